// SPDX-License-Identifier: MIT
// Definitions for detail/plan_order.hpp. Included at its bottom where
// chunkpipe is header-only, or once by <chunkpipe/compiled.hpp>
// (detail/linkage.hpp); do not include directly.
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>

namespace chunkpipe::detail {

CHUNKPIPE_INLINE PlanOrder::PlanOrder(const PlanLayout& layout) {
  const auto d = static_cast<std::size_t>(layout.depth);
  const std::size_t n_queues = layout.queues.size();
  state_.resize(d * layout.table.buffers.size());
  recent_.assign(static_cast<std::size_t>(layout.table.families), std::vector<OpAccess>(d));
  clocks_.assign(n_queues, std::vector<std::size_t>(n_queues, 0));
  queue_len_.assign(n_queues, 0);
  clock_.assign(n_queues, 0);
}

CHUNKPIPE_INLINE const OpAccess& PlanOrder::issue(const PlanLayout& layout, Op& op) {
  const StepTable& table = layout.table;
  const Step& step = table.steps[static_cast<std::size_t>(op.step)];
  const std::size_t chunk = op.chunk;
  const auto d = static_cast<std::size_t>(layout.depth);
  op.id = next_id_++;

  const auto q = static_cast<std::size_t>(op.queue);
  const std::size_t pos = ++queue_len_[q];
  clock_ = clocks_[q];  // everything before it on its queue
  clock_[q] = pos;

  // Every earlier access this one conflicts with: the last writer of each
  // buffer it touches, and for buffers it writes, every reader since then.
  before_.clear();
  const std::size_t base = static_cast<std::size_t>(op.slot) * table.buffers.size();
  // A ring-wide buffer (a carry) has one state, slot 0's.
  auto at = [&](int buffer) {
    const auto b = static_cast<std::size_t>(buffer);
    return table.ring_wide[b] ? b : base + b;
  };
  auto touch = [&](int buffer, bool writes) {
    const BufferState& b = state_[at(buffer)];
    if (b.has_writer) before_.push_back(&b.writer);
    if (writes) {
      for (std::size_t r = 0; r < b.n_readers; ++r) before_.push_back(&b.readers[r]);
    }
  };
  for (int b : step.reads) touch(b, false);
  for (int b : step.writes) touch(b, true);

  // Latest first: waiting on it often implies the earlier ones.
  std::sort(before_.begin(), before_.end(), [](const OpAccess* a, const OpAccess* b) { return a->op > b->op; });
  const std::size_t batch = layout.wait_batch;
  const bool on_device = layout.queues[q].kind == QueueKind::device;
  for (const OpAccess* a : before_) {
    if (clock_[static_cast<std::size_t>(a->queue)] >= a->pos) continue;  // already ordered
    // Batched slot reuse: the first chunk of each batch of wait_batch
    // waits for the same kind of op of the latest chunk of the previous
    // lap's batch, on the same stream, which orders the whole batch's reuse
    // at once; the rest of the batch then finds its waits already implied.
    if (on_device && batch > 1 && a->chunk < chunk && chunk % batch == 0 &&
        layout.queues[static_cast<std::size_t>(a->queue)].kind == QueueKind::device) {
      const auto fam = static_cast<std::size_t>(table.family[static_cast<std::size_t>(a->step)]);
      for (std::size_t target = std::min(a->chunk + batch - 1, chunk - 1); target > a->chunk; --target) {
        const OpAccess& later = recent_[fam][target % d];
        if (later.valid && later.chunk == target && later.queue == a->queue && later.op > a->op) {
          a = &later;
          break;
        }
      }
    }
    if (!a->signal) {
      throw std::logic_error("chunkpipe: internal error: op #" + std::to_string(op.id) + " must wait for op #" +
                             std::to_string(a->op) + ", which records no event");
    }
    op.waits.push_back(a->op);
    for (std::size_t i = 0; i < clock_.size(); ++i) clock_[i] = std::max(clock_[i], a->clock[i]);
  }
  std::sort(op.waits.begin(), op.waits.end());

  self_.op = op.id;
  self_.queue = op.queue;
  self_.pos = pos;
  self_.clock = clock_;
  self_.chunk = chunk;
  self_.step = op.step;
  self_.signal = op.signal;
  self_.valid = true;
  recent_[static_cast<std::size_t>(table.family[static_cast<std::size_t>(op.step)])][chunk % d] = self_;
  for (int b : step.reads) {
    BufferState& s = state_[at(b)];
    if (s.n_readers < s.readers.size()) {
      s.readers[s.n_readers] = self_;
    } else {
      s.readers.push_back(self_);
    }
    ++s.n_readers;
  }
  for (int b : step.writes) {
    BufferState& s = state_[at(b)];
    s.has_writer = true;
    s.writer = self_;
    s.n_readers = 0;
  }
  clocks_[q] = clock_;
  return self_;
}

}  // namespace chunkpipe::detail
