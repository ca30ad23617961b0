// SPDX-License-Identifier: MIT
// y = 2x + 1 over 64 Mi floats held in a std::vector, streamed through the
// GPU in chunks, then checked against the same computation on the host.
//   nvcc -std=c++17 -O2 -arch=native -I chunkpipe/include first.cu -o first
#include <chunkpipe/chunked_pipeline.cuh>

#include <cmath>
#include <cstdio>
#include <exception>
#include <vector>

// The work on one element. CHUNKPIPE_HOST_DEVICE compiles it for the GPU,
// where the pipeline calls it, and for the host, where the check calls it.
// fmaf rounds once on both, so the two agree bit for bit.
struct Affine {
  float a, b;
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return fmaf(a, x, b); }
};

int main() {
  try {
    const std::size_t n = std::size_t{64} << 20;  // 256 MiB each way
    std::vector<float> in(n), out(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<float>(i % 1000) * 0.001f;

    // The window: how many elements a stage sees at once. The schedule,
    // streams and buffers have defaults; the first run allocates them.
    chunkpipe::Options options;
    options.chunk_elems = std::size_t{4} << 20;
    const Affine f{2.0f, 1.0f};
    chunkpipe::ChunkedPipeline<chunkpipe::Map<Affine>> pipe(options, chunkpipe::map(f));

    // Blocks until `out` is written. A std::vector is pageable memory:
    // chunkpipe's threads copy it through pinned buffers of its own while
    // the GPU works on other chunks.
    pipe.run(in, out);

    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += out[i] != f(in[i]);
    std::printf("%zu elements through the GPU, %zu wrong\n", n, wrong);
    return wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    // No GPU, bad options, a CUDA failure: the message says which.
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
