// SPDX-License-Identifier: MIT
// GPU tests of the Scan stage: a running prefix on the GPU gives the host
// backend's bits (the documented order, which the CPU suite checks) under
// every policy, depth, grain and executor, over pinned, pageable and
// Source inputs and into Sinks; integer prefixes are exact and every run of
// a stream of runs starts from init; the ops as issued pass the hazard
// check with their carry waits.
#include <chunkpipe/host_backend.hpp>
#include <chunkpipe/pipeline.cuh>

#include "catch.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

using namespace chunkpipe;

namespace {

struct Plus {
  CHUNKPIPE_HOST_DEVICE float operator()(float a, float b) const { return a + b; }
};
struct PlusU64 {
  CHUNKPIPE_HOST_DEVICE std::uint64_t operator()(std::uint64_t a, std::uint64_t b) const { return a + b; }
};
struct Scale {
  float k;
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return x * k - 0.25f; }
};

std::vector<float> noisy(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-100.f, 100.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// The reference: the host backend, whose order the CPU suite checks
// against the documented one.
std::vector<float> host_scan(const std::vector<float>& x, std::size_t segment, float init, float k) {
  auto pipe = make_host_pipeline({.chunk_elems = segment * 4}, map(Scale{k}), scan(init, Plus{}, segment));
  std::vector<float> y(x.size());
  pipe.run(pinned(x), pinned(y));
  return y;
}

std::size_t mismatches(const float* got, const std::vector<float>& want) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < want.size(); ++i) wrong += bits(got[i]) == bits(want[i]) ? 0 : 1;
  return wrong;
}

}  // namespace

TEST_CASE("a Scan on the GPU gives the host backend's bits under every schedule", "[gpu][scan]") {
  const std::size_t segment = 4096;
  for (std::size_t n : {std::size_t{1}, std::size_t{4095}, std::size_t{300001}, std::size_t{1} << 20}) {
    const std::vector<float> x = noisy(n, static_cast<unsigned>(n));
    PinnedArray<float> in(n), out(n);
    std::copy(x.begin(), x.end(), in.begin());
    const std::vector<float> want = host_scan(x, segment, 3.f, 0.5f);
    for (Policy p : {Policy::serial, Policy::slot_streams, Policy::stage_streams, Policy::automatic}) {
      for (int depth : {1, 3}) {
        if (p == Policy::serial && depth != 1) continue;
        for (std::size_t grain : {std::size_t{0}, segment * 4}) {
          if (grain != 0 && p != Policy::stage_streams) continue;
          for (Executor ex : {Executor::streams, Executor::graphs}) {
            auto pipe = make_pipeline({.chunk_elems = segment * 16, .depth = depth, .policy = p, .grain_elems = grain,
                                       .executor = ex, .record_issued = true},
                                      map(Scale{0.5f}), scan(3.f, Plus{}, segment));
            // A decoy run first, so that the carry the real run starts
            // from holds another run's value.
            std::vector<float> decoy(n, 1.f), decoy_out(n);
            pipe.run(pinned(decoy), pinned(decoy_out));
            std::fill(out.begin(), out.end(), -7.5e30f);  // poison
            pipe.run(in, out);
            INFO("n " << n << " policy " << to_string(p) << " depth " << depth << " grain " << grain << " executor "
                      << to_string(ex));
            CHECK(mismatches(out.data(), want) == 0);
            CHECK(decoy_out[n - 1] == 3.f + static_cast<float>(n) * 0.25f);
            const HazardReport r = check_hazards(pipe.issued_plan());
            CHECK(r.ok());
          }
        }
      }
    }
  }
}

TEST_CASE("a Scan over pageable memory, a Source, a Sink and a stream of runs", "[gpu][scan]") {
  const std::size_t segment = 2048;
  const std::vector<float> x = noisy(1000003, 11);
  const std::vector<float> want = host_scan(x, segment, 0.f, 2.f);
  auto pipe = make_pipeline({.chunk_elems = segment * 8, .depth = 3}, map(Scale{2.f}), scan(0.f, Plus{}, segment));
  std::vector<float> y(x.size(), -1.f);
  pipe.run(x, y);  // pageable both ways: staged
  CHECK(mismatches(y.data(), want) == 0);

  std::size_t next = 0;
  auto src = source<float>([&](std::size_t, ::cuda::std::span<float> slot) {
    const std::size_t k = std::min(slot.size(), x.size() - next);
    std::copy_n(x.begin() + static_cast<std::ptrdiff_t>(next), k, slot.begin());
    next += k;
    return k;
  });
  std::vector<float> got(x.size(), -1.f);
  std::size_t delivered = 0;
  pipe.run(src, sink<float>([&](std::size_t, std::size_t offset, ::cuda::std::span<const float> d) {
    REQUIRE(offset == delivered);
    std::copy(d.begin(), d.end(), got.begin() + static_cast<std::ptrdiff_t>(offset));
    delivered += d.size();
  }));
  CHECK(delivered == x.size());
  CHECK(mismatches(got.data(), want) == 0);

  // Integer prefixes are exact, and every queued run starts from init.
  auto ints = make_pipeline({.chunk_elems = 1 << 16, .depth = 4, .policy = Policy::slot_streams},
                            scan(std::uint64_t{5}, PlusU64{}, 1024));
  std::vector<PinnedArray<std::uint64_t>> ins, outs;
  for (std::size_t b = 0; b < 8; ++b) {
    ins.emplace_back(100000 + 77777 * b);
    outs.emplace_back(100000 + 77777 * b);
    for (std::size_t i = 0; i < ins.back().size(); ++i) ins.back()[i] = (i * 2654435761u + b) % 1000;
    std::fill(outs.back().begin(), outs.back().end(), ~std::uint64_t{0});
  }
  std::vector<RunTicket> tickets;
  for (std::size_t b = 0; b < ins.size(); ++b) tickets.push_back(ints.run_async(ins[b], outs[b]));
  for (std::size_t b = 0; b < ins.size(); ++b) {
    tickets[b].wait();
    std::uint64_t s = 5;
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < ins[b].size(); ++i) wrong += outs[b][i] == (s += ins[b][i]) ? 0 : 1;
    INFO("run " << b);
    CHECK(wrong == 0);
  }
}
