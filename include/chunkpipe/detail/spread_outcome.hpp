// SPDX-License-Identifier: MIT
// What a spread run that keeps to itself came to, once its pieces are all
// finished (detail/spread.hpp, run_sides): its summary and, for a profiled
// run, the spread's report made from its pieces' reports; and what such a
// run of ranges in and out gives its caller. Host-only; tested on the CPU
// through the spread's tests.
//
// Why separate: this is assembly after the fact, from the run's tally
// alone, on the run thread once no member thread touches that tally any
// more; it needs nothing of the engine but its devices, and keeping it out
// keeps the engine to queueing and starting runs.
#pragma once

#include <chunkpipe/report.hpp>
#include <chunkpipe/spread_ticket.hpp>  // SpreadSummary
#include <chunkpipe/detail/spread_report.hpp>
#include <chunkpipe/detail/spread_runs.hpp>  // SpreadOutcome
#include <chunkpipe/detail/spread_tally.hpp>

#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

namespace chunkpipe {
namespace detail {

/// The outcome of a run from its `tally`, once every piece finished (its
/// reports are moved out). `profiled`: the members report and the spread
/// profiles (Options::profile): the outcome then holds the run's report,
/// its members named after `devices` (Options::devices). Never blocks;
/// throws only std::bad_alloc.
inline SpreadOutcome spread_outcome(SpreadTally& tally, const std::vector<int>& devices, bool profiled) {
  SpreadOutcome o;
  o.summary = tally.summary();
  if (profiled) {
    // One link for the floor where every member is the same device.
    const bool one_device = std::all_of(devices.begin(), devices.end(), [&](int d) { return d == devices.front(); });
    std::vector<PieceReport>& reports = tally.reports();
    const LinkModel link = one_device && !reports.empty() ? reports.front().report.link : LinkModel{};
    o.report =
        ::chunkpipe::detail::spread_report(std::move(reports), ::chunkpipe::detail::spread_member_names(devices), link);
  }
  return o;
}

/// What run(in, out) gives for a run that came to `summary`: a Filter's or
/// an Emit's count (`Counted`: elements written), or the summary itself.
/// Never blocks; throws only std::bad_alloc.
template <bool Counted>
std::conditional_t<Counted, std::size_t, SpreadSummary> spread_run_value(const SpreadSummary& summary) {
  if constexpr (Counted) {
    return summary.written;
  } else {
    return summary;
  }
}

}  // namespace detail
}  // namespace chunkpipe
