// SPDX-License-Identifier: MIT
//
// Probe (2026-12-07, benchmarks/RESULTS.md "PlanBuilder's cost per op"):
// what PlanBuilder costs an executor per op it issues, ticked as the
// Driver ticks the lifetime schedule: 2000 runs of 64 chunks, staged in
// and out, one Map stage, for each policy (serial at depth 1,
// slot_streams at 4, stage_streams at 3); the best of five passes, in ns
// per op. Host-only. To compare two trees, build it against each one's
// headers (header-only) and run the two programs in turn:
//   g++ -O2 -std=c++17 -I<tree>/include -I/usr/local/cuda/include
//       -I/usr/local/cuda/include/cccl benchmarks/probes/plan_tick.cpp -o plan_tick
#include <chunkpipe/plan.hpp>

#include <chrono>
#include <cstddef>
#include <cstdio>

int main() {
  using chunkpipe::Policy;
  const Policy policies[3] = {Policy::serial, Policy::slot_streams, Policy::stage_streams};
  const int depths[3] = {1, 4, 3};
  double best[3] = {1e9, 1e9, 1e9};
  for (int pass = 0; pass < 5; ++pass) {
    for (int p = 0; p < 3; ++p) {
      chunkpipe::PlanShape shape;
      shape.stages = 1;
      shape.stage_in = true;
      shape.stage_out = true;
      chunkpipe::PlanBuilder builder(policies[p], depths[p], shape);
      chunkpipe::OpBatch batch;
      std::size_t ops = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (int run = 0; run < 2000; ++run) {
        chunkpipe::RunSpec spec;
        spec.chunks = 64;
        spec.stage_in = true;
        spec.stage_out = true;
        builder.begin_run(spec);
        for (;;) {
          batch.clear();
          if (!builder.next_tick(batch)) break;
          ops += batch.size();
        }
        builder.end_run();
      }
      const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - t0;
      const double ns = took.count() / static_cast<double>(ops);
      if (ns < best[p]) best[p] = ns;
    }
  }
  std::printf("PlanBuilder, ns per op (best of 5): serial d1 %.1f, slot_streams d4 %.1f, stage_streams d3 %.1f\n",
              best[0], best[1], best[2]);
  return 0;
}
