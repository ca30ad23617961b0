// SPDX-License-Identifier: MIT
// Definitions for decide.hpp. Included at its bottom where chunkpipe is
// header-only, or once by <chunkpipe/compiled.hpp> (detail/linkage.hpp); do
// not include directly.
#pragma once

namespace chunkpipe {

namespace detail {

CHUNKPIPE_INLINE Candidate predict_candidate(const Options& o, bool all_elementwise, const Measured& m, const Machine& machine) {
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

CHUNKPIPE_INLINE std::string schedule_name(const Geometry& g) {
  std::string s = std::string(to_string(g.policy)) + " d" + std::to_string(g.depth);
  if (g.kernel_lanes > 1) s += ", " + std::to_string(g.kernel_lanes) + " kernel lanes";
  return s;
}

CHUNKPIPE_INLINE std::string fixed3(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", x);
  return b;
}

}  // namespace detail

CHUNKPIPE_INLINE std::string to_string(const Options& o) {
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

CHUNKPIPE_INLINE void check_decision_inputs(const Options& user, const Measured& m, double margin) {
  detail::validate_options(user);
  if (m.run_elems == 0) throw config_error("chunkpipe: decide: run_elems must be at least 1 (got 0)");
  if (m.stage_ns_per_elem.empty()) throw config_error("chunkpipe: decide: stage_ns_per_elem needs one figure per stage");
  if (!(margin >= 0.0)) throw config_error("chunkpipe: decide: margin must be 0 or more");
}

CHUNKPIPE_INLINE bool same_schedule(const Geometry& a, const Geometry& b) {
  return a.policy == b.policy && a.depth == b.depth && a.chunk_elems == b.chunk_elems &&
         a.kernel_lanes == b.kernel_lanes;
}

// Ranks d.ranked (the options as they are first), chooses, and says why.
CHUNKPIPE_INLINE void conclude(Decision& d, const Measured& m, const Machine& machine, double margin) {
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

CHUNKPIPE_INLINE Decision decide(const Options& user, bool all_elementwise, const Measured& m, const Machine& machine,
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

CHUNKPIPE_INLINE Decision decide_lanes(const Options& user, bool all_elementwise, const Measured& m, const Machine& machine,
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

CHUNKPIPE_INLINE double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace detail

CHUNKPIPE_INLINE Decision decide_calibrated(const Options& user, int stages, const std::vector<TimedOp>& timed,
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
