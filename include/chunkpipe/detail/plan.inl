// SPDX-License-Identifier: MIT
// Definitions for plan.hpp. Included at its bottom where chunkpipe is
// header-only, or once by <chunkpipe/compiled.hpp> (detail/linkage.hpp); do
// not include directly.
#pragma once

#include <algorithm>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace chunkpipe {

CHUNKPIPE_INLINE std::string_view to_string(Policy policy) noexcept {
  switch (policy) {
    case Policy::serial: return "serial";
    case Policy::slot_streams: return "slot_streams";
    case Policy::stage_streams: return "stage_streams";
    case Policy::automatic: return "auto";
  }
  return "?";
}

CHUNKPIPE_INLINE std::string_view to_string(OpKind kind) noexcept {
  switch (kind) {
    case OpKind::host_in: return "host-in";
    case OpKind::h2d: return "h2d";
    case OpKind::stage: return "stage";
    case OpKind::d2h: return "d2h";
    case OpKind::host_out: return "host-out";
  }
  return "?";
}

CHUNKPIPE_INLINE std::string_view to_string(Executor executor) noexcept {
  switch (executor) {
    case Executor::automatic: return "auto";
    case Executor::streams: return "streams";
    case Executor::graphs: return "graphs";
  }
  return "?";
}

CHUNKPIPE_INLINE Executor parse_executor(std::string_view text) {
  if (text == "streams") return Executor::streams;
  if (text == "graphs") return Executor::graphs;
  if (text == "auto" || text == "automatic") return Executor::automatic;
  throw config_error("chunkpipe: unknown executor '" + std::string(text) + "' (expected streams, graphs or auto)");
}

CHUNKPIPE_INLINE Policy parse_policy(std::string_view text) {
  if (text == "serial") return Policy::serial;
  if (text == "slot_streams") return Policy::slot_streams;
  if (text == "stage_streams") return Policy::stage_streams;
  if (text == "auto" || text == "automatic") return Policy::automatic;
  throw config_error("chunkpipe: unknown policy '" + std::string(text) +
                     "' (expected serial, slot_streams, stage_streams or auto)");
}

CHUNKPIPE_INLINE Resolved resolve(Policy policy, int depth) {
  if (depth < 0) {
    throw config_error("chunkpipe: depth must be at least 1 (0 picks the default), got " +
                       std::to_string(depth));
  }
  if (policy == Policy::serial) return {Policy::serial, 1};
  if (policy == Policy::automatic) policy = Policy::stage_streams;
  return {policy, depth == 0 ? default_depth : depth};
}

CHUNKPIPE_INLINE std::string Plan::describe(const Op& op) const {
  std::ostringstream s;
  s << to_string(op.kind);
  if (op.kind == OpKind::stage) s << ' ' << op.stage;
  s << " of chunk " << op.chunk << " (op #" << op.id << ", slot " << op.slot
    << ", queue " << queues.at(static_cast<std::size_t>(op.queue)).name << ')';
  return s.str();
}

CHUNKPIPE_INLINE PlanBuilder::PlanBuilder(Policy policy, int depth, PlanShape shape)
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
  if (shape_.carries.empty()) shape_.carries.assign(static_cast<std::size_t>(shape_.stages), false);
  if (shape_.carries.size() != static_cast<std::size_t>(shape_.stages)) {
    throw config_error("chunkpipe: PlanShape::carries has " + std::to_string(shape_.carries.size()) +
                       " entries for " + std::to_string(shape_.stages) + " stages");
  }
  if (shape_.kernel_lanes < 1) {
    throw config_error("chunkpipe: PlanShape::kernel_lanes must be at least 1, got " +
                       std::to_string(shape_.kernel_lanes));
  }
  lanes_ = policy_ == Policy::stage_streams ? shape_.kernel_lanes : 1;
  run_lanes_ = lanes_;
  const bool mixed = shape_.per_run_staging;
  const bool can_stage_in = mixed || shape_.stage_in;
  if (shape_.variable_out) shape_.stage_out = true;  // only a host-out op knows what to copy
  const bool can_stage_out = mixed || shape_.stage_out;

  // Buffers of one slot, in the order data passes through them.
  int pinned_in = -1;
  if (can_stage_in) {
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
      for (int i = 0; i < shape_.stages; ++i) {
        for (int l = 0; l < lanes_; ++l) {
          queues_.push_back({QueueKind::device, "stage " + std::to_string(i) +
                                                    (lanes_ > 1 ? " lane " + std::to_string(l) : std::string())});
        }
      }
      queues_.push_back({QueueKind::device, "d2h"});
      break;
    case Policy::automatic: break;  // rejected above
  }
  if (can_stage_in) {
    host_in_queue_ = static_cast<int>(queues_.size());
    queues_.push_back({QueueKind::host, "host in"});
  }
  if (can_stage_out) {
    host_out_queue_ = static_cast<int>(queues_.size());
    queues_.push_back({QueueKind::host, "host out"});
  }

  // Steps, in issue order within a tick. Host-in runs depth - 1 chunks
  // ahead so the host fills every free pinned slot while the GPU works; any
  // further ahead and it would wait on an H2D that has not been issued yet.
  // A copy that a run may make directly or through a pinned slot has a step
  // for each form; the two share a family (same queue, same slot buffers
  // on the device side).
  const int families_before_stages = 2;  // host-in, h2d
  const int fam_d2h = families_before_stages + shape_.stages;
  const int fam_host_out = fam_d2h + 1;
  auto add = [&](Step step, int family) {
    steps_.push_back(std::move(step));
    family_.push_back(family);
  };
  if (can_stage_in) {
    add({OpKind::host_in, -1, policy_ == Policy::serial ? 0 : depth_ - 1, {}, {pinned_in}, true}, 0);
    add({OpKind::h2d, -1, 0, {pinned_in}, {current}, true}, 1);
  }
  if (!can_stage_in || mixed) add({OpKind::h2d, -1, 0, {}, {current}, false}, 1);
  std::vector<int> carry_buffers;
  for (int i = 0; i < shape_.stages; ++i) {
    int out = current;
    if (!shape_.in_place[static_cast<std::size_t>(i)]) {
      out = static_cast<int>(buffers_.size());
      buffers_.push_back("stage " + std::to_string(i) + " out");
    }
    Step st{OpKind::stage, i, 0, {current}, {out}, false};
    if (shape_.carries[static_cast<std::size_t>(i)]) {
      // After the slot buffers, so reads[0] and writes[0] stay the data.
      const int carry = static_cast<int>(buffers_.size());
      buffers_.push_back("stage " + std::to_string(i) + " carry");
      carry_buffers.push_back(carry);
      st.reads.push_back(carry);
      st.writes.push_back(carry);
    }
    add(std::move(st), families_before_stages + i);
    current = out;
  }
  if (can_stage_out) {
    const int pinned_out = static_cast<int>(buffers_.size());
    buffers_.push_back("pinned out");
    add({OpKind::d2h, -1, 0, {current}, {pinned_out}, true}, fam_d2h);
    if (mixed && !shape_.variable_out) add({OpKind::d2h, -1, 0, {current}, {}, false}, fam_d2h);
    if (shape_.variable_out) {
      add({OpKind::host_out, -1, 0, {pinned_out, current}, {}, true}, fam_host_out);
    } else {
      add({OpKind::host_out, -1, 0, {pinned_out}, {}, true}, fam_host_out);
    }
  } else {
    add({OpKind::d2h, -1, 0, {current}, {}, false}, fam_d2h);
  }
  for (const Step& s : steps_) max_ahead_ = std::max(max_ahead_, s.ahead);

  // The steps each kind of run uses: variant = stage_in | stage_out << 1.
  for (int v = 0; v < 4; ++v) {
    const bool in = (v & 1) != 0, out = (v & 2) != 0;
    variant_ok_[v] = (mixed || (in == shape_.stage_in && out == shape_.stage_out)) && (out || !shape_.variable_out);
    if (!variant_ok_[v]) continue;
    for (std::size_t s = 0; s < steps_.size(); ++s) {
      const Step& st = steps_[s];
      bool use = true;
      if (st.kind == OpKind::host_in) use = in;
      if (st.kind == OpKind::h2d) use = st.staged == in;
      if (st.kind == OpKind::d2h) use = st.staged == out;
      if (st.kind == OpKind::host_out) use = out;
      if (use) active_[v].push_back(static_cast<int>(s));
    }
  }

  ring_wide_.assign(buffers_.size(), false);
  step_carries_.assign(steps_.size(), false);
  for (int b : carry_buffers) ring_wide_[static_cast<std::size_t>(b)] = true;
  for (std::size_t s = 0; s < steps_.size(); ++s) {
    for (int b : steps_[s].writes) step_carries_[s] = step_carries_[s] || ring_wide_[static_cast<std::size_t>(b)];
  }
  state_.resize(static_cast<std::size_t>(depth_) * buffers_.size());
  recent_.assign(static_cast<std::size_t>(fam_host_out + 1), std::vector<Access>(static_cast<std::size_t>(depth_)));
  // Every wait is a command the stream's front end must process before the
  // next copy or kernel. With a deep ring, one wait can free a batch of
  // slots at once: it is taken on the op that last used the batch's final
  // slot, which costs the ring batch - 1 chunks of slack. A quarter of the
  // ring, at most 8, keeps three quarters of the slack.
  // The batch divides the depth, so the ops waited for across laps are
  // exactly the last of each batch, and the rest need not signal.
  // Not with kernel lanes: a batch's stage ops are then on several
  // streams, so the batch's last one does not imply the others, and those
  // record no event to wait for.
  if (policy_ == Policy::stage_streams && lanes_ == 1) {
    const auto d = static_cast<std::size_t>(depth_);
    for (std::size_t m = std::min<std::size_t>(d / 4, 8); m > 1; --m) {
      if (d % m == 0) {
        wait_batch_ = m;
        break;
      }
    }
  }
  // Waits reach back at most depth chunks plus how far host-in runs ahead
  // (and a run that ended early skips at most that many); a multiple of the
  // depth keeps each of an executor's entries on one slot, so one queue.
  {
    const auto d = static_cast<std::size_t>(depth_);
    const std::size_t r = d + static_cast<std::size_t>(max_ahead_) + 2;
    reach_ = d * ((r + d - 1) / d);
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
  run_tail_.assign(queues_.size(), Access{});
  clock_.assign(queues_.size(), 0);
}

CHUNKPIPE_INLINE int PlanBuilder::queue_of(const Step& step, std::size_t chunk) const {
  if (step.kind == OpKind::host_in) return host_in_queue_;
  if (step.kind == OpKind::host_out) return host_out_queue_;
  switch (policy_) {
    case Policy::slot_streams: return static_cast<int>(chunk % static_cast<std::size_t>(depth_));
    case Policy::stage_streams:
      if (step.kind == OpKind::h2d) return 0;
      if (step.kind == OpKind::stage) {
        return 1 + step.stage * lanes_ + static_cast<int>(chunk % static_cast<std::size_t>(run_lanes_));
      }
      return 1 + shape_.stages * lanes_;  // d2h
    default: return 0;
  }
}

// Whether a later op may have to wait for op (step, chunk) by its event.
// Waits only ever order conflicting accesses to one slot's buffers, and those
// come from two places: later steps of the same chunk, and the steps of the
// chunk that next uses the slot (chunk + depth, in whichever run, so any
// step of the table). An op needs an event only if one of those runs on
// another queue; an op whose conflicts all share its stream (slot_streams,
// serial) is ordered by the stream alone. Host ops are waited for by queue
// position and always count. Across laps, device waiters on a batched ring
// wait only for the last chunk of a batch (see emit()), or for the last
// chunk of a run cut short, whose batch the next run will not fill.
CHUNKPIPE_INLINE bool PlanBuilder::needs_event(int step, std::size_t chunk) const {
  const auto s = static_cast<std::size_t>(step);
  const int q = queue_of(steps_[s], chunk);
  if (queues_[static_cast<std::size_t>(q)].kind == QueueKind::host) return true;
  const std::size_t n = steps_.size();
  const std::vector<int>& used = active();
  bool after = false;
  for (int later : used) {
    if (later == step) {
      after = true;
      continue;
    }
    const auto l = static_cast<std::size_t>(later);
    if (after && conflicts_[s * n + l] && queue_of(steps_[l], chunk) != q) return true;
  }
  // A carrying step's next op is the next chunk's, on whichever queue that
  // chunk's op of the step goes (a later run may take other lanes).
  if (step_carries_[s] && (queue_of(steps_[s], chunk + 1) != q || (shape_.lanes_vary && lanes_ > 1))) return true;
  const std::size_t next = chunk + static_cast<std::size_t>(depth_);
  const bool cut_last = truncated_ && chunk + 1 == run_base_ + run_chunks_;
  const bool last_of_batch = wait_batch_ == 1 || chunk % wait_batch_ == wait_batch_ - 1 || cut_last;
  for (std::size_t other = 0; other < n; ++other) {
    if (!conflicts_[s * n + other]) continue;
    const int waiter = queue_of(steps_[other], next);
    // The next lap may belong to a later run with other lanes
    // (RunSpec::kernel_lanes): a stage op there may be on any lane of its
    // stage, so only one lane of its own could do without the event.
    const bool other_lanes = shape_.lanes_vary && lanes_ > 1 && steps_[other].kind == OpKind::stage;
    if (waiter == q && !other_lanes) continue;
    if (queues_[static_cast<std::size_t>(waiter)].kind == QueueKind::host || last_of_batch) return true;
  }
  return false;
}

CHUNKPIPE_INLINE void PlanBuilder::begin_run(const RunSpec& spec) {
  if (run_open_) throw std::logic_error("chunkpipe: PlanBuilder::begin_run: a run is already open");
  const int v = (spec.stage_in ? 1 : 0) | (spec.stage_out ? 2 : 0);
  if (!variant_ok_[v] && shape_.variable_out && !spec.stage_out) {
    throw config_error("chunkpipe: the last stage emits a count the device decides, so every run must stage "
                       "outputs (RunSpec::stage_out)");
  }
  if (!variant_ok_[v]) {
    throw config_error(std::string("chunkpipe: this schedule was built for runs that ") +
                       (shape_.stage_in ? "stage" : "do not stage") + " inputs and " +
                       (shape_.stage_out ? "stage" : "do not stage") +
                       " outputs; set PlanShape::per_run_staging to mix them");
  }
  // After a run that ended early, host-in ops were issued for chunks it
  // never reached; the next run starts past them, at the start of a batch,
  // so batched waits find each batch whole.
  std::size_t base = next_chunk_;
  if (skipped_ && wait_batch_ > 1) base = (base + wait_batch_ - 1) / wait_batch_ * wait_batch_;
  if (spec.kernel_lanes < 0 || spec.kernel_lanes > lanes_) {
    throw config_error("chunkpipe: RunSpec::kernel_lanes " + std::to_string(spec.kernel_lanes) +
                       " is more lanes than this schedule has (" + std::to_string(lanes_) + "; 0 takes them all)");
  }
  if (!shape_.lanes_vary && spec.kernel_lanes != 0 && spec.kernel_lanes != lanes_) {
    throw config_error("chunkpipe: RunSpec::kernel_lanes " + std::to_string(spec.kernel_lanes) +
                       " differs from the schedule's " + std::to_string(lanes_) +
                       ", and its shape does not let runs' lanes vary (PlanShape::lanes_vary)");
  }
  run_lanes_ = spec.kernel_lanes == 0 ? lanes_ : spec.kernel_lanes;
  run_open_ = true;
  variant_ = v;
  spec_ = spec;
  run_base_ = base;
  next_chunk_ = base;
  run_chunks_ = spec.chunks;
  truncated_ = false;
  tick_ = 0;
  tick_open_ = false;
  run_first_op_ = next_id_;
  skipped_ = false;
  for (Access& a : run_tail_) a.valid = false;
}

CHUNKPIPE_INLINE void PlanBuilder::set_run_chunks(std::size_t chunks) {
  if (!run_open_) throw std::logic_error("chunkpipe: PlanBuilder::set_run_chunks: no run is open");
  if (chunks == run_chunks_) return;
  if (chunks > run_chunks_) {
    throw std::logic_error("chunkpipe: PlanBuilder::set_run_chunks: a run cannot grow (" +
                           std::to_string(run_chunks_) + " chunks, asked for " + std::to_string(chunks) + ")");
  }
  if (chunks < tick_ + 1) {
    throw std::logic_error("chunkpipe: PlanBuilder::set_run_chunks: " + std::to_string(chunks) +
                           " chunks, but tick " + std::to_string(tick_) + " is already under way");
  }
  run_chunks_ = chunks;
  truncated_ = true;
}

CHUNKPIPE_INLINE void PlanBuilder::emit_chunk_steps(bool ahead, std::size_t tick, OpBatch& out) {
  // The first half of a tick is host-in, whose chunk a Source fills before
  // anything else of that chunk can be sized; the second half the rest.
  for (int s : active()) {
    const Step& st = steps_[static_cast<std::size_t>(s)];
    const int a = st.ahead;
    if ((st.kind == OpKind::host_in) != ahead) continue;
    const std::size_t chunk = tick + static_cast<std::size_t>(a);
    // An ahead step issues chunks 0..ahead-1 of its own at tick 0, so the
    // ring starts full.
    if (a > 0 && tick == 0) {
      for (std::size_t c = 0; c < chunk && c < run_chunks_; ++c) emit(s, c, out);
    }
    if (chunk < run_chunks_) emit(s, chunk, out);
  }
}

CHUNKPIPE_INLINE bool PlanBuilder::begin_tick(OpBatch& out) {
  if (!run_open_) throw std::logic_error("chunkpipe: PlanBuilder::begin_tick: no run is open");
  if (tick_open_) throw std::logic_error("chunkpipe: PlanBuilder::begin_tick: the last tick is not finished");
  if (tick_ >= run_chunks_) return false;
  emit_chunk_steps(true, tick_, out);
  tick_open_ = true;
  return true;
}

CHUNKPIPE_INLINE void PlanBuilder::finish_tick(OpBatch& out) {
  if (!tick_open_) throw std::logic_error("chunkpipe: PlanBuilder::finish_tick: no tick is open");
  emit_chunk_steps(false, tick_, out);
  ++tick_;
  tick_open_ = false;
}

CHUNKPIPE_INLINE bool PlanBuilder::next_tick(OpBatch& out) {
  if (!begin_tick(out)) return false;
  finish_tick(out);
  return true;
}

CHUNKPIPE_INLINE bool PlanBuilder::next_tick(std::size_t chunk_limit, std::vector<Op>& out) {
  if (!run_open_) begin_run(RunSpec{unknown_chunks, shape_.stage_in, shape_.stage_out, 0});
  if (chunk_limit <= tick_) return false;
  if (chunk_limit < run_chunks_) set_run_chunks(chunk_limit);
  compat_.clear();
  const bool more = next_tick(compat_);
  out.insert(out.end(), compat_.begin(), compat_.end());
  return more;
}

CHUNKPIPE_INLINE PlanRun PlanBuilder::end_run() {
  if (!run_open_) throw std::logic_error("chunkpipe: PlanBuilder::end_run: no run is open");
  if (tick_open_ || tick_ < run_chunks_) {
    throw std::logic_error("chunkpipe: PlanBuilder::end_run: the run has ticks left");
  }
  PlanRun r;
  r.first_chunk = run_base_;
  r.chunks = run_chunks_;
  r.first_op = run_first_op_;
  r.ops = next_id_ - run_first_op_;
  r.stage_in = (variant_ & 1) != 0;
  r.stage_out = (variant_ & 2) != 0;
  r.elems = spec_.elems;
  r.kernel_lanes = run_lanes_;
  // The run's last op on each queue, less those another such op waits for
  // (directly or not): what is left implies every op of the run.
  for (std::size_t q = 0; q < run_tail_.size(); ++q) {
    const Access& t = run_tail_[q];
    if (!t.valid) continue;
    bool implied = false;
    for (std::size_t o = 0; o < run_tail_.size() && !implied; ++o) {
      implied = o != q && run_tail_[o].valid && run_tail_[o].clock[q] >= t.pos;
    }
    if (!implied) r.tail.push_back(t.op);
  }
  std::sort(r.tail.begin(), r.tail.end());
  skipped_ = next_chunk_ > run_base_ + run_chunks_;
  run_open_ = false;
  return r;
}

CHUNKPIPE_INLINE void PlanBuilder::emit(int step_index, std::size_t run_chunk, OpBatch& out) {
  const Step& step = steps_[static_cast<std::size_t>(step_index)];
  const std::size_t chunk = run_base_ + run_chunk;
  const auto d = static_cast<std::size_t>(depth_);
  Op& op = out.add();
  op.id = next_id_++;
  op.chunk = chunk;
  op.step = step_index;
  op.kind = step.kind;
  op.stage = step.stage;
  op.slot = static_cast<int>(chunk % d);
  op.queue = queue_of(step, chunk);
  next_chunk_ = std::max(next_chunk_, chunk + 1);

  const auto q = static_cast<std::size_t>(op.queue);
  const std::size_t pos = ++queue_len_[q];
  clock_ = clocks_[q];  // everything before it on its queue
  clock_[q] = pos;

  // Every earlier access this one conflicts with: the last writer of each
  // buffer it touches, and for buffers it writes, every reader since then.
  before_.clear();
  const std::size_t base = static_cast<std::size_t>(op.slot) * buffers_.size();
  // A ring-wide buffer (a carry) has one state, slot 0's.
  auto at = [&](int buffer) {
    const auto b = static_cast<std::size_t>(buffer);
    return ring_wide_[b] ? b : base + b;
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
  std::sort(before_.begin(), before_.end(), [](const Access* a, const Access* b) { return a->op > b->op; });
  const bool on_device = queues_[q].kind == QueueKind::device;
  for (const Access* a : before_) {
    if (clock_[static_cast<std::size_t>(a->queue)] >= a->pos) continue;  // already ordered
    // Batched slot reuse: the first chunk of each batch of wait_batch_
    // waits for the same kind of op of the latest chunk of the previous
    // lap's batch, on the same stream, which orders the whole batch's reuse
    // at once; the rest of the batch then finds its waits already implied.
    if (on_device && wait_batch_ > 1 && a->chunk < chunk && chunk % wait_batch_ == 0 &&
        queues_[static_cast<std::size_t>(a->queue)].kind == QueueKind::device) {
      const auto fam = static_cast<std::size_t>(family_[static_cast<std::size_t>(a->step)]);
      for (std::size_t target = std::min(a->chunk + wait_batch_ - 1, chunk - 1); target > a->chunk; --target) {
        const Access& later = recent_[fam][target % d];
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

  op.signal = needs_event(step_index, chunk);
  self_.op = op.id;
  self_.queue = op.queue;
  self_.pos = pos;
  self_.clock = clock_;
  self_.chunk = chunk;
  self_.step = step_index;
  self_.signal = op.signal;
  self_.valid = true;
  recent_[static_cast<std::size_t>(family_[static_cast<std::size_t>(step_index)])][chunk % d] = self_;
  run_tail_[q] = self_;
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
}

namespace detail {

CHUNKPIPE_INLINE Plan plan_header(const PlanBuilder& builder) {
  Plan plan;
  plan.policy = builder.policy();
  plan.depth = builder.depth();
  plan.shape = builder.shape();
  plan.queues = builder.queues();
  plan.steps = builder.steps();
  plan.buffers = builder.buffers();
  plan.ring_wide = builder.ring_wide();
  return plan;
}

/// A schedule's ops and runs, as issued through `builder`, as a Plan (what
/// check_hazards() and simulate() take). Chunks: the highest op's + 1.
CHUNKPIPE_INLINE Plan issued_plan(const PlanBuilder& builder, std::vector<Op> ops, std::vector<PlanRun> runs) {
  Plan plan = ::chunkpipe::detail::plan_header(builder);
  plan.ops = std::move(ops);
  plan.runs = std::move(runs);
  for (const Op& op : plan.ops) plan.chunks = std::max(plan.chunks, op.chunk + 1);
  return plan;
}

CHUNKPIPE_INLINE void plan_run(PlanBuilder& builder, const RunSpec& spec, Plan& plan) {
  builder.begin_run(spec);
  OpBatch batch;
  while (builder.next_tick(batch)) {
    plan.ops.insert(plan.ops.end(), batch.begin(), batch.end());
    batch.clear();
  }
  plan.runs.push_back(builder.end_run());
}

}  // namespace detail

CHUNKPIPE_INLINE Plan make_plan(Policy policy, int depth, const PlanShape& shape, std::size_t chunks) {
  PlanBuilder builder(policy, depth, shape);
  Plan plan = detail::plan_header(builder);
  detail::plan_run(builder, RunSpec{chunks, shape.stage_in, shape.stage_out || shape.variable_out, 0}, plan);
  plan.chunks = chunks;
  return plan;
}

CHUNKPIPE_INLINE Plan make_plan(Policy policy, int depth, const PlanShape& shape, const std::vector<RunSpec>& runs) {
  PlanBuilder builder(policy, depth, shape);
  Plan plan = detail::plan_header(builder);
  for (const RunSpec& spec : runs) {
    if (spec.chunks == unknown_chunks) {
      throw config_error("chunkpipe: make_plan: every run needs a known chunk count");
    }
    detail::plan_run(builder, spec, plan);
  }
  for (const Op& op : plan.ops) plan.chunks = std::max(plan.chunks, op.chunk + 1);
  return plan;
}

CHUNKPIPE_INLINE PlanGraph graph_of(const Plan& plan) {
  const std::size_t n = plan.ops.size();
  PlanGraph graph;
  graph.deps.resize(n);
  std::vector<std::size_t> last(plan.queues.size(), n);  // per queue: its latest op so far, n = none
  for (std::size_t i = 0; i < n; ++i) {
    const Op& op = plan.ops[i];
    auto malformed = [&](const std::string& why) {
      throw std::invalid_argument("chunkpipe: graph_of: op #" + std::to_string(i) + ": " + why);
    };
    if (op.id != i) malformed("id is " + std::to_string(op.id) + ", expected its position");
    if (op.queue < 0 || static_cast<std::size_t>(op.queue) >= last.size()) malformed("queue out of range");
    std::vector<std::size_t>& deps = graph.deps[i];
    deps.reserve(op.waits.size() + 1);
    for (std::size_t w : op.waits) {
      if (w >= i) malformed("waits for op #" + std::to_string(w) + ", which is not issued before it");
      deps.push_back(w);
    }
    // A graph has no stream to keep issue order, and planners leave out
    // every wait that order already implies: the queue edge stands in for
    // all of them.
    std::size_t& prev = last[static_cast<std::size_t>(op.queue)];
    if (prev != n) deps.push_back(prev);
    prev = i;
    std::sort(deps.begin(), deps.end());
    deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
  }
  return graph;
}

CHUNKPIPE_INLINE std::ostream& operator<<(std::ostream& os, const Plan& plan) {
  os << "plan: " << to_string(plan.policy) << ", depth " << plan.depth << ", " << plan.chunks
     << (plan.chunks == 1 ? " chunk" : " chunks") << ", queues:";
  for (const Queue& q : plan.queues) os << ' ' << (q.kind == QueueKind::host ? "[host] " : "") << q.name << ';';
  os << "\n   #  chunk  op        slot  queue       waits for\n";
  std::size_t next_run = plan.runs.size() > 1 ? 0 : plan.runs.size();
  for (const Op& op : plan.ops) {
    if (next_run < plan.runs.size() && plan.runs[next_run].first_op == op.id) {
      const PlanRun& r = plan.runs[next_run];
      os << "  -- run " << next_run << ": ";
      if (r.chunks == 0) {
        os << "no chunks";
      } else {
        os << "chunks " << r.first_chunk << " to " << r.first_chunk + r.chunks - 1;
      }
      os
         << (r.stage_in ? ", staged in" : "") << (r.stage_out ? ", staged out" : "") << '\n';
      ++next_run;
    }
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
