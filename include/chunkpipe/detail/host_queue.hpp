// SPDX-License-Identifier: MIT
// A host queue: one worker thread running tasks in the order they were
// pushed, the host-side counterpart of a stream. Host-only.
//
// Tasks are values of one type (with `void run() noexcept`) kept in a ring
// that grows only when it is full, so a queue in steady state allocates
// nothing per task.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

template <class Task>
class HostQueue {
 public:
  HostQueue() : ring_(16), thread_([this] { loop(); }) {}
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

  /// Appends a task. Returns its position: the count of tasks ever pushed,
  /// this one included. Never blocks on the worker.
  std::size_t push(Task task) {
    std::size_t pos;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (pushed_ - taken_ == ring_.size()) grow();
      ring_[pushed_ % ring_.size()] = std::move(task);
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

  /// Whether the task at position `pos` has run. Never blocks on the worker.
  bool is_done(std::size_t pos) {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_ >= pos;
  }

  /// Blocks until every task pushed so far has run.
  void drain() {
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return done_ >= pushed_; });
  }

 private:
  // Holds the lock. Keeps the tasks in order in a ring twice the size.
  void grow() {
    std::vector<Task> bigger(ring_.size() * 2);
    for (std::size_t p = taken_; p < pushed_; ++p) bigger[p % bigger.size()] = std::move(ring_[p % ring_.size()]);
    ring_.swap(bigger);
  }

  void loop() {
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stop_ || taken_ != pushed_; });
        if (taken_ == pushed_) return;  // stopping, and nothing left to run
        task = std::move(ring_[taken_ % ring_.size()]);
        ++taken_;
      }
      task.run();
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
  std::vector<Task> ring_;
  std::size_t pushed_ = 0;
  std::size_t taken_ = 0;
  std::size_t done_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members it uses exist
};

}  // namespace chunkpipe::detail
