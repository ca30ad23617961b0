// SPDX-License-Identifier: MIT
// What a PlanBuilder (plan.hpp) fixes when it is built and never changes:
// its queues, the steps every chunk goes through, the slot buffers they
// touch and which of their accesses conflict, and where each op goes.
//
// Part of plan.hpp, which includes it after the types it uses (Policy,
// PlanShape, Queue, Step) and before PlanBuilder, which holds a PlanLayout;
// do not include directly.
#pragma once

#include <chunkpipe/detail/linkage.hpp>

#include <cstddef>
#include <string>
#include <vector>

namespace chunkpipe::detail {

/// What every chunk of a schedule goes through: the steps, in issue order
/// within a tick, the slot buffers they read and write, and what follows
/// from those accesses. Built once (make_step_table()); never changes.
struct StepTable {
  std::vector<Step> steps;
  std::vector<int> family;           // [step]: steps that are forms of one copy share a family
  int families = 0;                  // family numbers are below it
  std::vector<std::string> buffers;  // names of one slot's buffers; Step::reads and writes index them
  std::vector<bool> ring_wide;       // [buffer]: one for the ring (a carry)
  std::vector<bool> carries;         // [step]: touches a ring-wide buffer
  std::vector<bool> conflicts;       // [step * steps + step]: their accesses to a slot conflict
  std::vector<int> active[4];        // [stage_in | stage_out << 1]: steps a run uses, in order
  int max_ahead = 0;                 // the largest `ahead` of any step
  // [as active]: whether such a run may be planned.
  bool variant_ok[4] = {false, false, false, false};

  /// Whether steps `a` and `b` access a slot's buffers in conflict (one
  /// writes what the other reads or writes): only those are ever ordered
  /// by a wait.
  bool conflict(std::size_t a, std::size_t b) const noexcept { return conflicts[a * steps.size() + b]; }
};

/// The steps and buffers of a schedule for `shape` (normalised, as
/// make_plan_layout() leaves it), whose host-in ops run ahead as `policy`
/// and `depth` allow.
StepTable make_step_table(Policy policy, int depth, const PlanShape& shape);

/// Everything a PlanBuilder fixes at construction: the policy, the ring,
/// the normalised shape, the queues, the step table, and how far waits
/// batch and reach. Built by make_plan_layout(), which checks the request;
/// never changes. Says, from it and a run's facts, which queue an op goes
/// on and whether it records an event.
struct PlanLayout {
  Policy policy = Policy::serial;
  int depth = 1;
  int lanes = 1;              // streams per stage (PlanShape::kernel_lanes; stage_streams only)
  PlanShape shape;            // normalised: in_place and carries filled in, stage_out set by variable_out
  std::vector<Queue> queues;  // streams first, host workers after
  int host_in_queue = -1;     // -1: no run may stage inputs
  int host_out_queue = -1;    // -1: no run may stage outputs
  StepTable table;
  std::size_t wait_batch = 1;  // slot-reuse waits cover this many chunks (PlanBuilder::wait_batch)
  std::size_t reach = 1;       // PlanBuilder::reach

  /// The queue of `step`'s op for `chunk`, in a run whose stage ops take
  /// turns on `run_lanes` kernel lanes.
  int queue_of(const Step& step, std::size_t chunk, int run_lanes) const;
  /// Whether a later op may have to wait for op (`step`, `chunk`) by its
  /// event, in a run of `variant` (StepTable::active) on `run_lanes` lanes;
  /// `cut_last`: the chunk is the last of a run cut short.
  bool needs_event(int step, std::size_t chunk, int variant, int run_lanes, bool cut_last) const;
};

/// The layout of a PlanBuilder(policy, depth, shape). Throws config_error
/// as that constructor says.
PlanLayout make_plan_layout(Policy policy, int depth, PlanShape shape);

}  // namespace chunkpipe::detail

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/plan_layout.inl>
#endif
