// SPDX-License-Identifier: MIT
// What orders the ops a PlanBuilder (plan.hpp) has issued, and the waits it
// derives from that for each new op: who last wrote and read each slot
// buffer, each queue's length and vector clock, each family's latest op.
//
// Part of plan.hpp, which includes it after detail/plan_layout.hpp and
// before PlanBuilder, which holds a PlanOrder; do not include directly.
#pragma once

#include <chunkpipe/detail/linkage.hpp>
#include <chunkpipe/detail/plan_layout.hpp>

#include <cstddef>
#include <vector>

namespace chunkpipe::detail {

/// One issued op, as the waits of later ops that conflict with it need it.
struct OpAccess {
  std::size_t op = 0;
  int queue = 0;
  std::size_t pos = 0;             // 1-based position on its queue
  std::vector<std::size_t> clock;  // vector clock of the op
  std::size_t chunk = 0;
  int step = 0;
  bool signal = true;  // records an event a later op may wait for
  bool valid = false;
};

/// The order of a schedule's ops so far, from run to run: for each slot
/// buffer (one state for a ring-wide one) its last writer and its readers
/// since, for each family of steps and slot its latest op, for each queue
/// its length and its tail's vector clock. issue() numbers the next op and
/// derives its waits from it: one exactly where neither queue order nor an
/// earlier wait already orders a conflicting access. Sized by the layout;
/// its scratch is kept, so issuing allocates nothing in steady state.
class PlanOrder {
 public:
  /// Nothing issued yet, sized for `layout`'s queues, slots and buffers.
  explicit PlanOrder(const PlanLayout& layout);

  /// Ops issued so far: the id the next op gets.
  std::size_t issued() const noexcept { return next_id_; }

  /// Gives `op`, whose chunk, step, slot, queue and signal are set, the
  /// next id and its waits, and records its accesses. Returns them as
  /// recorded; valid until the next call. `layout` is the one it was sized
  /// for. Throws std::logic_error if it would have to wait for an op that
  /// records no event (an internal error).
  const OpAccess& issue(const PlanLayout& layout, Op& op);

 private:
  // One buffer of one slot.
  struct BufferState {
    bool has_writer = false;
    OpAccess writer;
    std::vector<OpAccess> readers;  // [0, n_readers): since the last write
    std::size_t n_readers = 0;
  };

  std::vector<BufferState> state_;                // [slot * buffers + buffer]
  std::vector<std::vector<OpAccess>> recent_;     // [family][chunk % depth]: its latest op
  std::vector<std::vector<std::size_t>> clocks_;  // per queue: its tail's clock
  std::vector<std::size_t> queue_len_;            // per queue: ops issued on it
  std::size_t next_id_ = 0;

  // Scratch, kept so issuing allocates nothing in steady state.
  std::vector<const OpAccess*> before_;
  std::vector<std::size_t> clock_;
  OpAccess self_;
};

}  // namespace chunkpipe::detail

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/plan_order.inl>
#endif
