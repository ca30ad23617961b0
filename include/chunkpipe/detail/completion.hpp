// SPDX-License-Identifier: MIT
// How a run ends, for every backend: its first error, and a Sink's finish()
// or abort() called exactly once by whichever thread waits for the run
// first. Host-only; every member is safe to call from several threads.
#pragma once

#include <chunkpipe/detail/linkage.hpp>

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <utility>

namespace chunkpipe::detail {

class RunCompletion {
 public:
  /// A Sink's hooks: `finish` after a run that succeeded, `abort` after one
  /// that failed (finish() throwing included). Either may be empty.
  void set_hooks(std::function<void()> finish, std::function<void()> abort);

  /// Records a failure; the first one wins. Never throws.
  void fail(std::exception_ptr e) noexcept;
  /// Whether the run has failed so far. Never blocks.
  bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }
  std::exception_ptr error() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }

  /// Ends the run once its work is over: runs finish() (or, after a
  /// failure, abort()) the first time, then returns, or throws the run's
  /// error, every time. What abort() throws is dropped in favour of the
  /// run's own error. Calls from several threads see the same outcome.
  void conclude();

  /// True once conclude() has returned without an error. Never blocks.
  bool succeeded() const noexcept { return finished_.load(std::memory_order_acquire); }

 private:
  mutable std::mutex mutex_;
  std::exception_ptr error_;
  std::atomic<bool> failed_{false};
  std::atomic<bool> finished_{false};
  enum class State { open, concluding, done } state_ = State::open;
  std::condition_variable done_;
  std::function<void()> finish_, abort_;
};

}  // namespace chunkpipe::detail

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/completion.inl>
#endif
