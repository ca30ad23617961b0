// SPDX-License-Identifier: MIT
// GPU tests of stages that emit a count the device decides: a Filter (CUB
// select) packs what it keeps in order under every policy, into pinned and
// pageable ranges and a Sink, from ranges and a Source, in streams of
// runs; a short output gets nothing past its end and an error naming the
// count; an Emit kernel's records land packed; one that claims more than
// it got is refused; graphs asked for fall back to streams with a reason.
#include <chunkpipe/pipeline.cuh>

#include "catch.hpp"
#include "thrown.hpp"

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

using namespace chunkpipe;
using test_support::contains;
using test_support::thrown_by;

namespace {

struct Above {
  float t;
  CHUNKPIPE_HOST_DEVICE bool operator()(float x) const { return x > t; }
};
struct Shift {
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return x * 2.f - 1.f; }
};

std::vector<float> noisy(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<float> reference(const std::vector<float>& x, float t) {
  std::vector<float> k;
  for (float v : x) {
    const float y = v * 2.f - 1.f;
    if (y > t) k.push_back(y);
  }
  return k;
}

struct Pair {
  std::uint32_t index, value;
};
// One thread walks the chunk in order: slow, and plainly right.
__global__ void emit_multiples_of_three(const std::uint32_t* in, std::size_t n, std::size_t offset, Pair* out,
                                        std::size_t* produced) {
  std::size_t k = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (in[i] % 3 == 0) out[k++] = Pair{static_cast<std::uint32_t>(offset + i), in[i]};
  }
  *produced = k;
}
struct EmitThrees {
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    emit_multiples_of_three<<<1, 1, 0, ctx.stream.get()>>>(ctx.template in<0>().data(), ctx.count, ctx.offset,
                                                          ctx.template out<0>().data(), ctx.produced);
  }
};
// Counts up from the 0 the count holds when the functor is called.
__global__ void emit_evens_counting_up(const std::uint32_t* in, std::size_t n, std::uint32_t* out,
                                       std::size_t* produced) {
  for (std::size_t i = 0; i < n; ++i) {
    if (in[i] % 2 == 0) out[(*produced)++] = in[i];
  }
}
struct EmitEvens {
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    emit_evens_counting_up<<<1, 1, 0, ctx.stream.get()>>>(ctx.template in<0>().data(), ctx.count,
                                                          ctx.template out<0>().data(), ctx.produced);
  }
};
__global__ void claim(std::size_t* produced, std::size_t n) { *produced = n; }
struct Overclaims {
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    claim<<<1, 1, 0, ctx.stream.get()>>>(ctx.produced, ctx.chunk == 2 ? ctx.count + 5 : 0);
  }
};

}  // namespace

TEST_CASE("a Filter on the GPU packs what it keeps, in order, under every policy", "[gpu][filter]") {
  const std::size_t n = (std::size_t{1} << 20) + 4321;
  const std::vector<float> x = noisy(n, 3);
  PinnedArray<float> in(n);
  std::copy(x.begin(), x.end(), in.begin());
  for (float t : {0.8f, -2.f}) {  // keeps about 10%, and everything
    const std::vector<float> want = reference(x, t);
    for (Policy p : {Policy::serial, Policy::slot_streams, Policy::stage_streams, Policy::automatic}) {
      for (int depth : {1, 3}) {
        if (p == Policy::serial && depth != 1) continue;
        auto pipe = make_pipeline({.chunk_elems = 1 << 18, .depth = depth, .policy = p, .executor = Executor::graphs},
                                  map(Shift{}), filter(Above{t}));
        PinnedArray<float> out(n + 8);
        std::fill(out.begin(), out.end(), -9.f);
        auto ticket = pipe.run_async(in, out);
        const std::size_t wrote = ticket.get();
        INFO("t " << t << " policy " << to_string(p) << " depth " << depth);
        CHECK(ticket.ticket().executor() == Executor::streams);
        CHECK(!ticket.ticket().executor_note().empty());
        REQUIRE(wrote == want.size());
        CHECK(std::equal(want.begin(), want.end(), out.begin()));
        CHECK(std::all_of(out.begin() + static_cast<std::ptrdiff_t>(wrote), out.end(), [](float v) { return v == -9.f; }));
        std::vector<float> page(want.size());  // pageable, exactly long enough
        CHECK(pipe.run(in, page) == want.size());
        CHECK(page == want);
      }
    }
  }
}

TEST_CASE("a Filter into a Sink, from a Source, back to back, and into an output too short", "[gpu][filter]") {
  const std::vector<float> x = noisy(3000017, 5);
  const std::vector<float> want = reference(x, 0.5f);
  auto pipe = make_pipeline({.chunk_elems = 1 << 16, .depth = 4, .record_issued = true}, map(Shift{}), filter(Above{0.5f}));
  std::vector<float> got;
  CHECK(pipe.run(x, sink<float>([&](std::size_t, std::size_t offset, ::cuda::std::span<const float> d) {
          CHECK(offset == got.size());
          got.insert(got.end(), d.begin(), d.end());
        })) == want.size());
  CHECK(got == want);
  std::size_t next = 0;
  auto src = source<float>([&](std::size_t, ::cuda::std::span<float> slot) {
    const std::size_t k = std::min(slot.size(), x.size() - next);
    std::copy(x.begin() + static_cast<std::ptrdiff_t>(next), x.begin() + static_cast<std::ptrdiff_t>(next + k), slot.begin());
    next += k;
    return k;
  });
  PinnedArray<float> out(x.size());
  CHECK(pipe.run(std::move(src), out) == want.size());
  CHECK(std::equal(want.begin(), want.end(), out.begin()));

  PinnedArray<float> in(x.size());
  std::copy(x.begin(), x.end(), in.begin());
  std::vector<PinnedArray<float>> outs;
  std::vector<ResultTicket<std::size_t, RunTicket>> tickets;
  for (int b = 0; b < 12; ++b) outs.emplace_back(x.size());
  for (int b = 0; b < 12; ++b) {
    const std::size_t len = 100000 * static_cast<std::size_t>(b + 1);
    tickets.push_back(pipe.run_async(HostSpan<const float>{in.data(), len, Memory::pinned}, outs[static_cast<std::size_t>(b)]));
  }
  for (int b = 0; b < 12; ++b) {
    const std::vector<float> part(x.begin(), x.begin() + 100000 * (b + 1));
    const std::vector<float> w = reference(part, 0.5f);
    REQUIRE(tickets[static_cast<std::size_t>(b)].get() == w.size());
    CHECK(std::equal(w.begin(), w.end(), outs[static_cast<std::size_t>(b)].begin()));
  }
  CHECK(check_hazards(pipe.issued_plan()).ok());

  PinnedArray<float> buffer(want.size());
  std::fill(buffer.begin(), buffer.end(), -9.f);
  const std::size_t room = want.size() / 3;
  CHECK(contains(thrown_by([&] { (void)pipe.run(in, HostSpan<float>{buffer.data(), room, Memory::pinned}); }), "emitted " + std::to_string(want.size()) + " elements"));
  CHECK(std::all_of(buffer.begin() + static_cast<std::ptrdiff_t>(room), buffer.end(), [](float v) { return v == -9.f; }));
  // Filled to its end, in order (the chunk that crosses it leaves a prefix).
  CHECK(std::equal(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(room), want.begin()));
  CHECK(pipe.run(in, out) == want.size());  // and the pipeline goes on
}

TEST_CASE("an Emit kernel's records land packed; one that claims more than it got is refused", "[gpu][filter]") {
  const std::size_t n = 200003;
  PinnedArray<std::uint32_t> in(n);
  for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<std::uint32_t>(i * 2654435761u);
  auto pipe = make_pipeline({.chunk_elems = 8192, .depth = 3}, emit<Pair>(EmitThrees{}));
  PinnedArray<Pair> out(n);
  const std::size_t wrote = pipe.run(in, out);
  std::size_t k = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (in[i] % 3 != 0) continue;
    REQUIRE(k < wrote);
    CHECK(out[k].index == i);
    CHECK(out[k].value == in[i]);
    ++k;
  }
  CHECK(k == wrote);
  // Every chunk's count starts at 0, not at what the slot held before.
  auto evens = make_pipeline({.chunk_elems = 8192, .depth = 2}, emit<std::uint32_t>(EmitEvens{}));
  PinnedArray<std::uint32_t> ev(n);
  std::vector<std::uint32_t> want_ev;
  for (std::size_t i = 0; i < n; ++i) {
    if (in[i] % 2 == 0) want_ev.push_back(in[i]);
  }
  for (int round = 0; round < 2; ++round) {
    REQUIRE(evens.run(in, ev) == want_ev.size());
    CHECK(std::equal(want_ev.begin(), want_ev.end(), ev.begin()));
  }
  auto bad = make_pipeline({.chunk_elems = 8192}, emit<std::uint32_t>(Overclaims{}));
  PinnedArray<std::uint32_t> o(n);
  CHECK(contains(thrown_by([&] { (void)bad.run(in, o); }), "emitted 8197 elements from chunk 2 of 8192"));
  CHECK(bad.healthy());
}
