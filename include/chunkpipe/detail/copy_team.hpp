// SPDX-License-Identifier: MIT
// A team of threads that share one staging copy, or one positional read or
// write. Host-only.
//
// One thread's memcpy moves far less than a PCIe Gen5 link, so a host
// queue that stages a chunk into a pinned slot splits the chunk's bytes
// over its team: the queue's own worker takes the first share, helper
// threads the rest, and the copy ends when all have. One thread's pread
// from the page cache is slower still (8 GB/s on the H200 machine, 37 to
// 53 with eight: shared/DEVICE.md), so a Source or Sink that reads or
// writes at any offset shares each chunk the same way.
#pragma once

#include <chunkpipe/detail/slots.hpp>

#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace chunkpipe::detail {

class CopyTeam {
 public:
  /// `threads` in all, the caller's included: threads - 1 helpers start.
  explicit CopyTeam(int threads) {
    for (int i = 1; i < threads; ++i) helpers_.emplace_back([this, i] { help(static_cast<std::size_t>(i)); });
  }
  ~CopyTeam() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    go_.notify_all();
    for (std::thread& t : helpers_) t.join();
  }
  CopyTeam(const CopyTeam&) = delete;
  CopyTeam& operator=(const CopyTeam&) = delete;

  std::size_t threads() const noexcept { return helpers_.size() + 1; }

  /// Performs every copy; blocks until all bytes are in place. Not to be
  /// called from two threads at once (each host queue has its own team).
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
  /// on its own thread of the team (part 0 on the caller's), and returns
  /// when all have returned. What a call throws is rethrown here, the
  /// first part's first, once every call has returned. Blocks; not to be
  /// called from two threads at once.
  void each(const std::function<void(std::size_t part, std::size_t parts)>& fn) {
    if (helpers_.empty()) {
      fn(0, 1);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = &fn;
      errors_.assign(threads(), nullptr);
      remaining_ = helpers_.size();
      ++generation_;
    }
    go_.notify_all();
    std::exception_ptr mine;
    try {
      fn(0, threads());
    } catch (...) {
      mine = std::current_exception();
    }
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return remaining_ == 0; });
    job_ = nullptr;
    if (mine) std::rethrow_exception(mine);
    for (const std::exception_ptr& e : errors_) {
      if (e) std::rethrow_exception(e);
    }
  }

 private:
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

  void help(std::size_t part) {
    std::size_t seen = 0;
    for (;;) {
      const std::function<void(std::size_t, std::size_t)>* job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        go_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      std::exception_ptr error;
      try {
        (*job)(part, threads());
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        errors_[part] = error;
        --remaining_;
      }
      finished_.notify_one();
    }
  }

  std::mutex mutex_;
  std::condition_variable go_, finished_;
  const std::function<void(std::size_t, std::size_t)>* job_ = nullptr;
  std::vector<std::exception_ptr> errors_;  // [part]: what the part's call threw
  std::size_t remaining_ = 0;
  std::size_t generation_ = 0;
  bool stop_ = false;
  std::vector<std::thread> helpers_;  // last: started after the state they use
};

}  // namespace chunkpipe::detail
