// SPDX-License-Identifier: MIT
// Small chunks as one CUDA graph per run: built once for a run length,
// replayed for the next run of that length, re-pointed for new buffers.
#include <chunkpipe/pipeline.cuh>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

struct Twice {
  CHUNKPIPE_HOST_DEVICE float operator()(float v) const { return 2.0f * v; }
};

int main() {
  try {
    const std::size_t n = std::size_t{16} << 20;
    // 64 KiB chunks: on streams each chunk costs several CUDA calls, more
    // host time than its copies take on the link. A graph is one launch.
    chunkpipe::Options options;
    options.chunk_elems = 16384;
    options.policy = chunkpipe::Policy::slot_streams;
    options.depth = 4;
    options.executor = chunkpipe::Executor::graphs;
    chunkpipe::ChunkedPipeline<chunkpipe::Map<Twice>> pipe(options);

    chunkpipe::PinnedArray<float> x(n), y(n), x2(n), y2(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = x2[i] = static_cast<float>(i % 1000);

    // The first run builds and instantiates the graph; the next replay it.
    for (int r = 0; r < 3; ++r) {
      chunkpipe::RunTicket t = pipe.run_async(chunkpipe::pinned(x), chunkpipe::pinned(y));
      t.wait();
      std::printf("run %d ran on %s\n", r, std::string(chunkpipe::to_string(t.executor())).c_str());
    }
    // Other buffers of the same length: the cached graph is re-pointed.
    pipe.run(chunkpipe::pinned(x2), chunkpipe::pinned(y2));

    const chunkpipe::GraphStats s = pipe.graph_stats();
    std::printf("graphs built %zu (%.1f ms + %.1f ms to instantiate), replayed %zu, re-pointed %zu; copies as %s\n",
                s.built, s.build_ms, s.instantiate_ms, s.replayed, s.updated,
                s.copy_kernels ? "kernels" : "copy nodes");

    // A run a graph cannot take goes on streams and says why: pageable
    // memory ends on host threads.
    std::vector<float> v(n, 1.0f), w(n);
    chunkpipe::RunTicket staged = pipe.run_async(v, w);
    staged.wait();
    std::printf("a pageable run: %s (%s)\n", std::string(chunkpipe::to_string(staged.executor())).c_str(),
                staged.executor_note().c_str());

    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += (y[i] != 2.0f * x[i]) + (y2[i] != 2.0f * x2[i]) + (w[i] != 2.0f);
    std::printf("%zu wrong\n", wrong);
    return wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
