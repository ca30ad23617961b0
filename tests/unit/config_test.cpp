// SPDX-License-Identifier: MIT
// Bad configuration and bad arguments throw config_error (a
// std::invalid_argument) that names the problem, before anything runs.
#include <chunkpipe/host_backend.hpp>

#include "catch.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

using namespace chunkpipe;

namespace {

struct Add {
  CHUNKPIPE_HOST_DEVICE float operator()(float x, float y) const { return x + y; }
};
struct Twice {
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return 2.f * x; }
};

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const config_error& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("config_error is an invalid_argument", "[errors]") {
  REQUIRE_THROWS_AS(HostPipeline<Map<Twice>>({.chunk_elems = 0}), std::invalid_argument);
}

TEST_CASE("bad options are named", "[errors]") {
  REQUIRE(contains(message_of([] { HostPipeline<Map<Twice>>({.chunk_elems = 0}); }), "chunk_elems"));
  REQUIRE(contains(message_of([] { HostPipeline<Map<Twice>>({.depth = 0}); }), "depth"));
  REQUIRE(contains(message_of([] { HostPipeline<Map<Twice>>({.depth = -3}); }), "depth"));
  REQUIRE(contains(message_of([] { HostPipeline<Map<Twice>>({.device = -2}); }), "device"));
  REQUIRE(contains(message_of([] { HostPipeline<Map<Twice>>({.chunk_elems = 1 << 30, .grain_elems = 1}); }),
                   "grain_elems"));
  REQUIRE(contains(message_of([] { HostPipeline<Map<Twice>>({.kernel_lanes = -1}); }), "kernel_lanes"));
  REQUIRE(contains(message_of([] { HostPipeline<Map<Twice>>({.kernel_lanes = max_kernel_lanes + 1}); }),
                   "kernel_lanes"));
  REQUIRE(contains(message_of([] { HostPipeline<Map<Twice>>({.policy = Policy::slot_streams, .kernel_lanes = 2}); }),
                   "stage_streams"));
  // Never more lanes than slots.
  REQUIRE(HostPipeline<Map<Twice>>({.depth = 2, .policy = Policy::stage_streams, .kernel_lanes = 4})
              .geometry()
              .kernel_lanes == 2);
}

TEST_CASE("bad ranges are named and nothing is written", "[errors]") {
  HostPipeline<Map<Add>> add({.chunk_elems = 16});
  HostPipeline<Map<Twice>> twice({.chunk_elems = 16});
  std::vector<float> a(100, 1.f), b(99, 1.f);
  std::vector<float> out(100, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> short_out(50, std::numeric_limits<float>::quiet_NaN());

  REQUIRE(contains(message_of([&] { add.run(inputs(a, b), outputs(out)); }), "inputs have different lengths"));
  REQUIRE(contains(message_of([&] { twice.run(a, short_out); }), "fewer than the 100 input elements"));
  REQUIRE(contains(message_of([&] { twice.run(host_span(static_cast<const float*>(nullptr), 10), out); }),
                   "input 0 is a null pointer with 10 elements"));
  REQUIRE(contains(message_of([&] { twice.run(a, host_span(static_cast<float*>(nullptr), 100)); }),
                   "output 0 is a null pointer"));
  for (float v : out) REQUIRE(std::isnan(v));
  for (float v : short_out) REQUIRE(std::isnan(v));
}
