// SPDX-License-Identifier: MIT
//
// Probe (2026-11-29, benchmarks/RESULTS.md "Probes"): what separates
// chunkpipe's slot_streams depth 2 from the lesson's hand-written double
// buffer at 1 and 4 MiB chunks: the copy kind (cudaMemcpyDefault against
// the explicit direction) and the kernel (grid-stride loop against one
// element per thread), each against chunkpipe itself. Interleaved rounds,
// CUDA events.
//   build-gpu/benchmarks/probe_lesson_variants
#include "probe.hpp"

#include <chunkpipe/pipeline.cuh>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

// The lesson's kernel with a grid-stride loop, as chunkpipe's map kernel had.
__global__ void kern_gs(probe::Fma f, std::size_t n, float* out, const float* in) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n; i += stride)
    out[i] = f(in[i]);
}

int main() {
  if (const int status = probe::require_gpu()) return status;
  const probe::Host host;
  const std::size_t total = probe::Host::total;
  float* d = nullptr;
  CK(cudaMalloc(&d, 4 * 4 * 262144 * sizeof(float)));  // the lesson's two pairs of 4 MiB slots
  cudaStream_t s[2] = {probe::new_stream(), probe::new_stream()};
  const auto join = probe::join_streams({s[0], s[1]});
  const float* h_in = host.in;
  float* h_out = host.out;
  using Pipe = chunkpipe::ChunkedPipeline<chunkpipe::Map<probe::Fma>>;
  const auto in = chunkpipe::pinned(chunkpipe::host_span(h_in, total));
  const auto out = chunkpipe::pinned(chunkpipe::host_span(h_out, total));

  std::vector<probe::Variant> vs;
  std::vector<std::unique_ptr<Pipe>> pipes;
  std::vector<std::unique_ptr<chunkpipe::RunTicket>> tickets;
  for (std::size_t mib : {1, 4}) {
    for (int iters : {512, 2048, 4096}) {
      const std::size_t chunk = mib * 262144, chunks = total / chunk;
      char tag[48];
      std::snprintf(tag, sizeof tag, "%zuMiB fma %4d ", mib, iters);
      for (bool kind_default : {false, true}) {
        for (bool grid_stride : {false, true}) {
          const cudaMemcpyKind in_kind = kind_default ? cudaMemcpyDefault : cudaMemcpyHostToDevice;
          const cudaMemcpyKind out_kind = kind_default ? cudaMemcpyDefault : cudaMemcpyDeviceToHost;
          vs.push_back({std::string(tag) + (kind_default ? "Default " : "explicit") +
                            (grid_stride ? " gridstride" : " one-elem  "),
                        [=, &s] {
                          for (std::size_t k = 0; k < chunks; ++k) {
                            const int p = static_cast<int>(k & 1);
                            float* din = d + (2 * p) * chunk;
                            float* dout = d + (2 * p + 1) * chunk;
                            CK(cudaMemcpyAsync(din, h_in + k * chunk, chunk * 4, in_kind, s[p]));
                            if (grid_stride) {
                              kern_gs<<<unsigned(chunk / 256), 256, 0, s[p]>>>(probe::Fma{iters}, chunk, dout, din);
                            } else {
                              probe::kern<<<unsigned(chunk / 256), 256, 0, s[p]>>>(din, dout, chunk, probe::Fma{iters});
                            }
                            CK(cudaMemcpyAsync(h_out + k * chunk, dout, chunk * 4, out_kind, s[p]));
                          }
                        }, join});
        }
      }
      pipes.push_back(std::make_unique<Pipe>(
          chunkpipe::Options{.chunk_elems = chunk, .depth = 2, .policy = chunkpipe::Policy::slot_streams},
          chunkpipe::Map<probe::Fma>{probe::Fma{iters}}));
      tickets.push_back(std::make_unique<chunkpipe::RunTicket>());
      Pipe* pipe = pipes.back().get();
      chunkpipe::RunTicket* ticket = tickets.back().get();
      vs.push_back({std::string(tag) + "chunkpipe slot_streams d2", [=, &in, &out] { *ticket = pipe->run_async(in, out); },
                    [ticket](cudaStream_t w) { ticket->enqueue_wait(w); }, [ticket] { ticket->wait(); }});
    }
  }
  probe::run_rounds(vs, 9, 1);
}
