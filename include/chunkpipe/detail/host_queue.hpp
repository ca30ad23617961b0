// SPDX-License-Identifier: MIT
// A host queue: one worker thread running tasks in the order they were
// pushed, the host-side counterpart of a stream. Host-only.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

namespace chunkpipe::detail {

class HostQueue {
 public:
  HostQueue() : thread_([this] { loop(); }) {}
  ~HostQueue() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  HostQueue(const HostQueue&) = delete;
  HostQueue& operator=(const HostQueue&) = delete;

  /// Appends a task, which must not throw. Returns its position: the count
  /// of tasks ever pushed, this one included. Never blocks on the worker.
  std::size_t push(std::function<void()> task) {
    std::size_t pos;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      tasks_.push_back(std::move(task));
      pos = ++pushed_;
    }
    wake_.notify_one();
    return pos;
  }

  /// Blocks until the task at position `pos` (and so every earlier one) has run.
  void wait_done(std::size_t pos) {
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return done_ >= pos; });
  }

  /// Blocks until every task pushed so far has run.
  void drain() {
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return done_ >= pushed_; });
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;  // stopping, and nothing left to run
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++done_;
      }
      finished_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable finished_;
  std::deque<std::function<void()>> tasks_;
  std::size_t pushed_ = 0;
  std::size_t done_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members it uses exist
};

}  // namespace chunkpipe::detail
