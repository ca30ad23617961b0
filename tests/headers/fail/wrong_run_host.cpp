// SPDX-License-Identifier: MIT
// Compile-fail check (tests/headers/CMakeLists.txt): run() called the wrong
// way on a HostPipeline says why in one sentence each, and the right calls
// beside them (a spread of a Scan among them) still compile (any other error fails the check). The lines
// that start with "expect-error:" are what the check requires, each in
// exactly one diagnostic. wrong_run.cu does the same for ChunkedPipeline.
//
// expect-error: chunkpipe: a Reduce (or Accumulate) pipeline's run takes its input and returns the value: auto total = pipe.run(x);
// expect-error: chunkpipe: this pipeline writes its results to outputs: give run() an output, pipe.run(x, out);  or make the last stage a reduce/accumulate
// expect-error: chunkpipe: run(): the output ranges' element types must be exactly those the last stage produces
#include <chunkpipe/host_backend.hpp>
#include <chunkpipe/spread.hpp>

#include <vector>

namespace {
struct Plus {
  CHUNKPIPE_HOST_DEVICE float operator()(float a, float b) const { return a + b; }
};
struct Twice {
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return 2.f * x; }
};
}  // namespace

int main() {
  std::vector<float> x(100, 1.f), out(100);
  std::vector<int> wrong(100);
  auto sum = chunkpipe::make_host_pipeline({}, chunkpipe::reduce(0.f, Plus{}));
  auto twice = chunkpipe::make_host_pipeline({}, chunkpipe::map(Twice{}));
  // The right calls.
  float total = sum.run(x);
  twice.run(x, out);
  auto queued = sum.run_async(x);
  (void)queued.get();
  chunkpipe::HostSpreadPipeline<chunkpipe::Scan<float, Plus>> spread({.devices = {0, 0}}, chunkpipe::scan(0.f, Plus{}));
  spread.run(x, out);
  // The wrong ones.
  sum.run(x, out);
  twice.run(x);
  twice.run(x, wrong);
  return total > 0.f ? 0 : 1;
}
