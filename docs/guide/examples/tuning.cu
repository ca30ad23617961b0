// SPDX-License-Identifier: MIT
// The automatic policy times a pipeline's first chunks and picks its kernel
// lanes; tune() runs once and returns Options that fix that choice.
#include <chunkpipe/pipeline.cuh>

#include <cmath>
#include <cstdio>
#include <exception>
#include <optional>

// 4096 chained FMAs per element: the kernel, not the link, bounds this work.
struct Heavy {
  CHUNKPIPE_HOST_DEVICE float operator()(float y) const {
    for (int k = 0; k < 4096; ++k) y = fmaf(y, 0.999f, 0.0625f);
    return y;
  }
};

int main() {
  try {
    const std::size_t n = std::size_t{64} << 20;
    chunkpipe::PinnedArray<float> x(n), y(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 1000) * 0.001f;

    // Options{}: the automatic policy, which calibrates a pipeline of Map
    // stages. Its first run times five chunks with CUDA events; a later run
    // uses the kernel lanes the simulator predicts fastest for what was timed.
    chunkpipe::ChunkedPipeline<chunkpipe::Map<Heavy>> pipe;
    std::printf("calibrates: %s\n", pipe.calibrates() ? "yes" : "no");
    const chunkpipe::Options fixed = chunkpipe::tune(pipe, chunkpipe::pinned(x), chunkpipe::pinned(y));

    // decision() never blocks; tune() waited, so there is one.
    const std::optional<chunkpipe::Decision> d = pipe.decision();
    if (d) {
      std::printf("%s\n", d->why.c_str());
      for (const chunkpipe::Candidate& c : d->ranked) {
        std::printf("  %-70s predicted %.2f ms\n", chunkpipe::to_string(c.options).c_str(), c.predicted_ms);
      }
    }
    // Paste these to run the same schedule from the first run on.
    std::printf("chunkpipe::Options o = %s;\n", chunkpipe::to_string(fixed).c_str());
    chunkpipe::ChunkedPipeline<chunkpipe::Map<Heavy>> tuned(fixed);
    tuned.run(chunkpipe::pinned(x), chunkpipe::pinned(y));

    // Without a GPU: decide() from figures you give it. Here, what the
    // calibration timed for this kernel on the H200, 0.149 ns an element
    // (benchmarks/results/2026-12-03-pipeline-calibration-run7.txt).
    chunkpipe::Measured m;
    m.run_elems = n;
    m.stage_ns_per_elem = {0.149};
    const chunkpipe::Decision h = chunkpipe::decide(chunkpipe::Options{}, true, m, chunkpipe::machines::h200_pcie5());
    std::printf("for a model H200: %s\n", h.why.c_str());

    // Every 4099th element against the host (4096 FMAs each is slow there).
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; i += 4099) wrong += y[i] != Heavy{}(x[i]);
    std::printf("%zu wrong\n", wrong);
    return wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
