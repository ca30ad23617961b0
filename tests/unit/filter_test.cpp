// SPDX-License-Identifier: MIT
// Stages that emit a count the device decides (Filter, Emit) on the host
// backend: outputs are packed in order under every schedule and execution
// order, into pinned and pageable ranges and Sinks, from ranges and
// Sources; an output too short is written up to its end and no further,
// and the error says how many elements were needed; a stage that emits
// more than it got is refused; the plans order the host-out op that reads
// the device buffer before that buffer is reused.
#include <chunkpipe/host_backend.hpp>

#include "catch.hpp"
#include "replay.hpp"
#include "thrown.hpp"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

using namespace chunkpipe;
using test_support::contains;
using test_support::replay;
using test_support::thrown_by;

namespace {

struct Positive {
  CHUNKPIPE_HOST_DEVICE bool operator()(float x) const { return x > 0.f; }
};
struct Rare {  // keeps about one in ten
  CHUNKPIPE_HOST_DEVICE bool operator()(std::uint32_t x) const { return x % 10 == 3; }
};
struct Offset {
  float by;
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return x - by; }
};

// Emits (index, value * 10) for every multiple of three, in order.
struct Tagged {
  std::int64_t index, value;
};
struct TagThrees {
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    auto in = ctx.template in<0>();
    auto out = ctx.template out<0>();
    std::size_t k = 0;
    for (std::size_t i = 0; i < ctx.count; ++i) {
      if (in[i] % 3 == 0) out[k++] = Tagged{static_cast<std::int64_t>(ctx.offset + i), static_cast<std::int64_t>(in[i]) * 10};
    }
    *ctx.produced = k;
  }
};
struct Overclaims {
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    *ctx.produced = ctx.chunk == 1 ? ctx.count + 1 : 0;
  }
};

std::vector<float> noisy(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<float> kept(const std::vector<float>& x, float by) {
  std::vector<float> k;
  for (float v : x) {
    if (v - by > 0.f) k.push_back(v - by);
  }
  return k;
}

}  // namespace

TEST_CASE("a Filter packs what it keeps, in order, under every schedule and execution order") {
  for (std::size_t n : {std::size_t{1}, std::size_t{999}, std::size_t{50000}}) {
    const std::vector<float> x = noisy(n, static_cast<unsigned>(n));
    const std::vector<float> want = kept(x, 0.25f);
    for (Policy p : {Policy::serial, Policy::slot_streams, Policy::stage_streams}) {
      for (int depth : {1, 2, 4}) {
        if (p == Policy::serial && depth != 1) continue;
        for (std::size_t chunk : {std::size_t{100}, std::size_t{4096}}) {
          auto pipe = make_host_pipeline({.chunk_elems = chunk, .depth = depth, .policy = p}, map(Offset{0.25f}),
                                         filter(Positive{}));
          pipe.set_seed(n * 31 + chunk + static_cast<std::size_t>(depth));
          for (bool pin : {true, false}) {
            std::vector<float> out(n + 3, -7.f);  // poisoned, and longer than needed
            const std::size_t wrote = pin ? pipe.run(x, pinned(out)) : pipe.run(x, out);
            INFO("n " << n << " policy " << to_string(p) << " depth " << depth << " chunk " << chunk << " pinned " << pin);
            REQUIRE(wrote == want.size());
            CHECK(std::equal(want.begin(), want.end(), out.begin()));
            CHECK(std::all_of(out.begin() + static_cast<std::ptrdiff_t>(wrote), out.end(), [](float v) { return v == -7.f; }));
          }
        }
      }
    }
  }
}

TEST_CASE("an output too short for what a Filter kept gets nothing past its end and the error says how many") {
  const std::vector<float> x = noisy(20000, 4);
  const std::vector<float> want = kept(x, 0.f);
  auto pipe = make_host_pipeline({.chunk_elems = 1024, .depth = 3}, filter(Positive{}));
  std::vector<float> buffer(want.size(), -7.f);
  const std::size_t room = want.size() / 2;
  const HostSpan<float> shorter{buffer.data(), room, Memory::pinned};
  try {
    (void)pipe.run(x, shorter);
    FAIL("a short output was accepted");
  } catch (const pipeline_error& e) {
    const std::string what = e.what();
    CHECK(what.find("emitted " + std::to_string(want.size()) + " elements") != std::string::npos);
    CHECK(what.find("holds " + std::to_string(room)) != std::string::npos);
  }
  // Filled to its end, in order; nothing past it.
  CHECK(std::equal(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(room), want.begin()));
  CHECK(std::all_of(buffer.begin() + static_cast<std::ptrdiff_t>(room), buffer.end(), [](float v) { return v == -7.f; }));
  // The pipeline goes on.
  std::vector<float> out(x.size());
  CHECK(pipe.run(x, out) == want.size());
}

TEST_CASE("a Filter feeds a Sink its packed elements in windows of chunk_elems, and reads a Source") {
  std::vector<std::uint32_t> x(100000);
  std::mt19937 rng(8);
  for (auto& v : x) v = static_cast<std::uint32_t>(rng());
  std::vector<std::uint32_t> want;
  std::copy_if(x.begin(), x.end(), std::back_inserter(want), Rare{});
  auto pipe = make_host_pipeline({.chunk_elems = 4096, .depth = 3}, filter(Rare{}));
  std::vector<std::uint32_t> got;
  std::vector<std::size_t> sizes;
  const std::size_t wrote = pipe.run(x, sink<std::uint32_t>([&](std::size_t k, std::size_t offset, ::cuda::std::span<const std::uint32_t> d) {
    CHECK(offset == got.size());
    CHECK(k == sizes.size());
    sizes.push_back(d.size());
    got.insert(got.end(), d.begin(), d.end());
  }));
  CHECK(wrote == want.size());  // what the Sink was handed
  CHECK(got == want);
  // Whole windows of 4096 kept elements, whatever each chunk kept; the last short.
  REQUIRE(want.size() > 2 * 4096);
  REQUIRE(sizes.size() == (want.size() + 4095) / 4096);
  for (std::size_t k = 0; k + 1 < sizes.size(); ++k) CHECK(sizes[k] == 4096);

  std::vector<std::uint32_t> out(want.size());
  CHECK(pipe.run(replay(x), out) == want.size());
  CHECK(out == want);

  // Back to back, every ticket its own count; the ops as issued are safe.
  std::vector<std::vector<std::uint32_t>> outs(10, std::vector<std::uint32_t>(x.size()));
  std::vector<ResultTicket<std::size_t, HostTicket>> tickets;
  for (std::size_t b = 0; b < outs.size(); ++b) {
    tickets.push_back(pipe.run_async(HostSpan<const std::uint32_t>{x.data(), 5000 * (b + 1), Memory::pinned}, pinned(outs[b])));
  }
  for (std::size_t b = 0; b < outs.size(); ++b) {
    const auto end = x.begin() + static_cast<std::ptrdiff_t>(5000 * (b + 1));
    const auto n = static_cast<std::size_t>(std::count_if(x.begin(), end, Rare{}));
    REQUIRE(tickets[b].get() == n);
    std::vector<std::uint32_t> w;
    std::copy_if(x.begin(), end, std::back_inserter(w), Rare{});
    CHECK(std::equal(w.begin(), w.end(), outs[b].begin()));
  }
  CHECK(check_hazards(pipe.issued_plan()).ok());
  std::vector<std::uint32_t> none;
  CHECK(pipe.run(none, out) == 0);
}

TEST_CASE("an Emit writes records of its own type, packed, and one that claims more than it got is refused") {
  std::vector<std::uint32_t> x(30001);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::uint32_t>(i * 7 + 1);
  auto pipe = make_host_pipeline({.chunk_elems = 1000, .depth = 2}, emit<Tagged>(TagThrees{}));
  std::vector<Tagged> out(x.size(), Tagged{-1, -1});
  const std::size_t wrote = pipe.run(x, out);
  std::size_t k = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i] % 3 != 0) continue;
    REQUIRE(k < wrote);
    CHECK(out[k].index == static_cast<std::int64_t>(i));
    CHECK(out[k].value == static_cast<std::int64_t>(x[i]) * 10);
    ++k;
  }
  CHECK(k == wrote);
  CHECK(out[wrote].index == -1);

  auto bad = make_host_pipeline({.chunk_elems = 1000}, emit<std::uint32_t>(Overclaims{}));
  std::vector<std::uint32_t> o(x.size());
  CHECK(contains(thrown_by([&] { (void)bad.run(x, o); }), "emitted 1001 elements from chunk 1 of 1000"));
}

TEST_CASE("a Filter's plan copies the count out and lets the host-out op read the device buffer") {
  auto pipe = make_host_pipeline({.chunk_elems = 256, .depth = 3, .policy = Policy::stage_streams}, filter(Positive{}));
  const Plan plan = pipe.plan_for(256 * 20);
  CHECK(check_hazards(plan).ok());
  bool reads_device = false;
  for (const Step& s : plan.steps) {
    if (s.kind != OpKind::host_out) continue;
    for (int b : s.reads) reads_device = reads_device || plan.buffers[static_cast<std::size_t>(b)] == "stage 0 out";
  }
  CHECK(reads_device);
  // Without the host-out op's read of the device buffer, the next chunk's
  // filter in that slot could overwrite what is still being copied out.
  Plan broken = plan;
  for (Op& op : broken.ops) {
    if (op.kind == OpKind::stage) {
      op.waits.erase(std::remove_if(op.waits.begin(), op.waits.end(),
                                    [&](std::size_t w) { return broken.ops[w].kind == OpKind::host_out; }),
                     op.waits.end());
    }
  }
  CHECK_FALSE(check_hazards(broken).ok());
  PlanShape shape;
  shape.variable_out = true;
  PlanBuilder b(Policy::stage_streams, 2, shape);
  CHECK(contains(thrown_by([&] { (void)b.begin_run(RunSpec{4, false, false, 0}); }), "every run must stage outputs"));
}

namespace {
// Two outputs of different types, and a count that only counts up from
// the 0 it starts at.
struct SplitOdd {
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    auto in = ctx.template in<0>();
    for (std::size_t i = 0; i < ctx.count; ++i) {
      if (in[i] % 2 == 0) continue;
      const std::size_t k = (*ctx.produced)++;
      ctx.template out<0>()[k] = in[i];
      ctx.template out<1>()[k] = static_cast<double>(ctx.offset + i);
    }
  }
};
}  // namespace

TEST_CASE("an Emit with two outputs packs both alike; pageable outputs too short are filled to their end") {
  std::vector<std::uint32_t> x(25000);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::uint32_t>(i * 2654435761u);
  std::vector<std::uint32_t> want_v;
  std::vector<double> want_i;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i] % 2 != 0) want_v.push_back(x[i]), want_i.push_back(static_cast<double>(i));
  }
  auto pipe = make_host_pipeline({.chunk_elems = 999, .depth = 3}, emit<std::uint32_t, double>(SplitOdd{}));
  pipe.set_seed(77);
  std::vector<std::uint32_t> v(x.size(), 7);
  std::vector<double> idx(x.size(), -1.0);
  REQUIRE(pipe.run(x, outputs(v, idx)) == want_v.size());
  CHECK(std::equal(want_v.begin(), want_v.end(), v.begin()));
  CHECK(std::equal(want_i.begin(), want_i.end(), idx.begin()));
  CHECK(idx[want_i.size()] == -1.0);

  // Pageable (staged) outputs, both too short: each filled to its end.
  const std::size_t room = want_v.size() / 2 + 17;
  std::vector<std::uint32_t> sv(room + 5, 7);
  std::vector<double> si(room + 5, -1.0);
  CHECK(contains(thrown_by([&] {
                   (void)pipe.run(x, outputs(HostSpan<std::uint32_t>{sv.data(), room, Memory::pageable},
                                             HostSpan<double>{si.data(), room, Memory::pageable}));
                 }),
                 "emitted " + std::to_string(want_v.size()) + " elements"));
  CHECK(std::equal(want_v.begin(), want_v.begin() + static_cast<std::ptrdiff_t>(room), sv.begin()));
  CHECK(std::equal(want_i.begin(), want_i.begin() + static_cast<std::ptrdiff_t>(room), si.begin()));
  CHECK(std::all_of(sv.begin() + static_cast<std::ptrdiff_t>(room), sv.end(), [](std::uint32_t e) { return e == 7; }));
  CHECK(std::all_of(si.begin() + static_cast<std::ptrdiff_t>(room), si.end(), [](double e) { return e == -1.0; }));
}
