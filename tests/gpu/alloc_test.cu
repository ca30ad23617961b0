// SPDX-License-Identifier: MIT
// A steady-state run allocates nothing per chunk: the C++ allocations a run
// makes (counted by replacing operator new in this program) do not grow
// with its number of chunks, for pinned and staged runs and every policy.
// A program of its own because it replaces the global allocator
// (alloc_counter.cpp, compiled by the host compiler).
#include <chunkpipe/pipeline.cuh>

#include "catch.hpp"

#include "alloc_counter.hpp"

#include <cstring>
#include <vector>

using namespace chunkpipe;

namespace {

struct Scale {
  float s;
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return x * s; }
};

// Allocations per run, over `runs` runs of `chunks` chunks each, after the
// pipeline has warmed up on the same shape.
template <class In, class Out>
double allocations_per_run(ChunkedPipeline<Map<Scale>>& pipe, In& in, Out& out, std::size_t chunk, std::size_t chunks,
                           int runs) {
  auto a = host_span(in.data(), chunk * chunks, Memory::automatic);
  auto b = host_span(out.data(), chunk * chunks, Memory::automatic);
  for (int w = 0; w < 3; ++w) pipe.run(a, b);
  test_alloc::start();
  for (int r = 0; r < runs; ++r) pipe.run(a, b);
  return static_cast<double>(test_alloc::stop()) / runs;
}

}  // namespace

TEST_CASE("allocations per run do not grow with the run's chunks", "[gpu][streaming][alloc]") {
  const std::size_t chunk = 1 << 12;
  PinnedArray<float> pin_in(chunk * 64), pin_out(chunk * 64);
  std::vector<float> page_in(chunk * 64, 1.f), page_out(chunk * 64);
  for (std::size_t i = 0; i < pin_in.size(); ++i) pin_in[i] = 1.f;
  for (Policy policy : {Policy::serial, Policy::slot_streams, Policy::stage_streams}) {
    for (bool staged : {false, true}) {
      ChunkedPipeline<Map<Scale>> pipe({.chunk_elems = chunk, .depth = 3, .policy = policy}, Map<Scale>{{2.f}});
      double few = 0, many = 0;
      if (staged) {
        few = allocations_per_run(pipe, page_in, page_out, chunk, 4, 16);
        many = allocations_per_run(pipe, page_in, page_out, chunk, 64, 16);
      } else {
        few = allocations_per_run(pipe, pin_in, pin_out, chunk, 4, 16);
        many = allocations_per_run(pipe, pin_in, pin_out, chunk, 64, 16);
      }
      INFO(to_string(policy) << (staged ? " staged" : " pinned") << ": " << few << " allocations per run of 4 chunks, "
                             << many << " per run of 64");
      // A run allocates a fixed handful (its state, endpoints, ranges and
      // their index entries, its completion event's slot), the same for 4
      // chunks as for 64: nothing per chunk or per op.
      REQUIRE(many <= few + 0.5);
      REQUIRE(few <= 32);
      REQUIRE((staged ? page_out[chunk * 64 - 1] : pin_out[chunk * 64 - 1]) == 2.f);
    }
  }
}
