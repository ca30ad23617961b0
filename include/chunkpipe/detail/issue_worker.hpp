// SPDX-License-Identifier: MIT
// The thread that issues a pipeline's runs when the caller must not wait
// for them to be issued. Host-only.
//
// Issuing a staged run blocks on its own host work (an H2D cannot be queued
// before its pinned slot is filled), so run_async() hands it to this thread
// and returns. Runs keep the order they were handed over in; a run that
// needs no host work is issued by the caller itself when nothing is queued
// here, which costs no thread hop.
#pragma once

#include <chunkpipe/detail/linkage.hpp>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace chunkpipe::detail {

class IssueWorker {
 public:
  IssueWorker();
  IssueWorker(const IssueWorker&) = delete;
  IssueWorker& operator=(const IssueWorker&) = delete;
  /// Issues every job still queued, then stops. Never throws.
  ~IssueWorker();

  /// Whether no job is queued or running. Never blocks on a job.
  bool idle() {
    std::lock_guard<std::mutex> lock(mutex_);
    return pending_ == 0;
  }

  /// Queues a job (which must not throw); starts the thread on first use.
  void push(std::function<void()> job);

  /// Blocks until every job queued so far has run.
  void wait_idle() {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
  }

  void stop() noexcept;

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::deque<std::function<void()>> jobs_;
  std::size_t pending_ = 0;  // queued or running
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace chunkpipe::detail

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/issue_worker.inl>
#endif
