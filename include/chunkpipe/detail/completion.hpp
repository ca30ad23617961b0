// SPDX-License-Identifier: MIT
// How a run ends, for every backend: its first error, and a Sink's finish()
// or abort() called exactly once by whichever thread waits for the run
// first. Host-only; every member is safe to call from several threads.
#pragma once

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
  void set_hooks(std::function<void()> finish, std::function<void()> abort) {
    std::lock_guard<std::mutex> lock(mutex_);
    finish_ = std::move(finish);
    abort_ = std::move(abort);
  }

  /// Records a failure; the first one wins. Never throws.
  void fail(std::exception_ptr e) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = std::move(e);
    failed_.store(true, std::memory_order_release);
  }
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
  void conclude() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (state_ == State::open) {
      state_ = State::concluding;
      if (!error_ && finish_) {
        auto finish = std::move(finish_);
        lock.unlock();
        std::exception_ptr thrown;
        try {
          finish();
        } catch (...) {
          thrown = std::current_exception();
        }
        lock.lock();
        if (thrown && !error_) error_ = thrown;
      }
      if (error_ && abort_) {
        auto abort = std::move(abort_);
        lock.unlock();
        try {
          abort();
        } catch (...) {
          // The run's own error is the one to report.
        }
        lock.lock();
      }
      finish_ = nullptr;
      abort_ = nullptr;
      if (error_) failed_.store(true, std::memory_order_release);
      finished_.store(!error_, std::memory_order_release);
      state_ = State::done;
      done_.notify_all();
    } else {
      done_.wait(lock, [&] { return state_ == State::done; });
    }
    if (error_) std::rethrow_exception(error_);
  }

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
