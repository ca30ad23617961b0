// SPDX-License-Identifier: MIT
// Plans as graphs: graph_of() keeps every ordering a plan's queues and waits
// give, the hazard check believes a graph's edges and nothing else, and it
// misses no edge that a conflicting pair of accesses needs.
#include <chunkpipe/hazards.hpp>
#include <chunkpipe/plan.hpp>

#include "catch.hpp"

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

using namespace chunkpipe;

namespace {

std::vector<PlanShape> shapes() {
  std::vector<PlanShape> all;
  for (int stages : {1, 2, 3}) {
    for (int in_place = 0; in_place < 3; ++in_place) {  // none, every other stage, all
      for (int staging = 0; staging < 4; ++staging) {
        PlanShape s;
        s.stages = stages;
        s.in_place.assign(static_cast<std::size_t>(stages), in_place == 2);
        if (in_place == 1) {
          for (std::size_t k = 0; k < s.in_place.size(); k += 2) s.in_place[k] = true;
        }
        s.stage_in = (staging & 1) != 0;
        s.stage_out = (staging & 2) != 0;
        all.push_back(s);
      }
    }
  }
  return all;
}

std::vector<std::pair<Policy, int>> policies_and_depths() {
  std::vector<std::pair<Policy, int>> all{{Policy::serial, 1}};
  for (Policy policy : {Policy::slot_streams, Policy::stage_streams}) {
    for (int depth = 1; depth <= 4; ++depth) all.emplace_back(policy, depth);
  }
  return all;
}

// What graph_of() promises, spelled out independently: an op's waits and
// its queue's previous op, ascending, once each.
void require_graph_of_plan(const Plan& plan, const PlanGraph& graph) {
  REQUIRE(graph.deps.size() == plan.ops.size());
  std::vector<std::size_t> last(plan.queues.size(), plan.ops.size());
  for (const Op& op : plan.ops) {
    std::vector<std::size_t> expected = op.waits;
    std::size_t& prev = last[static_cast<std::size_t>(op.queue)];
    if (prev != plan.ops.size() && std::find(expected.begin(), expected.end(), prev) == expected.end()) {
      expected.push_back(prev);
    }
    prev = op.id;
    std::sort(expected.begin(), expected.end());
    INFO(plan.describe(op));
    REQUIRE(graph.deps[op.id] == expected);
  }
}

// reach[b][a]: a path of edges leads from op a to op b (a != b).
std::vector<std::vector<bool>> reachability(const PlanGraph& graph) {
  const std::size_t n = graph.deps.size();
  std::vector<std::vector<bool>> reach(n, std::vector<bool>(n, false));
  for (std::size_t b = 0; b < n; ++b) {
    for (std::size_t d : graph.deps[b]) {
      reach[b][d] = true;
      for (std::size_t a = 0; a < d; ++a) {
        if (reach[d][a]) reach[b][a] = true;
      }
    }
  }
  return reach;
}

bool shares(const std::vector<int>& x, const std::vector<int>& y) {
  for (int b : x) {
    if (std::find(y.begin(), y.end(), b) != y.end()) return true;
  }
  return false;
}

// The brute-force answer: every two ops of one slot whose accesses to a
// buffer conflict are joined by a path, in the order the program runs them.
bool safe_by_brute_force(const Plan& plan, const PlanGraph& graph) {
  const auto reach = reachability(graph);
  for (const Op& x : plan.ops) {
    for (const Op& y : plan.ops) {
      if (x.slot != y.slot || std::tie(x.chunk, x.step) >= std::tie(y.chunk, y.step)) continue;
      const Step& sx = plan.steps[static_cast<std::size_t>(x.step)];
      const Step& sy = plan.steps[static_cast<std::size_t>(y.step)];
      const bool conflict = shares(sx.writes, sy.reads) || shares(sx.writes, sy.writes) || shares(sx.reads, sy.writes);
      if (conflict && !reach[y.id][x.id]) return false;
    }
  }
  return true;
}

PlanGraph waits_only(const Plan& plan) {
  PlanGraph graph;
  for (const Op& op : plan.ops) graph.deps.push_back(op.waits);
  return graph;
}

// `plan` with `count` ops appended that touch no buffer, and `graph` with
// nothing ordering them: hazards stay the same, but an order that wide is
// past what the check spends on vector clocks (detail::Reachability), so it
// answers by searching the edges instead.
constexpr std::size_t idle_ops = 8192;

Plan widened(Plan plan) {
  const int idle = static_cast<int>(plan.steps.size());
  plan.steps.push_back(Step{OpKind::stage, 0, 0, {}, {}, false});
  for (std::size_t k = 0; k < idle_ops; ++k) {
    Op op;
    op.id = plan.ops.size();
    op.step = idle;
    op.kind = OpKind::stage;
    op.stage = 0;
    op.queue = static_cast<int>(plan.queues.size());
    plan.queues.push_back({QueueKind::device, "idle " + std::to_string(k)});
    plan.ops.push_back(op);
  }
  return plan;
}

PlanGraph widened(PlanGraph graph) {
  graph.deps.resize(graph.deps.size() + idle_ops);
  return graph;
}

void require_same_hazards(const HazardReport& a, const HazardReport& b) {
  REQUIRE(a.structural == b.structural);
  REQUIRE(a.messages == b.messages);
  REQUIRE(a.hazards.size() == b.hazards.size());
  for (std::size_t h = 0; h < a.hazards.size(); ++h) {
    REQUIRE(a.hazards[h].kind == b.hazards[h].kind);
    REQUIRE(a.hazards[h].earlier == b.hazards[h].earlier);
    REQUIRE(a.hazards[h].later == b.hazards[h].later);
    REQUIRE(a.hazards[h].slot == b.hazards[h].slot);
    REQUIRE(a.hazards[h].buffer == b.hazards[h].buffer);
  }
}

}  // namespace

TEST_CASE("graph_of of every policy, depth and shape is its queues and waits, and is safe", "[graph]") {
  for (const auto& [policy, depth] : policies_and_depths()) {
    for (std::size_t chunks : {std::size_t{1}, std::size_t{2}, std::size_t{5}, std::size_t{13}}) {
      for (const PlanShape& shape : shapes()) {
        const Plan plan = make_plan(policy, depth, shape, chunks);
        const PlanGraph graph = graph_of(plan);
        const HazardReport report = check_hazards(plan, graph);
        INFO(to_string(policy) << " depth " << depth << " chunks " << chunks << " stages " << shape.stages
                               << " stage_in " << shape.stage_in << " stage_out " << shape.stage_out << '\n'
                               << report);
        REQUIRE(report.ok());
        require_graph_of_plan(plan, graph);
      }
    }
  }
}

TEST_CASE("graph_of of lifetime plans mixing staged and pinned runs of ragged lengths is safe", "[graph]") {
  const std::vector<std::vector<RunSpec>> schedules{
      {{3, false, false, 0}, {5, true, true, 0}, {1, true, false, 0}, {4, false, true, 0}, {2, false, false, 0}},
      {{7, true, true, 0}, {2, false, false, 0}, {9, false, true, 0}, {1, true, true, 0}},
      {{1, false, false, 0}, {0, true, true, 0}, {6, true, false, 0}, {3, false, false, 0}},
  };
  for (const auto& [policy, depth] : policies_and_depths()) {
    for (int stages : {1, 2, 3}) {
      for (const auto& runs : schedules) {
        PlanShape shape;
        shape.stages = stages;
        shape.in_place.assign(static_cast<std::size_t>(stages), false);
        shape.in_place.back() = stages > 1;
        shape.per_run_staging = true;
        const Plan plan = make_plan(policy, depth, shape, runs);
        const PlanGraph graph = graph_of(plan);
        const HazardReport report = check_hazards(plan, graph);
        INFO(to_string(policy) << " depth " << depth << " stages " << stages << " runs " << runs.size() << '\n'
                               << plan << report);
        REQUIRE(report.ok());
        require_graph_of_plan(plan, graph);
      }
    }
  }
}

TEST_CASE("graph_of of two small plans, edge by edge", "[graph]") {
  // slot_streams needs no waits: every edge is its stream's order.
  const Plan slots = make_plan(Policy::slot_streams, 2, PlanShape{}, 3);
  const std::vector<std::vector<std::size_t>> by_stream{
      {}, {0}, {1},   // chunk 0 on stream 0
      {}, {3}, {4},   // chunk 1 on stream 1
      {2}, {6}, {7},  // chunk 2 back on stream 0, after chunk 0
  };
  REQUIRE(graph_of(slots).deps == by_stream);
  // stage_streams: the waits, merged with each stream's order.
  const Plan stages = make_plan(Policy::stage_streams, 2, PlanShape{}, 3);
  const std::vector<std::vector<std::size_t>> by_stage{
      {}, {0}, {1},            // chunk 0: copy in, kernel, copy out
      {0}, {1, 3}, {2, 4},     // chunk 1 behind it on each stream
      {1, 3}, {2, 4, 6}, {5, 7},  // chunk 2 reuses slot 0 once chunk 0's kernel and copy out are done
  };
  REQUIRE(graph_of(stages).deps == by_stage);
  // A wait on the op before it on its own queue is one edge, not two.
  Plan doubled = slots;
  doubled.ops[4].waits = {3};
  doubled.ops[7].waits = {1, 6};
  const PlanGraph graph = graph_of(doubled);
  REQUIRE(graph.deps[4] == std::vector<std::size_t>{3});
  REQUIRE(graph.deps[7] == std::vector<std::size_t>{1, 6});
}

TEST_CASE("graph_of refuses a malformed plan", "[graph][errors]") {
  Plan plan = make_plan(Policy::stage_streams, 2, PlanShape{}, 3);
  plan.ops[1].waits.push_back(5);
  REQUIRE_THROWS_AS(graph_of(plan), std::invalid_argument);
  plan = make_plan(Policy::stage_streams, 2, PlanShape{}, 3);
  plan.ops[4].waits.push_back(4);
  REQUIRE_THROWS_AS(graph_of(plan), std::invalid_argument);
  plan = make_plan(Policy::stage_streams, 2, PlanShape{}, 3);
  plan.ops[2].id = 7;
  REQUIRE_THROWS_AS(graph_of(plan), std::invalid_argument);
  plan = make_plan(Policy::stage_streams, 2, PlanShape{}, 3);
  plan.ops[2].queue = 3;
  REQUIRE_THROWS_AS(graph_of(plan), std::invalid_argument);
}

TEST_CASE("without its queue edges a graph is unsafe", "[graph][hazards]") {
  // Plans leave out every wait their queues imply, so a graph made of waits
  // alone lets those accesses race, and the check must notice. slot_streams
  // orders each slot by its stream alone. stage_streams orders slot reuse
  // by waits, but deep rings wait once per batch of chunks and leave the
  // rest of the batch to stream order (at depth 4 and below, waits alone
  // would do).
  PlanShape staged;
  staged.stages = 2;
  staged.stage_in = staged.stage_out = true;
  const std::vector<std::pair<Policy, int>> cases{{Policy::slot_streams, 1}, {Policy::slot_streams, 2},
                                                  {Policy::slot_streams, 3}, {Policy::stage_streams, 8},
                                                  {Policy::stage_streams, 16}};
  for (const auto& [policy, depth] : cases) {
    for (const PlanShape& shape : {PlanShape{}, staged}) {
      const Plan plan = make_plan(policy, depth, shape, 40);
      const PlanGraph graph = waits_only(plan);
      const HazardReport report = check_hazards(plan, graph);
      INFO(to_string(policy) << " depth " << depth << " staged " << shape.stage_in << '\n' << report);
      REQUIRE(report.structural.empty());
      REQUIRE_FALSE(report.hazards.empty());
      REQUIRE(report.messages.size() == report.hazards.size());
      REQUIRE_FALSE(safe_by_brute_force(plan, graph));
      // The plan itself, read with its queues, is fine: the queues did it.
      REQUIRE(check_hazards(plan).ok());
      REQUIRE(check_hazards(plan, graph_of(plan)).ok());
    }
  }
  // The kernel of chunk 0 on a stream of its own reads what nothing orders
  // after the copy in.
  const Plan plan = make_plan(Policy::slot_streams, 2, PlanShape{}, 2);
  const HazardReport report = check_hazards(plan, waits_only(plan));
  std::ostringstream s;
  s << report;
  REQUIRE(s.str().find("hazard: stage 0 of chunk 0 (op #1, slot 0, queue stream 0) reads device in of slot 0 "
                       "with nothing ordering it after h2d of chunk 0 (op #0, slot 0, queue stream 0)") !=
          std::string::npos);
}

TEST_CASE("removing one edge is caught exactly when a conflicting pair loses its order", "[graph][hazards]") {
  // Edges implied by the others must not matter; the rest matter exactly
  // when two conflicting accesses relied on them, which the brute-force
  // reference decides from every pair of ops.
  PlanShape staged;
  staged.stages = 2;
  staged.in_place = {false, true};
  staged.stage_in = staged.stage_out = true;
  std::size_t implied = 0, caught = 0;
  for (int depth : {1, 2, 3, 8}) {  // 8: reuse waits batched in twos, the rest of each batch by stream order
    for (const PlanShape& shape : {PlanShape{}, staged}) {
      const Plan plan = make_plan(Policy::stage_streams, depth, shape, depth == 8 ? 20 : 6);
      const PlanGraph graph = graph_of(plan);
      REQUIRE(check_hazards(plan, graph).ok());
      for (std::size_t i = 0; i < graph.deps.size(); ++i) {
        for (std::size_t e = 0; e < graph.deps[i].size(); ++e) {
          PlanGraph cut = graph;
          const std::size_t from = cut.deps[i][e];
          cut.deps[i].erase(cut.deps[i].begin() + static_cast<long>(e));
          const bool still_ordered = reachability(cut)[i][from];
          const bool expect_safe = safe_by_brute_force(plan, cut);
          const HazardReport report = check_hazards(plan, cut);
          INFO("depth " << depth << " staged " << shape.stage_in << ": without the edge from "
                        << plan.describe(plan.ops[from]) << " to " << plan.describe(plan.ops[i]) << '\n'
                        << report);
          REQUIRE(report.structural.empty());
          if (still_ordered) REQUIRE(expect_safe);
          // An edge neither implied nor needed, such as the H2D stream's
          // order between copies into different slots, orders nothing
          // that conflicts: safe, and the check must say so too.
          REQUIRE(report.ok() == expect_safe);
          if (still_ordered) ++implied;
          if (!expect_safe) ++caught;
        }
      }
    }
  }
  REQUIRE(implied > 0);  // depth 1: the kernel's wait on the last copy out implies its stream's order
  REQUIRE(caught > 0);
}

TEST_CASE("a malformed graph is reported, not thrown", "[graph][errors]") {
  const Plan plan = make_plan(Policy::stage_streams, 2, PlanShape{}, 3);
  const PlanGraph graph = graph_of(plan);

  PlanGraph shorter = graph;
  shorter.deps.pop_back();
  HazardReport report;
  REQUIRE_NOTHROW(report = check_hazards(plan, shorter));
  REQUIRE(report.structural == std::vector<std::string>{"the graph has 8 nodes for 9 ops"});
  REQUIRE(report.hazards.empty());

  PlanGraph longer = graph;
  longer.deps.emplace_back();
  REQUIRE(check_hazards(plan, longer).structural == std::vector<std::string>{"the graph has 10 nodes for 9 ops"});

  PlanGraph forward = graph;
  forward.deps[3].push_back(3);   // on itself
  forward.deps[4].push_back(8);   // on a later node
  forward.deps[5].push_back(99);  // on no node at all
  REQUIRE_NOTHROW(report = check_hazards(plan, forward));
  REQUIRE(report.structural == std::vector<std::string>{"op #3: depends on op #3, which is not before it",
                                                         "op #4: depends on op #8, which is not before it",
                                                         "op #5: depends on op #99, which is not before it"});
  std::ostringstream s;
  s << report;
  REQUIRE(s.str().find("malformed plan: op #4: depends on op #8") != std::string::npos);

  // The ops themselves must still make sense, whatever orders them.
  Plan bad = plan;
  bad.ops[2].slot = 7;
  bad.ops[6].queue = -1;
  REQUIRE_NOTHROW(report = check_hazards(bad, graph));
  REQUIRE(report.structural ==
          std::vector<std::string>{"op #2: slot out of range", "op #6: queue out of range"});

  // Waits are not the graph's business: one on a later op goes unread.
  bad = plan;
  bad.ops[1].waits.push_back(5);
  REQUIRE(check_hazards(bad, graph).ok());
}

TEST_CASE("the graph check agrees with the plan check on broken plans", "[graph][hazards]") {
  // The lesson's pitfall: three streams over two slots, no events.
  Plan pitfall = make_plan(Policy::slot_streams, 2, PlanShape{}, 6);
  pitfall.queues.push_back({QueueKind::device, "stream 2"});
  for (Op& op : pitfall.ops) {
    op.queue = static_cast<int>(op.chunk % 3);
    op.waits.clear();
  }
  std::vector<Plan> broken{pitfall};
  // And every plan missing one of its waits.
  PlanShape shape;
  shape.stages = 2;
  shape.stage_in = shape.stage_out = true;
  const Plan plan = make_plan(Policy::stage_streams, 3, shape, 7);
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    for (std::size_t w = 0; w < plan.ops[i].waits.size(); ++w) {
      Plan cut = plan;
      cut.ops[i].waits.erase(cut.ops[i].waits.begin() + static_cast<long>(w));
      broken.push_back(cut);
    }
  }
  REQUIRE(broken.size() > 10);
  for (const Plan& p : broken) {
    const HazardReport by_plan = check_hazards(p);
    const HazardReport by_graph = check_hazards(p, graph_of(p));
    REQUIRE_FALSE(by_plan.ok());
    require_same_hazards(by_graph, by_plan);
  }
}

TEST_CASE("wide graphs, checked by search instead of clocks, get the same answers", "[graph][hazards]") {
  PlanShape staged;
  staged.stages = 2;
  staged.in_place = {true, false};
  staged.stage_in = staged.stage_out = true;
  std::size_t graphs = 0, unsafe = 0;
  for (const auto& [policy, depth] : std::vector<std::pair<Policy, int>>{
           {Policy::slot_streams, 3}, {Policy::stage_streams, 2}, {Policy::stage_streams, 8}}) {
    for (const PlanShape& shape : {PlanShape{}, staged}) {
      const Plan plan = make_plan(policy, depth, shape, 20);
      const Plan wide = widened(plan);
      const PlanGraph full = graph_of(plan);
      // The whole graph, its waits alone, and a spread of single edges cut.
      std::vector<PlanGraph> cuts{full, waits_only(plan)};
      std::size_t edge = 0;
      for (std::size_t i = 0; i < full.deps.size(); ++i) {
        for (std::size_t e = 0; e < full.deps[i].size(); ++e, ++edge) {
          if (edge % 5 != 0) continue;
          cuts.push_back(full);
          cuts.back().deps[i].erase(cuts.back().deps[i].begin() + static_cast<long>(e));
        }
      }
      for (const PlanGraph& graph : cuts) {
        const HazardReport by_clocks = check_hazards(plan, graph);
        const HazardReport by_search = check_hazards(wide, widened(graph));
        INFO(to_string(policy) << " depth " << depth << " staged " << shape.stage_in << '\n' << by_clocks);
        require_same_hazards(by_search, by_clocks);
        ++graphs;
        if (!by_clocks.ok()) ++unsafe;
      }
    }
  }
  REQUIRE(unsafe > 0);
  REQUIRE(unsafe < graphs);
}

TEST_CASE("a long stage_streams plan checks as a graph", "[graph][hazards]") {
  const Plan plan = make_plan(Policy::stage_streams, 3, PlanShape{}, 16384);
  REQUIRE(plan.ops.size() == 3 * 16384);
  const PlanGraph graph = graph_of(plan);
  const HazardReport report = check_hazards(plan, graph);
  INFO(report);
  REQUIRE(report.ok());
  // And the edge that orders the last kernel after its copy in is needed.
  PlanGraph cut = graph;
  cut.deps[plan.ops.size() - 2].clear();
  // It follows its copy in, and the kernel and the copy out before it on its slot.
  REQUIRE(check_hazards(plan, cut).hazards.size() == 3);

  // The same edges as a plan with a queue per op: there are then as many
  // queues as ops, which must not cost ops^2.
  Plan own = plan;
  own.queues.clear();
  for (Op& op : own.ops) {
    own.queues.push_back({QueueKind::device, "queue " + std::to_string(op.id)});
    op.queue = static_cast<int>(op.id);
    op.waits = graph.deps[op.id];
    op.signal = true;
  }
  REQUIRE(check_hazards(own).ok());
  REQUIRE(check_hazards(own, graph).ok());
  own.ops.back().waits.clear();
  REQUIRE(check_hazards(own).hazards.size() == 1);  // the last copy out reads what its kernel wrote
}

TEST_CASE("a graph that leaves one stream's ops unordered is checked exactly, at any length", "[graph][hazards]") {
  // slot_streams orders each slot by its stream alone. Dropping stream 0's
  // edges leaves slot 0's ops unordered among themselves, an order as wide
  // as slot 0 has ops, while the other slots stay ordered. Every
  // conflicting pair of slot 0 is then a hazard: the first chunk's kernel
  // and copy out read what nothing orders them after (2), and each later
  // chunk of slot 0 also overwrites its predecessor's buffers (6).
  for (std::size_t chunks : {std::size_t{30}, std::size_t{16384}}) {
    const Plan plan = make_plan(Policy::slot_streams, 3, PlanShape{}, chunks);
    PlanGraph graph = graph_of(plan);
    for (const Op& op : plan.ops) {
      if (op.queue == 0) graph.deps[op.id].clear();
    }
    const HazardReport report = check_hazards(plan, graph);
    const std::size_t slot0_chunks = (chunks + 2) / 3;
    INFO(chunks << " chunks");
    REQUIRE(report.structural.empty());
    REQUIRE(report.hazards.size() == 2 + 6 * (slot0_chunks - 1));
    for (const Hazard& h : report.hazards) {
      REQUIRE(h.slot == 0);
      REQUIRE(plan.ops[h.earlier].slot == 0);
      REQUIRE(plan.ops[h.later].slot == 0);
    }
    if (chunks < 100) REQUIRE_FALSE(safe_by_brute_force(plan, graph));
  }
}
