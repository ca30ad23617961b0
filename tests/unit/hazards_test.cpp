// SPDX-License-Identifier: MIT
// The hazard check catches broken plans, and every wait the planner adds is
// one the check would miss.
#include <chunkpipe/hazards.hpp>
#include <chunkpipe/plan.hpp>

#include "catch.hpp"

#include <sstream>

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
