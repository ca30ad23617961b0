// SPDX-License-Identifier: MIT
// The simulator reproduces the arithmetic of chunked pipelines (serial = sum
// of stages, a deep pipeline = fill + N x slowest + drain, two slots on two
// streams = about half the serial chain), the double-buffering lesson's
// published T4 table (the lesson whose benchmark examples/double_buffer.cu
// rebuilds), the H200 figures of benchmarks/RESULTS.md, and the fluid
// sharing of the link when both directions run at once.
#include <chunkpipe/simulate.hpp>

#include "catch.hpp"
#include "thrown.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

using namespace chunkpipe;

namespace {

/// The lesson's run: 1 GiB of float, in 64 MiB chunks.
constexpr std::size_t kLessonElems = std::size_t{1} << 28;
constexpr std::size_t kLessonChunk = std::size_t{16} << 20;

bool near(double a, double b, double rel = 1e-9) { return std::fabs(a - b) <= rel * std::max(1.0, std::fabs(b)); }

/// A link with round numbers and no per-op costs, so expected times are
/// exact sums.
Machine ideal(double h2d_gbps, double d2h_gbps, double both_gbps = 0.0) {
  Machine m;
  m.link.name = "ideal";
  m.link.h2d_gbps = h2d_gbps;
  m.link.d2h_gbps = d2h_gbps;
  m.link.both_gbps = both_gbps;
  m.host_copy_gbps = 4.0;
  return m;
}

/// Chunks of 1e6 floats: 4 MB each way, so at 4 GB/s a copy takes 1 ms.
Workload chunks_of_4mb(std::size_t chunks, double stage_ms_per_chunk) {
  Workload w;
  w.chunk_elems = 1000000;
  w.elems = chunks * w.chunk_elems;
  w.stage_ns_per_elem = {stage_ms_per_chunk * 1e6 / 1e6};
  return w;
}

const TimedOp& find(const Report& r, std::size_t chunk, OpKind kind) {
  for (const TimedOp& op : r.ops) {
    if (op.chunk == chunk && op.kind == kind) return op;
  }
  FAIL("op not found");
  return r.ops.front();
}

}  // namespace

TEST_CASE("serial costs the sum of the stages", "[simulate]") {
  // h2d 1 ms (4 GB/s), kernel 3 ms, d2h 2 ms (2 GB/s) per chunk.
  const Report r = simulate(Policy::serial, 1, chunks_of_4mb(10, 3.0), ideal(4.0, 2.0));
  REQUIRE(r.predicted);
  REQUIRE(r.ops.size() == 30);
  CHECK(near(makespan_ms(r), 10 * (1.0 + 3.0 + 2.0)));
  CHECK(near(busy_ms(r, OpKind::h2d), 10.0));
  CHECK(near(stage_ms(r), 30.0));
  CHECK(near(busy_ms(r, OpKind::d2h), 20.0));
  CHECK(near(overlap(r), 1.0));  // nothing ever overlaps on one stream
}

TEST_CASE("a deep stage_streams pipeline costs fill + N x slowest + drain", "[simulate]") {
  const std::size_t n = 20;
  SECTION("the kernel is the slowest stage") {
    const Report r = simulate(Policy::stage_streams, 4, chunks_of_4mb(n, 3.0), ideal(4.0, 2.0));
    CHECK(near(makespan_ms(r), 1.0 + n * 3.0 + 2.0));
    CHECK(near(floor_ms(r), n * 3.0));
  }
  SECTION("the copy in is the slowest stage") {
    // h2d 3 ms (4 MB at 4/3 GB/s), kernel 1 ms, d2h 2 ms.
    const Report r = simulate(Policy::stage_streams, 3, chunks_of_4mb(n, 1.0), ideal(4.0 / 3.0, 2.0));
    CHECK(near(makespan_ms(r), n * 3.0 + 1.0 + 2.0));
  }
}

TEST_CASE("a reduction's copies out carry its records, so only the copy in bounds it", "[simulate]") {
  // 4 MB chunks in at 4 GB/s (1 ms), kernel 0.5 ms; out at 2 GB/s would
  // take 2 ms per chunk for element-wise outputs, and 4 bytes per segment
  // of 10000 elements take 0.2 us.
  const std::size_t n = 20;
  Workload w = chunks_of_4mb(n, 0.5);
  w.out_per_record = 10000;
  const Report r = simulate(Policy::stage_streams, 3, w, ideal(4.0, 2.0));
  CHECK(r.bytes_out == n * 100 * 4);
  CHECK(find(r, 3, OpKind::d2h).bytes == 100 * 4);
  CHECK(near(makespan_ms(r), n * 1.0 + 0.5 + 400.0 / 2e6, 1e-6));
  // Per-chunk records: one per chunk, with a short last chunk too.
  w.elems -= 1234;
  w.out_per_record = w.chunk_elems;
  w.out_bytes_per_elem = 1024;
  const Report c = simulate(Policy::stage_streams, 3, w, ideal(4.0, 2.0));
  CHECK(c.bytes_out == n * 1024);
  CHECK(find(c, n - 1, OpKind::d2h).bytes == 1024);
}

TEST_CASE("a filter's host-out ops wait for a DMA of what it kept; its copies out carry the count", "[simulate]") {
  const std::size_t n = 20;
  PlanShape shape;
  shape.variable_out = true;
  const Plan plan = make_plan(Policy::stage_streams, 3, shape, n);
  Workload w = chunks_of_4mb(n, 0.5);
  w.out_kept = 0.1;
  Machine m = ideal(4.0, 2.0);
  m.host_copy_gbps = 0.0;  // not needed: nothing is copied by the host
  const Report r = simulate(plan, w, m);
  CHECK(r.bytes_out == n * 400000);
  CHECK(find(r, 5, OpKind::d2h).bytes == sizeof(std::size_t));
  const TimedOp& out = find(r, 5, OpKind::host_out);
  CHECK(out.bytes == 400000);
  CHECK(near(out.end_ms - out.start_ms, 0.2, 1e-6));  // 0.4 MB at 2 GB/s
  // The copy in bounds it: n x 1 ms, then the last kernel and its copy out.
  CHECK(near(makespan_ms(r), n * 1.0 + 0.5 + 8.0 / 2e6 + 0.2, 1e-6));
  w.out_kept = 1.5;
  CHECK_THROWS_AS(simulate(plan, w, m), config_error);
}

TEST_CASE("two slots on two streams cost half the serial chain, not the slowest stage", "[simulate]") {
  // The lesson's failed prediction 2: with balanced stages of t, the double
  // buffer does not reach floor + two edges; each stream runs its own chunks
  // serially, and that chain (half the serial total) is the bound.
  const double t = 2.0;
  const std::size_t n = 16;
  const Workload w = chunks_of_4mb(n, t);
  const Machine m = ideal(2.0, 2.0);
  const double serial = makespan_ms(simulate(Policy::serial, 1, w, m));
  const Report two = simulate(Policy::slot_streams, 2, w, m);
  CHECK(near(serial, n * 3 * t));
  const double half = serial / 2.0;
  INFO("serial " << serial << " ms, double buffer " << makespan_ms(two) << " ms");
  CHECK(makespan_ms(two) >= half - 1e-9);
  CHECK(makespan_ms(two) <= half + 2 * t);
  CHECK(makespan_ms(two) > floor_ms(two) + 2 * t + 1.0);  // the lesson's wrong bound
  // Three slots on per-kind streams do reach it.
  const Report three = simulate(Policy::stage_streams, 3, w, m);
  CHECK(near(makespan_ms(three), t + n * t + t));
}

TEST_CASE("deeper and finer pipelines approach the floor", "[simulate]") {
  const Machine m = ideal(4.0, 4.0, 6.0);
  SECTION("depth") {
    double last = 1e300;
    for (int depth : {1, 2, 3, 4, 8}) {
      const Report r = simulate(Policy::stage_streams, depth, chunks_of_4mb(32, 0.5), m);
      INFO("depth " << depth << ": " << makespan_ms(r) << " ms, floor " << floor_ms(r));
      CHECK(makespan_ms(r) <= last * (1.0 + 1e-9));
      last = makespan_ms(r);
      if (depth >= 3) CHECK(efficiency(r) > 0.9);
    }
  }
  SECTION("chunk count at a fixed total") {
    double last = 0.0;
    for (std::size_t chunks : {4, 16, 64, 256}) {
      Workload w = chunks_of_4mb(64, 0.5);
      w.chunk_elems = w.elems / chunks;
      const Report r = simulate(Policy::stage_streams, 3, w, m);
      INFO(chunks << " chunks: efficiency " << efficiency(r));
      CHECK(efficiency(r) > last);
      CHECK(efficiency(r) <= 1.0 + 1e-9);
      last = efficiency(r);
    }
    CHECK(last > 0.98);
  }
}

TEST_CASE("copies in both directions share the link as a fluid", "[simulate]") {
  // Two chunks, a kernel that takes no time: chunk 0's copy out and chunk
  // 1's copy in start together at 0.4 ms and share the link until one ends.
  const Workload w = chunks_of_4mb(2, 0.0);
  SECTION("no two-way penalty: both run at full speed") {
    const Report r = simulate(Policy::stage_streams, 2, w, ideal(10.0, 10.0, 20.0));
    CHECK(near(find(r, 1, OpKind::h2d).end_ms, 0.8));
    CHECK(near(makespan_ms(r), 1.2));
  }
  SECTION("a two-way total below the sum slows both") {
    const Report r = simulate(Policy::stage_streams, 2, w, ideal(10.0, 10.0, 15.0));
    const double shared = 0.4 + 4e6 / 7.5e6;  // each gets half of 15 GB/s
    CHECK(near(find(r, 0, OpKind::d2h).start_ms, 0.4));
    CHECK(near(find(r, 1, OpKind::h2d).start_ms, 0.4));
    CHECK(near(find(r, 0, OpKind::d2h).end_ms, shared));
    CHECK(near(find(r, 1, OpKind::h2d).end_ms, shared));
    CHECK(near(makespan_ms(r), shared + 0.4));
    CHECK(makespan_ms(r) >= floor_ms(r));
  }
  SECTION("what one direction cannot use goes to the other") {
    // D2H is capped at 2 GB/s, so H2D gets 8 of the 10 both ways; once H2D
    // is done D2H still runs at 2.
    const Report r = simulate(Policy::stage_streams, 2, w, ideal(10.0, 2.0, 10.0));
    CHECK(near(find(r, 1, OpKind::h2d).end_ms, 0.4 + 4e6 / 8e6));
    CHECK(near(find(r, 0, OpKind::d2h).end_ms, 0.4 + 4e6 / 2e6));
  }
  SECTION("one copy engine: the directions take turns, in the order they became ready") {
    Machine m = ideal(10.0, 10.0, 20.0);
    m.link.copy_engines = 1;
    // A 0.1 ms kernel: chunk 1's copy in is ready at 0.4, chunk 0's copy
    // out only at 0.5, so it waits for the engine.
    const Report r = simulate(Policy::stage_streams, 2, chunks_of_4mb(2, 0.1), m);
    CHECK(near(find(r, 1, OpKind::h2d).start_ms, 0.4));
    CHECK(near(find(r, 0, OpKind::d2h).start_ms, 0.8));
    CHECK(near(find(r, 1, OpKind::d2h).start_ms, 1.2));
    CHECK(near(makespan_ms(r), 1.6));
    CHECK(near(floor_ms(r), 1.6));  // no overlap possible: in + out
  }
}

TEST_CASE("latency and per-op overhead are paid once per op", "[simulate]") {
  Machine m = ideal(4.0, 4.0);
  m.link.latency_us = 50.0;
  m.op_overhead_us = 10.0;
  const Report r = simulate(Policy::serial, 1, chunks_of_4mb(3, 1.0), m);
  const TimedOp& in = find(r, 0, OpKind::h2d);
  const TimedOp& kernel = find(r, 0, OpKind::stage);
  CHECK(near(in.end_ms - in.start_ms, 0.010 + 0.050 + 1.0));
  CHECK(near(kernel.end_ms - kernel.start_ms, 0.010 + 1.0));
  CHECK(near(makespan_ms(r), 3 * (2 * 1.06 + 1.01)));
}

TEST_CASE("a short last chunk costs its share, chunks past the end cost nothing", "[simulate]") {
  Workload w = chunks_of_4mb(2, 3.0);
  w.elems += w.chunk_elems / 2;  // 2.5 chunks
  const Machine m = ideal(4.0, 2.0);
  const Report r = simulate(Policy::serial, 1, w, m);
  REQUIRE(r.chunks == 3);
  CHECK(find(r, 2, OpKind::h2d).elems == w.chunk_elems / 2);
  CHECK(find(r, 2, OpKind::h2d).bytes == w.chunk_elems / 2 * 4);
  CHECK(near(makespan_ms(r), 2.5 * 6.0));
  CHECK(r.bytes_in == w.elems * 4);

  // A plan longer than the run: the extra chunk's ops take no time.
  PlanShape shape;
  const Report longer = simulate(make_plan(Policy::stage_streams, 2, shape, 5), w, m);
  CHECK(near(makespan_ms(longer), makespan_ms(simulate(Policy::stage_streams, 2, w, m))));
  for (const TimedOp& op : longer.ops) {
    if (op.chunk >= 3) CHECK(op.end_ms == op.start_ms);
  }
}

TEST_CASE("every prediction honours queue order, waits and one op per resource", "[simulate]") {
  // Without kernel tails, during which another stream's kernel may start
  // (tested below), and with the host issuing ops as it would.
  Machine m = machines::h200_pcie5();
  m.kernel_tail_elems = 0.0;
  m.host_issue_us = 3.0;
  for (Policy policy : {Policy::serial, Policy::slot_streams, Policy::stage_streams}) {
    for (int depth : {1, 2, 3, 5}) {
      for (int staging = 0; staging < 4; ++staging) {
        PlanShape shape;
        shape.stages = 2;
        shape.in_place = {false, true};
        shape.stage_in = (staging & 1) != 0;
        shape.stage_out = (staging & 2) != 0;
        const Resolved res = resolve(policy, depth);
        Workload w;
        w.chunk_elems = 1 << 20;
        w.elems = 7 * w.chunk_elems + 12345;
        w.stage_ns_per_elem = {0.3, 1.1};
        const Plan plan = make_plan(res.policy, res.depth, shape, 8);
        const Report r = simulate(plan, w, m);
        INFO(to_string(policy) << " depth " << depth << " staging " << staging);
        REQUIRE(r.ops.size() == plan.ops.size());
        std::vector<double> tail_end(plan.queues.size(), 0.0);
        for (const Op& op : plan.ops) {
          const TimedOp& t = r.ops[op.id];
          REQUIRE(t.end_ms >= t.start_ms);
          REQUIRE(t.start_ms >= tail_end[static_cast<std::size_t>(op.queue)] - 1e-12);
          tail_end[static_cast<std::size_t>(op.queue)] = t.end_ms;
          for (std::size_t wait : op.waits) REQUIRE(t.start_ms >= r.ops[wait].end_ms - 1e-12);
        }
        // The SMs and each copy engine run one op at a time.
        for (OpKind kind : {OpKind::h2d, OpKind::stage, OpKind::d2h}) {
          double sum = 0.0;
          for (const TimedOp& t : r.ops) {
            if (t.kind == kind) sum += t.end_ms - t.start_ms;
          }
          REQUIRE(near(sum, busy_ms(r, kind), 1e-9));
        }
        REQUIRE(makespan_ms(r) >= floor_ms(r) * (1.0 - 1e-12));
      }
    }
  }
}

TEST_CASE("the lesson's T4 table: naive within 3%, double buffer within 10%", "[simulate][lesson]") {
  // The lesson's table ("day 54"), Tesla T4: 16 chunks of 64 MiB; h2d only
  // 87.809, kernel only 43.700, d2h only 82.444 ms; measured naive
  // 211.246 ms and double buffer 115.465 ms.
  const Machine t4 = machines::t4_pcie3();
  const Workload w = map_workload(kLessonElems, kLessonChunk, 43.700);
  REQUIRE(w.elems == kLessonElems);
  REQUIRE(w.in_bytes_per_elem == 4);
  REQUIRE(w.out_bytes_per_elem == 4);
  const Report naive = simulate(Policy::serial, 1, w, t4);
  const Report twice = simulate(Policy::slot_streams, 2, w, t4);
  REQUIRE(naive.chunks == 16);
  // The component passes come back out.
  CHECK(near(busy_ms(naive, OpKind::h2d), 87.809, 1e-6));
  CHECK(near(stage_ms(naive), 43.700, 1e-6));
  CHECK(near(busy_ms(naive, OpKind::d2h), 82.444, 1e-6));
  CHECK(near(makespan_ms(naive), 213.953, 1e-6));  // the page's "naive bound (sum)"
  CHECK(near(floor_ms(naive), 87.809, 1e-6));      // its "pipeline floor (max)"
  INFO("predicted naive " << makespan_ms(naive) << " ms, double buffer " << makespan_ms(twice) << " ms");
  CHECK(std::fabs(makespan_ms(naive) - 211.246) / 211.246 < 0.03);
  CHECK(std::fabs(makespan_ms(twice) - 115.465) / 115.465 < 0.10);
  // The lesson's prediction 4 held: at least 1.6x.
  CHECK(makespan_ms(naive) / makespan_ms(twice) > 1.6);
}

TEST_CASE("the H200 model against the lesson's benchmark measured there", "[simulate][lesson]") {
  // benchmarks/RESULTS.md, 2026-11-29, examples/double_buffer --sweep on the
  // H200 test machine: kernel only 5.29 ms (run 2); the final code's run:
  // naive 44.34 ms, double buffer 25.00 ms, floor (two-way pass) 21.32 ms.
  const Workload w = map_workload(kLessonElems, kLessonChunk, 5.29);
  const Report naive = simulate(Policy::serial, 1, w, machines::h200_pcie5());
  const Report twice = simulate(Policy::slot_streams, 2, w, machines::h200_pcie5());
  INFO("predicted naive " << makespan_ms(naive) << " ms, double buffer " << makespan_ms(twice) << " ms, floor "
                          << floor_ms(naive) << " ms");
  CHECK(std::fabs(makespan_ms(naive) - 44.34) / 44.34 < 0.05);
  CHECK(std::fabs(makespan_ms(twice) - 25.00) / 25.00 < 0.10);
  CHECK(std::fabs(floor_ms(naive) - 21.32) / 21.32 < 0.05);
}

TEST_CASE("host staging ops run on their own threads at the host copy rate", "[simulate]") {
  PlanShape shape;
  shape.stage_in = shape.stage_out = true;
  const Plan plan = make_plan(Policy::stage_streams, 3, shape, 4);
  Machine m = ideal(8.0, 8.0);
  m.host_copy_gbps = 2.0;
  const Report r = simulate(plan, chunks_of_4mb(4, 0.5), m);
  const TimedOp& in = find(r, 0, OpKind::host_in);
  CHECK(near(in.end_ms - in.start_ms, 2.0));
  CHECK(near(busy_ms(r, OpKind::host_in), 8.0));  // one thread: never two at once
  CHECK(near(find(r, 0, OpKind::h2d).start_ms, 2.0));
  m.host_copy_gbps = 0.0;
  REQUIRE_THROWS_AS(simulate(plan, chunks_of_4mb(4, 0.5), m), config_error);
}

TEST_CASE("a file's chunks are read and written at the storage's rates", "[simulate][storage]") {
  PlanShape shape;
  shape.stage_in = shape.stage_out = true;
  const Plan plan = make_plan(Policy::stage_streams, 3, shape, 4);
  Machine m = ideal(8.0, 8.0);
  m.host_copy_gbps = 2.0;
  m.storage_read_gbps = 1.0;   // a 4 MB chunk: 4 ms
  m.storage_write_gbps = 0.5;  // 8 ms
  Workload w = chunks_of_4mb(4, 0.5);
  w.in_from_storage = true;
  Report r = simulate(plan, w, m);
  CHECK(near(find(r, 0, OpKind::host_in).end_ms - find(r, 0, OpKind::host_in).start_ms, 4.0));
  CHECK(near(find(r, 0, OpKind::host_out).end_ms - find(r, 0, OpKind::host_out).start_ms, 2.0));  // a range: memcpy
  // Reading bounds the run: four chunks one after another on the read thread.
  CHECK(near(busy_ms(r, OpKind::host_in), 16.0));
  w.out_to_storage = true;
  r = simulate(plan, w, m);
  CHECK(near(busy_ms(r, OpKind::host_out), 32.0));
  CHECK(makespan_ms(r) >= 32.0 + 4.0);  // the first chunk's read comes before any write
  // A storage rate that is not known is refused, naming it.
  m.storage_write_gbps = 0.0;
  try {
    (void)simulate(plan, w, m);
    FAIL("no error");
  } catch (const config_error& e) {
    CHECK(std::string(e.what()).find("storage_write_gbps") != std::string::npos);
  }
}

TEST_CASE("the simulator refuses what it cannot model", "[simulate][errors]") {
  const Machine m = ideal(4.0, 4.0);
  const Plan plan = make_plan(Policy::stage_streams, 2, PlanShape{}, 4);
  Workload w = chunks_of_4mb(4, 1.0);
  REQUIRE(simulate(plan, w, m).ops.size() == plan.ops.size());

  Workload zero = w;
  zero.chunk_elems = 0;
  REQUIRE_THROWS_AS(simulate(plan, zero, m), config_error);
  REQUIRE_THROWS_AS(simulate(Policy::serial, 1, zero, m), config_error);
  Workload stages = w;
  stages.stage_ns_per_elem = {1.0, 1.0};
  REQUIRE_THROWS_AS(simulate(plan, stages, m), config_error);
  Workload more = w;
  more.elems += 1;  // needs a fifth chunk
  REQUIRE_THROWS_AS(simulate(plan, more, m), config_error);
  Workload negative = w;
  negative.stage_ns_per_elem = {-1.0};
  REQUIRE_THROWS_AS(simulate(plan, negative, m), config_error);

  Machine no_link = m;
  no_link.link.h2d_gbps = 0.0;
  REQUIRE_THROWS_AS(simulate(plan, w, no_link), config_error);
  Machine nan = m;
  nan.link.latency_us = std::nan("");
  REQUIRE_THROWS_AS(simulate(plan, w, nan), config_error);

  Plan broken = plan;
  broken.ops[1].waits.push_back(5);  // waits on an op issued after it
  REQUIRE_THROWS_AS(simulate(broken, w, m), config_error);

  REQUIRE_THROWS_AS(map_workload(1 << 20, 0, 1.0), config_error);
  REQUIRE_THROWS_AS(map_workload(0, 1 << 20, 1.0), config_error);
  REQUIRE_THROWS_AS(map_workload(1 << 20, 1 << 20, -1.0), config_error);
  REQUIRE_THROWS_AS(map_workload(1 << 20, 1 << 20, std::nan("")), config_error);
}

TEST_CASE("kernel tails: the next kernel of another stream starts in them, one of the same stream waits",
          "[simulate][lanes]") {
  // Copies cost nearly nothing: the kernels decide. 64 chunks of 2^20
  // elements at 1 ns each (1.048576 ms a kernel), of which the last 2^17
  // elements' time (0.131072 ms) is the tail.
  Machine m = machines::h200_pcie5();
  m.link.h2d_gbps = m.link.d2h_gbps = m.link.both_gbps = 1e6;
  m.link.latency_us = 0.0;
  m.op_overhead_us = 0.0;
  m.kernel_tail_elems = 131072.0;
  Workload w = map_workload(64 << 20, 1 << 20, 64 * 1.048576);
  const double body = 1.048576, tail = 0.131072;
  auto run = [&](Policy policy, int depth, int lanes) {
    PlanShape shape;
    shape.kernel_lanes = lanes;
    return simulate(make_plan(policy, depth, shape, 64), w, m);
  };
  // One kernel stream: every kernel waits for the one before, tail and all.
  CHECK(near(makespan_ms(run(Policy::stage_streams, 3, 1)), 64 * (body + tail), 1e-3));
  // Two lanes, or a stream per slot: each kernel starts in the previous
  // one's tail, so only the last tail shows.
  for (const Report& r : {run(Policy::stage_streams, 3, 2), run(Policy::slot_streams, 3, 1)}) {
    CHECK(near(makespan_ms(r), 64 * body + tail, 1e-3));
    // Kernels overlap by at most a tail.
    std::vector<const TimedOp*> k;
    for (const TimedOp& t : r.ops) {
      if (t.kind == OpKind::stage) k.push_back(&t);
    }
    std::sort(k.begin(), k.end(), [](const TimedOp* a, const TimedOp* b) { return a->start_ms < b->start_ms; });
    for (std::size_t i = 1; i < k.size(); ++i) REQUIRE(k[i - 1]->end_ms - k[i]->start_ms <= tail + 1e-9);
  }
  // A kernel smaller than the tail is all tail.
  Workload small = map_workload(64 << 10, 1 << 10, 64 * 1.024e-3);
  PlanShape shape;
  shape.kernel_lanes = 1;
  const Report r = simulate(make_plan(Policy::stage_streams, 3, shape, 64), small, m);
  for (const TimedOp& t : r.ops) {
    if (t.kind == OpKind::stage) CHECK(near(t.end_ms - t.start_ms, 2 * 1.024e-3, 1e-9));
  }
}

TEST_CASE("host issue: small chunks are paced by the host, large ones by the link", "[simulate]") {
  Machine m = machines::h200_pcie5();
  m.host_issue_us = 3.0;
  const std::size_t elems = std::size_t{1} << 28;  // 1 GiB of float
  auto predict = [&](std::size_t chunk) {
    Workload w = map_workload(elems, chunk, 1.0);
    PlanShape shape;
    const Plan plan = make_plan(Policy::slot_streams, 4, shape, (elems + chunk - 1) / chunk);
    return makespan_ms(simulate(plan, w, m));
  };
  // 64 KiB chunks: 16384 chunks of three device ops, 3 us each to issue.
  const double issue_ms = 16384 * 3 * 3.0e-3;
  CHECK(predict(1 << 14) >= issue_ms);
  CHECK(predict(1 << 14) <= issue_ms * 1.05);
  // 8 MiB chunks: 128 chunks, 1.15 ms of issuing, far under the link's time.
  m.host_issue_us = 0.0;
  const double unpaced = predict(1 << 21);
  m.host_issue_us = 3.0;
  CHECK(near(predict(1 << 21), unpaced, 0.01 * unpaced));
}

// -- Spread runs (simulate_spread: one machine per member) --------------------

namespace {

/// 4 GiB of float each way through a cheap kernel, in the default 8 MiB units.
Workload spread_work() {
  return map_workload(std::size_t{1} << 30, std::size_t{1} << 21, 4.0);
}

}  // namespace

TEST_CASE("two devices of their own links take turns evenly and nearly halve a long run", "[simulate][spread]") {
  const Workload w = spread_work();
  const std::size_t piece = 8 * w.chunk_elems;
  const Machine h = machines::h200_pcie5();
  const SpreadPrediction one = simulate_spread(Policy::stage_streams, 3, w, {h}, piece);
  const SpreadPrediction two = simulate_spread(Policy::stage_streams, 3, w, {h, h}, piece);
  REQUIRE(one.pieces == std::vector<std::size_t>{64});
  // One member: its pieces in a row cost about what one run of the whole does.
  const double whole = makespan_ms(simulate(Policy::stage_streams, 3, w, h));
  CHECK(std::fabs(one.makespan_ms / whole - 1.0) < 0.02);
  CHECK(two.pieces == std::vector<std::size_t>{32, 32});
  CHECK(one.makespan_ms / two.makespan_ms > 1.9);
  CHECK(one.makespan_ms / two.makespan_ms <= 2.0);
  CHECK_FALSE(two.host_bound);
  CHECK(two.host_ms == 0.0);
  CHECK(near(two.makespan_ms, std::max(two.busy_ms[0], two.busy_ms[1])));
}

TEST_CASE("a device on a slower link takes fewer pieces and holds no one back", "[simulate][spread]") {
  const Workload w = spread_work();
  const std::size_t piece = 8 * w.chunk_elems;
  const Machine fast = machines::h200_pcie5();
  Machine slow = fast;
  slow.link.h2d_gbps /= 2;
  slow.link.d2h_gbps /= 2;
  slow.link.both_gbps /= 2;
  const SpreadPrediction p = simulate_spread(Policy::stage_streams, 3, w, {slow, fast}, piece);
  REQUIRE(p.pieces.size() == 2);
  CHECK(p.pieces[0] + p.pieces[1] == 64);
  // Half the rate: about a third of the pieces (a fixed split by turns would give half).
  CHECK(p.pieces[0] >= 18);
  CHECK(p.pieces[0] <= 24);
  const SpreadPrediction fast_alone = simulate_spread(Policy::stage_streams, 3, w, {fast}, piece);
  CHECK(p.makespan_ms < fast_alone.makespan_ms * 0.72);  // ideal: 2/3 of it
  // Neither ends long after the other: the last piece is what separates them.
  CHECK(std::fabs(p.busy_ms[0] - p.busy_ms[1]) < 2 * fast_alone.makespan_ms / 64);
}

TEST_CASE("staged spread runs are bound by the host's memory copies, shared by all members", "[simulate][spread]") {
  const Workload w = spread_work();
  const std::size_t piece = 8 * w.chunk_elems;
  const Machine h = machines::h200_pcie5();
  // Pageable both ways: 8 bytes an element through the host's memcpy at 50 GB/s.
  const SpreadPrediction p = simulate_spread(Policy::stage_streams, 3, w, {h, h}, piece, 8.0, 50.0);
  CHECK(p.host_bound);
  CHECK(near(p.host_ms, static_cast<double>(w.elems) * 8.0 / 50e6));
  CHECK(near(p.makespan_ms, p.host_ms));
  CHECK(p.device_ms < p.host_ms);
  // A fast enough host leaves the devices as the bound.
  const SpreadPrediction q = simulate_spread(Policy::stage_streams, 3, w, {h, h}, piece, 8.0, 1000.0);
  CHECK_FALSE(q.host_bound);
  CHECK(near(q.makespan_ms, q.device_ms));
}

TEST_CASE("queued spread runs that flow cost what one run of their bytes costs; runs that do not, more",
          "[simulate][spread][queued]") {
  const Workload w = spread_work();  // 1 Gi elements: 64 pieces of 8 chunks
  const std::size_t piece = 8 * w.chunk_elems;
  const Machine h = machines::h200_pcie5();
  const SpreadPrediction one_run = simulate_spread(Policy::stage_streams, 3, w, {h, h}, piece);
  // The second form with one run is the first form.
  SpreadShape single;
  single.runs = {w.elems};
  const SpreadPrediction same = simulate_spread(Policy::stage_streams, 3, w, {h, h}, piece, single);
  CHECK(same.makespan_ms == one_run.makespan_ms);
  CHECK(same.pieces == one_run.pieces);
  REQUIRE(same.run_end_ms.size() == 1);
  CHECK(same.run_end_ms[0] == one_run.makespan_ms);

  // 16 runs of 4 pieces, queued: the same pieces in the same order.
  SpreadShape queue;
  queue.runs.assign(16, w.elems / 16);
  const SpreadPrediction flows = simulate_spread(Policy::stage_streams, 3, w, {h, h}, piece, queue);
  CHECK(near(flows.makespan_ms, one_run.makespan_ms));
  CHECK(flows.pieces == one_run.pieces);
  REQUIRE(flows.run_end_ms.size() == 16);
  for (std::size_t k = 1; k < 16; ++k) CHECK(flows.run_end_ms[k] > flows.run_end_ms[k - 1]);
  CHECK(flows.run_end_ms.back() == flows.makespan_ms);
  // Runs of 3.5 pieces: each run's last piece is short, a little dearer in all.
  SpreadShape ragged = queue;
  ragged.runs.assign(16, 7 * piece / 2);
  const SpreadPrediction short_tails = simulate_spread(Policy::stage_streams, 3, w, {h, h}, piece, ragged);
  CHECK(short_tails.pieces[0] + short_tails.pieces[1] == 64);
  CHECK(short_tails.makespan_ms < flows.makespan_ms);  // 56 pieces' bytes, not 64
  CHECK(short_tails.makespan_ms > flows.makespan_ms * 56 / 64);

  // Runs that keep to themselves start afresh, each after the one before:
  // each costs what it costs alone.
  SpreadShape apart = queue;
  apart.flows = false;
  const SpreadPrediction waits = simulate_spread(Policy::stage_streams, 3, w, {h, h}, piece, apart);
  Workload sixteenth = w;
  sixteenth.elems = w.elems / 16;
  const double alone = simulate_spread(Policy::stage_streams, 3, sixteenth, {h, h}, piece).makespan_ms;
  CHECK(near(waits.makespan_ms, 16 * alone));
  CHECK(waits.makespan_ms > flows.makespan_ms * 1.01);
  CHECK(near(waits.run_end_ms[0], alone));
}

TEST_CASE("members that list one device share its link: together they run as one pipeline does",
          "[simulate][spread]") {
  const Workload w = spread_work();
  const std::size_t piece = 8 * w.chunk_elems;
  const Machine h = machines::h200_pcie5();
  const SpreadPrediction one = simulate_spread(Policy::stage_streams, 3, w, {h}, piece);
  SpreadShape twice;
  twice.devices = {0, 0};
  const SpreadPrediction shared = simulate_spread(Policy::stage_streams, 3, w, {h, h}, piece, twice);
  CHECK(near(shared.makespan_ms, one.makespan_ms));
  CHECK(shared.pieces == std::vector<std::size_t>{32, 32});  // in turns
  SpreadShape own;
  own.devices = {0, 1};
  const SpreadPrediction two = simulate_spread(Policy::stage_streams, 3, w, {h, h}, piece, own);
  CHECK(one.makespan_ms / two.makespan_ms > 1.9);
  // Three members, two on one device: that device takes about half of the pieces.
  SpreadShape mixed;
  mixed.devices = {0, 1, 0};
  const SpreadPrediction m = simulate_spread(Policy::stage_streams, 3, w, {h, h, h}, piece, mixed);
  CHECK(m.pieces[0] + m.pieces[2] == 32);
  CHECK(m.pieces[1] == 32);

  // Refused: a device list of another length, one device with two links, an empty run.
  SpreadShape bad;
  bad.devices = {0};
  REQUIRE_THROWS_AS(simulate_spread(Policy::stage_streams, 3, w, {h, h}, piece, bad), config_error);
  Machine slow = h;
  slow.link.h2d_gbps /= 2;
  CHECK(test_support::thrown_by([&] { simulate_spread(Policy::stage_streams, 3, w, {h, slow}, piece, twice); })
            .find("share its link") != std::string::npos);
  SpreadShape empty_run;
  empty_run.runs = {piece, 0};
  REQUIRE_THROWS_AS(simulate_spread(Policy::stage_streams, 3, w, {h}, piece, empty_run), config_error);
}

TEST_CASE("a ragged last piece costs less, and bad spread inputs are refused", "[simulate][spread][errors]") {
  Workload w = spread_work();
  const std::size_t piece = 8 * w.chunk_elems;
  const Machine h = machines::h200_pcie5();
  const SpreadPrediction full = simulate_spread(Policy::stage_streams, 3, w, {h}, piece);
  w.elems += w.chunk_elems / 2;  // half a chunk more: one more, short, piece
  const SpreadPrediction ragged = simulate_spread(Policy::stage_streams, 3, w, {h}, piece);
  CHECK(ragged.pieces == std::vector<std::size_t>{65});
  CHECK(ragged.makespan_ms > full.makespan_ms);
  CHECK(ragged.makespan_ms - full.makespan_ms < (full.makespan_ms / 64) / 4);
  REQUIRE_THROWS_AS(simulate_spread(Policy::stage_streams, 3, w, {}, piece), config_error);
  REQUIRE_THROWS_AS(simulate_spread(Policy::stage_streams, 3, w, {h}, piece + 1), config_error);
  REQUIRE_THROWS_AS(simulate_spread(Policy::stage_streams, 3, w, {h}, 0), config_error);
  REQUIRE_THROWS_AS(simulate_spread(Policy::stage_streams, 3, w, {h}, piece, 8.0), config_error);
  REQUIRE_THROWS_AS(simulate_spread(Policy::stage_streams, 3, w, {h}, piece, -1.0, 50.0), config_error);
  Workload none = w;
  none.elems = 0;
  REQUIRE_THROWS_AS(simulate_spread(Policy::stage_streams, 3, none, {h}, piece), config_error);
}
