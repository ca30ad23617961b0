// SPDX-License-Identifier: MIT
// Definitions for detail/issue_worker.hpp. Included at its bottom where
// chunkpipe is header-only, or once by <chunkpipe/compiled.hpp>
// (detail/linkage.hpp); do not include directly.
#pragma once

namespace chunkpipe::detail {

// Out of line, with the members' constructors and destructors (a thread,
// a deque of functions): long code that the compiled part holds once.
CHUNKPIPE_INLINE IssueWorker::IssueWorker() = default;

CHUNKPIPE_INLINE IssueWorker::~IssueWorker() { stop(); }

CHUNKPIPE_INLINE void IssueWorker::push(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(job));
    ++pending_;
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
  }
  wake_.notify_one();
}

CHUNKPIPE_INLINE void IssueWorker::stop() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

CHUNKPIPE_INLINE void IssueWorker::loop() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --pending_;
    }
    done_.notify_all();
  }
}

}  // namespace chunkpipe::detail
