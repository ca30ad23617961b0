// SPDX-License-Identifier: MIT
// Part of spread_ticket.hpp, which includes it after SpreadSummary (the
// summary a run's state holds): the run behind a SpreadTicket, which the
// spread's threads complete and the ticket waits on (SpreadRunState,
// SpreadRunEnd), and the spread a thread works for. Not API; do not
// include directly.
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/report.hpp>

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace chunkpipe {

namespace detail {

/// The spread whose run the current thread works for (its run thread, or a
/// member thread of its run), or null: waiting there for a run of that
/// spread that has not ended would wait for itself.
inline thread_local const void* spread_of_this_thread = nullptr;

/// The end of a spread run, whatever it gives: what a run ordered after
/// it (SpreadAfter) waits for.
class SpreadRunEnd {
 public:
  virtual ~SpreadRunEnd() = default;
  /// Blocks until the run ended, done or failed. Never throws, and never
  /// refuses: a run thread waits here only for runs queued before its own.
  virtual void wait_ended() const noexcept = 0;
};

/// What a queued spread run came to, shared by its tickets and the
/// spread's run thread. Thread-safe.
template <class R>
class SpreadRunState final : public SpreadRunEnd {
 public:
  explicit SpreadRunState(const void* owner) : owner_(owner) {}

  void wait_ended() const noexcept override {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return done_; });
  }

  void succeed(R value, SpreadSummary summary, std::optional<Report> report) {
    std::lock_guard<std::mutex> lock(mutex_);
    value_.emplace(std::move(value));
    summary_ = std::move(summary);
    report_ = std::move(report);
    done_ = true;
    cv_.notify_all();
  }
  void fail(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::move(e);
    done_ = true;
    cv_.notify_all();
  }
  // Blocks until the run ended; rethrows its error. Throws pipeline_error,
  // rather than waiting for ever, on a thread of its spread's runs.
  void wait() const {
    std::unique_lock<std::mutex> lock(mutex_);
    if (!done_ && spread_of_this_thread == owner_) {
      throw pipeline_error(
          "chunkpipe: a spread run waited for from inside a run of the same spread (its Source, "
          "Sink or finish(), or what a run it ordered after(...) calls): it would wait for a run "
          "that waits for this call");
    }
    cv_.wait(lock, [&] { return done_; });
    if (error_) std::rethrow_exception(error_);
  }
  bool ready() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }
  // After wait() returned: the run's result, summary and report.
  R value() const {
    wait();
    std::lock_guard<std::mutex> lock(mutex_);
    return *value_;
  }
  SpreadSummary summary() const {
    wait();
    std::lock_guard<std::mutex> lock(mutex_);
    return summary_;
  }
  std::optional<Report> report() const {
    wait();
    std::lock_guard<std::mutex> lock(mutex_);
    return report_;
  }
  std::size_t place = 0;  // its place in its spread's queue (1: the first run), set before it is queued

 private:
  mutable std::mutex mutex_;
  mutable std::condition_variable cv_;
  bool done_ = false;
  std::optional<R> value_;
  SpreadSummary summary_;
  std::optional<Report> report_;
  std::exception_ptr error_;
  const void* owner_;  // the spread that runs it
};

}  // namespace detail
}  // namespace chunkpipe
