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

#include <chunkpipe/detail/linkage.hpp>
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
#include <utility>
#include <vector>

namespace chunkpipe::detail {

class CopyTeam {
 public:
  /// `threads` in all, the caller's included: threads - 1 helpers start.
  /// Throws std::system_error (with no thread left running) where a
  /// thread cannot start.
  explicit CopyTeam(int threads);
  ~CopyTeam() { stop(); }
  CopyTeam(const CopyTeam&) = delete;
  CopyTeam& operator=(const CopyTeam&) = delete;

  std::size_t threads() const noexcept { return helpers_.size() + 1; }

  /// Performs every copy; blocks until all bytes are in place. May be
  /// called from several threads at once (a spread's members share one
  /// team, so that the host's memory, not the members' count, sets how
  /// many threads copy): see each().
  void copy(const std::vector<Copy>& copies);

  /// Calls fn(part, threads()) once for every part in [0, threads()), each
  /// on one thread: the caller's and whichever helpers are free (the caller
  /// takes every part no helper has taken, so a call never waits for a
  /// helper busy with another caller's parts to start one of its own), and
  /// returns when all have returned. What a call throws is rethrown here,
  /// the lowest part's first, once every call has returned. Blocks; may be
  /// called from several threads at once, each call's parts its own.
  void each(const std::function<void(std::size_t part, std::size_t parts)>& fn);

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
  static void share(const std::vector<Copy>& copies, std::size_t total, std::size_t part, std::size_t parts);

  // Takes `job`'s next part; a job with none left leaves the open list.
  // Under mutex_.
  std::size_t claim(Job& job) {
    const std::size_t part = job.next++;
    if (job.next == job.parts) open_.erase(std::find(open_.begin(), open_.end(), &job));
    return part;
  }

  // Runs one part and counts it done. Nothing of `job` is touched after
  // the count: the last part done lets its caller return.
  void perform(Job& job, std::size_t part);

  void stop() noexcept;

  void help();

  std::mutex mutex_;
  std::condition_variable go_, finished_;
  std::deque<Job*> open_;  // calls with parts unclaimed, oldest first
  bool stop_ = false;
  std::vector<std::thread> helpers_;  // last: started after the state they use
};

/// One CopyTeam, made when first asked for and shared by all who ask: a
/// spread's members (each host lane of each member) and its deliverer, so
/// that a spread stages with one team, whatever its members' count; and,
/// where the team is sized by measurement, every such spread of the
/// process (spread_copy_team, detail/spread_member.hpp). Thread-safe.
class SharedCopyTeam {
 public:
  /// A team of `threads`.
  explicit SharedCopyTeam(int threads) : size_([threads] { return threads; }) {}
  /// A team of size() threads, asked once, by the first get().
  explicit SharedCopyTeam(std::function<int()> size) : size_(std::move(size)) {}
  /// The team; it is sized and its threads start with the first call
  /// (blocking for the size's measurement where it measures). Throws what
  /// sizing it or starting a thread throws; the next call tries again.
  std::shared_ptr<CopyTeam> get();

 private:
  std::function<int()> size_;
  std::mutex mutex_;
  std::shared_ptr<CopyTeam> team_;
};

}  // namespace chunkpipe::detail

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/copy_team.inl>
#endif
