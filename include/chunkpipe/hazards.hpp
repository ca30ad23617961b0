// SPDX-License-Identifier: MIT
// Hazard check: proves from a plan's own ordering edges that no slot buffer
// is read before it is written or overwritten while an earlier operation may
// still use it. Host-only C++, no CUDA.
//
// The only edges it believes are the ones an executor really creates: order
// on one queue, and each op's explicit waits. It does not look at how the
// plan was built, so it also catches plans written or edited by hand, such
// as the lesson's pitfall of more streams than buffers with no events.
#pragma once

#include <chunkpipe/plan.hpp>

#include <cstddef>
#include <iosfwd>
#include <string>
#include <vector>

namespace chunkpipe {

/// Two accesses to one slot buffer that the plan does not order.
struct Hazard {
  enum class Kind { read_after_write, write_after_read, write_after_write };
  Kind kind;
  std::size_t earlier;  ///< op id that must finish first
  std::size_t later;    ///< op id that may run too early
  int slot;
  int buffer;           ///< index into Plan::buffers
};

/// The outcome of check_hazards().
struct HazardReport {
  std::vector<std::string> structural;  ///< malformed plan: bad ids, waits on later ops, ...
  std::vector<Hazard> hazards;
  std::vector<std::string> messages;    ///< one readable line per hazard
  bool ok() const noexcept { return structural.empty() && hazards.empty(); }
};

/// Checks `plan`. Never throws for a bad plan (that is what it reports);
/// may throw std::bad_alloc.
HazardReport check_hazards(const Plan& plan);

/// Prints "no hazards" or one line per problem.
std::ostream& operator<<(std::ostream& os, const HazardReport& report);

}  // namespace chunkpipe

#include <chunkpipe/detail/hazards.inl>
