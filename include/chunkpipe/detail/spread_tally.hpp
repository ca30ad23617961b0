// SPDX-License-Identifier: MIT
// What one spread run (detail/spread_run.inl) counts while its members'
// threads take and finish its pieces: its summary, its pieces' reports,
// and whether the handout is over (sealed). Host-only; tested on the CPU
// through the spread's tests.
#pragma once

#include <chunkpipe/spread_ticket.hpp>  // SpreadSummary
#include <chunkpipe/detail/spread_report.hpp>

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <utility>
#include <vector>

namespace chunkpipe {
namespace detail {

class SpreadTally {
 public:
  /// A run over `members` members.
  explicit SpreadTally(std::size_t members) { summary_.pieces.assign(members, 0); }

  /// Member m was given one more piece. Thread-safe.
  void issued(std::size_t m) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++summary_.pieces[m];
  }
  /// A piece's report (a profiled run). Thread-safe.
  void add(PieceReport r) {
    std::lock_guard<std::mutex> lock(mutex_);
    reports_.push_back(std::move(r));
  }

  /// No member takes another piece. Thread-safe; never blocks.
  void seal() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      sealed_ = true;
    }
    sealed_cv_.notify_all();
  }
  /// Blocks until seal().
  void wait_sealed() {
    std::unique_lock<std::mutex> lock(mutex_);
    sealed_cv_.wait(lock, [&] { return sealed_; });
  }

  /// The summary, for one thread at a time: the run's own once no member
  /// takes its pieces any more, or the thread delivering a piece (pieces
  /// are delivered one after another).
  SpreadSummary& summary() noexcept { return summary_; }
  /// The pieces' reports, once every piece is finished.
  std::vector<PieceReport>& reports() noexcept { return reports_; }

 private:
  std::mutex mutex_;
  std::condition_variable sealed_cv_;
  bool sealed_ = false;
  SpreadSummary summary_;             // pieces under mutex_
  std::vector<PieceReport> reports_;  // under mutex_
};

}  // namespace detail
}  // namespace chunkpipe
