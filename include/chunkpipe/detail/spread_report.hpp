// SPDX-License-Identifier: MIT
// A profiled spread run's report, made from its pieces' reports
// (detail/spread.hpp): one time axis, one row set per member. Host-only.
#pragma once

#include <chunkpipe/report.hpp>

#include <algorithm>
#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace chunkpipe {
namespace detail {

/// One piece of a spread run as its member measured it (a profiled run).
struct PieceReport {
  std::size_t member = 0;       ///< which member ran it
  std::size_t first_chunk = 0;  ///< the spread run's number of the piece's chunk 0
  Report report;
};

/// The members' names in a spread's reports, one per entry of `devices`:
/// "m0 (device 0)".
inline std::vector<std::string> spread_member_names(const std::vector<int>& devices) {
  std::vector<std::string> names;
  for (std::size_t m = 0; m < devices.size(); ++m) {
    names.push_back("m" + std::to_string(m) + " (device " + std::to_string(devices[m]) + ")");
  }
  return names;
}

/// A spread run's report from its pieces' reports: every op on one time
/// axis, each piece's moved by where it sits on its member's profiling
/// clock (Report::clock_ms) and the members' clocks lined up at their
/// zeros by the host clock (Report::clock_zero_ns), the earliest op at 0;
/// chunks numbered as the run's; queues the members' own, named after
/// their member (`names`), which TimedOp::device and Report::devices say.
/// `link`: what the floor is computed against (unknown: bandwidths 0).
/// Host-only; throws only std::bad_alloc.
inline Report spread_report(std::vector<PieceReport> pieces, std::vector<std::string> names, const LinkModel& link) {
  Report out;
  out.devices = std::move(names);
  out.link = link;
  if (pieces.empty()) return out;
  std::sort(pieces.begin(), pieces.end(),
            [](const PieceReport& a, const PieceReport& b) { return a.first_chunk < b.first_chunk; });
  const Report& first = pieces.front().report;
  out.label = "spread over " + std::to_string(out.devices.size()) + " members, each " + first.label;
  out.policy = first.policy;
  out.depth = first.depth;
  out.chunk_elems = first.chunk_elems;
  out.executor = first.executor;
  // Each member's queues once, in member order: a member's schedule keeps
  // its queues for its life, so every piece of it names the same ones.
  std::vector<std::size_t> queue_base(out.devices.size(), 0);
  std::vector<std::vector<Queue>> queues(out.devices.size());
  long long zero = 0;
  bool any = false;
  for (const PieceReport& p : pieces) {
    if (p.member >= queues.size()) continue;
    if (queues[p.member].size() < p.report.queues.size()) queues[p.member] = p.report.queues;
    if (!any || p.report.clock_zero_ns < zero) zero = p.report.clock_zero_ns;
    any = true;
  }
  for (std::size_t m = 0; m < queues.size(); ++m) {
    queue_base[m] = out.queues.size();
    for (const Queue& q : queues[m]) out.queues.push_back({q.kind, out.devices[m] + " " + q.name});
  }
  for (const PieceReport& p : pieces) {
    const Report& r = p.report;
    const double shift = static_cast<double>(r.clock_zero_ns - zero) * 1e-6 + r.clock_ms;
    std::size_t base_chunk = 0;  // the piece's own number of its chunk 0
    bool found = false;
    for (const TimedOp& op : r.ops) {
      if (!found || op.chunk < base_chunk) base_chunk = op.chunk;
      found = true;
    }
    for (TimedOp op : r.ops) {
      op.start_ms += shift;
      op.end_ms += shift;
      op.chunk = p.first_chunk + (op.chunk - base_chunk);
      op.device = static_cast<int>(p.member);
      if (p.member < queue_base.size()) op.queue += static_cast<int>(queue_base[p.member]);
      out.ops.push_back(op);
    }
    out.chunks += r.chunks;
    out.elems += r.elems;
    out.bytes_in += r.bytes_in;
    out.bytes_out += r.bytes_out;
    if (out.executor_note.empty()) out.executor_note = r.executor_note;
    if (out.decision.empty()) out.decision = r.decision;
  }
  double t0 = 0.0;
  for (std::size_t i = 0; i < out.ops.size(); ++i) t0 = i == 0 ? out.ops[i].start_ms : std::min(t0, out.ops[i].start_ms);
  for (std::size_t i = 0; i < out.ops.size(); ++i) {
    out.ops[i].start_ms -= t0;
    out.ops[i].end_ms -= t0;
    out.ops[i].id = i;  // issue order within each piece, pieces in run order
  }
  return out;
}

/// Whether a pipeline type profiles its runs (has report()).
template <class P, class = void>
struct has_report : std::false_type {};
template <class P>
struct has_report<P, std::void_t<decltype(std::declval<const P&>().report())>> : std::true_type {};

}  // namespace detail
}  // namespace chunkpipe
