// SPDX-License-Identifier: MIT
/// \file
/// Hazard check: proves from a plan's own ordering edges that no slot buffer
/// is read before it is written or overwritten while an earlier operation may
/// still use it. Host-only C++, no CUDA.
///
/// The only edges it believes are the ones an executor really creates: order
/// on one queue, and each op's explicit waits; or, for a graph executor,
/// which has no queues, the graph's edges alone. It does not look at how the
/// plan was built, so it also catches plans written or edited by hand, such
/// as the lesson's pitfall of more streams than buffers with no events.
#pragma once

#include <chunkpipe/detail/linkage.hpp>
#include <chunkpipe/plan.hpp>

#include <cstddef>
#include <iosfwd>
#include <string>
#include <vector>

namespace chunkpipe {

/// Two accesses to one slot buffer that the plan does not order.
struct Hazard {
  /// The order the two accesses need: a read after a write, a write after
  /// a read, or one write after another.
  enum class Kind { read_after_write, write_after_read, write_after_write };
  Kind kind;            ///< which of those orders is missing
  std::size_t earlier;  ///< op id that must finish first
  std::size_t later;    ///< op id that may run too early
  int slot;             ///< the slot whose buffer both ops access
  int buffer;           ///< index into Plan::buffers
};

/// The outcome of check_hazards().
struct HazardReport {
  std::vector<std::string> structural;  ///< malformed plan: bad ids, waits on later ops, ...
  std::vector<Hazard> hazards;          ///< every unordered pair of conflicting accesses found
  std::vector<std::string> messages;    ///< one readable line per hazard
  /// True when the plan is well formed and has no hazard.
  bool ok() const noexcept { return structural.empty() && hazards.empty(); }
};

/// Checks `plan`, ordered by its queues and waits. Costs about ops x queues
/// in time and memory, or, where that would be large, a search per
/// conflicting pair over the ops issued between the two. Never blocks.
/// Never throws for a bad plan (that is what it reports); may throw
/// std::bad_alloc.
HazardReport check_hazards(const Plan& plan);

/// Checks `graph` as the only ordering of `plan`'s ops (no queue order, and
/// the ops' waits are ignored): every pair of conflicting slot-buffer
/// accesses must be ordered by a path of graph edges. Reports structural
/// problems in HazardReport::structural: graph.deps.size() !=
/// plan.ops.size(), an edge from a node not before it (deps[i] entries must
/// be < i), and the op fields check_hazards(plan) also rejects (id, queue,
/// slot, step). For graph_of(plan) it costs what check_hazards(plan) does;
/// a graph that leaves many ops unordered after the op before them on
/// their queue may cost a search per conflicting pair instead. Never
/// blocks. Never throws but std::bad_alloc.
HazardReport check_hazards(const Plan& plan, const PlanGraph& graph);

/// Prints "no hazards" or one line per problem.
std::ostream& operator<<(std::ostream& os, const HazardReport& report);

}  // namespace chunkpipe

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/hazards.inl>
#endif
