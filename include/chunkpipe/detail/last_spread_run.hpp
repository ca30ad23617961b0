// SPDX-License-Identifier: MIT
// What a spread says of its latest run (detail/spread.hpp): the summary
// and, for a profiled run, the report of the run started last, once it
// completes; nothing while it is in progress or after it failed. Runs
// complete in the order they started, but a run's completion and the next
// run's start come from different threads: each says which run it is.
// Host-only.
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/spread_ticket.hpp>  // SpreadSummary

#include <cstddef>
#include <mutex>
#include <optional>

namespace chunkpipe {
namespace detail {

/// The latest spread run's summary and report. Thread-safe; one lock.
class LastSpreadRun {
 public:
  /// The run with queue place `place` starts: it is the latest now, and
  /// what the one before left is gone.
  void started(std::size_t place) {
    std::lock_guard<std::mutex> lock(mutex_);
    latest_ = place;
    summary_ = SpreadSummary{};
    report_.reset();
  }
  /// The run at `place` completed: kept if no run started after it.
  void completed(std::size_t place, const SpreadSummary& summary, const std::optional<Report>& report) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (place != latest_) return;
    summary_ = summary;
    report_ = report;
  }
  /// The latest run's summary: empty while it runs and after it failed.
  SpreadSummary summary() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return summary_;
  }
  /// The latest run's report. Throws pipeline_error where there is none
  /// (`profiled`: whether the spread profiles, for the message).
  Report report(bool profiled) const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!report_) {
      throw pipeline_error(profiled ? "chunkpipe: no report: the latest spread run failed, or none has run"
                                    : "chunkpipe: no report: set Options::profile and run first");
    }
    return *report_;
  }

 private:
  mutable std::mutex mutex_;
  SpreadSummary summary_;
  std::optional<Report> report_;
  std::size_t latest_ = 0;  // the place of the run started last
};

}  // namespace detail
}  // namespace chunkpipe
