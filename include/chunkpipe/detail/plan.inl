// SPDX-License-Identifier: MIT
// Definitions for plan.hpp. Included at its bottom; do not include directly.
#pragma once

#include <algorithm>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace chunkpipe {

inline std::string_view to_string(Policy policy) noexcept {
  switch (policy) {
    case Policy::serial: return "serial";
    case Policy::slot_streams: return "slot_streams";
    case Policy::stage_streams: return "stage_streams";
    case Policy::automatic: return "auto";
  }
  return "?";
}

inline std::string_view to_string(OpKind kind) noexcept {
  switch (kind) {
    case OpKind::host_in: return "host-in";
    case OpKind::h2d: return "h2d";
    case OpKind::stage: return "stage";
    case OpKind::d2h: return "d2h";
    case OpKind::host_out: return "host-out";
  }
  return "?";
}

inline Policy parse_policy(std::string_view text) {
  if (text == "serial") return Policy::serial;
  if (text == "slot_streams") return Policy::slot_streams;
  if (text == "stage_streams") return Policy::stage_streams;
  if (text == "auto" || text == "automatic") return Policy::automatic;
  throw config_error("chunkpipe: unknown policy '" + std::string(text) +
                     "' (expected serial, slot_streams, stage_streams or auto)");
}

inline Resolved resolve(Policy policy, int depth) {
  if (depth < 0) {
    throw config_error("chunkpipe: depth must be at least 1 (0 picks the default), got " +
                       std::to_string(depth));
  }
  if (policy == Policy::serial) return {Policy::serial, 1};
  if (policy == Policy::automatic) policy = Policy::stage_streams;
  return {policy, depth == 0 ? default_depth : depth};
}

inline std::string Plan::describe(const Op& op) const {
  std::ostringstream s;
  s << to_string(op.kind);
  if (op.kind == OpKind::stage) s << ' ' << op.stage;
  s << " of chunk " << op.chunk << " (op #" << op.id << ", slot " << op.slot
    << ", queue " << queues.at(static_cast<std::size_t>(op.queue)).name << ')';
  return s.str();
}

inline PlanBuilder::PlanBuilder(Policy policy, int depth, PlanShape shape)
    : policy_(policy), depth_(depth), shape_(std::move(shape)) {
  if (policy_ == Policy::automatic) {
    throw config_error("chunkpipe: PlanBuilder needs a concrete policy; call resolve() first");
  }
  if (depth_ < 1) {
    throw config_error("chunkpipe: depth must be at least 1, got " + std::to_string(depth_));
  }
  if (policy_ == Policy::serial && depth_ != 1) {
    throw config_error("chunkpipe: the serial policy has exactly one slot; got depth " +
                       std::to_string(depth_));
  }
  if (shape_.stages < 1) {
    throw config_error("chunkpipe: a pipeline needs at least one stage");
  }
  if (shape_.in_place.empty()) shape_.in_place.assign(static_cast<std::size_t>(shape_.stages), false);
  if (shape_.in_place.size() != static_cast<std::size_t>(shape_.stages)) {
    throw config_error("chunkpipe: PlanShape::in_place has " +
                       std::to_string(shape_.in_place.size()) + " entries for " +
                       std::to_string(shape_.stages) + " stages");
  }

  // Buffers of one slot, in the order data passes through them.
  int pinned_in = -1;
  if (shape_.stage_in) {
    pinned_in = static_cast<int>(buffers_.size());
    buffers_.push_back("pinned in");
  }
  int current = static_cast<int>(buffers_.size());
  buffers_.push_back("device in");

  // Queues: streams first, host workers after.
  switch (policy_) {
    case Policy::serial: queues_.push_back({QueueKind::device, "stream"}); break;
    case Policy::slot_streams:
      for (int s = 0; s < depth_; ++s) queues_.push_back({QueueKind::device, "stream " + std::to_string(s)});
      break;
    case Policy::stage_streams:
      queues_.push_back({QueueKind::device, "h2d"});
      for (int i = 0; i < shape_.stages; ++i) queues_.push_back({QueueKind::device, "stage " + std::to_string(i)});
      queues_.push_back({QueueKind::device, "d2h"});
      break;
    case Policy::automatic: break;  // rejected above
  }
  if (shape_.stage_in) {
    host_in_queue_ = static_cast<int>(queues_.size());
    queues_.push_back({QueueKind::host, "host in"});
  }
  if (shape_.stage_out) {
    host_out_queue_ = static_cast<int>(queues_.size());
    queues_.push_back({QueueKind::host, "host out"});
  }

  // Steps. host_in runs depth - 1 chunks ahead so the host fills every free
  // pinned slot while the GPU works; any further ahead and it would wait on
  // an H2D that has not been issued yet.
  if (shape_.stage_in) {
    steps_.push_back({OpKind::host_in, -1, policy_ == Policy::serial ? 0 : depth_ - 1, {}, {pinned_in}});
  }
  {
    Step h2d{OpKind::h2d, -1, 0, {}, {current}};
    if (shape_.stage_in) h2d.reads.push_back(pinned_in);
    steps_.push_back(h2d);
  }
  for (int i = 0; i < shape_.stages; ++i) {
    int out = current;
    if (!shape_.in_place[static_cast<std::size_t>(i)]) {
      out = static_cast<int>(buffers_.size());
      buffers_.push_back("stage " + std::to_string(i) + " out");
    }
    steps_.push_back({OpKind::stage, i, 0, {current}, {out}});
    current = out;
  }
  {
    Step d2h{OpKind::d2h, -1, 0, {current}, {}};
    if (shape_.stage_out) {
      int pinned_out = static_cast<int>(buffers_.size());
      buffers_.push_back("pinned out");
      d2h.writes.push_back(pinned_out);
      steps_.push_back(d2h);
      steps_.push_back({OpKind::host_out, -1, 0, {pinned_out}, {}});
    } else {
      steps_.push_back(d2h);
    }
  }
  for (const Step& s : steps_) max_ahead_ = std::max(max_ahead_, s.ahead);

  state_.resize(static_cast<std::size_t>(depth_) * buffers_.size());
  recent_.assign(steps_.size(), std::vector<Access>(static_cast<std::size_t>(depth_)));
  // Every wait is a command the stream's front end must process before the
  // next copy or kernel. With a deep ring, one wait can free a batch of
  // slots at once: it is taken on the op that last used the batch's final
  // slot, which costs the ring batch - 1 chunks of slack. A quarter of the
  // ring, at most 8, keeps three quarters of the slack.
  // The batch divides the depth, so the ops waited for across laps are
  // exactly the last of each batch, and the rest need not signal.
  if (policy_ == Policy::stage_streams) {
    const auto d = static_cast<std::size_t>(depth_);
    for (std::size_t m = std::min<std::size_t>(d / 4, 8); m > 1; --m) {
      if (d % m == 0) {
        wait_batch_ = m;
        break;
      }
    }
  }
  // Which steps' accesses to a slot's buffers conflict (one writes what the
  // other reads or writes): only those are ever ordered by a wait.
  const std::size_t n_steps = steps_.size();
  conflicts_.assign(n_steps * n_steps, false);
  auto overlap = [](const std::vector<int>& a, const std::vector<int>& b) {
    for (int x : a) {
      if (std::find(b.begin(), b.end(), x) != b.end()) return true;
    }
    return false;
  };
  for (std::size_t a = 0; a < n_steps; ++a) {
    for (std::size_t b = 0; b < n_steps; ++b) {
      const Step& x = steps_[a];
      const Step& y = steps_[b];
      conflicts_[a * n_steps + b] = overlap(x.writes, y.reads) || overlap(x.writes, y.writes) || overlap(x.reads, y.writes);
    }
  }
  clocks_.assign(queues_.size(), std::vector<std::size_t>(queues_.size(), 0));
  queue_len_.assign(queues_.size(), 0);
}

inline int PlanBuilder::queue_of(const Step& step, std::size_t chunk) const {
  if (step.kind == OpKind::host_in) return host_in_queue_;
  if (step.kind == OpKind::host_out) return host_out_queue_;
  switch (policy_) {
    case Policy::slot_streams: return static_cast<int>(chunk % static_cast<std::size_t>(depth_));
    case Policy::stage_streams:
      if (step.kind == OpKind::h2d) return 0;
      if (step.kind == OpKind::stage) return 1 + step.stage;
      return 1 + shape_.stages;  // d2h
    default: return 0;
  }
}

// Whether a later op may have to wait for op (step, chunk) by its event.
// Waits only ever order conflicting accesses to one slot's buffers, and those
// come from two places: later steps of the same chunk, and the steps of the
// chunk that next uses the slot (chunk + depth). An op needs an event only if
// one of those runs on another queue; an op whose conflicts all share its
// stream (slot_streams, serial) is ordered by the stream alone. Host ops are
// waited for by queue position and always count. Across laps, device waiters
// on a batched ring wait only for the last chunk of a batch (see emit()).
inline bool PlanBuilder::needs_event(int step, std::size_t chunk) const {
  const auto s = static_cast<std::size_t>(step);
  const int q = queue_of(steps_[s], chunk);
  if (queues_[static_cast<std::size_t>(q)].kind == QueueKind::host) return true;
  const std::size_t n = steps_.size();
  for (std::size_t later = s + 1; later < n; ++later) {
    if (conflicts_[s * n + later] && queue_of(steps_[later], chunk) != q) return true;
  }
  const std::size_t next = chunk + static_cast<std::size_t>(depth_);
  const bool last_of_batch = wait_batch_ == 1 || chunk % wait_batch_ == wait_batch_ - 1;
  for (std::size_t other = 0; other < n; ++other) {
    if (!conflicts_[s * n + other]) continue;
    const int waiter = queue_of(steps_[other], next);
    if (waiter == q) continue;
    if (queues_[static_cast<std::size_t>(waiter)].kind == QueueKind::host || last_of_batch) return true;
  }
  return false;
}

inline bool PlanBuilder::next_tick(std::size_t chunk_limit, std::vector<Op>& out) {
  if (tick_ >= chunk_limit) return false;
  for (std::size_t s = 0; s < steps_.size(); ++s) {
    const std::size_t chunk = tick_ + static_cast<std::size_t>(steps_[s].ahead);
    // An ahead step issues chunks 0..ahead-1 of its own at tick 0, so the
    // ring starts full.
    if (tick_ == 0) {
      for (std::size_t c = 0; c < chunk && c < chunk_limit; ++c) emit(static_cast<int>(s), c, out);
    }
    if (chunk < chunk_limit) emit(static_cast<int>(s), chunk, out);
  }
  ++tick_;
  return true;
}

inline void PlanBuilder::emit(int step_index, std::size_t chunk, std::vector<Op>& out) {
  const Step& step = steps_[static_cast<std::size_t>(step_index)];
  Op op;
  op.id = next_id_++;
  op.chunk = chunk;
  op.step = step_index;
  op.kind = step.kind;
  op.stage = step.stage;
  op.slot = static_cast<int>(chunk % static_cast<std::size_t>(depth_));
  op.queue = queue_of(step, chunk);

  const auto q = static_cast<std::size_t>(op.queue);
  const std::size_t pos = ++queue_len_[q];
  std::vector<std::size_t> clock = clocks_[q];  // everything before it on its queue
  clock[q] = pos;

  // Every earlier access this one conflicts with: the last writer of each
  // buffer it touches, and for buffers it writes, every reader since then.
  std::vector<const Access*> before;
  const std::size_t base = static_cast<std::size_t>(op.slot) * buffers_.size();
  auto touch = [&](int buffer, bool writes) {
    const BufferState& b = state_[base + static_cast<std::size_t>(buffer)];
    if (b.has_writer) before.push_back(&b.writer);
    if (writes) {
      for (const Access& r : b.readers) before.push_back(&r);
    }
  };
  for (int b : step.reads) touch(b, false);
  for (int b : step.writes) touch(b, true);

  // Latest first: waiting on it often implies the earlier ones.
  std::sort(before.begin(), before.end(), [](const Access* a, const Access* b) { return a->op > b->op; });
  const bool on_device = queues_[q].kind == QueueKind::device;
  for (const Access* a : before) {
    if (clock[static_cast<std::size_t>(a->queue)] >= a->pos) continue;  // already ordered
    // Batched slot reuse: the first chunk of each batch of wait_batch_
    // waits for the same step of a later chunk of the previous lap, on the
    // same stream, which orders the whole batch's reuse at once; the rest
    // of the batch then finds its waits already implied.
    if (on_device && wait_batch_ > 1 && a->chunk < chunk && chunk % wait_batch_ == 0 &&
        queues_[static_cast<std::size_t>(a->queue)].kind == QueueKind::device) {
      const std::size_t target = std::min(a->chunk + wait_batch_ - 1, chunk - 1);
      const Access& later = recent_[static_cast<std::size_t>(a->step)][target % static_cast<std::size_t>(depth_)];
      if (target > a->chunk && later.chunk == target && later.queue == a->queue && later.op > a->op) a = &later;
    }
    if (!a->signal) {
      throw std::logic_error("chunkpipe: internal error: op #" + std::to_string(op.id) + " must wait for op #" +
                             std::to_string(a->op) + ", which records no event");
    }
    op.waits.push_back(a->op);
    for (std::size_t i = 0; i < clock.size(); ++i) clock[i] = std::max(clock[i], a->clock[i]);
  }
  std::sort(op.waits.begin(), op.waits.end());

  op.signal = needs_event(step_index, chunk);
  const Access self{op.id, op.queue, pos, clock, chunk, step_index, op.signal};
  recent_[static_cast<std::size_t>(step_index)][chunk % static_cast<std::size_t>(depth_)] = self;
  for (int b : step.reads) state_[base + static_cast<std::size_t>(b)].readers.push_back(self);
  for (int b : step.writes) {
    BufferState& s = state_[base + static_cast<std::size_t>(b)];
    s.has_writer = true;
    s.writer = self;
    s.readers.clear();
  }
  clocks_[q] = std::move(clock);
  out.push_back(std::move(op));
}

inline Plan make_plan(Policy policy, int depth, const PlanShape& shape, std::size_t chunks) {
  PlanBuilder builder(policy, depth, shape);
  Plan plan;
  plan.policy = builder.policy();
  plan.depth = builder.depth();
  plan.shape = builder.shape();
  plan.chunks = chunks;
  plan.queues = builder.queues();
  plan.steps = builder.steps();
  plan.buffers = builder.buffers();
  while (builder.next_tick(chunks, plan.ops)) {
  }
  return plan;
}

inline std::ostream& operator<<(std::ostream& os, const Plan& plan) {
  os << "plan: " << to_string(plan.policy) << ", depth " << plan.depth << ", " << plan.chunks
     << (plan.chunks == 1 ? " chunk" : " chunks") << ", queues:";
  for (const Queue& q : plan.queues) os << ' ' << (q.kind == QueueKind::host ? "[host] " : "") << q.name << ';';
  os << "\n   #  chunk  op        slot  queue       waits for\n";
  for (const Op& op : plan.ops) {
    std::string kind(to_string(op.kind));
    if (op.kind == OpKind::stage) kind += ' ' + std::to_string(op.stage);
    os << std::setw(4) << op.id << "  " << std::setw(5) << op.chunk << "  " << std::left << std::setw(9)
       << kind << ' ' << std::right << std::setw(4) << op.slot << "  " << std::left << std::setw(11)
       << plan.queues[static_cast<std::size_t>(op.queue)].name << std::right << ' ';
    if (op.waits.empty()) os << '-';
    for (std::size_t i = 0; i < op.waits.size(); ++i) os << (i ? ", #" : "#") << op.waits[i];
    os << '\n';
  }
  return os;
}

}  // namespace chunkpipe
