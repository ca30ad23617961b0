// SPDX-License-Identifier: MIT
// Definitions for simulate.hpp. Included at its bottom where chunkpipe is
// header-only, or once by <chunkpipe/compiled.hpp> (detail/linkage.hpp); do
// not include directly.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <string>
#include <tuple>
#include <utility>

namespace chunkpipe {

namespace detail {

CHUNKPIPE_INLINE void require_figure(double v, const char* what, bool positive) {
  if (!std::isfinite(v) || v < 0.0 || (positive && v == 0.0)) {
    throw config_error(std::string("chunkpipe: simulate: ") + what + " must be " +
                       (positive ? "above 0" : "0 or more") + " and finite, got " + std::to_string(v));
  }
}

/// Rates in bytes per ms of the copies now moving: at most one per
/// direction. Alone, a copy gets its one-way bandwidth; together they split
/// the two-way total fairly, and what one cannot use (capped by its own
/// one-way figure) goes to the other.
CHUNKPIPE_INLINE std::pair<double, double> link_rates(const LinkModel& l, bool h2d, bool d2h) {
  const double both = l.both_gbps > 0.0 ? l.both_gbps : l.h2d_gbps + l.d2h_gbps;
  double rh = 0.0, rd = 0.0;
  if (h2d && d2h) {
    rh = std::min(l.h2d_gbps, both / 2.0);
    rd = std::min(l.d2h_gbps, both / 2.0);
    const double left = both - rh - rd;
    if (rh < l.h2d_gbps) rh = std::min(l.h2d_gbps, rh + left);
    else rd = std::min(l.d2h_gbps, rd + left);
  } else if (h2d) {
    rh = std::min(l.h2d_gbps, both);
  } else if (d2h) {
    rd = std::min(l.d2h_gbps, both);
  }
  return {rh * 1e6, rd * 1e6};  // GB/s = 1e6 B/ms
}

}  // namespace detail

CHUNKPIPE_INLINE Report simulate(const Plan& plan, const Workload& work, const Machine& machine) {
  using detail::require_figure;
  const LinkModel& link = machine.link;
  const std::size_t n = plan.ops.size();

  // Everything is checked before anything is simulated.
  if (work.chunk_elems == 0) throw config_error("chunkpipe: simulate: chunk_elems must be at least 1 (got 0)");
  if (work.stage_ns_per_elem.size() != static_cast<std::size_t>(plan.shape.stages)) {
    throw config_error("chunkpipe: simulate: the workload has " + std::to_string(work.stage_ns_per_elem.size()) +
                       " stage times for a plan of " + std::to_string(plan.shape.stages) + " stages");
  }
  // A plan of several runs (a pipeline's stream of runs) sizes each chunk
  // from its own run: run r's chunk k holds elements [k, k + 1) x
  // chunk_elems of that run, and work.elems is ignored. A one-run plan
  // takes them from work.elems.
  const bool by_run = plan.runs.size() > 1;
  std::vector<std::size_t> run_of(by_run ? n : 0);
  std::size_t run_elems_total = 0;
  if (by_run) {
    for (std::size_t r = 0; r < plan.runs.size(); ++r) {
      const PlanRun& pr = plan.runs[r];
      if (pr.first_op + pr.ops > n) throw config_error("chunkpipe: simulate: malformed plan: a run past its ops");
      for (std::size_t i = pr.first_op; i < pr.first_op + pr.ops; ++i) run_of[i] = r;
      run_elems_total += pr.elems != 0 ? pr.elems : pr.chunks * work.chunk_elems;
    }
  }
  auto elems_of = [&](std::size_t i) -> std::size_t {
    const Op& op = plan.ops[i];
    if (!by_run) {
      const std::size_t offset = op.chunk * work.chunk_elems;
      return offset < work.elems ? std::min(work.chunk_elems, work.elems - offset) : 0;
    }
    const PlanRun& r = plan.runs[run_of[i]];
    const std::size_t total = r.elems != 0 ? r.elems : r.chunks * work.chunk_elems;
    const std::size_t offset = (op.chunk - r.first_chunk) * work.chunk_elems;
    return offset < total ? std::min(work.chunk_elems, total - offset) : 0;
  };
  const std::size_t needed = by_run ? 0 : (work.elems + work.chunk_elems - 1) / work.chunk_elems;
  if (plan.chunks < needed) {
    throw config_error("chunkpipe: simulate: the plan has " + std::to_string(plan.chunks) + " chunks; " +
                       std::to_string(work.elems) + " elements in chunks of " + std::to_string(work.chunk_elems) +
                       " need " + std::to_string(needed));
  }
  for (double ns : work.stage_ns_per_elem) require_figure(ns, "stage_ns_per_elem", false);
  require_figure(link.h2d_gbps, "link.h2d_gbps", true);
  require_figure(link.d2h_gbps, "link.d2h_gbps", true);
  require_figure(link.both_gbps, "link.both_gbps", false);
  require_figure(link.latency_us, "link.latency_us", false);
  require_figure(machine.op_overhead_us, "op_overhead_us", false);
  require_figure(machine.host_copy_gbps, "host_copy_gbps", false);
  require_figure(machine.kernel_tail_elems, "kernel_tail_elems", false);
  require_figure(machine.host_issue_us, "host_issue_us", false);
  require_figure(machine.storage_read_gbps, "storage_read_gbps", false);
  require_figure(machine.storage_write_gbps, "storage_write_gbps", false);
  if (link.copy_engines < 1) {
    throw config_error("chunkpipe: simulate: link.copy_engines must be at least 1, got " +
                       std::to_string(link.copy_engines));
  }
  for (std::size_t i = 0; i < n; ++i) {
    const Op& op = plan.ops[i];
    auto bad = [&](const std::string& why) {
      throw config_error("chunkpipe: simulate: malformed plan: op #" + std::to_string(i) + ' ' + why);
    };
    if (op.id != i) bad("has id " + std::to_string(op.id));
    if (op.queue < 0 || static_cast<std::size_t>(op.queue) >= plan.queues.size()) bad("has no queue");
    if (op.kind == OpKind::stage && (op.stage < 0 || op.stage >= plan.shape.stages)) bad("has no stage");
    for (std::size_t w : op.waits) {
      if (w >= i) bad("waits for op #" + std::to_string(w) + ", which is not issued before it");
    }
    const bool packed_out = op.kind == OpKind::host_out && plan.shape.variable_out;  // a DMA, not a host copy
    if ((op.kind == OpKind::host_in || (op.kind == OpKind::host_out && !packed_out)) && elems_of(i) > 0) {
      const bool storage = op.kind == OpKind::host_in ? work.in_from_storage : work.out_to_storage;
      const double rate = !storage ? machine.host_copy_gbps
                          : op.kind == OpKind::host_in ? machine.storage_read_gbps
                                                       : machine.storage_write_gbps;
      if (!(rate > 0.0)) {
        throw config_error(std::string("chunkpipe: simulate: the plan stages through the host, and the machine's ") +
                           (!storage ? "host_copy_gbps"
                            : op.kind == OpKind::host_in ? "storage_read_gbps (the workload is read from storage)"
                                                         : "storage_write_gbps (the workload is written to storage)") +
                           " is not known");
      }
    }
  }

  Report report;
  report.predicted = true;
  report.label = std::string(to_string(plan.policy)) + ", depth " + std::to_string(plan.depth) +
                 (link.name.empty() ? std::string() : " on " + link.name);
  report.policy = plan.policy;
  report.depth = plan.depth;
  report.chunk_elems = work.chunk_elems;
  report.chunks = plan.chunks;
  report.elems = by_run ? run_elems_total : work.elems;
  report.bytes_in = report.elems * work.in_bytes_per_elem;
  // Outputs are records: one per out_per_record elements of a chunk.
  const std::size_t per = work.out_per_record == 0 ? 1 : work.out_per_record;
  auto out_bytes = [&](std::size_t elems) { return (elems + per - 1) / per * work.out_bytes_per_elem; };
  // A stage that emits a count (PlanShape::variable_out): its copy out
  // carries the count, and its host-out op waits for a DMA of what was
  // kept (Workload::out_kept of the elements) over the link.
  const bool variable = plan.shape.variable_out;
  if (variable && !(work.out_kept >= 0.0 && work.out_kept <= 1.0)) {
    throw config_error("chunkpipe: simulate: out_kept must be between 0 and 1, got " + std::to_string(work.out_kept));
  }
  auto kept_bytes = [&](std::size_t elems) {
    return static_cast<std::size_t>(std::llround(static_cast<double>(elems) * work.out_kept)) * work.out_bytes_per_elem;
  };
  report.bytes_out = 0;  // summed over the copies out below
  report.queues = plan.queues;
  report.link = link;
  report.ops.resize(n);

  // What each op costs: a fixed part (overhead, copy latency, kernel or
  // host copy time) that holds its resource, then for copies a transfer
  // that also shares the link.
  enum : int { h2d_engine = 0, d2h_engine = 1, sms = 2, first_host = 3 };
  const bool one_engine = link.copy_engines == 1;
  std::vector<int> resource(n);
  std::vector<double> fixed_ms(n), transfer_bytes(n, 0.0);
  std::vector<double> tail_ms(n, 0.0);  // of fixed_ms: a kernel's last wave, with the SMs free for another stream's
  for (std::size_t i = 0; i < n; ++i) {
    const Op& op = plan.ops[i];
    const std::size_t elems = elems_of(i);
    TimedOp& t = report.ops[i];
    t.id = op.id;
    t.chunk = op.chunk;
    t.kind = op.kind;
    t.stage = op.stage;
    t.slot = op.slot;
    t.queue = op.queue;
    t.elems = elems;
    const double overhead = machine.op_overhead_us * 1e-3;
    switch (op.kind) {
      case OpKind::h2d:
      case OpKind::d2h:
        t.bytes = op.kind == OpKind::h2d ? elems * work.in_bytes_per_elem : variable ? sizeof(std::size_t) : out_bytes(elems);
        resource[i] = (op.kind == OpKind::h2d || one_engine) ? h2d_engine : d2h_engine;
        fixed_ms[i] = overhead + link.latency_us * 1e-3;
        transfer_bytes[i] = static_cast<double>(t.bytes);
        break;
      case OpKind::stage: {
        resource[i] = sms;
        const double ns = work.stage_ns_per_elem[static_cast<std::size_t>(op.stage)];
        const double tail = std::min(static_cast<double>(elems), machine.kernel_tail_elems) * ns * 1e-6;
        fixed_ms[i] = overhead + static_cast<double>(elems) * ns * 1e-6 + tail;
        tail_ms[i] = tail;
        break;
      }
      case OpKind::host_in:
      case OpKind::host_out:
        t.bytes = op.kind == OpKind::host_in ? elems * work.in_bytes_per_elem : out_bytes(elems);
        resource[i] = first_host + op.queue;
        if (variable && op.kind == OpKind::host_out) {
          // Its thread waits for the DMA; the pinned case, no host copy.
          t.bytes = kept_bytes(elems);
          fixed_ms[i] = elems == 0 ? 0.0
                                   : overhead + link.latency_us * 1e-3 +
                                         static_cast<double>(t.bytes) / (link.d2h_gbps * 1e6);
          break;
        }
        {
          // A file's chunk is read or written at the storage's rate; a
          // staged range's at the host's memcpy rate.
          const double gbps = op.kind == OpKind::host_in && work.in_from_storage     ? machine.storage_read_gbps
                              : op.kind == OpKind::host_out && work.out_to_storage ? machine.storage_write_gbps
                                                                                   : machine.host_copy_gbps;
          fixed_ms[i] = elems == 0 ? 0.0 : overhead + static_cast<double>(t.bytes) / (gbps * 1e6);
        }
        break;
    }
    if (elems == 0) fixed_ms[i] = 0.0, transfer_bytes[i] = 0.0;
    if (variable ? op.kind == OpKind::host_out : op.kind == OpKind::d2h) report.bytes_out += t.bytes;
  }

  // Happens-before: the previous op on the queue and the waits.
  std::vector<std::vector<std::size_t>> next(n);
  std::vector<std::size_t> pending(n, 0);
  {
    std::vector<std::size_t> tail(plan.queues.size(), n);
    for (const Op& op : plan.ops) {
      std::size_t& t = tail[static_cast<std::size_t>(op.queue)];
      if (t != n) next[t].push_back(op.id), ++pending[op.id];
      t = op.id;
      for (std::size_t w : op.waits) next[w].push_back(op.id), ++pending[op.id];
    }
  }

  using Ready = std::pair<double, std::size_t>;  // (ready time, op id): served smallest first
  using ReadyQueue = std::priority_queue<Ready, std::vector<Ready>, std::greater<Ready>>;
  const std::size_t resources = first_host + plan.queues.size();
  std::vector<ReadyQueue> ready(resources);
  constexpr std::size_t idle = std::numeric_limits<std::size_t>::max();
  std::vector<std::size_t> running(resources, idle);
  std::vector<double> fixed_end(n, 0.0), remaining(n, 0.0);
  std::vector<bool> transferring(n, false);
  std::vector<std::pair<double, std::size_t>> tailing;  // (end, op): kernels in their tails, SMs let go
  std::size_t done = 0;
  double now = 0.0;

  // When the host has issued each op: device ops one after another, in
  // plan order (host ops are their threads' own work).
  std::vector<double> issued_at(n, 0.0);
  if (machine.host_issue_us > 0.0) {
    double t = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      if (plan.queues[static_cast<std::size_t>(plan.ops[i].queue)].kind != QueueKind::device) continue;
      t += machine.host_issue_us * 1e-3;
      issued_at[i] = t;
    }
  }
  std::priority_queue<std::pair<double, std::size_t>, std::vector<std::pair<double, std::size_t>>,
                      std::greater<std::pair<double, std::size_t>>>
      unissued;  // (issue time, op): ready but not yet issued by the host

  // An op with nothing to do (a chunk past the end) finishes the moment it
  // is ready and holds no resource; otherwise it queues for its resource.
  std::vector<std::size_t> finished;  // ops that finished at `now`, successors not yet released
  auto make_ready = [&](std::size_t i) {
    if (issued_at[i] > now) {
      unissued.push({issued_at[i], i});
      return;
    }
    if (fixed_ms[i] == 0.0 && transfer_bytes[i] == 0.0 && report.ops[i].elems == 0) {
      report.ops[i].start_ms = report.ops[i].end_ms = now;
      finished.push_back(i);
    } else {
      ready[static_cast<std::size_t>(resource[i])].push({now, i});
    }
  };
  auto release = [&]() {
    while (!finished.empty()) {
      const std::size_t i = finished.back();
      finished.pop_back();
      ++done;
      for (std::size_t s : next[i]) {
        if (--pending[s] == 0) make_ready(s);
      }
    }
  };
  for (std::size_t i = 0; i < n; ++i) {
    if (pending[i] == 0) make_ready(i);
  }
  release();

  while (true) {
    // Every free resource takes the op that has been ready longest.
    for (std::size_t r = 0; r < resources; ++r) {
      if (running[r] != idle || ready[r].empty()) continue;
      const std::size_t i = ready[r].top().second;
      ready[r].pop();
      running[r] = i;
      report.ops[i].start_ms = now;
      fixed_end[i] = now + fixed_ms[i] - tail_ms[i];
      remaining[i] = transfer_bytes[i];
      transferring[i] = false;
    }

    // The copies now moving bytes, and their shares of the link.
    std::size_t in_copy = idle, out_copy = idle;
    for (int r : {int{h2d_engine}, int{d2h_engine}}) {
      const std::size_t i = running[static_cast<std::size_t>(r)];
      if (i == idle || !transferring[i]) continue;
      (plan.ops[i].kind == OpKind::h2d ? in_copy : out_copy) = i;
    }
    const auto rates = detail::link_rates(link, in_copy != idle, out_copy != idle);
    auto rate_of = [&](std::size_t i) { return i == in_copy ? rates.first : rates.second; };

    // The next moment anything changes.
    double step = std::numeric_limits<double>::infinity();
    bool any = false;
    for (std::size_t r = 0; r < resources; ++r) {
      const std::size_t i = running[r];
      if (i == idle) continue;
      any = true;
      step = std::min(step, transferring[i] ? remaining[i] / rate_of(i) : fixed_end[i] - now);
    }
    for (const auto& t : tailing) {
      any = true;
      step = std::min(step, t.first - now);
    }
    if (!unissued.empty()) {
      any = true;
      step = std::min(step, unissued.top().first - now);
    }
    if (!any) break;
    step = std::max(step, 0.0);

    const double then = now + step;
    for (std::size_t r = 0; r < resources; ++r) {
      const std::size_t i = running[r];
      if (i == idle) continue;
      bool ends = false;
      if (transferring[i]) {
        // Finishing within a rounding error of the earliest counts as now,
        // so two copies that end together do not take two steps.
        const double left = remaining[i] - rate_of(i) * step;
        ends = left <= 1e-9 * transfer_bytes[i] || remaining[i] / rate_of(i) <= step * (1.0 + 1e-12);
        remaining[i] = ends ? 0.0 : left;
      } else if (fixed_end[i] - now <= step) {  // the very expression `step` is the minimum of
        if (transfer_bytes[i] > 0.0) {
          transferring[i] = true;  // latency paid; the bytes start moving
        } else {
          ends = true;
        }
      }
      if (ends) {
        running[r] = idle;
        if (tail_ms[i] > 0.0) {
          tailing.push_back({then + tail_ms[i], i});  // its last wave: the SMs are free for another stream
        } else {
          report.ops[i].end_ms = then;
          finished.push_back(i);
        }
      }
    }
    for (std::size_t k = 0; k < tailing.size();) {
      // Within a rounding error of the step, as for fixed ends above.
      if (tailing[k].first - now <= step * (1.0 + 1e-12)) {
        report.ops[tailing[k].second].end_ms = then;
        finished.push_back(tailing[k].second);
        tailing[k] = tailing.back();
        tailing.pop_back();
      } else {
        ++k;
      }
    }
    now = then;
    while (!unissued.empty() && unissued.top().first <= now * (1.0 + 1e-12)) {
      const std::size_t i = unissued.top().second;
      unissued.pop();
      issued_at[i] = now;  // issued: make_ready queues it now
      make_ready(i);
    }
    release();  // the ready queues order by (time, id), so release order does not matter
  }

  if (done != n) {
    throw pipeline_error("chunkpipe: simulate: " + std::to_string(n - done) +
                         " ops never became ready; the plan's waits form a cycle");
  }
  return report;
}

CHUNKPIPE_INLINE Report simulate(Policy policy, int depth, const Workload& work, const Machine& machine) {
  if (work.chunk_elems == 0) throw config_error("chunkpipe: simulate: chunk_elems must be at least 1 (got 0)");
  const Resolved r = resolve(policy, depth);
  PlanShape shape;
  shape.stages = static_cast<int>(work.stage_ns_per_elem.size());
  const std::size_t chunks = (work.elems + work.chunk_elems - 1) / work.chunk_elems;
  return simulate(make_plan(r.policy, r.depth, shape, chunks), work, machine);
}

CHUNKPIPE_INLINE SpreadPrediction simulate_spread(Policy policy, int depth, const Workload& work,
                                        const std::vector<Machine>& members, std::size_t piece_elems,
                                        double staged_bytes_per_elem, double host_memcpy_gbps) {
  if (members.empty()) throw config_error("chunkpipe: simulate_spread: needs at least one member machine");
  if (work.elems == 0) throw config_error("chunkpipe: simulate_spread: the run needs at least 1 element (got 0)");
  SpreadShape shape;
  shape.runs = {work.elems};
  shape.staged_bytes_per_elem = staged_bytes_per_elem;
  shape.host_memcpy_gbps = host_memcpy_gbps;
  return simulate_spread(policy, depth, work, members, piece_elems, shape);
}

CHUNKPIPE_INLINE SpreadPrediction simulate_spread(Policy policy, int depth, const Workload& work,
                                        const std::vector<Machine>& members, std::size_t piece_elems,
                                        const SpreadShape& shape) {
  if (members.empty()) throw config_error("chunkpipe: simulate_spread: needs at least one member machine");
  if (work.chunk_elems == 0) throw config_error("chunkpipe: simulate_spread: chunk_elems must be at least 1 (got 0)");
  if (piece_elems == 0 || piece_elems % work.chunk_elems != 0) {
    throw config_error("chunkpipe: simulate_spread: a piece must be a whole number of chunks (piece_elems " +
                       std::to_string(piece_elems) + ", chunk_elems " + std::to_string(work.chunk_elems) + ")");
  }
  detail::require_figure(shape.staged_bytes_per_elem, "staged_bytes_per_elem", false);
  detail::require_figure(shape.host_memcpy_gbps, "host_memcpy_gbps", false);
  if (shape.staged_bytes_per_elem > 0.0 && shape.host_memcpy_gbps <= 0.0) {
    throw config_error("chunkpipe: simulate_spread: a staged run needs the host's memcpy rate (host_memcpy_gbps)");
  }
  const std::vector<std::size_t> runs = shape.runs.empty() ? std::vector<std::size_t>{work.elems} : shape.runs;
  std::size_t total = 0;
  for (std::size_t n : runs) {
    if (n == 0) throw config_error("chunkpipe: simulate_spread: the run needs at least 1 element (got 0)");
    total += n;
  }
  if (!shape.devices.empty() && shape.devices.size() != members.size()) {
    throw config_error("chunkpipe: simulate_spread: devices names " + std::to_string(shape.devices.size()) +
                       " devices for " + std::to_string(members.size()) + " members (one each, or none)");
  }
  // Each member's timeline: its own, or the first member's on its device.
  std::vector<std::size_t> line(members.size());
  for (std::size_t i = 0; i < members.size(); ++i) {
    line[i] = i;
    for (std::size_t j = 0; j < i && !shape.devices.empty(); ++j) {
      if (shape.devices[j] != shape.devices[i]) continue;
      const LinkModel& a = members[j].link;
      const LinkModel& b = members[i].link;
      if (a.h2d_gbps != b.h2d_gbps || a.d2h_gbps != b.d2h_gbps || a.both_gbps != b.both_gbps) {
        throw config_error("chunkpipe: simulate_spread: members " + std::to_string(j) + " and " + std::to_string(i) +
                           " list device " + std::to_string(shape.devices[i]) +
                           " and so share its link, but their machines' links differ");
      }
      line[i] = j;
      break;
    }
  }
  const Resolved r = resolve(policy, depth);
  PlanShape plan_shape;
  plan_shape.stages = static_cast<int>(work.stage_ns_per_elem.size());
  // What member m's runs in a row cost (the plan of those runs, as the
  // member issues them).
  auto span = [&](std::size_t m, const std::vector<std::size_t>& lengths) {
    std::vector<RunSpec> specs;
    Workload w = work;
    w.elems = 0;
    for (std::size_t e : lengths) {
      RunSpec s;
      s.chunks = (e + work.chunk_elems - 1) / work.chunk_elems;
      s.elems = e;
      specs.push_back(s);
      w.elems += e;
    }
    return makespan_ms(simulate(make_plan(r.policy, r.depth, plan_shape, specs), w, members[m]));
  };
  // A piece of `len` on member m: alone (the first of its timeline, or of
  // a run that does not flow), and behind a full piece.
  std::vector<std::tuple<std::size_t, std::size_t, double, double>> costs;  // (m, len, alone, behind)
  auto cost = [&](std::size_t m, std::size_t len, bool alone) {
    for (const auto& [cm, cl, a, b] : costs) {
      if (cm == m && cl == len) return alone ? a : b;
    }
    const double full = span(m, {piece_elems});
    const double a = len == piece_elems ? full : span(m, {len});
    const double b = span(m, {piece_elems, len}) - full;
    costs.emplace_back(m, len, a, b);
    return alone ? a : b;
  };

  SpreadPrediction p;
  p.pieces.assign(members.size(), 0);
  p.busy_ms.assign(members.size(), 0.0);
  std::vector<double> free_at(members.size(), 0.0);  // [timeline]: when it takes its next piece
  std::vector<char> fresh(members.size(), 1);        // [timeline]: its next piece starts it afresh
  std::vector<std::size_t> turn(members.size(), 0);  // [timeline]: pieces it took, for taking turns
  double complete = 0.0;
  for (std::size_t k = 0; k < runs.size(); ++k) {
    if (k > 0 && !shape.flows) {
      std::fill(free_at.begin(), free_at.end(), complete);
      std::fill(fresh.begin(), fresh.end(), 1);
    }
    const std::size_t count = (runs[k] + piece_elems - 1) / piece_elems;
    const std::size_t tail = runs[k] - (count - 1) * piece_elems;
    double end = 0.0;
    for (std::size_t j = 0; j < count; ++j) {
      // The timeline free first (ties to the lower index), then its
      // members in turn.
      std::size_t t = line[0];
      for (std::size_t i = 1; i < members.size(); ++i) {
        if (line[i] == i && free_at[i] < free_at[t]) t = i;
      }
      std::vector<std::size_t> on;
      for (std::size_t i = 0; i < members.size(); ++i) {
        if (line[i] == t) on.push_back(i);
      }
      const std::size_t m = on[turn[t]++ % on.size()];
      free_at[t] += cost(m, j + 1 == count ? tail : piece_elems, fresh[t] != 0);
      fresh[t] = 0;
      p.busy_ms[m] = free_at[t];
      ++p.pieces[m];
      end = std::max(end, free_at[t]);
    }
    complete = std::max(complete, end);
    p.run_end_ms.push_back(complete);
  }
  p.device_ms = complete;
  p.host_ms = shape.staged_bytes_per_elem > 0.0
                  ? static_cast<double>(total) * shape.staged_bytes_per_elem / (shape.host_memcpy_gbps * 1e6)
                  : 0.0;
  p.host_bound = p.host_ms > p.device_ms;
  p.makespan_ms = std::max(p.device_ms, p.host_ms);
  return p;
}

CHUNKPIPE_INLINE Workload map_workload(std::size_t elems, std::size_t chunk_elems, double kernel_ms,
                             std::size_t in_bytes_per_elem, std::size_t out_bytes_per_elem) {
  if (elems == 0) throw config_error("chunkpipe: map_workload: elems must be at least 1 (got 0)");
  if (chunk_elems == 0) throw config_error("chunkpipe: map_workload: chunk_elems must be at least 1 (got 0)");
  detail::require_figure(kernel_ms, "kernel_ms", false);
  Workload w;
  w.elems = elems;
  w.chunk_elems = chunk_elems;
  w.in_bytes_per_elem = in_bytes_per_elem;
  w.out_bytes_per_elem = out_bytes_per_elem;
  w.stage_ns_per_elem = {kernel_ms * 1e6 / static_cast<double>(elems)};
  return w;
}

namespace machines {

CHUNKPIPE_INLINE Machine h200_pcie5() {
  Machine m;
  m.link.name = "H200 PCIe Gen5 x16";
  // Measured on the project's H200 test machine on 2026-11-29 with pinned
  // memory, 1 GiB per figure: H2D 53 to 55 GB/s, D2H 54 to 55, both at once
  // 97 to 100 in total over that day's runs (benchmarks/RESULTS.md: the
  // double_buffer component passes read 55.3, 55.1 and 101.0 GB/s).
  m.link.h2d_gbps = 54.5;
  m.link.d2h_gbps = 54.5;
  m.link.both_gbps = 98.5;
  // Assumed, not measured: about 3 us per copy in all (2 us latency plus
  // the 1 us op overhead below) is what makes that day's 53 GB/s at 4 MiB
  // chunks and 55 at 256 MiB come out. Replace with a measured figure.
  m.link.latency_us = 2.0;
  // asyncEngineCount 3: H2D and D2H each have an engine.
  m.link.copy_engines = 3;
  // Assumed: one host thread copying into pinned memory. Replace with a
  // measured figure before trusting predictions of staged (pageable) runs.
  m.host_copy_gbps = 10.0;
  // Assumed: the gap between two dependent ops on the GPU, launch-scale.
  m.op_overhead_us = 1.0;
  // Measured on the H200 on 2026-12-02 (pipeline_bench, 4096 FMAs per
  // element, benchmarks/RESULTS.md "Kernel lanes"): one kernel stream loses
  // 9 to 10 us per kernel against several, the time 65536 elements of that
  // kernel take (0.147 ns each). With it, the simulator's figures for one
  // and for two lanes came within 0.4% of the measured ones at 4 to 256 MiB.
  m.kernel_tail_elems = 65536.0;
  // Measured on the H200 on 2026-12-01 and 2026-12-02 (streams_bench's host
  // section: ops queued behind a gate, so the host's time alone): a
  // hand-written loop issues a chunk's three ops in 6.7 to 11.6 us, 2.2 to
  // 3.9 us an op, depending on the machine's day; chunkpipe's ops cost about
  // as much more again in events and waits on stage_streams.
  m.host_issue_us = 3.0;
  return m;
}

CHUNKPIPE_INLINE Machine t4_pcie3() {
  // A published benchmark table (the double-buffering lesson's, re-verified
  // 2026-09-02 on a Tesla T4 with CUDA 13.0): each one-way pass moves 1 GiB
  // (2^30 bytes) of pinned memory in 16 chunks of 64 MiB. Bandwidth is
  // bytes over the pass's time, so per-chunk costs are already inside it:
  // latency and overhead are 0 here to avoid paying them twice.
  constexpr double gib = 1073741824.0;
  Machine m;
  m.link.name = "Tesla T4 PCIe Gen3 x16";
  m.link.h2d_gbps = gib / 87.809e-3 / 1e9;  // "h2d only 87.809 ms": 12.23 GB/s
  m.link.d2h_gbps = gib / 82.444e-3 / 1e9;  // "d2h only 82.444 ms": 13.02 GB/s
  // No two-way figure was measured: assume no penalty.
  m.link.both_gbps = m.link.h2d_gbps + m.link.d2h_gbps;
  m.link.latency_us = 0.0;
  m.link.copy_engines = 3;  // asyncEngineCount 3
  m.host_copy_gbps = 0.0;   // unknown: the table's buffers are pinned, nothing is staged
  m.op_overhead_us = 0.0;
  return m;
}

}  // namespace machines

}  // namespace chunkpipe
