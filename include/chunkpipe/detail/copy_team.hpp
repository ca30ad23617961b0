// SPDX-License-Identifier: MIT
// A team of threads that share one staging copy, or one positional read or
// write. Host-only.
//
// One thread's memcpy moves far less than a PCIe Gen5 link, so a host
// queue that stages a chunk into a pinned slot splits the chunk's bytes
// over its team: the queue's own worker and the team's free helpers take
// the shares, and the copy ends when all are done. One thread's pread
// from the page cache is slower still (8 GB/s on the H200 machine, 37 to
// 53 with eight: shared/DEVICE.md), so a Source or Sink that reads or
// writes at any offset shares each chunk the same way. Each host queue of
// a pipeline has a team of its own; the members of a spread share one
// (Spread: the host's memory bounds staged runs, not the members' count),
// so several queues may hand it work at once.
#pragma once

#include <chunkpipe/detail/slots.hpp>

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace chunkpipe::detail {

class CopyTeam {
 public:
  /// `threads` in all, the caller's included: threads - 1 helpers start.
  /// Throws std::system_error (with no thread left running) where a
  /// thread cannot start.
  explicit CopyTeam(int threads) {
    try {
      for (int i = 1; i < threads; ++i) helpers_.emplace_back([this] { help(); });
    } catch (...) {
      stop();
      throw;
    }
  }
  ~CopyTeam() { stop(); }
  CopyTeam(const CopyTeam&) = delete;
  CopyTeam& operator=(const CopyTeam&) = delete;

  std::size_t threads() const noexcept { return helpers_.size() + 1; }

  /// Performs every copy; blocks until all bytes are in place. May be
  /// called from several threads at once (a spread's members share one
  /// team, so that the host's memory, not the members' count, sets how
  /// many threads copy): see each().
  void copy(const std::vector<Copy>& copies) {
    std::size_t total = 0;
    for (const Copy& c : copies) total += c.bytes;
    // Small copies are not worth waking anyone for.
    if (helpers_.empty() || total < (std::size_t{1} << 20)) {
      share(copies, total, 0, 1);
      return;
    }
    each([&](std::size_t part, std::size_t parts) { share(copies, total, part, parts); });
  }

  /// Calls fn(part, threads()) once for every part in [0, threads()), each
  /// on one thread: the caller's and whichever helpers are free (the caller
  /// takes every part no helper has taken, so a call never waits for a
  /// helper busy with another caller's parts to start one of its own), and
  /// returns when all have returned. What a call throws is rethrown here,
  /// the lowest part's first, once every call has returned. Blocks; may be
  /// called from several threads at once, each call's parts its own.
  void each(const std::function<void(std::size_t part, std::size_t parts)>& fn) {
    if (helpers_.empty()) {
      fn(0, 1);
      return;
    }
    Job job(fn, threads());
    {
      std::lock_guard<std::mutex> lock(mutex_);
      open_.push_back(&job);
    }
    go_.notify_all();
    for (;;) {
      std::size_t part = 0;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (job.next == job.parts) break;
        part = claim(job);
      }
      perform(job, part);
    }
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return job.done == job.parts; });
    for (const std::exception_ptr& e : job.errors) {
      if (e) std::rethrow_exception(e);
    }
  }

 private:
  // One call of each(): its parts are claimed in order, by its caller and
  // the helpers, and it ends when every part is done. Lives on the
  // caller's stack; `next`, `done` and `errors` under mutex_.
  struct Job {
    Job(const std::function<void(std::size_t, std::size_t)>& f, std::size_t n) : fn(&f), parts(n), errors(n) {}
    const std::function<void(std::size_t, std::size_t)>* fn;
    std::size_t parts;
    std::size_t next = 0;  // parts claimed
    std::size_t done = 0;  // parts returned
    std::vector<std::exception_ptr> errors;  // [part]: what its call threw
  };

  // Copies share `part` of `parts` of the bytes of `copies`, taken as one
  // concatenated range, in 64-byte-aligned pieces.
  static void share(const std::vector<Copy>& copies, std::size_t total, std::size_t part, std::size_t parts) {
    auto edge = [&](std::size_t p) { return p == parts ? total : (total / parts * p) & ~std::size_t{63}; };
    std::size_t begin = edge(part), end = edge(part + 1), base = 0;
    for (const Copy& c : copies) {
      const std::size_t lo = std::max(begin, base), hi = std::min(end, base + c.bytes);
      if (lo < hi) {
        std::memcpy(static_cast<std::byte*>(c.dst) + (lo - base), static_cast<const std::byte*>(c.src) + (lo - base),
                    hi - lo);
      }
      base += c.bytes;
      if (base >= end) break;
    }
  }

  // Takes `job`'s next part; a job with none left leaves the open list.
  // Under mutex_.
  std::size_t claim(Job& job) {
    const std::size_t part = job.next++;
    if (job.next == job.parts) open_.erase(std::find(open_.begin(), open_.end(), &job));
    return part;
  }

  // Runs one part and counts it done. Nothing of `job` is touched after
  // the count: the last part done lets its caller return.
  void perform(Job& job, std::size_t part) {
    std::exception_ptr error;
    try {
      (*job.fn)(part, job.parts);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job.errors[part] = std::move(error);
      ++job.done;
    }
    finished_.notify_all();  // callers wait on one condition variable
  }

  void stop() noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    go_.notify_all();
    for (std::thread& t : helpers_) t.join();
  }

  void help() {
    for (;;) {
      Job* job = nullptr;
      std::size_t part = 0;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        go_.wait(lock, [&] { return stop_ || !open_.empty(); });
        if (stop_) return;
        job = open_.front();
        part = claim(*job);
      }
      perform(*job, part);
    }
  }

  std::mutex mutex_;
  std::condition_variable go_, finished_;
  std::deque<Job*> open_;  // calls with parts unclaimed, oldest first
  bool stop_ = false;
  std::vector<std::thread> helpers_;  // last: started after the state they use
};

/// One CopyTeam of `threads`, made when first asked for and shared by all
/// who ask: a spread's members (each host lane of each member) and its
/// deliverer, so that a spread stages with one team, whatever its members'
/// count. Thread-safe.
class SharedCopyTeam {
 public:
  explicit SharedCopyTeam(int threads) : threads_(threads) {}
  int threads() const noexcept { return threads_; }
  /// The team; its threads start with the first call. Throws what starting
  /// a thread throws.
  std::shared_ptr<CopyTeam> get() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!team_) team_ = std::make_shared<CopyTeam>(threads_);
    return team_;
  }

 private:
  const int threads_;
  std::mutex mutex_;
  std::shared_ptr<CopyTeam> team_;
};

}  // namespace chunkpipe::detail
