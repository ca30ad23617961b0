// SPDX-License-Identifier: MIT
// What the stream executor (stream_ops.hpp) remembers of the ops it issued:
// where each ran (queue, host position) and the event that marks its end.
//
// An op's completion event lives in a ring indexed by (step, chunk %
// reach): an entry is recorded again only by the same step of the same
// slot `reach` chunks later, on the same queue, so a late waiter only ever
// waits for more (PlanBuilder::reach). Records are kept in a table of the
// same size, by op id; waits reach back a bounded number of ops, except to
// an op that is still the latest of its step and slot (a pinned buffer last
// used by a staged run long ago), which a second table keeps.
#pragma once

#include <chunkpipe/memory.cuh>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/detail/linkage.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace chunkpipe::detail {

/// One issued op, as a later op's wait needs it.
struct OpRecord {
  std::size_t id = static_cast<std::size_t>(-1);
  int step = 0;
  std::size_t chunk = 0;
  int queue = 0;
  std::size_t host_pos = 0;  ///< its position in its host queue (host ops)
  bool signal = false;       ///< records its end (a ring event or a host position)
};

class OpRecords {
 public:
  /// Sizes the tables for a schedule's steps, depth and reach; forgets every
  /// record. Creates ring events it lacks. Throws cuda_error.
  void configure(std::size_t steps, std::size_t depth, std::size_t reach);

  /// The record of `op`, starting now (its host position still 0).
  OpRecord& start(const Op& op, bool signal) {
    OpRecord& r = records_[op.id % records_.size()];
    r = OpRecord{op.id, op.step, op.chunk, op.queue, 0, signal};
    return r;
  }
  /// `r` is now the latest op of its step in `slot`.
  void settle(const OpRecord& r, int slot) {
    last_[static_cast<std::size_t>(r.step) * depth_ + static_cast<std::size_t>(slot)] = r;
  }

  /// Op `id`'s record. Throws std::logic_error where it is older than the
  /// window (an internal error: the plan's waits never reach that far).
  const OpRecord& of(std::size_t id) const;

  /// The event that marks `r`'s end (device ops that signal).
  cudaEvent_t event(const OpRecord& r) const { return ring_[static_cast<std::size_t>(r.step)][r.chunk % reach_].get(); }
  /// The event op (`step`, `chunk`) records when it signals.
  cudaEvent_t event(int step, std::size_t chunk) const {
    return ring_[static_cast<std::size_t>(step)][chunk % reach_].get();
  }
  /// The op a wait on `r`'s event waits for, as the issued log names it:
  /// `r` itself, since an entry is recorded again only by the same step of
  /// the same slot `reach` chunks later, which no waiter of `r` precedes.
  static std::size_t owner(const OpRecord& r) noexcept { return r.id; }

 private:
  std::size_t depth_ = 1;
  std::size_t reach_ = 1;
  std::vector<std::vector<Event>> ring_;  // [step][chunk % reach_]
  std::vector<OpRecord> records_;         // [op id % size]
  std::vector<OpRecord> last_;            // [step * depth + slot]: its latest op
};

}  // namespace chunkpipe::detail

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/op_records.inl>
#endif
