// SPDX-License-Identifier: MIT
// The host backend's report: with Options::profile, every op that moved data
// is timed on the host clock, once, in the order the plan's waits allow and
// the seeded walk chose, and the report prints as a GPU run's does, with no
// link floor. Without profile, report() says how to get one.
#include <chunkpipe/files.hpp>
#include <chunkpipe/host_backend.hpp>
#include <chunkpipe/spread.hpp>

#include "catch.hpp"
#include "scratch_dir.hpp"
#include "thrown.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <vector>

using namespace chunkpipe;
using test_support::contains;
using test_support::thrown_by;

namespace {

struct Fma {
  float a, b;
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return std::fma(x, a, b); }
};

// A stage whose every chunk takes at least `ms` of host time, so the
// report's times can be checked against a known lower bound.
struct Sleepy {
  int ms;
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    auto in = ctx.template in<0>();
    auto out = ctx.template out<0>();
    for (std::size_t i = 0; i < ctx.count; ++i) out[i] = in[i] + 1.0f;
  }
};

struct FailsAtChunk {
  std::size_t bad;
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    if (ctx.chunk == bad) throw std::runtime_error("stage failed on purpose");
  }
};

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

const Policy all_policies[] = {Policy::serial, Policy::slot_streams, Policy::stage_streams, Policy::automatic};

// By start; ties (below the clock's resolution) in issue order, so that a
// tie never looks like a reordering.
bool in_time_order(const TimedOp& a, const TimedOp& b) {
  return a.start_ms != b.start_ms ? a.start_ms < b.start_ms : a.id < b.id;
}

// The report's ops by op id; fails the test on an id timed twice.
std::map<std::size_t, TimedOp> by_id(const Report& r) {
  std::map<std::size_t, TimedOp> m;
  for (const TimedOp& op : r.ops) REQUIRE(m.emplace(op.id, op).second);
  return m;
}

// Every fact a report of one run of `n` floats through one Map, staged
// both ways, must hold against the plan it ran (`issued`, run `r`).
void check_against_plan(const Report& report, const Plan& issued, std::size_t run, std::size_t n,
                        std::size_t unit) {
  const PlanRun& pr = issued.runs.at(run);
  const std::map<std::size_t, TimedOp> timed = by_id(report);

  // Exactly one entry per op of the run, and none of another run's: every
  // op of a run of known length moves elements.
  REQUIRE(report.ops.size() == pr.ops);
  for (std::size_t id = pr.first_op; id < pr.first_op + pr.ops; ++id) REQUIRE(timed.count(id) == 1);

  for (const auto& [id, t] : timed) {
    const Op& op = issued.ops[id];
    INFO(issued.describe(op));
    // What the plan says the op is, with the run's own chunk numbers.
    REQUIRE(t.kind == op.kind);
    REQUIRE(t.chunk == op.chunk - pr.first_chunk);
    REQUIRE(t.queue == op.queue);
    REQUIRE(t.slot == op.slot);
    REQUIRE(t.stage == op.stage);
    // Its elements and the bytes it copied: a ragged last chunk included.
    const std::size_t elems = std::min(unit, n - t.chunk * unit);
    REQUIRE(t.elems == elems);
    REQUIRE(t.bytes == (op.kind == OpKind::stage ? 0 : elems * sizeof(float)));
    // Real times: after the run's start, never ending before they start.
    REQUIRE(t.start_ms >= 0.0);
    REQUIRE(t.start_ms <= t.end_ms);
    // What it waited for had ended when it started: the plan's waits, and
    // the op before it on its queue.
    for (std::size_t w : op.waits) {
      if (w < pr.first_op) continue;  // an earlier run's op: on its own clock
      REQUIRE(timed.at(w).end_ms <= t.start_ms);
    }
  }
  for (std::size_t q = 0; q < issued.queues.size(); ++q) {
    double last_end = -1.0;
    for (const auto& [id, t] : timed) {
      if (t.queue != static_cast<int>(q)) continue;
      REQUIRE(t.start_ms >= last_end);
      last_end = t.end_ms;
    }
  }
}

}  // namespace

TEST_CASE("a profiled host run times each op that moved data once, in an order its plan allows",
          "[host][report]") {
  const Fma f{1.25f, -0.5f};
  const std::size_t unit_request = 100;
  for (Policy policy : all_policies) {
    for (int depth : {1, 3}) {
      for (std::uint64_t seed : {0u, 5u, 11u}) {
        HostPipeline<Map<Fma>> pipe({.chunk_elems = unit_request, .depth = depth, .policy = policy, .profile = true},
                                    Map<Fma>{f});
        pipe.set_seed(seed);
        const std::size_t unit = pipe.geometry().chunk_elems;
        const std::size_t n = 7 * unit + 37;  // a ragged last chunk
        const std::vector<float> x = random_floats(n, static_cast<unsigned>(seed + 1));
        std::vector<float> y(n, std::numeric_limits<float>::quiet_NaN());
        pipe.run(x, y);  // pageable: staged in and out by host ops
        INFO(to_string(policy) << " depth " << depth << " seed " << seed);
        for (std::size_t i = 0; i < n; ++i) REQUIRE(y[i] == f(x[i]));

        const Report r = pipe.report();
        const Plan issued = pipe.issued_plan();
        REQUIRE(issued.runs.size() == 1);
        check_against_plan(r, issued, 0, n, unit);

        // The plan the run followed is the one plan_for() gives for a run
        // on its own: the same ops, kind by kind and chunk by chunk.
        const Plan alone = pipe.plan_for(n, true, true);
        std::multiset<std::tuple<int, std::size_t, int>> planned, reported;
        for (const Op& op : alone.ops) planned.insert({static_cast<int>(op.kind), op.chunk, op.stage});
        for (const TimedOp& op : r.ops) reported.insert({static_cast<int>(op.kind), op.chunk, op.stage});
        REQUIRE(reported == planned);

        // Each chunk's ops in the order the data flows through them.
        const std::size_t chunks = (n + unit - 1) / unit;
        for (std::size_t c = 0; c < chunks; ++c) {
          std::map<OpKind, TimedOp> of;
          for (const TimedOp& op : r.ops) {
            if (op.chunk == c) REQUIRE(of.emplace(op.kind, op).second);  // one Map: one op of each kind
          }
          REQUIRE(of.size() == 5);
          REQUIRE(of.at(OpKind::host_in).end_ms <= of.at(OpKind::h2d).start_ms);
          REQUIRE(of.at(OpKind::h2d).end_ms <= of.at(OpKind::stage).start_ms);
          REQUIRE(of.at(OpKind::stage).end_ms <= of.at(OpKind::d2h).start_ms);
          REQUIRE(of.at(OpKind::d2h).end_ms <= of.at(OpKind::host_out).start_ms);
        }

        // The host runs one op at a time: in time order, none overlaps the
        // one before, and the timeline is in the order the seeded walk
        // chose, which seed 0 makes issue order.
        std::vector<TimedOp> in_time = r.ops;
        std::sort(in_time.begin(), in_time.end(), in_time_order);
        for (std::size_t i = 1; i < in_time.size(); ++i) REQUIRE(in_time[i].start_ms >= in_time[i - 1].end_ms);
        if (seed == 0) {
          for (std::size_t i = 1; i < in_time.size(); ++i) REQUIRE(in_time[i].id > in_time[i - 1].id);
        }
        REQUIRE(makespan_ms(r) > 0.0);
        REQUIRE(overlap(r) <= 1.0 + 1e-9);

        // The header: the schedule, the run's size, and no link.
        CHECK(r.policy == pipe.geometry().policy);
        CHECK(r.depth == pipe.geometry().depth);
        CHECK(r.chunk_elems == unit);
        CHECK(r.elems == n);
        CHECK(r.chunks == chunks);
        CHECK(r.bytes_in == n * sizeof(float));
        CHECK(r.bytes_out == n * sizeof(float));
        CHECK(r.queues.size() == issued.queues.size());
        CHECK_FALSE(r.predicted);
        CHECK_FALSE(link_known(r.link));
        CHECK(floor_ms(r) == 0.0);
        CHECK(efficiency(r) == 0.0);
      }
    }
  }
}

TEST_CASE("a host report counts a Reduce's records and a Filter's kept elements as the bytes out", "[host][report]") {
  // Report::bytes_out is what the run wrote: one record per segment for a
  // Reduce, the elements kept for a Filter; bytes_in every element read.
  const std::vector<float> x = random_floats(10000, 11);
  const std::size_t kept = static_cast<std::size_t>(std::count_if(x.begin(), x.end(), [](float v) { return v > 0.f; }));
  REQUIRE(kept > 1000);
  REQUIRE(kept < 9000);
  {
    struct Plus {
      CHUNKPIPE_HOST_DEVICE float operator()(float a, float b) const { return a + b; }
    };
    auto pipe = make_host_pipeline({.chunk_elems = 1024, .depth = 3, .profile = true}, reduce(0.f, Plus{}, 256));
    (void)pipe.run(x);
    const Report r = pipe.report();
    CHECK(r.elems == x.size());
    CHECK(r.bytes_in == x.size() * sizeof(float));
    CHECK(r.bytes_out == (x.size() + 255) / 256 * sizeof(float));
  }
  {
    struct Positive {
      CHUNKPIPE_HOST_DEVICE bool operator()(float v) const { return v > 0.f; }
    };
    auto pipe = make_host_pipeline({.chunk_elems = 1024, .depth = 3, .profile = true}, filter(Positive{}));
    std::vector<float> y(x.size(), -9.f);
    REQUIRE(pipe.run(x, y) == kept);
    const Report r = pipe.report();
    CHECK(r.bytes_in == x.size() * sizeof(float));
    CHECK(r.bytes_out == kept * sizeof(float));
  }
}

TEST_CASE("the seeded walk's order is what the host report shows", "[host][report]") {
  // Some seed runs a later-issued op before an earlier one; the report must
  // show that, not issue order.
  bool reordered = false;
  for (std::uint64_t seed = 1; seed <= 8 && !reordered; ++seed) {
    HostPipeline<Map<Fma>> pipe({.chunk_elems = 64, .depth = 3, .policy = Policy::stage_streams, .profile = true},
                                Map<Fma>{{2.f, 0.f}});
    pipe.set_seed(seed);
    const std::vector<float> x = random_floats(64 * 6, 3);
    std::vector<float> y(x.size());
    pipe.run(x, y);
    std::vector<TimedOp> ops = pipe.report().ops;
    std::sort(ops.begin(), ops.end(), in_time_order);
    for (std::size_t i = 1; i < ops.size(); ++i) reordered = reordered || ops[i].id < ops[i - 1].id;
  }
  CHECK(reordered);
}

TEST_CASE("a host report's times are measured: a stage that sleeps shows its time", "[host][report]") {
  const int ms = 3;
  const std::size_t unit_request = 256;
  HostPipeline<ChunkFn<Sleepy, float>> pipe({.chunk_elems = unit_request, .depth = 2, .profile = true},
                                            ChunkFn<Sleepy, float>{Sleepy{ms}});
  const std::size_t unit = pipe.geometry().chunk_elems;
  const std::size_t chunks = 4;
  const std::vector<float> x = random_floats(chunks * unit, 9);
  std::vector<float> y(x.size());
  pipe.run(pinned(x), pinned(y));  // direct: no host ops
  for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(y[i] == x[i] + 1.0f);

  const Report r = pipe.report();
  std::size_t stages = 0;
  for (const TimedOp& op : r.ops) {
    REQUIRE(op.kind != OpKind::host_in);
    REQUIRE(op.kind != OpKind::host_out);
    if (op.kind != OpKind::stage) continue;
    ++stages;
    CHECK(op.end_ms - op.start_ms >= ms);
  }
  REQUIRE(stages == chunks);
  CHECK(busy_ms(r, OpKind::stage) >= chunks * ms);
  CHECK(makespan_ms(r) >= busy_ms(r, OpKind::stage));
  // The copies are memcpys of 1 KiB: far shorter than the stage.
  CHECK(busy_ms(r, OpKind::h2d) < busy_ms(r, OpKind::stage));
}

TEST_CASE("a host report prints as a GPU one does, with no floor", "[host][report]") {
  HostPipeline<Map<Fma>> pipe({.chunk_elems = 512, .depth = 3, .policy = Policy::slot_streams, .profile = true},
                              Map<Fma>{{0.5f, 1.f}});
  const std::vector<float> x = random_floats(4096 + 100, 4);
  std::vector<float> y(x.size());
  pipe.run(x, y);
  const Report r = pipe.report();

  std::ostringstream os;
  os << r;
  const std::string text = os.str();
  INFO(text);
  CHECK(contains(text, "host backend, slot_streams, depth 3 (measured)"));
  CHECK(contains(text, "schedule  slot_streams, depth 3, 9 chunks of 512 elems"));
  CHECK(contains(text, "host-in"));
  CHECK(contains(text, "H2D"));
  CHECK(contains(text, "stage 0"));
  CHECK(contains(text, "D2H"));
  CHECK(contains(text, "host-out"));
  CHECK(contains(text, "floor     none (host backend: copies are memcpy, no PCIe link)"));
  CHECK(contains(text, "GB/s copied"));
  CHECK_FALSE(contains(text, "efficiency"));
  CHECK_FALSE(contains(text, "over the link"));

  const std::string timeline = ascii_timeline(r, 80);
  INFO(timeline);
  CHECK(contains(timeline, "host backend, slot_streams, depth 3 (measured)"));
  CHECK_FALSE(contains(timeline, "(no ops ran)"));
  CHECK_FALSE(contains(timeline, "efficiency"));
  for (const char* row : {"host-in ", "H2D ", "stage 0 ", "D2H ", "host-out "}) CHECK(contains(timeline, row));

  const test_support::ScratchDir dir("chunkpipe_host_report_test");
  const std::string trace = dir / "trace.json";
  write_chrome_trace(r, trace);
  std::ifstream in(trace);
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::size_t events = 0;
  for (std::size_t at = json.find("\"ph\":\"X\""); at != std::string::npos; at = json.find("\"ph\":\"X\"", at + 1)) {
    ++events;
  }
  CHECK(events == r.ops.size());
}

TEST_CASE("report() without Options::profile, before a run and after a failed one throws pipeline_error",
          "[host][report][errors]") {
  const std::vector<float> x = random_floats(1000, 5);
  std::vector<float> y(x.size());

  HostPipeline<Map<Fma>> plain({.chunk_elems = 100}, Map<Fma>{{1.f, 1.f}});
  CHECK_THROWS_AS(plain.report(), pipeline_error);
  plain.run(x, y);
  CHECK_THROWS_AS(plain.report(), pipeline_error);
  CHECK(contains(thrown_by([&] { (void)plain.report(); }), "Options::profile"));
  HostTicket t = plain.run_async(x, y);
  t.wait();
  CHECK_THROWS_AS(t.report(), pipeline_error);
  CHECK(contains(thrown_by([&] { (void)t.report(); }), "Options::profile"));
  CHECK(contains(thrown_by([] { (void)HostTicket{}.report(); }), "no report"));

  HostPipeline<Map<Fma>> profiled({.chunk_elems = 100, .profile = true}, Map<Fma>{{1.f, 1.f}});
  CHECK(contains(thrown_by([&] { (void)profiled.report(); }), "no run yet"));
  HostTicket pending = profiled.run_async(x, y);
  CHECK(contains(thrown_by([&] { (void)pending.report(); }), "wait()"));
  pending.wait();
  CHECK(pending.report().ops.size() > 0);

  HostPipeline<ChunkFn<FailsAtChunk>> failing({.chunk_elems = 100, .profile = true},
                                              ChunkFn<FailsAtChunk>{FailsAtChunk{2}});
  HostTicket bad = failing.run_async(x, y);
  CHECK_THROWS_AS(bad.wait(), std::runtime_error);
  CHECK_THROWS_AS(bad.report(), pipeline_error);
  CHECK_THROWS_AS(failing.report(), pipeline_error);
}

TEST_CASE("runs in flight together each get their own report on one profiling clock", "[host][report]") {
  const Fma f{3.f, 0.25f};
  HostPipeline<Map<Fma>> pipe({.chunk_elems = 100, .depth = 3, .profile = true}, Map<Fma>{f});
  pipe.set_seed(3);  // mixes the two runs' ops
  const std::size_t unit = pipe.geometry().chunk_elems;
  const std::size_t n1 = 5 * unit + 1, n2 = 3 * unit;
  const std::vector<float> a = random_floats(n1, 1), b = random_floats(n2, 2);
  std::vector<float> ya(n1), yb(n2);
  HostTicket t1 = pipe.run_async(a, ya);
  HostTicket t2 = pipe.run_async(b, yb);
  t2.wait();
  t1.wait();
  for (std::size_t i = 0; i < n1; ++i) REQUIRE(ya[i] == f(a[i]));
  for (std::size_t i = 0; i < n2; ++i) REQUIRE(yb[i] == f(b[i]));

  const Plan issued = pipe.issued_plan();
  REQUIRE(issued.runs.size() == 2);
  const Report& r1 = t1.report();
  const Report& r2 = t2.report();
  check_against_plan(r1, issued, 0, n1, unit);
  check_against_plan(r2, issued, 1, n2, unit);
  CHECK(r1.elems == n1);
  CHECK(r2.elems == n2);
  CHECK(r1.chunks == 6);
  CHECK(r2.chunks == 3);

  // One clock for the pipeline: the first profiled run started it, the
  // second started later on it.
  CHECK(r1.clock_zero_ns != 0);
  CHECK(r1.clock_zero_ns == r2.clock_zero_ns);
  CHECK(r1.clock_ms >= 0.0);
  CHECK(r2.clock_ms >= r1.clock_ms);

  // A run after both waited: it starts after every op of theirs ended.
  std::vector<float> yc(n2);
  pipe.run(b, yc);
  const Report r3 = pipe.report();
  double ended = 0.0;
  for (const Report* r : {&r1, &r2}) {
    for (const TimedOp& op : r->ops) ended = std::max(ended, r->clock_ms + op.end_ms);
  }
  CHECK(r3.clock_zero_ns == r1.clock_zero_ns);
  CHECK(r3.clock_ms >= ended);
  // The first run's report is the ticket's, whatever ran since.
  CHECK(t1.report().elems == n1);
}

TEST_CASE("a ticket waited for after its pipeline is gone still has its report", "[host][report]") {
  const std::vector<float> x = random_floats(1000, 7);
  std::vector<float> y(x.size());
  HostTicket t;
  std::size_t ops = 0;
  {
    HostPipeline<Map<Fma>> pipe({.chunk_elems = 100, .depth = 2, .policy = Policy::serial, .profile = true},
                                Map<Fma>{{2.f, 2.f}});
    t = pipe.run_async(x, y);
    ops = pipe.issued_plan().ops.size();
  }  // runs every op still pending
  t.wait();
  for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(y[i] == Fma{2.f, 2.f}(x[i]));
  REQUIRE(ops > 0);
  CHECK(t.report().ops.size() == ops);
  CHECK(t.report().elems == x.size());
}

TEST_CASE("a profiled host spread run reports every member's ops", "[host][report][spread]") {
  Options o;
  o.chunk_elems = 1000;
  o.depth = 2;
  o.devices = {0, 1};
  o.profile = true;
  const Fma f{2.f, 1.f};
  HostSpreadPipeline<Map<Fma>> spread(o, Map<Fma>{f});
  const std::size_t n = 40 * 1000 + 123;
  const std::vector<float> x = random_floats(n, 8);
  std::vector<float> y(n);
  spread.run(x, y);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(y[i] == f(x[i]));
  const Report r = spread.report();
  CHECK(r.devices.size() == 2);
  CHECK(r.elems == n);
  CHECK(r.bytes_in == n * sizeof(float));
  std::size_t stages = 0;
  for (const TimedOp& op : r.ops) {
    REQUIRE(op.start_ms <= op.end_ms);
    REQUIRE((op.device == 0 || op.device == 1));
    if (op.kind == OpKind::stage) ++stages;
  }
  CHECK(stages == r.chunks);
  CHECK(r.chunks >= (n + 999) / 1000);
}

TEST_CASE("RunSummary prints its elements and chunks", "[host][report]") {
  HostPipeline<Map<Fma>> pipe({.chunk_elems = 1000}, Map<Fma>{{1.f, 0.f}});
  const std::size_t unit = pipe.geometry().chunk_elems;
  const std::vector<float> x = random_floats(2 * unit + 500, 6);
  std::vector<float> y(x.size());
  pipe.run(x, y);
  std::ostringstream os;
  os << pipe.last_run();
  CHECK(os.str() == std::to_string(x.size()) + " elements in 3 chunks");
  std::ostringstream one;
  one << RunSummary{1, 1};
  CHECK(one.str() == "1 element in 1 chunk");
}

TEST_CASE("a report says how a file run's source and sink did their I/O, and nothing for ranges", "[host][report][files]") {
  const test_support::ScratchDir dir("chunkpipe_io_report");
  const std::string in = dir / "in.f32", out = dir / "out.f32";
  std::vector<float> x(5000);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 97) - 48.f;
  {
    std::ofstream f(in, std::ios::binary);
    f.write(reinterpret_cast<const char*>(x.data()), static_cast<std::streamsize>(x.size() * sizeof(float)));
  }
  const Fma f{2.f, 0.5f};
  HostPipeline<Map<Fma>> pipe({.chunk_elems = 1024, .depth = 3, .profile = true}, Map<Fma>{f});
  pipe.run(file_source<float>(in), file_sink<float>(out));
  const Report r = pipe.report();
  INFO(r.io);
  CHECK(contains(r.io, "source read at any offset"));
  CHECK(contains(r.io, "3 parts, in turn"));
  CHECK(contains(r.io, "into 3 free slots"));
  CHECK(contains(r.io, "file_source '" + in + "' read through the page cache"));  // 20 KB: never O_DIRECT
  CHECK(contains(r.io, "sink written at any offset, a chunk a call"));
  CHECK(contains(r.io, "write-back started per chunk, fsync at the end"));
  std::ostringstream printed;
  printed << r;
  CHECK(contains(printed.str(), "\n  io        source read at any offset"));
  // The run did what the report says it did.
  std::ifstream got_file(out, std::ios::binary);
  std::vector<float> got(x.size());
  got_file.read(reinterpret_cast<char*>(got.data()), static_cast<std::streamsize>(got.size() * sizeof(float)));
  REQUIRE(got_file.gcount() == static_cast<std::streamsize>(got.size() * sizeof(float)));
  for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(got[i] == f(x[i]));
  // Ranges, and a Sink that is not positional: nothing to say, or only the
  // sink's half.
  std::vector<float> y(x.size());
  pipe.run(x, y);
  CHECK(pipe.report().io.empty());
  pipe.run(file_source<float>(in), y);
  CHECK(contains(pipe.report().io, "source read at any offset"));
  CHECK_FALSE(contains(pipe.report().io, "sink"));
}
