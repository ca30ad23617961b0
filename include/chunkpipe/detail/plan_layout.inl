// SPDX-License-Identifier: MIT
// Definitions for detail/plan_layout.hpp. Included at its bottom where
// chunkpipe is header-only, or once by <chunkpipe/compiled.hpp>
// (detail/linkage.hpp); do not include directly.
#pragma once

#include <algorithm>
#include <string>
#include <utility>

namespace chunkpipe::detail {

CHUNKPIPE_INLINE StepTable make_step_table(Policy policy, int depth, const PlanShape& shape) {
  StepTable t;
  const bool mixed = shape.per_run_staging;
  const bool can_stage_in = mixed || shape.stage_in;
  const bool can_stage_out = mixed || shape.stage_out;

  // Buffers of one slot, in the order data passes through them.
  int pinned_in = -1;
  if (can_stage_in) {
    pinned_in = static_cast<int>(t.buffers.size());
    t.buffers.push_back("pinned in");
  }
  int current = static_cast<int>(t.buffers.size());
  t.buffers.push_back("device in");

  // Steps, in issue order within a tick. Host-in runs depth - 1 chunks
  // ahead so the host fills every free pinned slot while the GPU works; any
  // further ahead and it would wait on an H2D that has not been issued yet.
  // A copy that a run may make directly or through a pinned slot has a step
  // for each form; the two share a family (same queue, same slot buffers
  // on the device side).
  const int families_before_stages = 2;  // host-in, h2d
  const int fam_d2h = families_before_stages + shape.stages;
  const int fam_host_out = fam_d2h + 1;
  t.families = fam_host_out + 1;
  auto add = [&](Step step, int family) {
    t.steps.push_back(std::move(step));
    t.family.push_back(family);
  };
  if (can_stage_in) {
    add({OpKind::host_in, -1, policy == Policy::serial ? 0 : depth - 1, {}, {pinned_in}, true}, 0);
    add({OpKind::h2d, -1, 0, {pinned_in}, {current}, true}, 1);
  }
  if (!can_stage_in || mixed) add({OpKind::h2d, -1, 0, {}, {current}, false}, 1);
  std::vector<int> carry_buffers;
  for (int i = 0; i < shape.stages; ++i) {
    int out = current;
    if (!shape.in_place[static_cast<std::size_t>(i)]) {
      out = static_cast<int>(t.buffers.size());
      t.buffers.push_back("stage " + std::to_string(i) + " out");
    }
    Step st{OpKind::stage, i, 0, {current}, {out}, false};
    if (shape.carries[static_cast<std::size_t>(i)]) {
      // After the slot buffers, so reads[0] and writes[0] stay the data.
      const int carry = static_cast<int>(t.buffers.size());
      t.buffers.push_back("stage " + std::to_string(i) + " carry");
      carry_buffers.push_back(carry);
      st.reads.push_back(carry);
      st.writes.push_back(carry);
    }
    add(std::move(st), families_before_stages + i);
    current = out;
  }
  if (can_stage_out) {
    const int pinned_out = static_cast<int>(t.buffers.size());
    t.buffers.push_back("pinned out");
    add({OpKind::d2h, -1, 0, {current}, {pinned_out}, true}, fam_d2h);
    if (mixed && !shape.variable_out) add({OpKind::d2h, -1, 0, {current}, {}, false}, fam_d2h);
    if (shape.variable_out) {
      add({OpKind::host_out, -1, 0, {pinned_out, current}, {}, true}, fam_host_out);
    } else {
      add({OpKind::host_out, -1, 0, {pinned_out}, {}, true}, fam_host_out);
    }
  } else {
    add({OpKind::d2h, -1, 0, {current}, {}, false}, fam_d2h);
  }
  for (const Step& s : t.steps) t.max_ahead = std::max(t.max_ahead, s.ahead);

  // The steps each kind of run uses: variant = stage_in | stage_out << 1.
  for (int v = 0; v < 4; ++v) {
    const bool in = (v & 1) != 0, out = (v & 2) != 0;
    t.variant_ok[v] = (mixed || (in == shape.stage_in && out == shape.stage_out)) && (out || !shape.variable_out);
    if (!t.variant_ok[v]) continue;
    for (std::size_t s = 0; s < t.steps.size(); ++s) {
      const Step& st = t.steps[s];
      bool use = true;
      if (st.kind == OpKind::host_in) use = in;
      if (st.kind == OpKind::h2d) use = st.staged == in;
      if (st.kind == OpKind::d2h) use = st.staged == out;
      if (st.kind == OpKind::host_out) use = out;
      if (use) t.active[v].push_back(static_cast<int>(s));
    }
  }

  t.ring_wide.assign(t.buffers.size(), false);
  t.carries.assign(t.steps.size(), false);
  for (int b : carry_buffers) t.ring_wide[static_cast<std::size_t>(b)] = true;
  for (std::size_t s = 0; s < t.steps.size(); ++s) {
    for (int b : t.steps[s].writes) t.carries[s] = t.carries[s] || t.ring_wide[static_cast<std::size_t>(b)];
  }
  // Which steps' accesses to a slot's buffers conflict (one writes what the
  // other reads or writes): only those are ever ordered by a wait.
  const std::size_t n_steps = t.steps.size();
  t.conflicts.assign(n_steps * n_steps, false);
  auto overlap = [](const std::vector<int>& a, const std::vector<int>& b) {
    for (int x : a) {
      if (std::find(b.begin(), b.end(), x) != b.end()) return true;
    }
    return false;
  };
  for (std::size_t a = 0; a < n_steps; ++a) {
    for (std::size_t b = 0; b < n_steps; ++b) {
      const Step& x = t.steps[a];
      const Step& y = t.steps[b];
      t.conflicts[a * n_steps + b] =
          overlap(x.writes, y.reads) || overlap(x.writes, y.writes) || overlap(x.reads, y.writes);
    }
  }
  return t;
}

CHUNKPIPE_INLINE PlanLayout make_plan_layout(Policy policy, int depth, PlanShape shape) {
  PlanLayout layout;
  layout.policy = policy;
  layout.depth = depth;
  layout.shape = std::move(shape);
  PlanShape& s = layout.shape;
  if (policy == Policy::automatic) {
    throw config_error("chunkpipe: PlanBuilder needs a concrete policy; call resolve() first");
  }
  if (depth < 1) {
    throw config_error("chunkpipe: depth must be at least 1, got " + std::to_string(depth));
  }
  if (policy == Policy::serial && depth != 1) {
    throw config_error("chunkpipe: the serial policy has exactly one slot; got depth " + std::to_string(depth));
  }
  if (s.stages < 1) {
    throw config_error("chunkpipe: a pipeline needs at least one stage");
  }
  if (s.in_place.empty()) s.in_place.assign(static_cast<std::size_t>(s.stages), false);
  if (s.in_place.size() != static_cast<std::size_t>(s.stages)) {
    throw config_error("chunkpipe: PlanShape::in_place has " + std::to_string(s.in_place.size()) + " entries for " +
                       std::to_string(s.stages) + " stages");
  }
  if (s.carries.empty()) s.carries.assign(static_cast<std::size_t>(s.stages), false);
  if (s.carries.size() != static_cast<std::size_t>(s.stages)) {
    throw config_error("chunkpipe: PlanShape::carries has " + std::to_string(s.carries.size()) + " entries for " +
                       std::to_string(s.stages) + " stages");
  }
  if (s.kernel_lanes < 1) {
    throw config_error("chunkpipe: PlanShape::kernel_lanes must be at least 1, got " + std::to_string(s.kernel_lanes));
  }
  layout.lanes = policy == Policy::stage_streams ? s.kernel_lanes : 1;
  const int lanes = layout.lanes;
  if (s.variable_out) s.stage_out = true;  // only a host-out op knows what to copy
  const bool can_stage_in = s.per_run_staging || s.stage_in;
  const bool can_stage_out = s.per_run_staging || s.stage_out;

  // Queues: streams first, host workers after.
  std::vector<Queue>& queues = layout.queues;
  switch (policy) {
    case Policy::serial: queues.push_back({QueueKind::device, "stream"}); break;
    case Policy::slot_streams:
      for (int i = 0; i < depth; ++i) queues.push_back({QueueKind::device, "stream " + std::to_string(i)});
      break;
    case Policy::stage_streams:
      queues.push_back({QueueKind::device, "h2d"});
      for (int i = 0; i < s.stages; ++i) {
        for (int l = 0; l < lanes; ++l) {
          queues.push_back({QueueKind::device,
                            "stage " + std::to_string(i) + (lanes > 1 ? " lane " + std::to_string(l) : std::string())});
        }
      }
      queues.push_back({QueueKind::device, "d2h"});
      break;
    case Policy::automatic: break;  // rejected above
  }
  if (can_stage_in) {
    layout.host_in_queue = static_cast<int>(queues.size());
    queues.push_back({QueueKind::host, "host in"});
  }
  if (can_stage_out) {
    layout.host_out_queue = static_cast<int>(queues.size());
    queues.push_back({QueueKind::host, "host out"});
  }

  layout.table = ::chunkpipe::detail::make_step_table(policy, depth, s);
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
  const auto d = static_cast<std::size_t>(depth);
  if (policy == Policy::stage_streams && lanes == 1) {
    for (std::size_t m = std::min<std::size_t>(d / 4, 8); m > 1; --m) {
      if (d % m == 0) {
        layout.wait_batch = m;
        break;
      }
    }
  }
  // Waits reach back at most depth chunks plus how far host-in runs ahead
  // (and a run that ended early skips at most that many); a multiple of the
  // depth keeps each of an executor's entries on one slot, so one queue.
  const std::size_t r = d + static_cast<std::size_t>(layout.table.max_ahead) + 2;
  layout.reach = d * ((r + d - 1) / d);
  return layout;
}

CHUNKPIPE_INLINE int PlanLayout::queue_of(const Step& step, std::size_t chunk, int run_lanes) const {
  if (step.kind == OpKind::host_in) return host_in_queue;
  if (step.kind == OpKind::host_out) return host_out_queue;
  switch (policy) {
    case Policy::slot_streams: return static_cast<int>(chunk % static_cast<std::size_t>(depth));
    case Policy::stage_streams:
      if (step.kind == OpKind::h2d) return 0;
      if (step.kind == OpKind::stage) {
        return 1 + step.stage * lanes + static_cast<int>(chunk % static_cast<std::size_t>(run_lanes));
      }
      return 1 + shape.stages * lanes;  // d2h
    default: return 0;
  }
}

// Waits only ever order conflicting accesses to one slot's buffers, and those
// come from two places: later steps of the same chunk, and the steps of the
// chunk that next uses the slot (chunk + depth, in whichever run, so any
// step of the table). An op needs an event only if one of those runs on
// another queue; an op whose conflicts all share its stream (slot_streams,
// serial) is ordered by the stream alone. Host ops are waited for by queue
// position and always count. Across laps, device waiters on a batched ring
// wait only for the last chunk of a batch (see PlanOrder::issue()), or for
// the last chunk of a run cut short, whose batch the next run will not fill.
CHUNKPIPE_INLINE bool PlanLayout::needs_event(int step, std::size_t chunk, int variant, int run_lanes,
                                              bool cut_last) const {
  const auto s = static_cast<std::size_t>(step);
  const std::vector<Step>& steps = table.steps;
  const int q = queue_of(steps[s], chunk, run_lanes);
  if (queues[static_cast<std::size_t>(q)].kind == QueueKind::host) return true;
  const std::size_t n = steps.size();
  bool after = false;
  for (int later : table.active[variant]) {
    if (later == step) {
      after = true;
      continue;
    }
    const auto l = static_cast<std::size_t>(later);
    if (after && table.conflict(s, l) && queue_of(steps[l], chunk, run_lanes) != q) return true;
  }
  // A carrying step's next op is the next chunk's, on whichever queue that
  // chunk's op of the step goes (a later run may take other lanes).
  if (table.carries[s] && (queue_of(steps[s], chunk + 1, run_lanes) != q || (shape.lanes_vary && lanes > 1))) {
    return true;
  }
  const std::size_t next = chunk + static_cast<std::size_t>(depth);
  const bool last_of_batch = wait_batch == 1 || chunk % wait_batch == wait_batch - 1 || cut_last;
  for (std::size_t other = 0; other < n; ++other) {
    if (!table.conflict(s, other)) continue;
    const int waiter = queue_of(steps[other], next, run_lanes);
    // The next lap may belong to a later run with other lanes
    // (RunSpec::kernel_lanes): a stage op there may be on any lane of its
    // stage, so only one lane of its own could do without the event.
    const bool other_lanes = shape.lanes_vary && lanes > 1 && steps[other].kind == OpKind::stage;
    if (waiter == q && !other_lanes) continue;
    if (queues[static_cast<std::size_t>(waiter)].kind == QueueKind::host || last_of_batch) return true;
  }
  return false;
}

}  // namespace chunkpipe::detail
