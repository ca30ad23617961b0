// SPDX-License-Identifier: MIT
// Record stages on the host backend: a Reduce folds a run to the bits its
// documented order gives whatever the schedule (policy, depth, grain,
// execution order, ragged tails, Sources), an Accumulate merges per-chunk
// states, a PerChunk hands every chunk's record back; bad windows and short
// outputs are refused with errors that say what was needed.
#include <chunkpipe/host_backend.hpp>

#include "catch.hpp"
#include "float_data.hpp"
#include "replay.hpp"
#include "thrown.hpp"
#include "trace_records.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace chunkpipe;
using test_support::bits;
using test_support::contains;
using test_support::noisy;
using test_support::replay;
using test_support::thrown_by;

namespace {

struct Plus {
  CHUNKPIPE_HOST_DEVICE float operator()(float a, float b) const { return a + b; }
};
struct PlusU64 {
  CHUNKPIPE_HOST_DEVICE std::uint64_t operator()(std::uint64_t a, std::uint64_t b) const { return a + b; }
};
struct Square {
  CHUNKPIPE_HOST_DEVICE std::uint64_t operator()(std::uint32_t x) const { return std::uint64_t{x} * x; }
};
struct MinMax {
  float lo, hi;
};
struct MinMaxOp {
  CHUNKPIPE_HOST_DEVICE MinMax operator()(MinMax a, MinMax b) const {
    return {a.lo < b.lo ? a.lo : b.lo, a.hi > b.hi ? a.hi : b.hi};
  }
};
struct ToMinMax {
  CHUNKPIPE_HOST_DEVICE MinMax operator()(float x) const { return {x, x}; }
};

struct Hist {
  std::uint32_t bins[16];
};
// Host-side per-chunk histogram (the GPU test launches a kernel instead).
struct CountChunk {
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    REQUIRE(ctx.backend == Backend::host);
    REQUIRE(ctx.template out<0>().size() == 1);
    Hist& h = ctx.template out<0>()[0];
    for (std::uint8_t v : ctx.template in<0>()) ++h.bins[v % 16];
  }
};
struct MergeHist {
  void operator()(Hist& total, const Hist& chunk) const {
    for (int b = 0; b < 16; ++b) total.bins[b] += chunk.bins[b];
  }
};

// Per-chunk record: the chunk's offset, count and a checksum of its values.
struct Tag {
  std::uint64_t offset, count, sum;
};
struct TagChunk {
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    Tag& t = ctx.template out<0>()[0];
    REQUIRE(t.sum == 7);  // the record starts as init
    t.offset = ctx.offset;
    t.count = ctx.count;
    for (std::uint32_t v : ctx.template in<0>()) t.sum += v;
  }
};

// A perfect pairwise tree over p[lo, lo + size), size a power of two.
float tree(const std::vector<float>& p, std::size_t lo, std::size_t size) {
  if (size == 1) return p[lo];
  return tree(p, lo, size / 2) + tree(p, lo + size / 2, size / 2);
}

// The fold order stage.hpp documents, written out independently: 256
// strided lanes per segment, a binary tree over the lanes that hold
// elements; on the host, the partials cut from the left into blocks of the
// powers of two that make up their count, largest first, each block a
// perfect pairwise tree, then init and the blocks left to right.
float documented_sum(const std::vector<float>& x, std::size_t segment, float init) {
  std::vector<float> partials;
  for (std::size_t at = 0; at < x.size(); at += segment) {
    const std::size_t len = std::min(segment, x.size() - at);
    std::vector<float> lane;
    for (std::size_t t = 0; t < 256 && t < len; ++t) {
      float a = x[at + t];
      for (std::size_t k = t + 256; k < len; k += 256) a = a + x[at + k];
      lane.push_back(a);
    }
    for (std::size_t s = 128; s >= 1; s /= 2) {
      for (std::size_t t = 0; t < s; ++t) {
        if (t + s < lane.size()) lane[t] = lane[t] + lane[t + s];
      }
    }
    partials.push_back(lane[0]);
  }
  float acc = init;
  std::size_t lo = 0;
  for (std::size_t bit = std::size_t{1} << 40; bit > 0; bit /= 2) {
    if ((partials.size() & bit) == 0) continue;
    acc = acc + tree(partials, lo, bit);
    lo += bit;
  }
  return acc;
}

}  // namespace

TEST_CASE("a Reduce gives the documented fold's bits under every schedule, grain and execution order") {
  const std::size_t segment = 512;
  for (std::size_t n : {std::size_t{1}, std::size_t{511}, std::size_t{512}, std::size_t{40000}, std::size_t{77777}}) {
    const std::vector<float> x = noisy(n, static_cast<unsigned>(n));
    const float want = documented_sum(x, segment, 0.5f);
    double exact = 0.5;
    for (float v : x) exact += v;
    // The bound stage.hpp states: (segment/256 + 8 + 2 log2(partials)) x
    // 2^-24 of the absolute sum.
    double mag = 0.5;
    for (float v : x) mag += std::fabs(v);
    const double partials = std::ceil(static_cast<double>(n) / segment);
    const double depth = segment / 256.0 + 8 + 2 * std::log2(std::max(1.0, partials));
    CHECK(std::fabs(static_cast<double>(want) - exact) <= depth * std::ldexp(1.0, -24) * mag);
    for (Policy p : {Policy::serial, Policy::slot_streams, Policy::stage_streams, Policy::automatic}) {
      for (int depth : {1, 2, 4}) {
        if (p == Policy::serial && depth != 1) continue;
        for (std::size_t chunk : {std::size_t{512}, std::size_t{2048}, std::size_t{8192}}) {
          for (std::size_t grain : {std::size_t{0}, std::size_t{1024}}) {
            if (grain != 0 && p != Policy::stage_streams) continue;
            HostPipeline<Reduce<float, Plus>> pipe({.chunk_elems = chunk, .depth = depth, .policy = p, .grain_elems = grain},
                                                   reduce(0.5f, Plus{}, segment));
            pipe.set_seed(n + chunk + static_cast<std::size_t>(depth));
            const float got = pipe.run(pinned(x));
            INFO("n " << n << " policy " << to_string(p) << " depth " << depth << " chunk " << chunk << " grain " << grain);
            CHECK(bits(got) == bits(want));
          }
        }
      }
    }
  }
}

TEST_CASE("a Reduce after a Map is exact where the arithmetic is") {
  const std::size_t n = 100003;
  std::vector<std::uint32_t> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<std::uint32_t>(i);
  auto pipe = make_host_pipeline({.chunk_elems = 4096, .depth = 3}, map(Square{}), reduce(std::uint64_t{11}, PlusU64{}, 1024));
  // 0^2 + ... + (n-1)^2 = (n-1) n (2n-1) / 6
  const std::uint64_t m = n - 1;
  CHECK(pipe.run(x) == 11 + m * (m + 1) * (2 * m + 1) / 6);
  // Min and max together: a record type of its own.
  const std::vector<float> f = noisy(30000, 3);
  auto mm = make_host_pipeline({.chunk_elems = 2048}, map(ToMinMax{}), reduce(MinMax{1e30f, -1e30f}, MinMaxOp{}, 256));
  const MinMax r = mm.run(f);
  CHECK(r.lo == *std::min_element(f.begin(), f.end()));
  CHECK(r.hi == *std::max_element(f.begin(), f.end()));
}

TEST_CASE("an empty Reduce returns init, and a window of partial segments is refused") {
  HostPipeline<Reduce<float, Plus>> pipe({.chunk_elems = 1024}, reduce(42.f, Plus{}, 256));
  std::vector<float> none;
  CHECK(pipe.run(none) == 42.f);
  auto bad = [] {
    HostPipeline<Reduce<float, Plus>> p({.chunk_elems = 1000}, reduce(0.f, Plus{}, 256));
  };
  CHECK_THROWS_AS(bad(), config_error);
  try {
    bad();
  } catch (const config_error& e) {
    const std::string what = e.what();
    CHECK(what.find("segments of 256") != std::string::npos);
    CHECK(what.find("chunk_elems (1000)") != std::string::npos);
  }
  auto bad_grain = [] {
    HostPipeline<Reduce<float, Plus>> p({.chunk_elems = 4096, .policy = Policy::stage_streams, .grain_elems = 1000},
                                        reduce(0.f, Plus{}, 256));
  };
  CHECK(contains(thrown_by([&] { (void)bad_grain(); }), "grain_elems (1000)"));
  auto zero = [] { HostPipeline<Reduce<float, Plus>> p({}, reduce(0.f, Plus{}, 0)); };
  CHECK(contains(thrown_by([&] { (void)zero(); }), "segment must be at least 1"));
}

TEST_CASE("a Reduce over a Source, pageable memory and a stream of runs gives the same bits") {
  const std::vector<float> x = noisy(50000, 9);
  const float want = documented_sum(x, 1024, 0.f);
  HostPipeline<Reduce<float, Plus>> pipe({.chunk_elems = 4096, .depth = 3}, reduce(0.f, Plus{}, 1024));
  pipe.set_seed(5);
  CHECK(bits(pipe.run(x)) == bits(want));  // pageable: staged in
  CHECK(bits(pipe.run(replay(x))) == bits(want));

  // Back to back: each ticket folds its own run, dropped tickets included.
  std::vector<std::vector<float>> batches;
  for (unsigned b = 0; b < 12; ++b) batches.push_back(noisy(5000 + 1024 * b, 100 + b));
  std::vector<ResultTicket<float, HostTicket>> tickets;
  for (std::size_t b = 0; b < batches.size(); ++b) {
    auto t = pipe.run_async(pinned(batches[b]));
    if (b % 3 != 2) tickets.push_back(t);
  }
  for (std::size_t i = 0, b = 0; b < batches.size(); ++b) {
    if (b % 3 == 2) continue;
    CHECK(bits(tickets[i++].get()) == bits(documented_sum(batches[b], 1024, 0.f)));
  }
  CHECK(check_hazards(pipe.issued_plan()).ok());
}

TEST_CASE("an Accumulate merges a state per chunk into the host's count") {
  std::vector<std::uint8_t> x(70001);
  std::mt19937 rng(4);
  for (auto& v : x) v = static_cast<std::uint8_t>(rng());
  Hist want{};
  for (std::uint8_t v : x) ++want.bins[v % 16];
  for (std::size_t chunk : {std::size_t{1000}, std::size_t{4096}, std::size_t{100000}}) {
    auto pipe = make_host_pipeline({.chunk_elems = chunk, .depth = 2}, accumulate(Hist{}, CountChunk{}, MergeHist{}));
    pipe.set_seed(chunk);
    const Hist got = pipe.run(x);
    for (int b = 0; b < 16; ++b) CHECK(got.bins[b] == want.bins[b]);
  }
  auto pipe = make_host_pipeline({.chunk_elems = 512}, accumulate(Hist{}, CountChunk{}, MergeHist{}));
  std::vector<std::uint8_t> none;
  const Hist empty = pipe.run(none);
  for (int b = 0; b < 16; ++b) CHECK(empty.bins[b] == 0);
}

TEST_CASE("a PerChunk returns one record per chunk, and an output too short says how many were needed") {
  const std::size_t n = 10000, chunk = 1024;
  std::vector<std::uint32_t> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<std::uint32_t>(3 * i + 1);
  auto pipe = make_host_pipeline({.chunk_elems = chunk, .depth = 3}, per_chunk(Tag{0, 0, 7}, TagChunk{}));
  const std::size_t chunks = (n + chunk - 1) / chunk;
  std::vector<Tag> out(chunks + 2, Tag{99, 99, 99});  // poisoned; two past the end stay so
  pipe.run(x, out);
  for (std::size_t c = 0; c < chunks; ++c) {
    std::uint64_t sum = 7;
    const std::size_t len = std::min(chunk, n - c * chunk);
    for (std::size_t i = 0; i < len; ++i) sum += x[c * chunk + i];
    CHECK(out[c].offset == c * chunk);
    CHECK(out[c].count == len);
    CHECK(out[c].sum == sum);
  }
  CHECK(out[chunks].offset == 99);
  CHECK(out[chunks + 1].offset == 99);

  std::vector<Tag> shorter(chunks - 1);
  CHECK(contains(thrown_by([&] { (void)pipe.run(x, shorter); }), "fewer than the 10 records the run makes (one per 1024"));

  // A Sink gets each chunk's record with its index.
  std::vector<std::size_t> offsets;
  pipe.run(x, sink<Tag>([&](std::size_t, std::size_t offset, ::cuda::std::span<const Tag> r) {
    REQUIRE(r.size() == 1);
    CHECK(r[0].offset == offset * chunk);
    offsets.push_back(offset);
  }));
  CHECK(offsets.size() == chunks);
  for (std::size_t c = 0; c < offsets.size(); ++c) CHECK(offsets[c] == c);
}

TEST_CASE("a folding run that fails reports its error from get()") {
  HostPipeline<Reduce<float, Plus>> pipe({.chunk_elems = 1024}, reduce(0.f, Plus{}, 256));
  auto src = source<float>([](std::size_t chunk, ::cuda::std::span<float> slot) -> std::size_t {
    if (chunk == 2) throw std::runtime_error("disk on fire");
    std::fill(slot.begin(), slot.end(), 1.f);
    return slot.size();
  });
  auto t = pipe.run_async(std::move(src));
  CHECK(contains(thrown_by([&] { (void)t.get(); }), "disk on fire"));
  // The pipeline is still usable.
  std::vector<float> ones(3000, 1.f);
  CHECK(pipe.run(ones) == 3000.f);
}

using test_support::MergeTrace;
using test_support::Trace;
using test_support::TraceChunk;

TEST_CASE("an Accumulate merges its records in chunk order, from ranges and from a Source") {
  const std::size_t n = 50000, chunk = 777;
  std::vector<float> x(n, 1.f);
  std::uint64_t want = 5;
  for (std::size_t at = 0; at < n; at += chunk) want = want * 1000003u + (at + 1);
  auto pipe = make_host_pipeline({.chunk_elems = chunk, .depth = 4}, accumulate(Trace{5, 0}, TraceChunk{}, MergeTrace{}));
  pipe.set_seed(3);  // ops run out of issue order where the plan allows
  const Trace got = pipe.run(x);
  CHECK(got.hash == want);
  CHECK(got.chunks == (n + chunk - 1) / chunk);
  CHECK(pipe.run(replay(x)).hash == want);
}
