// SPDX-License-Identifier: MIT
// Definitions for hazards.hpp. Included at its bottom where chunkpipe is
// header-only, or once by <chunkpipe/compiled.hpp> (detail/linkage.hpp); do
// not include directly.
#pragma once

#include <algorithm>
#include <ostream>
#include <tuple>

namespace chunkpipe {

namespace detail {

CHUNKPIPE_INLINE const char* hazard_name(Hazard::Kind kind) {
  switch (kind) {
    case Hazard::Kind::read_after_write: return "reads";
    case Hazard::Kind::write_after_read: return "overwrites";
    case Hazard::Kind::write_after_write: return "overwrites";
  }
  return "?";
}

CHUNKPIPE_INLINE void malformed(HazardReport& report, std::size_t op, const std::string& why) {
  report.structural.push_back("op #" + std::to_string(op) + ": " + why);
}

// The fields of op i that the replay below indexes with, whatever orders it.
CHUNKPIPE_INLINE void check_op_fields(const Plan& plan, std::size_t i, HazardReport& report) {
  const Op& op = plan.ops[i];
  if (op.id != i) malformed(report, i, "id is " + std::to_string(op.id) + ", expected its position");
  if (op.queue < 0 || static_cast<std::size_t>(op.queue) >= plan.queues.size()) {
    malformed(report, i, "queue out of range");
  }
  if (op.slot < 0 || op.slot >= plan.depth) malformed(report, i, "slot out of range");
  if (op.step < 0 || static_cast<std::size_t>(op.step) >= plan.steps.size()) {
    malformed(report, i, "step out of range");
  }
}

// Happens-before under a set of edges: deps[i] are the ops op i directly
// follows, each < i (checked before this is built).
//
// Vector clocks over a cover of the ops by chains, each totally ordered:
// clock(i)[c] is how many ops of chain c precede op i or are it, so a
// precedes b exactly when clock(b)[chain(a)] >= position(a). That costs ops
// x chains, and queues make good chains: an op carries on the chain of the
// op before it on its queue whenever that op precedes it, which is always
// so for a plan's own order and for graph_of(); then the chains are the
// queues and this is the same work as clocks per queue.
//
// An op that breaks its queue's chain (a graph that drops queue edges)
// carries on any chain whose last op precedes it, or starts one. A wide
// order needs many chains, up to one per op; past a budget the clocks are
// dropped and each question is answered by searching back along the edges
// from the later op, which only ever visits ops issued between the two.
class Reachability {
 public:
  Reachability(const Plan& plan, const std::vector<std::vector<std::size_t>>& deps) : deps_(deps) {
    clocked_ = clock_all(plan);
    if (!clocked_) {
      // The partial clocks are of no use to the search.
      for (std::vector<std::size_t>* v : {&chain_, &pos_, &start_, &clocks_}) std::vector<std::size_t>().swap(*v);
      seen_.assign(deps_.size(), 0);
    }
  }

  bool before(std::size_t a, std::size_t b) const {
    if (!clocked_) return search(a, b);
    const std::size_t c = chain_[a];
    // Chains started after b was clocked hold no op before it.
    return c < start_[b + 1] - start_[b] && clocks_[start_[b] + c] >= pos_[a];
  }

 private:
  bool clock_all(const Plan& plan) {
    // Up to this much work (clock entries written and read) clocks beat
    // searching: at most 32 MiB of them, enough for 50,000 ops on 30
    // queues, far below the ops^2 of a graph with no edges, which needs a
    // chain per op.
    constexpr std::size_t budget = std::size_t{1} << 22;
    const std::size_t n = deps_.size();
    chain_.assign(n, 0);
    pos_.assign(n, 0);
    start_.assign(n + 1, 0);
    clocks_.clear();
    // Enough when the chains are the queues, the usual case.
    clocks_.reserve(std::min(budget, n * std::max<std::size_t>(plan.queues.size(), 1)));
    std::vector<std::size_t> len;                           // [chain]: its ops so far
    std::vector<std::size_t> queue_last(plan.queues.size(), n);  // n = none yet
    std::vector<std::size_t> clock;
    std::size_t work = 0;
    for (std::size_t i = 0; i < n; ++i) {
      clock.assign(len.size(), 0);
      for (std::size_t d : deps_[i]) {
        const std::size_t from = start_[d];
        const std::size_t width = start_[d + 1] - from;
        for (std::size_t k = 0; k < width; ++k) clock[k] = std::max(clock[k], clocks_[from + k]);
        work += width;
      }
      auto ends_before = [&](std::size_t c) { return clock[c] == len[c]; };
      std::size_t chain = len.size();
      std::size_t& prev = queue_last[static_cast<std::size_t>(plan.ops[i].queue)];
      // A queue's first op starts a chain rather than take over another
      // queue's, whose next op would then find its own chain gone.
      if (prev != n) {
        if (ends_before(chain_[prev])) {
          chain = chain_[prev];
        } else {
          for (std::size_t c = 0; c < len.size(); ++c) {
            if (ends_before(c)) {
              chain = c;
              break;
            }
          }
          work += len.size();
        }
      }
      if (chain == len.size()) {
        len.push_back(0);
        clock.push_back(0);
      }
      prev = i;
      chain_[i] = chain;
      pos_[i] = ++len[chain];
      clock[chain] = pos_[i];
      clocks_.insert(clocks_.end(), clock.begin(), clock.end());
      start_[i + 1] = clocks_.size();
      work += clock.size();
      // Every op still to come writes a clock at least this wide: give up
      // as soon as that cannot fit, not once the budget is spent.
      if (work > budget || (budget - work) / len.size() < n - i - 1) return false;
    }
    return true;
  }

  bool search(std::size_t a, std::size_t b) const {
    if (a >= b) return false;  // edges only go forward in issue order
    ++stamp_;
    stack_.assign(1, b);
    while (!stack_.empty()) {
      const std::size_t x = stack_.back();
      stack_.pop_back();
      for (std::size_t d : deps_[x]) {
        if (d == a) return true;
        if (d < a || seen_[d] == stamp_) continue;  // issued before a: cannot lead back to it
        seen_[d] = stamp_;
        stack_.push_back(d);
      }
    }
    return false;
  }

  const std::vector<std::vector<std::size_t>>& deps_;
  bool clocked_ = false;
  std::vector<std::size_t> chain_;   // [op]
  std::vector<std::size_t> pos_;     // [op]: 1-based position in its chain
  std::vector<std::size_t> start_;   // [op]: its clock is clocks_[start_[op], start_[op + 1])
  std::vector<std::size_t> clocks_;
  mutable std::vector<std::size_t> seen_;  // [op]: the search that last visited it
  mutable std::vector<std::size_t> stack_;
  mutable std::size_t stamp_ = 0;
};

// Replays every buffer's accesses in program order (chunk by chunk, step by
// step), which is what the result must equal, and reports each conflicting
// pair that `deps` leaves unordered. The plan's fields are already checked.
CHUNKPIPE_INLINE void find_hazards(const Plan& plan, const std::vector<std::vector<std::size_t>>& deps, HazardReport& report) {
  const std::size_t n = plan.ops.size();
  const Reachability order(plan, deps);

  std::vector<std::size_t> replay(n);
  for (std::size_t i = 0; i < n; ++i) replay[i] = i;
  std::stable_sort(replay.begin(), replay.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(plan.ops[a].chunk, plan.ops[a].step) < std::tie(plan.ops[b].chunk, plan.ops[b].step);
  });

  struct State {
    std::size_t writer = static_cast<std::size_t>(-1);
    std::vector<std::size_t> readers;
  };
  const std::size_t buffers = plan.buffers.size();
  std::vector<State> state(static_cast<std::size_t>(plan.depth) * buffers);
  auto flag = [&](Hazard::Kind kind, std::size_t earlier, std::size_t later, int slot, int buffer) {
    if (order.before(earlier, later)) return;
    report.hazards.push_back({kind, earlier, later, slot, buffer});
    const auto b = static_cast<std::size_t>(buffer);
    const bool ring = b < plan.ring_wide.size() && plan.ring_wide[b];
    report.messages.push_back(plan.describe(plan.ops[later]) + ' ' + hazard_name(kind) + ' ' + plan.buffers[b] +
                              (ring ? std::string(" (one for every slot)") : " of slot " + std::to_string(slot)) +
                              " with nothing ordering it after " + plan.describe(plan.ops[earlier]));
  };

  for (std::size_t i : replay) {
    const Op& op = plan.ops[i];
    const Step& step = plan.steps[static_cast<std::size_t>(op.step)];
    const std::size_t base = static_cast<std::size_t>(op.slot) * buffers;
    // A ring-wide buffer (a stage's carry) is one buffer for every slot.
    auto at = [&](int b) {
      const auto i = static_cast<std::size_t>(b);
      return i < plan.ring_wide.size() && plan.ring_wide[i] ? i : base + i;
    };
    for (int b : step.reads) {
      State& s = state[at(b)];
      if (s.writer != static_cast<std::size_t>(-1)) flag(Hazard::Kind::read_after_write, s.writer, i, op.slot, b);
    }
    for (int b : step.writes) {
      State& s = state[at(b)];
      if (s.writer != static_cast<std::size_t>(-1)) flag(Hazard::Kind::write_after_write, s.writer, i, op.slot, b);
      for (std::size_t r : s.readers) {
        if (r != i) flag(Hazard::Kind::write_after_read, r, i, op.slot, b);
      }
    }
    for (int b : step.reads) state[at(b)].readers.push_back(i);
    for (int b : step.writes) {
      State& s = state[at(b)];
      s.writer = i;
      s.readers.clear();
    }
  }
}

}  // namespace detail

CHUNKPIPE_INLINE HazardReport check_hazards(const Plan& plan) {
  HazardReport report;
  const std::size_t n = plan.ops.size();

  // Structure first: the edges below are only meaningful on a sane plan.
  for (std::size_t i = 0; i < n; ++i) {
    detail::check_op_fields(plan, i, report);
    for (std::size_t w : plan.ops[i].waits) {
      // A wait on an op issued later can never be satisfied by an executor
      // that issues in order: it would deadlock or wait on stale state.
      if (w >= i) {
        detail::malformed(report, i, "waits for op #" + std::to_string(w) + ", which is not issued before it");
      } else if (!plan.ops[w].signal) {
        // An executor records no event for it: the wait would find an older one.
        detail::malformed(report, i, "waits for op #" + std::to_string(w) + ", which does not signal");
      }
    }
  }
  if (!report.structural.empty()) return report;

  // Queue order and waits are exactly graph_of()'s edges, and everything
  // graph_of() rejects was reported above, so it cannot throw here.
  detail::find_hazards(plan, graph_of(plan).deps, report);
  return report;
}

CHUNKPIPE_INLINE HazardReport check_hazards(const Plan& plan, const PlanGraph& graph) {
  HazardReport report;
  const std::size_t n = plan.ops.size();
  if (graph.deps.size() != n) {
    report.structural.push_back("the graph has " + std::to_string(graph.deps.size()) + " nodes for " +
                                std::to_string(n) + " ops");
  }
  for (std::size_t i = 0; i < n; ++i) {
    detail::check_op_fields(plan, i, report);
    if (i >= graph.deps.size()) continue;
    for (std::size_t d : graph.deps[i]) {
      // Issue order is the graph's topological order (the clocks and the
      // search rely on it); an edge against it is a cycle or mixed-up ids.
      if (d >= i) detail::malformed(report, i, "depends on op #" + std::to_string(d) + ", which is not before it");
    }
  }
  if (!report.structural.empty()) return report;

  detail::find_hazards(plan, graph.deps, report);
  return report;
}

CHUNKPIPE_INLINE std::ostream& operator<<(std::ostream& os, const HazardReport& report) {
  if (report.ok()) return os << "no hazards\n";
  for (const std::string& s : report.structural) os << "malformed plan: " << s << '\n';
  for (const std::string& s : report.messages) os << "hazard: " << s << '\n';
  return os;
}

}  // namespace chunkpipe
