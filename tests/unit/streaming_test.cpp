// SPDX-License-Identifier: MIT
// Streaming: a pipeline's runs form one continuing schedule. Sequences of
// runs (random lengths, policies, depths, staging mixes, sources and sinks,
// failures in the middle) are hazard-free as planned and as issued, run on
// the host backend in shuffled orders across runs, and match a reference
// bit for bit. Runs that would race are refused; after(ticket) orders them.
#include <chunkpipe/hazards.hpp>
#include <chunkpipe/host_backend.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/simulate.hpp>

#include "catch.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using namespace chunkpipe;

namespace {

struct Fma {
  float a, b;
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return std::fma(x, a, b); }
};

struct Offsets {  // ChunkFn: writes each element's index in its run, to check offsets survive streaming
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    auto in = ctx.template in<0>();
    auto out = ctx.template out<0>();
    for (std::size_t i = 0; i < ctx.count; ++i) out[i] = static_cast<double>(ctx.offset + i) + in[i];
  }
};

float value_at(std::size_t i, unsigned salt) { return static_cast<float>((i * 2654435761u + salt) % 8191) / 8191.0f - 0.5f; }

std::vector<float> data(std::size_t n, unsigned salt) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value_at(i, salt);
  return v;
}

const Policy all_policies[] = {Policy::serial, Policy::slot_streams, Policy::stage_streams, Policy::automatic};

// The ops of one run, looked up by (chunk, kind).
const Op* find(const Plan& plan, std::size_t chunk, OpKind kind) {
  for (const Op& op : plan.ops) {
    if (op.chunk == chunk && op.kind == kind) return &op;
  }
  return nullptr;
}

}  // namespace

TEST_CASE("sequences of runs are hazard-free for every policy, depth and staging mix", "[streaming][hazards]") {
  std::mt19937 rng(42);
  for (Policy policy : all_policies) {
    for (int depth = 1; depth <= 9; ++depth) {
      for (int stages : {1, 2}) {
        const Resolved r = resolve(policy, depth);
        PlanShape shape;
        shape.stages = stages;
        shape.per_run_staging = true;
        std::vector<RunSpec> runs;
        for (int k = 0; k < 12; ++k) {
          RunSpec s;
          s.chunks = rng() % 9;  // empty runs too
          s.stage_in = rng() % 2 == 0;
          s.stage_out = rng() % 3 == 0;
          runs.push_back(s);
        }
        const Plan plan = make_plan(r.policy, r.depth, shape, runs);
        INFO(to_string(policy) << " depth " << depth << " stages " << stages);
        const HazardReport report = check_hazards(plan);
        INFO(report);
        REQUIRE(report.ok());
        REQUIRE(plan.runs.size() == runs.size());
        // Chunks and ops continue from run to run, with no gap.
        std::size_t chunk = 0, op = 0;
        for (std::size_t k = 0; k < runs.size(); ++k) {
          REQUIRE(plan.runs[k].first_chunk == chunk);
          REQUIRE(plan.runs[k].first_op == op);
          REQUIRE(plan.runs[k].chunks == runs[k].chunks);
          chunk += runs[k].chunks;
          op += plan.runs[k].ops;
          // A run's tail ops are its own, and imply all of them: no op of
          // the run is left that a tail does not follow.
          for (std::size_t t : plan.runs[k].tail) {
            REQUIRE(t >= plan.runs[k].first_op);
            REQUIRE(t < plan.runs[k].first_op + plan.runs[k].ops);
          }
          REQUIRE(plan.runs[k].tail.empty() == (runs[k].chunks == 0));
        }
        REQUIRE(op == plan.ops.size());
      }
    }
  }
}

TEST_CASE("a run's first chunk waits only for its slot's previous occupant, not for the whole run before", "[streaming]") {
  // stage_streams, depth 3: run 1's chunk 0 (chunk 4 overall) reuses slot 1,
  // last used by chunk 1 of run 0. Its copy-in waits for chunk 1's kernel,
  // and for nothing of chunks 2 and 3 (no barrier between runs).
  const Plan plan = make_plan(Policy::stage_streams, 3, PlanShape{}, std::vector<RunSpec>{{4}, {4}});
  REQUIRE(check_hazards(plan).ok());
  const Op* h2d = find(plan, 4, OpKind::h2d);
  REQUIRE(h2d != nullptr);
  REQUIRE(h2d->waits == std::vector<std::size_t>{find(plan, 1, OpKind::stage)->id});
  // Run 0 ends with its last copy-out, which follows everything of the run.
  REQUIRE(plan.runs[0].tail == std::vector<std::size_t>{find(plan, 3, OpKind::d2h)->id});
  // slot_streams: a run's tail is the last op of every stream it used.
  const Plan slots = make_plan(Policy::slot_streams, 2, PlanShape{}, std::vector<RunSpec>{{3}, {1}});
  REQUIRE(slots.runs[0].tail.size() == 2);
  REQUIRE(slots.runs[1].tail.size() == 1);
  for (const Op& op : slots.ops) REQUIRE(op.waits.empty());  // stream order alone, across runs too
}

TEST_CASE("runs of one schedule print with their boundaries", "[streaming]") {
  PlanShape shape;
  shape.per_run_staging = true;
  const Plan plan = make_plan(Policy::stage_streams, 2, shape, std::vector<RunSpec>{{2, false, false}, {1, true, true}});
  std::ostringstream s;
  s << plan;
  REQUIRE(s.str().find("run 0: chunks 0 to 1") != std::string::npos);
  REQUIRE(s.str().find("run 1: chunks 2 to 2, staged in, staged out") != std::string::npos);
}

TEST_CASE("without per_run_staging every run stages as the shape says", "[streaming][errors]") {
  PlanShape shape;
  shape.stage_in = true;
  REQUIRE_THROWS_AS(make_plan(Policy::stage_streams, 3, shape, std::vector<RunSpec>{{2, true, false}, {2, false, false}}),
                    config_error);
}

TEST_CASE("back-to-back runs on the host backend: every order across runs gives the reference", "[streaming][host]") {
  const Fma f{0.999f, 0.0625f};
  for (Policy policy : all_policies) {
    for (int depth : {1, 2, 3, 5}) {
      for (std::uint64_t seed : {0u, 1u, 5u, 11u}) {
        HostPipeline<Map<Fma>> pipe({.chunk_elems = 32, .depth = depth, .policy = policy, .grain_elems = 32},
                                    Map<Fma>{f});
        pipe.set_seed(seed);
        std::mt19937 rng(static_cast<unsigned>(seed * 31 + static_cast<unsigned>(depth)));
        const int runs = 10;
        std::vector<std::vector<float>> ins, outs;
        std::vector<HostTicket> tickets;
        for (int k = 0; k < runs; ++k) {
          const std::size_t n = rng() % 200;  // some empty, some shorter than a chunk, ragged ends
          ins.push_back(data(n, static_cast<unsigned>(k)));
          outs.emplace_back(n, std::numeric_limits<float>::quiet_NaN());
        }
        for (int k = 0; k < runs; ++k) {
          const int mix = static_cast<int>(rng() % 4);  // pinned or staged, on either side
          auto in = mix & 1 ? pinned(ins[k]) : pageable(ins[k]);
          auto out = mix & 2 ? pinned(outs[k]) : pageable(outs[k]);
          tickets.push_back(pipe.run_async(in, out));
        }
        // Wait in a shuffled order: ops of every run still pending run then.
        std::vector<int> order(runs);
        for (int k = 0; k < runs; ++k) order[static_cast<std::size_t>(k)] = k;
        std::shuffle(order.begin(), order.end(), rng);
        for (int k : order) tickets[static_cast<std::size_t>(k)].wait();
        INFO(to_string(policy) << " depth " << depth << " seed " << seed);
        for (int k = 0; k < runs; ++k) {
          for (std::size_t i = 0; i < ins[k].size(); ++i) REQUIRE(outs[k][i] == f(ins[k][i]));
        }
        const Plan issued = pipe.issued_plan();
        REQUIRE(issued.runs.size() == static_cast<std::size_t>(runs) - [&] {
          std::size_t empty = 0;
          for (const auto& v : ins) empty += v.empty() ? 1 : 0;
          return empty;
        }());
        const HazardReport report = check_hazards(issued);
        INFO(report);
        REQUIRE(report.ok());
      }
    }
  }
}

TEST_CASE("sources, sinks and ranges mixed in one stream of runs", "[streaming][host][source][sink]") {
  const Fma f{2.f, -1.f};
  for (Policy policy : all_policies) {
    for (int depth : {2, 3, 8}) {
      for (std::uint64_t seed : {0u, 3u, 7u}) {
        // depth 8 with grains of 8 over a window of 64: a deep batched ring,
        // whose reuse waits must survive runs a Source ends early.
        HostPipeline<Map<Fma>> pipe({.chunk_elems = 64, .depth = depth, .policy = policy, .grain_elems = 8},
                                    Map<Fma>{f});
        pipe.set_seed(seed);
        std::vector<HostTicket> tickets;
        std::vector<std::vector<float>> ranges_out;
        std::vector<std::size_t> totals = {100, 64, 0, 7, 129, 3, 256};
        std::vector<std::vector<float>> got(totals.size());
        ranges_out.reserve(totals.size());
        for (std::size_t k = 0; k < totals.size(); ++k) {
          const std::size_t total = totals[k];
          auto src = source<float>([total, k](std::size_t chunk, ::cuda::std::span<float> slot) {
            const std::size_t begin = chunk * slot.size();
            const std::size_t n = begin < total ? std::min(slot.size(), total - begin) : 0;
            for (std::size_t i = 0; i < n; ++i) slot[i] = value_at(begin + i, static_cast<unsigned>(k));
            return n;
          });
          if (k % 2 == 0) {
            auto* out = &got[k];
            tickets.push_back(pipe.run_async(src, sink<float>([out](std::size_t, std::size_t offset,
                                                                   ::cuda::std::span<const float> d) {
                                               if (out->size() < offset + d.size()) out->resize(offset + d.size());
                                               for (std::size_t i = 0; i < d.size(); ++i) (*out)[offset + i] = d[i];
                                             })));
          } else {
            ranges_out.emplace_back(300, std::numeric_limits<float>::quiet_NaN());
            tickets.push_back(pipe.run_async(src, ranges_out.back()));
          }
        }
        for (HostTicket& t : tickets) t.wait();
        INFO(to_string(policy) << " depth " << depth << " seed " << seed);
        std::size_t r = 0;
        for (std::size_t k = 0; k < totals.size(); ++k) {
          const std::vector<float>& out = k % 2 == 0 ? got[k] : ranges_out[r++];
          for (std::size_t i = 0; i < totals[k]; ++i) REQUIRE(out[i] == f(value_at(i, static_cast<unsigned>(k))));
          REQUIRE(tickets[k].summary().elems == totals[k]);
          if (k % 2 == 1) {
            for (std::size_t i = totals[k]; i < out.size(); ++i) REQUIRE(std::isnan(out[i]));
          }
        }
        const HazardReport report = check_hazards(pipe.issued_plan());
        INFO(report);
        REQUIRE(report.ok());
      }
    }
  }
}

TEST_CASE("a failing run in the middle fails alone; the runs around it complete", "[streaming][host][errors]") {
  const Fma f{1.5f, 0.25f};
  for (Policy policy : all_policies) {
    for (std::uint64_t seed : {0u, 2u, 9u}) {
      HostPipeline<Map<Fma>> pipe({.chunk_elems = 50, .depth = 3, .policy = policy}, Map<Fma>{f});
      pipe.set_seed(seed);
      const auto a = data(333, 1), c = data(250, 3);
      std::vector<float> ya(333, std::numeric_limits<float>::quiet_NaN()), yc(250, std::numeric_limits<float>::quiet_NaN());
      std::vector<float> yb(400, std::numeric_limits<float>::quiet_NaN());
      int aborted = 0;
      struct Failing {
        int* aborted;
        std::size_t operator()(std::size_t chunk, ::cuda::std::span<float> slot) const {
          if (chunk == 2) throw std::runtime_error("source failed at chunk 2");
          for (float& v : slot) v = 1.f;
          return slot.size();
        }
      };
      auto ta = pipe.run_async(a, ya);
      auto tb = pipe.run_async(source<float>(Failing{&aborted}), yb);
      auto tc = pipe.run_async(pinned(c), pinned(yc));
      INFO(to_string(policy) << " seed " << seed);
      tc.wait();
      ta.wait();
      try {
        tb.wait();
        FAIL("expected the source's error");
      } catch (const std::runtime_error& e) {
        REQUIRE(std::string(e.what()) == "source failed at chunk 2");
      }
      REQUIRE_THROWS_AS(tb.wait(), std::runtime_error);  // the same error again
      for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(ya[i] == f(a[i]));
      for (std::size_t i = 0; i < c.size(); ++i) REQUIRE(yc[i] == f(c[i]));
      REQUIRE(check_hazards(pipe.issued_plan()).ok());
      // And the pipeline goes on.
      std::vector<float> again(333);
      pipe.run(a, again);
      for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(again[i] == f(a[i]));
    }
  }
}

TEST_CASE("offsets and chunk indices are the run's own, whatever ran before", "[streaming][host]") {
  HostPipeline<ChunkFn<Offsets, double>> pipe({.chunk_elems = 16, .depth = 3});
  std::vector<HostTicket> tickets;
  std::vector<std::vector<float>> ins;
  std::vector<std::vector<double>> outs;
  for (std::size_t n : {40u, 16u, 5u, 33u}) {
    ins.push_back(data(n, static_cast<unsigned>(n)));
    outs.emplace_back(n, std::numeric_limits<double>::quiet_NaN());
  }
  for (std::size_t k = 0; k < ins.size(); ++k) tickets.push_back(pipe.run_async(ins[k], outs[k]));
  for (auto& t : tickets) t.wait();
  for (std::size_t k = 0; k < ins.size(); ++k) {
    for (std::size_t i = 0; i < ins[k].size(); ++i) REQUIRE(outs[k][i] == static_cast<double>(i) + ins[k][i]);
  }
}

TEST_CASE("ranges that overlap are refused, naming both; exact in-place runs are fine", "[streaming][errors]") {
  const Fma f{2.f, 1.f};
  HostPipeline<Map<Fma>> pipe({.chunk_elems = 16}, Map<Fma>{f});
  std::vector<float> v = data(100, 7);
  const std::vector<float> original = v;
  auto message = [](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const config_error& e) {
      return e.what();
    }
    return "(nothing thrown)";
  };
  // Within one run: an output one element past its input.
  const std::string partial = message([&] { pipe.run(host_span(v.data(), 99), host_span(v.data() + 1, 99)); });
  INFO(partial);
  REQUIRE(partial.find("input 0") != std::string::npos);
  REQUIRE(partial.find("output 0") != std::string::npos);
  REQUIRE(partial.find("overlap") != std::string::npos);
  REQUIRE(v == original);  // nothing ran
  // Two outputs over each other.
  struct Two {
    CHUNKPIPE_HOST_DEVICE ::cuda::std::tuple<float, float> operator()(float x) const { return {x, -x}; }
  };
  HostPipeline<Map<Two>> two({.chunk_elems = 16});
  std::vector<float> o(150);
  REQUIRE(message([&] { two.run(v, outputs(host_span(o.data(), 100), host_span(o.data() + 50, 100))); })
              .find("outputs may not overlap") != std::string::npos);
  // Exactly in place is allowed, staged or not.
  pipe.run(v, v);
  for (std::size_t i = 0; i < v.size(); ++i) REQUIRE(v[i] == f(original[i]));
  std::vector<float> w = original;
  pipe.run(pinned(w), pinned(w));
  for (std::size_t i = 0; i < w.size(); ++i) REQUIRE(w[i] == f(original[i]));

  // Across runs in flight: run 2 reads what run 1 writes.
  std::vector<float> a = original, b(100), c(100);
  auto t1 = pipe.run_async(a, b);
  const std::string raw = message([&] { (void)pipe.run_async(b, c); });
  INFO(raw);
  REQUIRE(raw.find("run still in flight") != std::string::npos);
  REQUIRE(raw.find("after(") != std::string::npos);
  // Reading what another run reads is fine; ordered after it, chaining is too.
  std::vector<float> d(100);
  auto t2 = pipe.run_async(a, d);
  auto t3 = pipe.run_async(b, c, after(t1));
  t3.wait();
  t2.wait();
  for (std::size_t i = 0; i < 100; ++i) {
    REQUIRE(c[i] == f(f(original[i])));
    REQUIRE(d[i] == f(original[i]));
  }
  // Once waited for, a run no longer holds its ranges.
  t1.wait();
  auto t4 = pipe.run_async(b, a);
  t4.wait();
}

TEST_CASE("the simulator predicts a stream of runs as one schedule", "[streaming][simulate]") {
  Machine m;
  m.link = {"test link", 50.0, 50.0, 90.0, 2.0, 2};
  const std::size_t chunk = 1 << 20;
  const Workload w = map_workload(std::size_t{64} << 20, chunk, 4.0);
  // 16 runs of 4 full chunks cost what one run of 64 chunks costs: the
  // schedule does not drain between runs.
  const Plan one = make_plan(Policy::stage_streams, 3, PlanShape{}, 64);
  const Plan many = make_plan(Policy::stage_streams, 3, PlanShape{}, std::vector<RunSpec>(16, RunSpec{4, false, false, 4 * chunk}));
  const double t_one = makespan_ms(simulate(one, w, m));
  const double t_many = makespan_ms(simulate(many, w, m));
  REQUIRE(std::fabs(t_many - t_one) <= 1e-9 * t_one);
  // Runs shorter than a chunk move only their own elements: 64 runs of a
  // quarter chunk cost about a quarter of 64 full chunks, plus per-copy latency.
  const Plan small = make_plan(Policy::stage_streams, 3, PlanShape{}, std::vector<RunSpec>(64, RunSpec{1, false, false, chunk / 4}));
  const Report r = simulate(small, w, m);
  REQUIRE(r.elems == 16 * chunk);
  REQUIRE(makespan_ms(r) < 0.3 * t_one);
  REQUIRE(makespan_ms(r) > 0.2 * t_one);
}

TEST_CASE("after(ticket) on the host backend takes tickets of the same pipeline only", "[streaming][errors]") {
  HostPipeline<Map<Fma>> one({.chunk_elems = 16}, Map<Fma>{{1.f, 1.f}});
  HostPipeline<Map<Fma>> other({.chunk_elems = 16}, Map<Fma>{{1.f, 1.f}});
  std::vector<float> a = data(64, 1), b(64), c(64);
  HostTicket t = one.run_async(a, b);
  REQUIRE_FALSE(t.ready());  // issued, not yet run: ops run inside wait()
  REQUIRE_THROWS_AS((void)other.run_async(b, c, after(t)), config_error);
  t.wait();
  REQUIRE(t.ready());
}

TEST_CASE("a run continues another only where every range picks up exactly where the other's ended",
          "[streaming][coalesce]") {
  std::vector<float> a(300), b(300);
  std::vector<double> c(300);
  const auto at = [](auto& v, std::size_t i) { return reinterpret_cast<std::byte*>(v.data() + i); };
  // Two inputs (float, double) and one output, 100 elements, then 50 more.
  auto run = [&](std::size_t from, std::size_t n) {
    detail::Endpoints e;
    e.in.push_back({at(a, from), sizeof(float), n, false, {}, {}});
    e.in.push_back({reinterpret_cast<std::byte*>(c.data() + from), sizeof(double), n, false, {}, {}});
    e.out.push_back({at(b, from), sizeof(float), false, n, {}, {}});
    return e;
  };
  const detail::Endpoints first = run(0, 100);
  CHECK(detail::continues(first, 100, run(100, 50), 50));
  detail::Endpoints joined = first;
  detail::append_run(joined, run(100, 50));
  CHECK(joined.in[0].size == 150);
  CHECK(joined.in[1].size == 150);
  CHECK(joined.out[0].size == 150);
  CHECK(detail::continues(joined, 150, run(150, 7), 7));

  // Anything else does not continue it.
  CHECK_FALSE(detail::continues(first, 100, run(101, 50), 50));  // a gap
  CHECK_FALSE(detail::continues(first, 100, run(99, 50), 50));   // an overlap
  CHECK_FALSE(detail::continues(first, 100, run(0, 100), 100));  // the same range again
  CHECK_FALSE(detail::continues(first, 100, run(100, 0), 0));    // an empty run
  auto changed = [&](auto&& change) {
    detail::Endpoints next = run(100, 50);
    change(next);
    return detail::continues(first, 100, next, 50);
  };
  CHECK_FALSE(changed([&](detail::Endpoints& e) { e.out[0].data = at(b, 101); }));  // only the output jumps
  CHECK_FALSE(changed([](detail::Endpoints& e) { e.in[0].elem_size = 2; }));
  CHECK_FALSE(changed([](detail::Endpoints& e) { e.in[0].staged = true; }));
  CHECK_FALSE(changed([](detail::Endpoints& e) { e.out[0].staged = true; }));
  CHECK_FALSE(changed([](detail::Endpoints& e) { e.in.pop_back(); }));
  CHECK_FALSE(changed([](detail::Endpoints& e) { e.out[0].size = 51; }));  // an output longer than the run
  CHECK_FALSE(changed([](detail::Endpoints& e) { e.per_record = 2; }));
  CHECK_FALSE(changed([](detail::Endpoints& e) { e.packed = std::make_shared<detail::Packed>(); }));
  CHECK_FALSE(changed([](detail::Endpoints& e) { e.keep = std::make_shared<int>(0); }));
  CHECK_FALSE(changed([](detail::Endpoints& e) { e.finish = [] {}; }));
  CHECK_FALSE(changed([](detail::Endpoints& e) {
    e.in[0].produce = [](std::size_t, void*, std::size_t) { return std::size_t{0}; };
  }));
  CHECK_FALSE(changed([](detail::Endpoints& e) {
    e.out[0].consume = [](std::size_t, std::size_t, const void*, std::size_t) {};
  }));
}

namespace {
struct KeepPositive {
  CHUNKPIPE_HOST_DEVICE bool operator()(float x) const { return x > 0.0f; }
};
}  // namespace

TEST_CASE("after(...) takes the ticket of a counting or folding run as it is, and report() is on it too",
          "[streaming][host]") {
  Options o;
  o.chunk_elems = 16;
  o.profile = true;
  HostPipeline<Filter<KeepPositive>> keep(o, filter(KeepPositive{}));
  std::vector<float> a(200), b(200, -1.0f), c(200, -1.0f);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = (i % 3 == 0 ? -1.0f : 1.0f) * static_cast<float>(i + 1);
  ResultTicket<std::size_t, HostTicket> t1 = keep.run_async(a, b);
  // The second reads what the first writes: refused unless ordered after it.
  ResultTicket<std::size_t, HostTicket> t2 = keep.run_async(b, c, after(t1));
  CHECK(t2.get() == t1.get());  // nothing negative was kept
  std::size_t k = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] > 0.0f) CHECK(c[k++] == a[i]);
  }
  CHECK(k == t1.get());
  CHECK(c[k] == -1.0f);  // nothing past what was kept
  CHECK(t2.report().elems == a.size());  // the first run's output holds a.size() elements
  CHECK_FALSE(t2.report().ops.empty());
  // Mixed with a plain ticket, first or not.
  HostTicket t3 = keep.run_async(c, b, after(t2, t1.ticket())).ticket();
  std::vector<float> d(200, -1.0f);
  auto t4 = keep.run_async(b, d, after(t3, t2));
  CHECK(t4.get() == t1.get());
  CHECK(d == c);
}
