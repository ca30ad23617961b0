// SPDX-License-Identifier: MIT
/// \file
/// The decision: which schedule a pipeline should run, given what was
/// measured of it (the time its stages take per element) and of the machine
/// (the link). Host-only C++, no CUDA.
///
/// Every candidate schedule is resolved exactly as a pipeline would resolve
/// its Options, planned, and run on the simulator
/// (simulate.hpp); the fastest wins, unless the schedule the pipeline would
/// run anyway is within a margin of it. So a decision is a pure function of
/// its inputs, its Options can be printed and pasted, and what it predicts
/// is the simulator's figure for exactly the plan those Options make.
#pragma once

#include <chunkpipe/detail/linkage.hpp>
#include <chunkpipe/errors.hpp>
#include <chunkpipe/options.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/simulate.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

namespace chunkpipe {

/// What a decision is made from: a pipeline's work as measured.
struct Measured {
  std::size_t run_elems = 0;              ///< elements of a typical run
  std::size_t in_bytes_per_elem = 4;      ///< over all inputs
  std::size_t out_bytes_per_elem = 4;     ///< over all outputs
  std::vector<double> stage_ns_per_elem;  ///< each stage's kernel time per element, tails not included
  /// Units must be whole multiples of this (a Reduce's segment), as the
  /// pipeline's own geometry is.
  std::size_t unit_multiple = 1;
  /// Per stage: it carries a value from chunk to chunk (a Scan; the
  /// pipeline's PlanShape::carries), so its kernels run one after another
  /// whatever the lanes. Empty: none does.
  std::vector<bool> carries;
};

/// One schedule considered, with the simulator's figure for it.
struct Candidate {
  Options options;        ///< the user's options with policy, depth and kernel_lanes set
  Geometry geometry;      ///< what they resolve to
  double predicted_ms = 0.0;  ///< the simulator's makespan for it, in ms
  bool is_default = false;  ///< the schedule the user's options give as they are
};

/// What decide() chose, and why.
struct Decision {
  /// The schedule chosen: the fastest prediction, or the options as they
  /// are (is_default) where they come within the margin of it.
  Candidate chosen;
  /// Every candidate, fastest first (ties in the order they were
  /// considered); `chosen` is one of them.
  std::vector<Candidate> ranked;
  /// One line: what bounds the work, what was chosen and what it is
  /// predicted to save against the schedule the options give as they are.
  std::string why;
  /// What it was decided from (for decide_calibrated(), what was timed).
  Measured measured;
  /// The machine it was decided for (for decide_calibrated(), the copy
  /// rates as timed).
  Machine machine;
};

/// The window and the fields a decision sets, as C++ a user can paste:
/// "{.chunk_elems = 262144, .depth = 4, .policy = Policy::stage_streams,
/// .kernel_lanes = 2}" (those at their defaults left out; the other fields
/// are the user's own and not printed).
std::string to_string(const Options& o);

/// Chooses policy, depth and kernel lanes for a pipeline with `user`'s
/// options (its window, memory budget and everything else kept) running
/// runs like `m` on `machine`. Considered: the options as they are; the
/// automatic policy at the default depth and stage_streams at depths 2 to
/// 4, each with 1 to 3 kernel lanes; slot_streams at depths 2 to 4; only
/// those whose slots fit in the memory the options as they are use (or
/// Options::memory_elems, if more), and that resolve at all (a grain that
/// would need too many slots is skipped). Host staging is not modelled:
/// the prediction is for pinned runs.
/// A pipeline with a stage that sees chunks (`all_elementwise` false)
/// keeps its window as the unit. The fastest prediction wins unless the
/// options as they are come within `margin` (a fraction) of it. Never
/// blocks; deterministic. Throws config_error for options that do not
/// validate, a run of 0 elements, or figures the simulator refuses.
Decision decide(const Options& user, bool all_elementwise, const Measured& m, const Machine& machine,
                double margin = 0.01);

/// The decision a pipeline can still make once its slots are laid out:
/// kernel lanes only, 1 to `most`, with the policy, depth and unit that
/// `user`'s options resolve to kept (the automatic policy's calibration,
/// which changes lanes from one run to the next). The options as they are
/// (their lanes, 1 for 0) stay unless another count is predicted faster by
/// more than `margin`. Never blocks; deterministic. Throws config_error as
/// decide() does, and for `most` below 1.
Decision decide_lanes(const Options& user, bool all_elementwise, const Measured& m, const Machine& machine,
                      int most, double margin = 0.01);

/// The decision a calibrating pipeline makes (ChunkedPipeline::decision()),
/// from the device ops it timed (its first chunks, or a later check's;
/// `timed`: each op's kind, stage, elements, bytes, and end_ms - start_ms
/// its time on the GPU) for runs of `run_elems` elements of `stages` Map stages: the stages'
/// time per element (median; a kernel's tail taken out as the simulator
/// puts it in), the copies' bytes per element and rates as they ran
/// (median; both directions at once where the run overlapped them, so the
/// two-way total is left to their sum and the per-copy cost is inside
/// them), with machines::h200_pcie5()'s figures for what events cannot
/// show (a kernel's tail, an op's overhead and issue cost); then
/// decide_lanes() up to
/// `most` lanes. Ops of 0 elements or of no measurable time are left out.
/// Never blocks; deterministic. Throws config_error when no copy each way
/// or no op of some stage is left, and as decide_lanes() does.
Decision decide_calibrated(const Options& user, int stages, const std::vector<TimedOp>& timed, std::size_t run_elems,
                           int most, double margin = 0.01);

}  // namespace chunkpipe

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/decide.inl>
#endif
