// SPDX-License-Identifier: MIT
// Definitions for detail/completion.hpp. Included at its bottom where
// chunkpipe is header-only, or once by <chunkpipe/compiled.hpp>
// (detail/linkage.hpp); do not include directly.
#pragma once

namespace chunkpipe::detail {

CHUNKPIPE_INLINE void RunCompletion::set_hooks(std::function<void()> finish, std::function<void()> abort) {
  std::lock_guard<std::mutex> lock(mutex_);
  finish_ = std::move(finish);
  abort_ = std::move(abort);
}

CHUNKPIPE_INLINE void RunCompletion::fail(std::exception_ptr e) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error_) error_ = std::move(e);
  failed_.store(true, std::memory_order_release);
}

CHUNKPIPE_INLINE void RunCompletion::conclude() {
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

}  // namespace chunkpipe::detail
