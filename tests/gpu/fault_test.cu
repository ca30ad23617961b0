// SPDX-License-Identifier: MIT
// A kernel that faults poisons the CUDA context for the whole process, so
// this test has a program of its own (and is left out of the memcheck run,
// which would rightly report the fault it plants).
#include <chunkpipe/pipeline.cuh>

#include "catch.hpp"

#include <vector>

using namespace chunkpipe;

namespace {

__global__ void write_through_null(float* out, std::size_t n) {
  if (threadIdx.x == 0 && blockIdx.x == 0 && n > 0) {
    float* volatile bad = nullptr;
    *bad = out[0];  // an illegal address: sticky, the context is lost
  }
}

struct Faults {
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    if (ctx.chunk == 2) write_through_null<<<1, 32, 0, ctx.stream.get()>>>(ctx.template out<0>().data(), ctx.count);
  }
};

}  // namespace

TEST_CASE("a faulting kernel reaches the caller, without a hang, and marks the pipeline", "[gpu][errors]") {
  const std::size_t n = 1 << 20;
  std::vector<float> x(n, 1.f), y(n);
  ChunkedPipeline<ChunkFn<Faults>> pipe({.chunk_elems = 1 << 16, .depth = 3});
  try {
    pipe.run(x, y);
    FAIL("expected cuda_error");
  } catch (const cuda_error& e) {
    INFO(e.what());
    REQUIRE(detail::is_sticky(e.code()));
  }
  REQUIRE_FALSE(pipe.healthy());
  REQUIRE_THROWS_AS(pipe.run(x, y), pipeline_error);
}
