// SPDX-License-Identifier: MIT
// GPU tests of the Scan stage: a running prefix on the GPU gives the host
// backend's bits (the documented order, which the CPU suite checks) under
// every policy, depth, grain and executor, over pinned, pageable and
// Source inputs and into Sinks; integer prefixes are exact and every run of
// a stream of runs starts from init; the ops as issued pass the hazard
// check with their carry waits. A spread's Scan gives one pipeline's bits,
// each run's pieces on one member.
#include <chunkpipe/host_backend.hpp>
#include <chunkpipe/spread.hpp>
#include <chunkpipe/pipeline.cuh>

#include "catch.hpp"
#include "replay.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
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

  std::vector<float> got(x.size(), -1.f);
  std::size_t delivered = 0;
  pipe.run(test_support::replay(x), sink<float>([&](std::size_t, std::size_t offset, ::cuda::std::span<const float> d) {
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

TEST_CASE("a Scan spread over the same GPU once and twice gives one pipeline's bits", "[gpu][scan][spread]") {
  int dev = 0;
  CHUNKPIPE_CUDA_TRY(cudaGetDevice(&dev));
  const std::size_t segment = 2048;
  const Options base{.chunk_elems = segment * 8, .depth = 3, .policy = Policy::slot_streams};  // units of the window
  auto one = make_pipeline(base, map(Scale{0.5f}), scan(1.f, Plus{}, segment));
  for (const std::vector<int>& devices : {std::vector<int>{dev}, std::vector<int>{dev, dev}}) {
    Options o = base;
    o.devices = devices;
    SpreadPipeline<Map<Scale>, Scan<float, Plus>> spread(o, map(Scale{0.5f}), scan(1.f, Plus{}, segment));
    const std::size_t piece = spread.piece_elems();
    const std::size_t n = 5 * piece + 7777;  // six pieces, the last short
    INFO(devices.size() << " members, " << n << " elements");
    const std::vector<float> x = noisy(n, 23);
    PinnedArray<float> in(n), want(n), out(n);
    std::copy(x.begin(), x.end(), in.begin());
    std::fill(want.begin(), want.end(), -7.5e30f);
    one.run(in, want);
    for (int round = 0; round < 2; ++round) {  // the second from init again
      std::fill(out.begin(), out.end(), -7.5e30f);
      const SpreadSummary s = spread.run(in, out);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) wrong += bits(out[i]) == bits(want[i]) ? 0 : 1;
      CHECK(wrong == 0);
      CHECK(std::count_if(s.pieces.begin(), s.pieces.end(), [](std::size_t k) { return k != 0; }) == 1);
      CHECK(std::accumulate(s.pieces.begin(), s.pieces.end(), std::size_t{0}) == 6);
    }
    // Pageable in and out (each member stages), and a Source into a Sink.
    const std::vector<float> wanted(want.begin(), want.end());
    std::vector<float> y(n, -1.f);
    spread.run(x, y);
    CHECK(mismatches(y.data(), wanted) == 0);
    std::vector<float> got(n, -1.f);
    std::size_t delivered = 0;
    auto in_order = sink<float>([&](std::size_t, std::size_t offset, ::cuda::std::span<const float> d) {
      REQUIRE(offset == delivered);
      std::copy(d.begin(), d.end(), got.begin() + static_cast<std::ptrdiff_t>(offset));
      delivered += d.size();
    });
    spread.run(test_support::replay(x), in_order);
    CHECK(delivered == n);
    CHECK(mismatches(got.data(), wanted) == 0);
    // Queued runs flow beside each other, each on one member, each its own
    // prefix.
    std::vector<PinnedArray<float>> ins, outs, wants;
    for (std::size_t b = 0; b < 4; ++b) {
      const std::size_t len = piece * (b + 1) + 1000 * b + 1;
      ins.emplace_back(len);
      outs.emplace_back(len);
      wants.emplace_back(len);
      const std::vector<float> v = noisy(len, static_cast<unsigned>(b + 90));
      std::copy(v.begin(), v.end(), ins.back().begin());
      std::fill(outs.back().begin(), outs.back().end(), -7.5e30f);
      one.run(ins.back(), wants.back());
    }
    std::vector<SpreadTicket<SpreadSummary>> tickets;
    for (std::size_t b = 0; b < ins.size(); ++b) tickets.push_back(spread.run_async(ins[b], outs[b]));
    for (std::size_t b = 0; b < ins.size(); ++b) {
      const SpreadSummary s = tickets[b].get();
      INFO("queued run " << b);
      CHECK(std::count_if(s.pieces.begin(), s.pieces.end(), [](std::size_t k) { return k != 0; }) == 1);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < ins[b].size(); ++i) wrong += bits(outs[b][i]) == bits(wants[b][i]) ? 0 : 1;
      CHECK(wrong == 0);
    }
  }
}
