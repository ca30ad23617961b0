// SPDX-License-Identifier: MIT
// Plans: every policy at every depth is well formed and hazard-free, and the
// planner adds exactly the waits that stream order does not already give.
#include <chunkpipe/hazards.hpp>
#include <chunkpipe/plan.hpp>

#include "catch.hpp"

#include <cstdint>
#include <set>
#include <sstream>
#include <tuple>

using namespace chunkpipe;

namespace {

std::vector<PlanShape> shapes() {
  std::vector<PlanShape> all;
  for (int stages : {1, 2, 3}) {
    for (int staging = 0; staging < 4; ++staging) {
      PlanShape s;
      s.stages = stages;
      s.in_place.assign(static_cast<std::size_t>(stages), false);
      if (stages == 3) s.in_place[1] = true;  // an in-place stage in the middle
      s.stage_in = (staging & 1) != 0;
      s.stage_out = (staging & 2) != 0;
      all.push_back(s);
    }
  }
  return all;
}

}  // namespace

TEST_CASE("every policy, depth 1..6 and chunk count passes the hazard check", "[plan][hazards]") {
  for (Policy policy : {Policy::serial, Policy::slot_streams, Policy::stage_streams, Policy::automatic}) {
    for (int depth = 1; depth <= 6; ++depth) {
      for (std::size_t chunks : {std::size_t{1}, std::size_t{2}, std::size_t{7}, std::size_t{64}}) {
        for (const PlanShape& shape : shapes()) {
          const Resolved r = resolve(policy, depth);
          const Plan plan = make_plan(r.policy, r.depth, shape, chunks);
          const HazardReport report = check_hazards(plan);
          INFO(to_string(policy) << " depth " << depth << " chunks " << chunks << " stages " << shape.stages
                                 << " stage_in " << shape.stage_in << " stage_out " << shape.stage_out << '\n'
                                 << report);
          REQUIRE(report.ok());
          // Every chunk goes through every step exactly once.
          REQUIRE(plan.ops.size() == chunks * plan.steps.size());
          std::set<std::pair<std::size_t, int>> seen;
          for (const Op& op : plan.ops) {
            REQUIRE(seen.insert({op.chunk, op.step}).second);
            REQUIRE(op.slot == static_cast<int>(op.chunk % static_cast<std::size_t>(plan.depth)));
            REQUIRE(plan.queues[static_cast<std::size_t>(op.queue)].kind ==
                    ((op.kind == OpKind::host_in || op.kind == OpKind::host_out) ? QueueKind::host
                                                                                  : QueueKind::device));
          }
        }
      }
    }
  }
}

TEST_CASE("serial is one stream and one slot whatever the depth", "[plan]") {
  const Resolved r = resolve(Policy::serial, 4);
  REQUIRE(r.depth == 1);
  const Plan plan = make_plan(r.policy, r.depth, PlanShape{}, 5);
  REQUIRE(plan.queues.size() == 1);
  for (const Op& op : plan.ops) {
    REQUIRE(op.queue == 0);
    REQUIRE(op.slot == 0);
    REQUIRE(op.waits.empty());  // one stream: its order is the only lock
  }
}

TEST_CASE("slot_streams needs no events: stream order protects each slot", "[plan]") {
  // The lesson's claim for its double buffer, at every depth.
  for (int depth = 1; depth <= 6; ++depth) {
    const Plan plan = make_plan(Policy::slot_streams, depth, PlanShape{}, 20);
    REQUIRE(plan.queues.size() == static_cast<std::size_t>(depth));
    for (const Op& op : plan.ops) {
      REQUIRE(op.queue == static_cast<int>(op.chunk % static_cast<std::size_t>(depth)));
      REQUIRE(op.waits.empty());
    }
  }
}

TEST_CASE("stage_streams chains stages with events and guards slot reuse", "[plan]") {
  const int depth = 3;
  const Plan plan = make_plan(Policy::stage_streams, depth, PlanShape{}, 8);
  REQUIRE(plan.queues.size() == 3);  // h2d, stage 0, d2h
  auto find = [&](std::size_t chunk, OpKind kind) -> const Op& {
    for (const Op& op : plan.ops) {
      if (op.chunk == chunk && op.kind == kind) return op;
    }
    FAIL("op not found");
    return plan.ops.front();
  };
  for (std::size_t k = 0; k < 8; ++k) {
    const Op& h2d = find(k, OpKind::h2d);
    const Op& stage = find(k, OpKind::stage);
    const Op& d2h = find(k, OpKind::d2h);
    // The kernel waits for its copy in, the copy out for its kernel.
    REQUIRE(d2h.waits == std::vector<std::size_t>{stage.id});
    if (k >= static_cast<std::size_t>(depth)) {
      // Reusing a slot: the copy in waits for the kernel that last read it,
      // the kernel for the copy out that last read its output.
      REQUIRE(h2d.waits == std::vector<std::size_t>{find(k - depth, OpKind::stage).id});
      REQUIRE(stage.waits == std::vector<std::size_t>{find(k - depth, OpKind::d2h).id, h2d.id});
    } else {
      REQUIRE(h2d.waits.empty());
      REQUIRE(stage.waits == std::vector<std::size_t>{h2d.id});
    }
  }
}

TEST_CASE("host-in runs depth - 1 chunks ahead and waits for the H2D that freed its slot", "[plan]") {
  PlanShape shape;
  shape.stage_in = true;
  const Plan plan = make_plan(Policy::stage_streams, 3, shape, 6);
  // Issue order starts with host-in of chunks 0, 1, 2: the ring starts full.
  REQUIRE(plan.ops[0].kind == OpKind::host_in);
  REQUIRE(plan.ops[1].kind == OpKind::host_in);
  REQUIRE(plan.ops[2].kind == OpKind::host_in);
  REQUIRE(plan.ops[2].chunk == 2);
  for (const Op& op : plan.ops) {
    if (op.kind != OpKind::host_in || op.chunk < 3) continue;
    REQUIRE(op.waits.size() == 1);
    const Op& freed = plan.ops[op.waits[0]];
    REQUIRE(freed.kind == OpKind::h2d);
    REQUIRE(freed.chunk == op.chunk - 3);
  }
}

TEST_CASE("building tick by tick gives the same plan as make_plan", "[plan]") {
  PlanShape shape;
  shape.stages = 2;
  shape.stage_in = shape.stage_out = true;
  const Plan whole = make_plan(Policy::stage_streams, 4, shape, 11);
  PlanBuilder builder(Policy::stage_streams, 4, shape);
  std::vector<Op> ops;
  // Unknown length first, then the limit once it is known, as a source would.
  for (int t = 0; t < 5; ++t) REQUIRE(builder.next_tick(static_cast<std::size_t>(-1), ops));
  ops.erase(std::remove_if(ops.begin(), ops.end(), [](const Op& op) { return op.chunk >= 11; }), ops.end());
  while (builder.next_tick(11, ops)) {
  }
  REQUIRE(ops.size() == whole.ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    REQUIRE(ops[i].chunk == whole.ops[i].chunk);
    REQUIRE(ops[i].step == whole.ops[i].step);
    REQUIRE(ops[i].queue == whole.ops[i].queue);
    REQUIRE(ops[i].waits == whole.ops[i].waits);
  }
}

TEST_CASE("a plan prints one line per op with its waits", "[plan]") {
  const Plan plan = make_plan(Policy::stage_streams, 2, PlanShape{}, 3);
  std::ostringstream s;
  s << plan;
  const std::string text = s.str();
  REQUIRE(text.find("stage_streams, depth 2, 3 chunks") != std::string::npos);
  REQUIRE(text.find("#0") != std::string::npos);
  REQUIRE(std::count(text.begin(), text.end(), '\n') == static_cast<long>(2 + plan.ops.size()));
}

TEST_CASE("the planner rejects impossible requests", "[plan][errors]") {
  REQUIRE_THROWS_AS(PlanBuilder(Policy::stage_streams, 0, PlanShape{}), config_error);
  REQUIRE_THROWS_AS(PlanBuilder(Policy::automatic, 2, PlanShape{}), config_error);
  REQUIRE_THROWS_AS(PlanBuilder(Policy::serial, 2, PlanShape{}), config_error);
  PlanShape none;
  none.stages = 0;
  REQUIRE_THROWS_AS(PlanBuilder(Policy::slot_streams, 2, none), config_error);
  PlanShape mismatched;
  mismatched.stages = 2;
  mismatched.in_place = {true};
  REQUIRE_THROWS_AS(PlanBuilder(Policy::slot_streams, 2, mismatched), config_error);
  REQUIRE_THROWS_AS(resolve(Policy::slot_streams, -1), config_error);
  REQUIRE(parse_policy("auto") == Policy::automatic);
  REQUIRE(parse_policy("stage_streams") == Policy::stage_streams);
  REQUIRE_THROWS_AS(parse_policy("fastest"), config_error);
}

TEST_CASE("ops ordered by their own stream record no event", "[plan][hazards]") {
  // slot_streams and serial keep every op of a slot on one stream, so no
  // device op is ever waited for by an event.
  for (Policy policy : {Policy::serial, Policy::slot_streams}) {
    for (int depth : {1, 2, 3, 4}) {
      if (policy == Policy::serial && depth != 1) continue;
      const Plan plan = make_plan(policy, depth, PlanShape{}, 20);
      INFO(to_string(policy) << " depth " << depth);
      REQUIRE(check_hazards(plan).ok());
      for (const Op& op : plan.ops) REQUIRE_FALSE(op.signal);
    }
  }
  // Staged: the host worker waits for the copy-in before refilling its
  // pinned slot and for the copy-out before reading it; the stage stays silent.
  PlanShape staged;
  staged.stage_in = true;
  staged.stage_out = true;
  const Plan plan = make_plan(Policy::slot_streams, 2, staged, 20);
  REQUIRE(check_hazards(plan).ok());
  for (const Op& op : plan.ops) {
    INFO(plan.describe(op));
    REQUIRE(op.signal == (op.kind != OpKind::stage));
  }
}

TEST_CASE("deep stage_streams rings batch their slot-reuse waits, and stay safe", "[plan][hazards]") {
  for (int depth : {8, 12, 16, 24, 32}) {
    for (const PlanShape& shape : shapes()) {
      const Plan plan = make_plan(Policy::stage_streams, depth, shape, 200);
      INFO("depth " << depth << " stages " << shape.stages << " staged " << shape.stage_in << shape.stage_out);
      REQUIRE(check_hazards(plan).ok());
    }
    // One stage, no staging: the H2D stream waits once per batch of
    // depth/4 (at most 8) chunks once the ring has gone round, not once per chunk.
    const Plan plan = make_plan(Policy::stage_streams, depth, PlanShape{}, 200);
    std::size_t batch = std::min<std::size_t>(static_cast<std::size_t>(depth) / 4, 8);
    while (static_cast<std::size_t>(depth) % batch != 0) --batch;  // the batch divides the depth
    std::size_t h2d_waits = 0;
    for (const Op& op : plan.ops) {
      if (op.kind == OpKind::h2d) h2d_waits += op.waits.size();
    }
    const std::size_t reused = 200 - static_cast<std::size_t>(depth);
    REQUIRE(h2d_waits <= (reused + batch - 1) / batch + 1);
    REQUIRE(h2d_waits >= reused / batch);
    // Only the last copy-out of each batch is ever waited for, so only it
    // records an event (the hazard check refuses waits on silent ops).
    std::size_t silent = 0;
    for (const Op& op : plan.ops) {
      if (op.kind == OpKind::d2h && !op.signal) ++silent;
      if (op.kind != OpKind::d2h) REQUIRE(op.signal);
    }
    REQUIRE(silent == 200 - 200 / batch);
  }
  // A staged output's copy-out feeds host-out, so it always signals.
  PlanShape staged;
  staged.stage_out = true;
  for (const Op& op : make_plan(Policy::stage_streams, 16, staged, 64).ops) REQUIRE(op.signal);
}

TEST_CASE("kernel lanes: consecutive chunks' stages take turns on their own streams, and stay safe",
          "[plan][hazards][lanes]") {
  for (int lanes : {1, 2, 3, 4}) {
    // Deep rings too: the automatic policy's grains give 24 slots and more,
    // where slot-reuse waits are batched (a quarter of the ring).
    for (int depth : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 24, 32}) {
      for (const PlanShape& base : shapes()) {
        PlanShape shape = base;
        shape.kernel_lanes = lanes;
        for (std::size_t chunks : {std::size_t{1}, std::size_t{5}, std::size_t{40}}) {
          const Plan plan = make_plan(Policy::stage_streams, depth, shape, chunks);
          INFO("lanes " << lanes << " depth " << depth << " stages " << shape.stages << " chunks " << chunks);
          const HazardReport report = check_hazards(plan);
          INFO(report);
          REQUIRE(report.ok());
          // h2d, stages x lanes, d2h, then the host queues.
          std::size_t device = 0;
          for (const Queue& q : plan.queues) device += q.kind == QueueKind::device ? 1 : 0;
          REQUIRE(device == 2 + static_cast<std::size_t>(shape.stages * lanes));
          std::set<int> h2d, d2h;
          for (const Op& op : plan.ops) {
            if (op.kind == OpKind::h2d) h2d.insert(op.queue);
            if (op.kind == OpKind::d2h) d2h.insert(op.queue);
            if (op.kind != OpKind::stage) continue;
            // Chunk c's stage s on lane c % lanes.
            REQUIRE(op.queue == 1 + op.stage * lanes + static_cast<int>(op.chunk % static_cast<std::size_t>(lanes)));
          }
          REQUIRE(h2d.size() == 1);
          REQUIRE(d2h.size() == 1);
        }
      }
    }
  }
  // Other policies have no lanes to give.
  PlanShape shape;
  shape.kernel_lanes = 3;
  REQUIRE(make_plan(Policy::slot_streams, 4, shape, 8).queues.size() == 4);
  shape.kernel_lanes = 0;
  REQUIRE_THROWS_AS(make_plan(Policy::stage_streams, 4, shape, 8), config_error);
}

TEST_CASE("kernel lanes may change from one run to the next, and every sequence stays safe",
          "[plan][hazards][lanes][streaming]") {
  // A pipeline that decides its lanes after calibrating (decide.hpp) keeps
  // the schedule's streams and moves later runs onto more (or fewer) lanes.
  std::uint64_t seed = 12345;
  auto next = [&](std::uint64_t m) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (seed >> 33) % m;
  };
  for (int lanes : {2, 3}) {
    for (int depth : {2, 3, 4, 6, 8, 24}) {
      for (const PlanShape& base : shapes()) {
        PlanShape shape = base;
        shape.kernel_lanes = lanes;
        shape.lanes_vary = true;
        shape.per_run_staging = true;
        for (int trial = 0; trial < 3; ++trial) {
          std::vector<RunSpec> runs;
          for (int r = 0; r < 6; ++r) {
            RunSpec spec;
            spec.chunks = 1 + next(2 * static_cast<std::uint64_t>(depth) + 3);
            spec.stage_in = next(2) == 1;
            spec.stage_out = next(2) == 1;
            spec.kernel_lanes = static_cast<int>(next(static_cast<std::uint64_t>(lanes) + 1));  // 0: all
            runs.push_back(spec);
          }
          const Plan plan = make_plan(Policy::stage_streams, depth, shape, runs);
          INFO("lanes " << lanes << " depth " << depth << " stages " << shape.stages << " trial " << trial);
          const HazardReport report = check_hazards(plan);
          INFO(report);
          REQUIRE(report.ok());
          REQUIRE(plan.runs.size() == runs.size());
          for (std::size_t r = 0; r < runs.size(); ++r) {
            const PlanRun& run = plan.runs[r];
            const int used = runs[r].kernel_lanes == 0 ? lanes : runs[r].kernel_lanes;
            REQUIRE(run.kernel_lanes == used);
            for (std::size_t i = run.first_op; i < run.first_op + run.ops; ++i) {
              const Op& op = plan.ops[i];
              if (op.kind != OpKind::stage) continue;
              // Chunk c of the run on lane c % (the run's lanes), within its stage's streams.
              REQUIRE(op.queue == 1 + op.stage * lanes + static_cast<int>(op.chunk % static_cast<std::size_t>(used)));
            }
          }
        }
      }
    }
  }
  // More lanes than the schedule has streams for is refused.
  PlanShape shape;
  shape.kernel_lanes = 2;
  RunSpec spec{4, false, false, 0};
  spec.kernel_lanes = 3;
  REQUIRE_THROWS_AS(make_plan(Policy::stage_streams, 4, shape, std::vector<RunSpec>{spec}), config_error);
  // And fewer, unless the shape lets runs' lanes vary.
  spec.kernel_lanes = 1;
  REQUIRE_THROWS_AS(make_plan(Policy::stage_streams, 4, shape, std::vector<RunSpec>{spec}), config_error);
  shape.lanes_vary = true;
  REQUIRE(make_plan(Policy::stage_streams, 4, shape, std::vector<RunSpec>{spec}).runs.at(0).kernel_lanes == 1);
}
