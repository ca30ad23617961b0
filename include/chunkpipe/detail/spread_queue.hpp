// SPDX-License-Identifier: MIT
// A spread's queue of runs (detail/spread.hpp): runs are queued in the
// order run() and run_async() are called, and one thread of the spread's
// (an IssueWorker's, started by the first) starts them in that order. A
// run is complete when the thread says so (a run that keeps to itself) or
// later, when its last piece finishes (a flowing run); either way it is
// retired in queue order, which is what a blocking run() waits for.
// Host-only; tested on the CPU through the spreads of the host backend.
#pragma once

#include <chunkpipe/spread_ticket.hpp>  // spread_of_this_thread
#include <chunkpipe/detail/issue_worker.hpp>
#include <chunkpipe/detail/run_setup.hpp>  // RunRanges

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace chunkpipe {
namespace detail {

/// Queued runs and the thread that starts them. Thread-safe; one lock.
class SpreadQueue {
 public:
  /// A queued run. run() returns true when the run is complete (the queue
  /// retires it then), false when it was started and continues (whoever
  /// completes it calls retire()).
  struct Job {
    virtual ~Job() = default;
    virtual bool run() noexcept = 0;
    /// Ranges of a run that may continue into the runs before it (ranges
    /// or a Source in, ranges or a Sink out); null: the runs before it
    /// must be complete first.
    const RunRanges* flows = nullptr;
    /// Whether a run that continues puts its pieces through piece buffers
    /// of its own (a count into ranges, a Source's or a Sink's run: FlowingRuns bounds
    /// how many such runs are open at once).
    bool slots = false;
    /// What the run starts after (after(...)): each call blocks until that
    /// work ended, done or failed, and never throws.
    std::vector<std::function<void()>> after;
  };

  /// `start`: called on the queue's thread for each job in turn, once what
  /// it is after has ended; it waits for what else the job must follow,
  /// runs it and returns what Job::run() returns. `owner`: the spread,
  /// which that thread works for (spread_of_this_thread).
  SpreadQueue(std::function<bool(Job&)> start, const void* owner) : start_(std::move(start)), owner_(owner) {}
  SpreadQueue(const SpreadQueue&) = delete;
  SpreadQueue& operator=(const SpreadQueue&) = delete;
  ~SpreadQueue() { close(); }

  /// Queues `job` behind the jobs queued before (on an IssueWorker, whose
  /// thread starts with the first) and writes its place (1: the first ever
  /// queued) to `*place` before that thread can see the job. Throws only
  /// std::bad_alloc and std::system_error, with nothing queued.
  void push(std::unique_ptr<Job> job, std::size_t* place) {
    std::lock_guard<std::mutex> lock(mutex_);  // places in the worker's order
    *place = queued_ + 1;
    worker_.push([this, held = std::shared_ptr<Job>(std::move(job))]() mutable noexcept { serve(std::move(held)); });
    ++queued_;
  }

  /// One more run is complete, in queue order.
  void retire() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++retired_;
    retired_cv_.notify_all();
  }

  /// Blocks until the run at `place` is retired.
  void wait_retired(std::size_t place) {
    std::unique_lock<std::mutex> lock(mutex_);
    retired_cv_.wait(lock, [&] { return retired_ >= place; });
  }

  /// Starts every job still queued, then lets the thread go. Blocks. Call
  /// before anything `start` uses goes (the owner's destructor, first).
  void close() noexcept { worker_.stop(); }

 private:
  // One job, on the worker's thread: what it was queued after ends first
  // (its own tickets say how), and the jobs queued after it wait behind
  // it, as they start in order.
  void serve(std::shared_ptr<Job> job) noexcept {
    spread_of_this_thread = owner_;
    for (const auto& wait : job->after) {
      try {
        if (wait) wait();
      } catch (...) {  // a wait's errors are its work's own (Job::after)
      }
    }
    const bool complete = start_(*job);
    job.reset();  // a kept run's Source and Sink go before the next starts (a flowing run's, at its completion)
    if (complete) retire();
  }

  std::function<bool(Job&)> start_;
  const void* owner_;
  std::mutex mutex_;
  std::condition_variable retired_cv_;    // a run retired
  std::size_t queued_ = 0, retired_ = 0;  // runs queued, and retired, so far
  IssueWorker worker_;  // last: stopped (close()) before the rest goes
};

}  // namespace detail
}  // namespace chunkpipe
