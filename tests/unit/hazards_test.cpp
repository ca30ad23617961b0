// SPDX-License-Identifier: MIT
// The hazard check catches broken plans, and every wait the planner adds is
// one the check would miss.
#include <chunkpipe/hazards.hpp>
#include <chunkpipe/plan.hpp>

#include "catch.hpp"

#include <algorithm>
#include <sstream>
#include <vector>

using namespace chunkpipe;

TEST_CASE("the lesson's pitfall, two buffers and three streams, is caught", "[hazards]") {
  // Chunk k on stream k % 3 but buffer pair k % 2, and no events: chunk 2
  // overwrites pair 0 on stream 2 while stream 0 may still be using it.
  Plan plan = make_plan(Policy::slot_streams, 2, PlanShape{}, 6);
  plan.queues.push_back({QueueKind::device, "stream 2"});
  for (Op& op : plan.ops) {
    op.queue = static_cast<int>(op.chunk % 3);
    op.waits.clear();
  }
  const HazardReport report = check_hazards(plan);
  REQUIRE_FALSE(report.ok());
  REQUIRE(report.structural.empty());
  bool found = false;
  for (const Hazard& h : report.hazards) {
    const Op& later = plan.ops[h.later];
    const Op& earlier = plan.ops[h.earlier];
    if (later.kind == OpKind::h2d && later.chunk == 2 && earlier.kind == OpKind::stage && earlier.chunk == 0 &&
        h.kind == Hazard::Kind::write_after_read) {
      found = true;
    }
  }
  REQUIRE(found);
  std::ostringstream s;
  s << report;
  REQUIRE(s.str().find("h2d of chunk 2") != std::string::npos);
  REQUIRE(s.str().find("overwrites device in of slot 0") != std::string::npos);
}

TEST_CASE("the same three streams over three slots are safe", "[hazards]") {
  // The fix the lesson names: as many buffer pairs as streams.
  const Plan plan = make_plan(Policy::slot_streams, 3, PlanShape{}, 9);
  REQUIRE(check_hazards(plan).ok());
}

TEST_CASE("removing any single wait the planner added makes the plan unsafe", "[hazards]") {
  // The planner adds a wait only where nothing else orders two accesses, so
  // every one of them must matter.
  PlanShape shape;
  shape.stages = 2;
  shape.stage_in = shape.stage_out = true;
  for (Policy policy : {Policy::slot_streams, Policy::stage_streams}) {
    for (int depth : {1, 2, 3, 8}) {  // 8: stage_streams batches its reuse waits in twos
      const Plan plan = make_plan(policy, depth, shape, depth == 8 ? 20 : 7);
      REQUIRE(check_hazards(plan).ok());
      std::size_t waits = 0;
      for (std::size_t i = 0; i < plan.ops.size(); ++i) {
        for (std::size_t w = 0; w < plan.ops[i].waits.size(); ++w) {
          Plan broken = plan;
          broken.ops[i].waits.erase(broken.ops[i].waits.begin() + static_cast<long>(w));
          INFO(to_string(policy) << " depth " << depth << ": without wait #" << plan.ops[i].waits[w]
                                 << " of " << plan.describe(plan.ops[i]));
          REQUIRE_FALSE(check_hazards(broken).ok());
          ++waits;
        }
      }
      REQUIRE(waits > 0);
    }
  }
}

TEST_CASE("a read before the write it needs is caught", "[hazards]") {
  // The kernel of chunk 1 on its own stream without waiting for its copy in.
  Plan plan = make_plan(Policy::stage_streams, 2, PlanShape{}, 2);
  for (Op& op : plan.ops) {
    if (op.kind == OpKind::stage && op.chunk == 1) op.waits.clear();
  }
  const HazardReport report = check_hazards(plan);
  REQUIRE_FALSE(report.ok());
  REQUIRE(report.hazards.front().kind == Hazard::Kind::read_after_write);
}

TEST_CASE("malformed plans are reported, not trusted", "[hazards]") {
  Plan plan = make_plan(Policy::stage_streams, 2, PlanShape{}, 3);
  plan.ops[1].waits.push_back(5);  // waits for an op issued after it
  HazardReport report = check_hazards(plan);
  REQUIRE_FALSE(report.ok());
  REQUIRE(report.structural.size() == 1);
  REQUIRE(report.structural[0].find("not issued before it") != std::string::npos);

  plan = make_plan(Policy::stage_streams, 2, PlanShape{}, 3);
  plan.ops[2].slot = 7;
  REQUIRE_FALSE(check_hazards(plan).ok());

  // A wait on an op that records no event would find an older one.
  plan = make_plan(Policy::stage_streams, 2, PlanShape{}, 3);
  plan.ops[0].signal = false;  // h2d of chunk 0, which the kernel waits for
  report = check_hazards(plan);
  REQUIRE(report.structural.size() == 1);
  REQUIRE(report.structural[0].find("does not signal") != std::string::npos);
}

namespace {

// The run of `plan` whose ops include `op` (plan.runs.size() if none).
std::size_t run_of(const Plan& plan, std::size_t op) {
  for (std::size_t r = 0; r < plan.runs.size(); ++r) {
    if (op >= plan.runs[r].first_op && op < plan.runs[r].first_op + plan.runs[r].ops) return r;
  }
  return plan.runs.size();
}

// Removes every wait from one run to an earlier one, one at a time, and
// requires the check to report, for each, a slot whose reuse the two runs
// now race on. Returns how many such waits there were.
std::size_t require_every_wait_between_runs_needed(const Plan& plan) {
  std::size_t between = 0;
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    const std::vector<std::size_t>& waits = plan.ops[i].waits;
    for (std::size_t w = 0; w < waits.size(); ++w) {
      if (run_of(plan, waits[w]) == run_of(plan, i)) continue;
      ++between;
      Plan broken = plan;
      broken.ops[i].waits.erase(broken.ops[i].waits.begin() + static_cast<long>(w));
      const HazardReport report = check_hazards(broken);
      INFO("without wait #" << waits[w] << " (" << plan.describe(plan.ops[waits[w]]) << ", run "
                            << run_of(plan, waits[w]) << ") of " << plan.describe(plan.ops[i]) << " (run "
                            << run_of(plan, i) << ")");
      INFO(report);
      REQUIRE(report.structural.empty());
      REQUIRE_FALSE(report.hazards.empty());
      // Every race left is between an op of an earlier run and one of a
      // later run, on a slot both use: only the edge between runs is gone.
      for (const Hazard& h : report.hazards) {
        REQUIRE(run_of(plan, h.earlier) < run_of(plan, h.later));
        REQUIRE(plan.ops[h.earlier].slot == h.slot);
        REQUIRE(plan.ops[h.later].slot == h.slot);
      }
    }
  }
  return between;
}

}  // namespace

TEST_CASE("a sequence of runs is proved as one schedule: every wait from one run to an earlier one is needed",
          "[hazards][streaming]") {
  // A pipeline's runs share the slot ring: chunks are numbered across
  // runs, so a run's first chunks reuse the slots of the last chunks of
  // the runs before it, and the planner orders that reuse with the same
  // derived waits as inside a run (no barrier between runs). Runs shorter
  // than the ring reuse slots of several runs back; staging that changes
  // from run to run moves the copies between the direct and the staged
  // form; lanes that change move stage ops to other streams. Each run on
  // its own would pass: only the check over the whole sequence sees these.
  PlanShape shape;
  shape.stages = 2;
  shape.per_run_staging = true;
  const std::vector<RunSpec> runs{{1, true, true}, {2, false, false}, {5, true, false}, {1, false, true},
                                  {3, true, true}, {7, false, true}};
  for (Policy policy : {Policy::slot_streams, Policy::stage_streams}) {
    for (int depth : {1, 2, 3, 8}) {  // 8: stage_streams batches its reuse waits
      const Plan plan = make_plan(policy, depth, shape, runs);
      INFO(to_string(policy) << " depth " << depth);
      REQUIRE(plan.runs.size() == runs.size());
      REQUIRE(check_hazards(plan).ok());
      REQUIRE(check_hazards(plan, graph_of(plan)).ok());
      REQUIRE(require_every_wait_between_runs_needed(plan) > 0);
    }
  }
  // Lanes that change from run to run (a pipeline that calibrates).
  PlanShape lanes = shape;
  lanes.kernel_lanes = 3;
  lanes.lanes_vary = true;
  std::vector<RunSpec> laned = runs;
  for (std::size_t r = 0; r < laned.size(); ++r) laned[r].kernel_lanes = static_cast<int>(r % 4);  // 0: all three
  for (int depth : {2, 3, 6}) {
    const Plan plan = make_plan(Policy::stage_streams, depth, lanes, laned);
    INFO("stage_streams, 3 lanes, depth " << depth);
    REQUIRE(check_hazards(plan).ok());
    REQUIRE(require_every_wait_between_runs_needed(plan) > 0);
  }
}

TEST_CASE("graphs of consecutive runs need the edges between them: without them only races across runs remain",
          "[hazards][streaming][graphs]") {
  // As a graph executor would issue the runs if each run's graph went out
  // with nothing ordering it after the one before (two streams, say): the
  // edges inside each run are kept, those reaching an earlier run dropped.
  PlanShape shape;
  shape.stages = 1;
  shape.stage_in = shape.stage_out = true;
  for (Policy policy : {Policy::slot_streams, Policy::stage_streams}) {
    for (int depth : {2, 3}) {
      const std::vector<RunSpec> runs{{3, true, true}, {2, true, true}, {4, true, true}};
      const Plan plan = make_plan(policy, depth, shape, runs);
      INFO(to_string(policy) << " depth " << depth);
      PlanGraph graph = graph_of(plan);
      REQUIRE(check_hazards(plan, graph).ok());
      std::size_t dropped = 0;
      for (std::size_t i = 0; i < graph.deps.size(); ++i) {
        std::vector<std::size_t>& deps = graph.deps[i];
        const auto before = deps.size();
        auto other_run = [&](std::size_t d) { return run_of(plan, d) != run_of(plan, i); };
        deps.erase(std::remove_if(deps.begin(), deps.end(), other_run), deps.end());
        dropped += before - deps.size();
      }
      REQUIRE(dropped > 0);
      const HazardReport report = check_hazards(plan, graph);
      INFO(report);
      REQUIRE(report.structural.empty());
      REQUIRE_FALSE(report.hazards.empty());
      for (const Hazard& h : report.hazards) REQUIRE(run_of(plan, h.earlier) < run_of(plan, h.later));
    }
  }
}

TEST_CASE("a run a Source ended early, then more runs: what the builder issued is proved, edges between runs included",
          "[hazards][streaming]") {
  // Host-in runs ahead, so a run whose Source ends at chunk 2 has already
  // filled slots for chunks it never reaches; the next run starts past
  // them. The plan is built as the driver builds it, tick by tick.
  PlanShape shape;
  shape.stages = 2;
  shape.stage_in = shape.stage_out = true;
  for (int depth : {3, 8}) {
    PlanBuilder builder(Policy::stage_streams, depth, shape);
    Plan plan;
    plan.policy = builder.policy();
    plan.depth = builder.depth();
    plan.shape = builder.shape();
    plan.queues = builder.queues();
    plan.steps = builder.steps();
    plan.buffers = builder.buffers();
    OpBatch batch;
    auto take = [&] {
      plan.ops.insert(plan.ops.end(), batch.begin(), batch.end());
      batch.clear();
    };
    builder.begin_run(RunSpec{unknown_chunks, true, true});
    while (builder.begin_tick(batch)) {
      if (builder.run_tick() == 1) builder.set_run_chunks(2);  // the Source ended in chunk 1
      builder.finish_tick(batch);
      take();
    }
    plan.runs.push_back(builder.end_run());
    for (std::size_t chunks : {4, 1, 5}) {
      builder.begin_run(RunSpec{chunks, true, true});
      while (builder.next_tick(batch)) take();
      plan.runs.push_back(builder.end_run());
    }
    for (const Op& op : plan.ops) plan.chunks = std::max(plan.chunks, op.chunk + 1);
    INFO("depth " << depth);
    // Ops for chunks past the cut run's end: it issued more than it ran.
    std::size_t orphans = 0;
    for (std::size_t i = plan.runs[0].first_op; i < plan.runs[0].first_op + plan.runs[0].ops; ++i) {
      orphans += plan.ops[i].chunk >= plan.runs[0].first_chunk + plan.runs[0].chunks ? 1 : 0;
    }
    REQUIRE(orphans > 0);
    REQUIRE(plan.runs[1].first_chunk >= plan.runs[0].first_chunk + 2 + orphans);
    REQUIRE(check_hazards(plan).ok());
    REQUIRE(require_every_wait_between_runs_needed(plan) > 0);
  }
}
