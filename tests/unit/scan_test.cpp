// SPDX-License-Identifier: MIT
// The Scan stage on the host backend and in the plan: a running prefix over
// a whole run gives the bits of the order scan.hpp documents (written out
// again below) under every schedule, grain and execution order, exact
// integer prefixes, a fresh start for every run; its chunk-to-chunk carry
// is a wait the plan derives, the hazard check finds missing and the
// simulator pays for.
#include <chunkpipe/host_backend.hpp>
#include <chunkpipe/simulate.hpp>

#include "catch.hpp"
#include "float_data.hpp"
#include "replay.hpp"
#include "thrown.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

using namespace chunkpipe;
using test_support::bits;
using test_support::contains;
using test_support::noisy;
using test_support::poisoned;
using test_support::replay;
using test_support::thrown_by;

namespace {

struct Plus {
  CHUNKPIPE_HOST_DEVICE float operator()(float a, float b) const { return a + b; }
};
struct PlusU64 {
  CHUNKPIPE_HOST_DEVICE std::uint64_t operator()(std::uint64_t a, std::uint64_t b) const { return a + b; }
};
struct Double {
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return 2.0f * x; }
};
// Not commutative: keeps the order of its operands visible.
struct Affine {
  float a, b;  // x -> a x + b
};
struct Compose {
  CHUNKPIPE_HOST_DEVICE Affine operator()(Affine f, Affine g) const { return {g.a * f.a, g.a * f.b + g.b}; }
};
struct ToAffine {
  CHUNKPIPE_HOST_DEVICE Affine operator()(float x) const { return {1.0f + x * 1e-3f, x}; }
};

// The order scan.hpp documents, written out again from its words: segments
// from the run's start; in a segment, 256 lanes of ceil(segment / 256)
// consecutive elements, each a running left fold; a lane's values take the
// fold of the lanes before it on their left; every value of segment k takes
// on its left init folded with the totals of segments 0 to k - 1.
template <class T, class Op, class I>
std::vector<T> documented_scan(const std::vector<I>& x, std::size_t segment, T init, Op op) {
  std::vector<T> out(x.size());
  const std::size_t q = (segment + 255) / 256;
  T carry = init;
  for (std::size_t at = 0; at < x.size(); at += segment) {
    const std::size_t end = std::min(x.size(), at + segment);
    std::vector<T> value(end - at);
    std::vector<T> lane_totals;
    for (std::size_t lo = at; lo < end; lo += q) {
      T run = static_cast<T>(x[lo]);
      value[lo - at] = run;
      for (std::size_t j = lo + 1; j < std::min(end, lo + q); ++j) value[j - at] = run = op(run, static_cast<T>(x[j]));
      lane_totals.push_back(run);
    }
    T before = lane_totals[0];
    for (std::size_t l = 1; l < lane_totals.size(); ++l) {
      for (std::size_t j = at + l * q; j < std::min(end, at + (l + 1) * q); ++j) value[j - at] = op(before, value[j - at]);
      before = op(before, lane_totals[l]);
    }
    for (std::size_t j = at; j < end; ++j) out[j] = op(carry, value[j - at]);
    carry = op(carry, before);  // `before` is now the segment's total
  }
  return out;
}

}  // namespace

TEST_CASE("a Scan gives the documented order's bits under every schedule, grain and execution order") {
  const std::size_t segment = 1024;
  for (std::size_t n : {std::size_t{1}, std::size_t{255}, std::size_t{1024}, std::size_t{40000}, std::size_t{77777}}) {
    const std::vector<float> x = noisy(n, static_cast<unsigned>(n));
    const std::vector<float> want = documented_scan(x, segment, 0.25f, Plus{});
    // The order is a real prefix: close to the sequential sum everywhere.
    double seq = 0.25, mag = 0.25;
    for (std::size_t i = 0; i < n; ++i) {
      seq += x[i];
      mag += std::fabs(x[i]);
      REQUIRE(std::fabs(static_cast<double>(want[i]) - seq) <= 1e-4 * mag);
    }
    for (Policy p : {Policy::serial, Policy::slot_streams, Policy::stage_streams, Policy::automatic}) {
      for (int depth : {1, 2, 4}) {
        if (p == Policy::serial && depth != 1) continue;
        for (std::size_t chunk : {std::size_t{1024}, std::size_t{4096}, std::size_t{16384}}) {
          for (std::size_t grain : {std::size_t{0}, std::size_t{2048}}) {
            if (grain != 0 && (p != Policy::stage_streams || grain >= chunk)) continue;
            HostPipeline<Scan<float, Plus>> pipe(
                {.chunk_elems = chunk, .depth = depth, .policy = p, .grain_elems = grain},
                scan(0.25f, Plus{}, segment));
            pipe.set_seed(n + chunk + static_cast<std::size_t>(depth));
            std::vector<float> y = poisoned<float>(n);
            pipe.run(pinned(x), pinned(y));
            INFO("n " << n << " policy " << to_string(p) << " depth " << depth << " chunk " << chunk << " grain "
                      << grain);
            std::size_t wrong = 0;
            for (std::size_t i = 0; i < n; ++i) wrong += bits(y[i]) == bits(want[i]) ? 0 : 1;
            CHECK(wrong == 0);
            CHECK(check_hazards(pipe.issued_plan()).ok());
          }
        }
      }
    }
  }
}

TEST_CASE("an integer Scan is the exact prefix, runs start again from init, and stages around it see it") {
  const std::size_t n = 100003;
  std::vector<std::uint64_t> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = (i * 2654435761u) % 1000;
  auto pipe = make_host_pipeline({.chunk_elems = 4096, .depth = 3}, scan(std::uint64_t{7}, PlusU64{}, 512));
  for (int round = 0; round < 3; ++round) {  // every run from init, not from the last run's carry
    std::vector<std::uint64_t> y = poisoned<std::uint64_t>(n);
    pipe.run(pinned(x), pinned(y));
    std::uint64_t s = 7;
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += y[i] == (s += x[i]) ? 0 : 1;
    CHECK(wrong == 0);
  }
  // Queued runs of different lengths, each its own prefix.
  std::vector<std::vector<std::uint64_t>> ins, outs;
  for (std::size_t b = 0; b < 6; ++b) {
    ins.emplace_back(1000 + 3000 * b, b + 1);
    outs.push_back(poisoned<std::uint64_t>(ins.back().size()));
  }
  std::vector<HostTicket> tickets;
  for (std::size_t b = 0; b < ins.size(); ++b) tickets.push_back(pipe.run_async(pinned(ins[b]), pinned(outs[b])));
  for (std::size_t b = 0; b < ins.size(); ++b) {
    tickets[b].wait();
    CHECK(outs[b].back() == 7 + (b + 1) * ins[b].size());
    CHECK(outs[b].front() == 7 + (b + 1));
  }
  // Every op of the three runs and the six queued ones, carries across
  // runs included, as one schedule.
  const Plan issued = pipe.issued_plan();
  CHECK(issued.runs.size() == 9);
  CHECK(check_hazards(issued).ok());
  // A Map before and after: y = 2 * scan(2 * x).
  const std::vector<float> f = noisy(30000, 3);
  std::vector<float> doubled(f.size());
  for (std::size_t i = 0; i < f.size(); ++i) doubled[i] = 2.0f * f[i];
  const std::vector<float> inner = documented_scan(doubled, 1024, 1.0f, Plus{});
  auto around = make_host_pipeline({.chunk_elems = 2048}, map(Double{}), scan(1.0f, Plus{}, 1024), map(Double{}));
  std::vector<float> y = poisoned<float>(f.size());
  around.run(f, y);  // pageable: staged
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < f.size(); ++i) wrong += bits(y[i]) == bits(2.0f * inner[i]) ? 0 : 1;
  CHECK(wrong == 0);
}

TEST_CASE("a Scan keeps the order of a non-commutative operator and reads Sources and feeds Sinks") {
  const std::vector<float> x = noisy(20000, 11);
  const std::vector<Affine> want = documented_scan(
      [&] {
        std::vector<Affine> a(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) a[i] = ToAffine{}(x[i]);
        return a;
      }(),
      512, Affine{1.0f, 0.0f}, Compose{});
  auto pipe = make_host_pipeline({.chunk_elems = 2048, .depth = 4, .policy = Policy::slot_streams}, map(ToAffine{}),
                                 scan(Affine{1.0f, 0.0f}, Compose{}, 512));
  std::vector<Affine> got(x.size());
  std::size_t delivered = 0;
  pipe.run(replay(x), sink<Affine>([&](std::size_t, std::size_t offset, ::cuda::std::span<const Affine> d) {
    REQUIRE(offset == delivered);
    std::memcpy(got.data() + offset, d.data(), d.size() * sizeof(Affine));
    delivered += d.size();
  }));
  REQUIRE(delivered == x.size());
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    wrong += bits(got[i].a) == bits(want[i].a) && bits(got[i].b) == bits(want[i].b) ? 0 : 1;
  }
  CHECK(wrong == 0);
}

TEST_CASE("a Scan's window must hold whole segments, and two segments must nest") {
  CHECK(contains(thrown_by([] { HostPipeline<Scan<float, Plus>> p({.chunk_elems = 1000}, scan(0.f, Plus{}, 256)); }),
                 "a Reduce or a Scan works in segments of 256"));
  CHECK(contains(thrown_by([] { HostPipeline<Scan<float, Plus>> p({}, scan(0.f, Plus{}, 0)); }),
                 "a Scan's segment must be at least 1"));
  CHECK(contains(thrown_by([] {
                   HostPipeline<Scan<float, Plus>, Reduce<float, Plus>> p({.chunk_elems = 4096}, scan(0.f, Plus{}, 768),
                                                                          reduce(0.f, Plus{}, 512));
                 }),
                 "segments of 768 and 512"));
  // A hand-made plan must give the carry its buffer.
  HostPipeline<Scan<float, Plus>> planned({.chunk_elems = 1024}, scan(0.f, Plus{}, 256));
  std::vector<float> in(4096, 1.f), out(4096);
  PlanShape no_carry;
  no_carry.stages = 1;
  CHECK(contains(thrown_by([&] { planned.run_plan(make_plan(Policy::slot_streams, 2, no_carry, 4), pinned(in), pinned(out)); }),
                 "PlanShape::carries[0]"));
  PlanShape with_carry = no_carry;
  with_carry.carries = {true};
  planned.run_plan(make_plan(Policy::slot_streams, 2, with_carry, 4), pinned(in), pinned(out));
  CHECK(out[4095] == 4096.f);
  // Nested segments are fine: units hold whole segments of both, and each
  // stage keeps its own (the Reduce's partials are still of 256).
  HostPipeline<Scan<std::uint64_t, PlusU64>, Reduce<std::uint64_t, PlusU64>> ok(
      {.chunk_elems = 4096}, scan(std::uint64_t{0}, PlusU64{}, 1024), reduce(std::uint64_t{0}, PlusU64{}, 256));
  std::vector<std::uint64_t> ones(10000, 1);
  CHECK(ok.run(ones) == std::uint64_t{50005000});  // 1 + 2 + ... + 10000
  // The other way round: the Scan's segment the smaller (its carry holds
  // one value per 256 of a unit).
  HostPipeline<Scan<std::uint64_t, PlusU64>, Reduce<std::uint64_t, PlusU64>> fine(
      {.chunk_elems = 4096}, scan(std::uint64_t{0}, PlusU64{}, 256), reduce(std::uint64_t{0}, PlusU64{}, 1024));
  CHECK(fine.run(ones) == std::uint64_t{50005000});
}

TEST_CASE("a carry is a wait the plan derives, the hazard check proves and the simulator pays for") {
  for (Policy p : {Policy::serial, Policy::slot_streams, Policy::stage_streams}) {
    for (int depth : {1, 2, 3, 8}) {
      if ((p == Policy::serial) != (depth == 1)) continue;
      for (int lanes : {1, 2}) {
        if (lanes > 1 && p != Policy::stage_streams) continue;
        PlanShape shape;
        shape.stages = 2;
        shape.carries = {false, true};
        shape.kernel_lanes = lanes;
        const Plan plan = make_plan(p, depth, shape, 24);
        INFO("policy " << to_string(p) << " depth " << depth << " lanes " << lanes);
        REQUIRE(check_hazards(plan).ok());
        // Runs in a row (short, ragged, staged or not, fewer lanes): the
        // carry orders each run's first chunk after the run before's last.
        PlanShape varied = shape;
        varied.per_run_staging = true;
        varied.lanes_vary = lanes > 1;
        const Plan runs = make_plan(p, depth, varied,
                                    std::vector<RunSpec>{{1, false, false}, {5, true, false}, {2, false, true, 0, 1},
                                                         {7, true, true}, {3, false, false, 0, lanes}});
        CHECK(check_hazards(runs).ok());
        CHECK(check_hazards(runs, graph_of(runs)).ok());
        // Every carrying op of chunk c > 0 follows the one of chunk c - 1.
        const PlanGraph g = graph_of(plan);
        std::vector<std::size_t> carrying;
        for (const Op& op : plan.ops) {
          if (op.kind == OpKind::stage && op.stage == 1) carrying.push_back(op.id);
        }
        REQUIRE(carrying.size() == 24);
        for (std::size_t c = 1; c < carrying.size(); ++c) {
          const Op& op = plan.ops[carrying[c]];
          const bool waits = std::find(op.waits.begin(), op.waits.end(), carrying[c - 1]) != op.waits.end();
          const bool same_queue = plan.ops[carrying[c - 1]].queue == op.queue;
          CHECK((waits || same_queue));
          if (!same_queue) CHECK(plan.ops[carrying[c - 1]].signal);
        }
        // Take one carry wait away: the check must see it.
        for (std::size_t c = 1; c < carrying.size(); ++c) {
          Plan broken = plan;
          auto& w = broken.ops[carrying[c]].waits;
          const auto it = std::find(w.begin(), w.end(), carrying[c - 1]);
          if (it == w.end()) continue;
          w.erase(it);
          const HazardReport r = check_hazards(broken);
          CHECK_FALSE(r.ok());
          bool named = false;
          for (const std::string& m : r.messages) named = named || contains(m, "stage 1 carry (one for every slot)");
          CHECK(named);
          break;
        }
      }
    }
  }
  // Copies overlap, kernels of a carrying stage do not: with the kernel
  // the bottleneck and a long tail, two lanes let each kernel start in the
  // tail of the one before; a carry makes it wait for its end.
  PlanShape free_shape;
  free_shape.stages = 1;
  free_shape.kernel_lanes = 2;
  PlanShape carry_shape = free_shape;
  carry_shape.carries = {true};
  const std::size_t chunks = 64, elems = chunks * 1024;
  Workload w;
  w.elems = elems;
  w.chunk_elems = 1024;
  w.in_bytes_per_elem = 4;
  w.out_bytes_per_elem = 4;
  w.stage_ns_per_elem = {20.0};
  Machine m = machines::h200_pcie5();
  m.kernel_tail_elems = 512;
  const double free_ms = makespan_ms(simulate(make_plan(Policy::stage_streams, 3, free_shape, chunks), w, m));
  const double carry_ms = makespan_ms(simulate(make_plan(Policy::stage_streams, 3, carry_shape, chunks), w, m));
  // Each kernel: 1024 elements at 20 ns, plus a tail of 512 (the model's
  // Machine::kernel_tail_elems); with a carry, one after another.
  const double kernels_ms = static_cast<double>(chunks) * (1024 + 512) * 20e-6;
  CHECK(carry_ms >= kernels_ms);
  CHECK(carry_ms > free_ms * 1.05);  // two lanes overlapped the tails without a carry
}
