// SPDX-License-Identifier: MIT
// Compile-fail check (tests/headers/CMakeLists.txt): run() called the wrong
// way on a ChunkedPipeline says why in one sentence each, and the right
// calls beside them still compile (any other error fails the check). The
// lines that start with "expect-error:" are what the check requires, each
// in exactly one diagnostic. wrong_run_host.cpp does the same for
// HostPipeline with the host compiler. It includes chunked_pipeline.cuh,
// not the umbrella, so a Filter pipeline built without <chunkpipe/filter.cuh>
// is checked here too: one static_assert that names the header.
//
// expect-error: chunkpipe: a Reduce (or Accumulate) pipeline's run takes its input and returns the value: auto total = pipe.run(x);
// expect-error: chunkpipe: this pipeline writes its results to outputs: give run() an output, pipe.run(x, out);  or make the last stage a reduce/accumulate
// expect-error: chunkpipe: run(): the output ranges' element types must be exactly those the last stage produces
// expect-error: chunkpipe: a pipeline with a Filter stage runs CUB's DeviceSelect on the GPU: #include <chunkpipe/filter.cuh> (or the umbrella
#include <chunkpipe/chunked_pipeline.cuh>

#include <vector>

namespace {
struct Plus {
  __host__ __device__ float operator()(float a, float b) const { return a + b; }
};
struct Twice {
  __device__ float operator()(float x) const { return 2.f * x; }
};
struct Big {
  __device__ bool operator()(float x) const { return x > 0.5f; }
};
}  // namespace

int main() {
  std::vector<float> x(100, 1.f), out(100);
  std::vector<int> wrong(100);
  auto sum = chunkpipe::make_pipeline({}, chunkpipe::reduce(0.f, Plus{}));
  auto twice = chunkpipe::make_pipeline({}, chunkpipe::map(Twice{}));
  // The right calls.
  float total = sum.run(x);
  twice.run(x, out);
  auto queued = sum.run_async(x);
  (void)queued.get();
  // The wrong ones.
  sum.run(x, out);
  twice.run(x);
  twice.run(x, wrong);
  auto keep = chunkpipe::make_pipeline({}, chunkpipe::filter(Big{}));  // no <chunkpipe/filter.cuh>
  (void)keep.run(x, out);
  return total > 0.f ? 0 : 1;
}
