// SPDX-License-Identifier: MIT
// Runs queued with run_async() continue one schedule on the GPU. after()
// orders a run after another run, or after work on a stream of yours, and
// enqueue_wait() makes your stream wait for a run. None of it blocks the host.
#include <chunkpipe/pipeline.cuh>

#include <cstdio>
#include <exception>
#include <vector>

struct Twice {
  CHUNKPIPE_HOST_DEVICE float operator()(float v) const { return 2.0f * v; }
};

// A kernel of yours that produces the input, in device memory.
__global__ void fill_kernel(float* x, std::size_t n) {
  const std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (i < n) x[i] = static_cast<float>(i % 1000);
}

int main() {
  try {
    const std::size_t n = std::size_t{32} << 20, batches = 16, batch = n / batches;
    chunkpipe::PinnedArray<float> x(n), y(n), z(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 1000);
    chunkpipe::ChunkedPipeline<chunkpipe::Map<Twice>> pipe;
    std::size_t wrong = 0;

    // 1. Batches. run_async() returns once the run is queued; its ranges
    // must stay alive and untouched until its ticket is waited for. Queued
    // runs overlap on the GPU as one long run would.
    std::vector<chunkpipe::RunTicket> tickets;
    for (std::size_t k = 0; k < batches; ++k) {
      tickets.push_back(pipe.run_async(chunkpipe::host_span(x.data() + k * batch, batch),
                                       chunkpipe::host_span(y.data() + k * batch, batch)));
    }
    for (chunkpipe::RunTicket& t : tickets) t.wait();  // throws the run's error, if any
    for (std::size_t i = 0; i < n; ++i) wrong += y[i] != 2.0f * x[i];

    // 2. A run that reads what a run in flight writes must say so: without
    // after(first) it is refused with config_error. The order is kept on
    // the device; the host does not wait.
    chunkpipe::RunTicket first = pipe.run_async(chunkpipe::pinned(x), chunkpipe::pinned(y));
    chunkpipe::RunTicket second = pipe.run_async(chunkpipe::pinned(y), chunkpipe::pinned(z), chunkpipe::after(first));
    second.wait();
    first.wait();
    for (std::size_t i = 0; i < n; ++i) wrong += z[i] != 4.0f * x[i];

    // 3. Your own stream. The run waits on the device for the kernel queued
    // on `stream` when it starts, and `stream` waits for the run's end, so
    // the copy after it sees the output. Device memory is copied directly.
    chunkpipe::Stream stream = chunkpipe::Stream::create();
    chunkpipe::DeviceBuffer dx(n * sizeof(float)), dy(n * sizeof(float));
    float* in = reinterpret_cast<float*>(dx.data());
    float* out = reinterpret_cast<float*>(dy.data());
    fill_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream.get()>>>(in, n);
    CHUNKPIPE_CUDA_TRY(cudaGetLastError());
    chunkpipe::RunTicket third =
        pipe.run_async(chunkpipe::host_span(in, n), chunkpipe::host_span(out, n), chunkpipe::after(stream.get()));
    third.enqueue_wait(stream.get());
    CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(z.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost, stream.get()));
    CHUNKPIPE_CUDA_TRY(cudaStreamSynchronize(stream.get()));
    third.wait();
    for (std::size_t i = 0; i < n; ++i) wrong += z[i] != 2.0f * static_cast<float>(i % 1000);

    std::printf("%zu batches, two ordered runs and one on a stream of ours: %zu wrong\n", batches, wrong);
    return wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
