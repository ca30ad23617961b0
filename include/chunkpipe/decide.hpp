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

// ---------------------------------------------------------------------------

namespace detail {

inline Candidate predict_candidate(const Options& o, bool all_elementwise, const Measured& m, const Machine& machine) {
  Candidate c;
  c.options = o;
  c.geometry = detail::resolve_geometry(o, all_elementwise, Target::device, m.unit_multiple);
  PlanShape shape;
  shape.stages = static_cast<int>(m.stage_ns_per_elem.size());
  shape.kernel_lanes = c.geometry.kernel_lanes;
  shape.carries = m.carries;  // make_plan refuses a list of the wrong length
  const std::size_t chunks = (m.run_elems + c.geometry.chunk_elems - 1) / c.geometry.chunk_elems;
  const Plan plan = make_plan(c.geometry.policy, c.geometry.depth, shape, chunks);
  Workload w;
  w.elems = m.run_elems;
  w.chunk_elems = c.geometry.chunk_elems;
  w.in_bytes_per_elem = m.in_bytes_per_elem;
  w.out_bytes_per_elem = m.out_bytes_per_elem;
  w.stage_ns_per_elem = m.stage_ns_per_elem;
  c.predicted_ms = makespan_ms(simulate(plan, w, machine));
  return c;
}

inline std::string schedule_name(const Geometry& g) {
  std::string s = std::string(to_string(g.policy)) + " d" + std::to_string(g.depth);
  if (g.kernel_lanes > 1) s += ", " + std::to_string(g.kernel_lanes) + " kernel lanes";
  return s;
}

inline std::string fixed3(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", x);
  return b;
}

}  // namespace detail

inline std::string to_string(const Options& o) {
  const Options d{};
  std::string s = "{.chunk_elems = " + std::to_string(o.chunk_elems);
  if (o.depth != d.depth) s += ", .depth = " + std::to_string(o.depth);
  if (o.policy != d.policy) {
    // The enumerator's name: to_string() says "auto" for automatic.
    s += ", .policy = Policy::" + (o.policy == Policy::automatic ? std::string("automatic") : std::string(to_string(o.policy)));
  }
  if (o.grain_elems != d.grain_elems) s += ", .grain_elems = " + std::to_string(o.grain_elems);
  if (o.memory_elems != d.memory_elems) s += ", .memory_elems = " + std::to_string(o.memory_elems);
  if (o.kernel_lanes != d.kernel_lanes) s += ", .kernel_lanes = " + std::to_string(o.kernel_lanes);
  return s + "}";
}

namespace detail {

inline void check_decision_inputs(const Options& user, const Measured& m, double margin) {
  detail::validate_options(user);
  if (m.run_elems == 0) throw config_error("chunkpipe: decide: run_elems must be at least 1 (got 0)");
  if (m.stage_ns_per_elem.empty()) throw config_error("chunkpipe: decide: stage_ns_per_elem needs one figure per stage");
  if (!(margin >= 0.0)) throw config_error("chunkpipe: decide: margin must be 0 or more");
}

inline bool same_schedule(const Geometry& a, const Geometry& b) {
  return a.policy == b.policy && a.depth == b.depth && a.chunk_elems == b.chunk_elems &&
         a.kernel_lanes == b.kernel_lanes;
}

// Ranks d.ranked (the options as they are first), chooses, and says why.
inline void conclude(Decision& d, const Measured& m, const Machine& machine, double margin) {
  const Candidate as_is = d.ranked.front();
  std::stable_sort(d.ranked.begin(), d.ranked.end(),
                   [](const Candidate& a, const Candidate& b) { return a.predicted_ms < b.predicted_ms; });
  const Candidate& best = d.ranked.front();
  const bool keep = as_is.predicted_ms <= best.predicted_ms * (1.0 + margin);
  d.chosen = keep ? as_is : best;
  d.chosen.is_default = keep;

  // What bounds the work: the slowest of the link (per element, each way
  // and both at once) and the stages' kernels.
  const LinkModel& link = machine.link;
  const double in_ns = static_cast<double>(m.in_bytes_per_elem) / link.h2d_gbps;
  const double out_ns = static_cast<double>(m.out_bytes_per_elem) / link.d2h_gbps;
  const double both_ns = link.both_gbps > 0 ? static_cast<double>(m.in_bytes_per_elem + m.out_bytes_per_elem) /
                                                  link.both_gbps
                                            : 0.0;
  const double link_ns = std::max({in_ns, out_ns, both_ns});
  double kernel_ns = 0.0;
  for (double ns : m.stage_ns_per_elem) kernel_ns = std::max(kernel_ns, ns);
  const std::string bound = kernel_ns > link_ns ? "compute-bound" : "link-bound";
  d.why = bound + " (kernel " + fixed3(kernel_ns) + " ns per element, link " + fixed3(link_ns) + "): ";
  if (keep) {
    d.why += "keeps " + schedule_name(as_is.geometry) + ", predicted " + fixed3(as_is.predicted_ms) + " ms";
    if (best.predicted_ms < as_is.predicted_ms) {
      d.why += ", within " + fixed3(100.0 * margin) + "% of the fastest (" + schedule_name(best.geometry) + ", " +
               fixed3(best.predicted_ms) + " ms)";
    }
  } else {
    d.why += schedule_name(best.geometry) + ", predicted " + fixed3(best.predicted_ms) + " ms against " +
             fixed3(as_is.predicted_ms) + " for " + schedule_name(as_is.geometry);
  }
}

}  // namespace detail

inline Decision decide(const Options& user, bool all_elementwise, const Measured& m, const Machine& machine,
                       double margin) {
  detail::check_decision_inputs(user, m, margin);
  Decision d;
  d.measured = m;
  d.machine = machine;
  const Candidate as_is = detail::predict_candidate(user, all_elementwise, m, machine);
  auto slot_elems = [](const Geometry& g) { return static_cast<std::size_t>(g.depth) * g.chunk_elems; };
  const std::size_t budget = std::max(slot_elems(as_is.geometry), user.memory_elems);
  d.ranked.push_back(as_is);
  d.ranked.back().is_default = true;

  auto consider = [&](Policy policy, int depth, int lanes) {
    Options o = user;
    o.policy = policy;
    o.depth = depth;
    o.kernel_lanes = lanes;
    Geometry g;
    try {
      g = detail::resolve_geometry(o, all_elementwise, detail::Target::device, m.unit_multiple);
    } catch (const config_error&) {
      return;  // options a pipeline would refuse (a grain cut into too many slots): not a candidate
    }
    if (slot_elems(g) > budget) return;  // more memory than the options allow
    for (const Candidate& c : d.ranked) {
      if (detail::same_schedule(c.geometry, g)) return;  // the same schedule by another name
    }
    d.ranked.push_back(detail::predict_candidate(o, all_elementwise, m, machine));
  };
  for (int lanes = 1; lanes <= 3; ++lanes) consider(Policy::automatic, default_depth, lanes);
  for (int depth = 2; depth <= 4; ++depth) {
    for (int lanes = 1; lanes <= 3; ++lanes) consider(Policy::stage_streams, depth, lanes);
  }
  for (int depth = 2; depth <= 4; ++depth) consider(Policy::slot_streams, depth, 0);
  detail::conclude(d, m, machine, margin);
  return d;
}

inline Decision decide_lanes(const Options& user, bool all_elementwise, const Measured& m, const Machine& machine,
                             int most, double margin) {
  detail::check_decision_inputs(user, m, margin);
  if (most < 1) throw config_error("chunkpipe: decide_lanes: most must be at least 1 (got " + std::to_string(most) + ")");
  Decision d;
  d.measured = m;
  d.machine = machine;
  d.ranked.push_back(detail::predict_candidate(user, all_elementwise, m, machine));
  d.ranked.back().is_default = true;
  for (int lanes = 1; lanes <= most; ++lanes) {
    Options o = user;
    o.kernel_lanes = lanes;
    // Simulate only schedules not ranked yet (the options as they are are
    // one of these): a simulation of a long run is most of a decision's
    // host time, which a calibrating pipeline spends between runs.
    const Geometry g = detail::resolve_geometry(o, all_elementwise, detail::Target::device, m.unit_multiple);
    bool seen = false;
    for (const Candidate& k : d.ranked) seen = seen || detail::same_schedule(k.geometry, g);
    if (!seen) d.ranked.push_back(detail::predict_candidate(o, all_elementwise, m, machine));
  }
  detail::conclude(d, m, machine, margin);
  return d;
}

namespace detail {

inline double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace detail

inline Decision decide_calibrated(const Options& user, int stages, const std::vector<TimedOp>& timed,
                                  std::size_t run_elems, int most, double margin) {
  if (stages < 1) throw config_error("chunkpipe: decide_calibrated: a pipeline has at least one stage");
  Machine machine = machines::h200_pcie5();
  machine.link.name = "calibrated";
  machine.link.both_gbps = 0.0;
  machine.link.latency_us = 0.0;
  const double tail = machine.kernel_tail_elems;
  std::vector<double> in_rate, out_rate, in_bpe, out_bpe;
  std::vector<std::vector<double>> stage_ns(static_cast<std::size_t>(stages));
  for (const TimedOp& op : timed) {
    const double ms = op.end_ms - op.start_ms;
    if (op.elems == 0 || !(ms > 0.0)) continue;  // below the events' resolution: says nothing
    const double n = static_cast<double>(op.elems);
    if (op.kind == OpKind::stage) {
      if (op.stage < 0 || op.stage >= stages) throw config_error("chunkpipe: decide_calibrated: an op of no stage");
      // A kernel of n elements takes n + min(n, tail) elements' time (simulate.hpp).
      stage_ns[static_cast<std::size_t>(op.stage)].push_back(ms * 1e6 / (n + std::min(n, tail)));
    } else if ((op.kind == OpKind::h2d || op.kind == OpKind::d2h) && op.bytes != 0) {
      const bool in = op.kind == OpKind::h2d;
      (in ? in_rate : out_rate).push_back(static_cast<double>(op.bytes) / (ms * 1e6));
      (in ? in_bpe : out_bpe).push_back(static_cast<double>(op.bytes) / n);
    }
  }
  if (in_rate.empty() || out_rate.empty()) {
    throw config_error("chunkpipe: decide_calibrated: needs a timed copy each way");
  }
  Measured m;
  m.run_elems = run_elems;
  m.in_bytes_per_elem = static_cast<std::size_t>(detail::median_of(in_bpe) + 0.5);
  m.out_bytes_per_elem = static_cast<std::size_t>(detail::median_of(out_bpe) + 0.5);
  for (const auto& ns : stage_ns) {
    if (ns.empty()) throw config_error("chunkpipe: decide_calibrated: a stage has no timed op");
    m.stage_ns_per_elem.push_back(detail::median_of(ns));
  }
  machine.link.h2d_gbps = detail::median_of(in_rate);
  machine.link.d2h_gbps = detail::median_of(out_rate);
  return decide_lanes(user, true, m, machine, most, margin);
}

}  // namespace chunkpipe
