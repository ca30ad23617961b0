// SPDX-License-Identifier: MIT
// How a spread's queued runs continue into each other (detail/spread.hpp):
// each member's pieces in flight, of whichever runs (MemberLanes), and the
// runs that were started and are not complete yet, completed in the order
// they started (OpenRuns). Host-only; tested on the CPU.
//
// Why: a spread run used to finish every piece before the next queued run
// took its first, so each run paid its members' pipeline fill and drain
// (16 queued runs of 64 MiB over {0, 0} ran at 0.824 of one run of the
// same bytes, issue 34). A run whose ranges touch no unfinished run's
// (detail/spread.hpp says which runs may) now takes pieces while the runs
// before it still have pieces in flight; a member's room (`ahead` pieces)
// is shared by all of them, so the balance between members is kept. The
// pieces are finished by a thread per member, not by the thread that
// issued them, so a run's issuing ends when its last piece is issued and
// nothing waits on one run's piece to start the next.
#pragma once

#include <chunkpipe/spread_ticket.hpp>  // spread_of_this_thread
#include <chunkpipe/detail/piece_book.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace chunkpipe {
namespace detail {

/// Each member's pieces in flight, oldest first, across runs, and one
/// thread per member that finishes them in that order as they run. A
/// piece is kept as what finishing it does (wait for it, then what its run
/// does with a finished piece: deliver, count, complete the run); that
/// must not throw: a piece's error goes to its own run. A piece counts as
/// in flight until it is finished, so a member's room (wait_room) is what
/// its pipeline really holds. Thread-safe: one mutex.
class MemberLanes {
 public:
  using Finish = std::function<void()>;
  /// A piece's entry, made before the piece is issued: pushing it then
  /// cannot fail, so no issued piece goes unfinished.
  using Entry = std::list<Finish>;
  /// Makes an entry for push(). Throws std::bad_alloc.
  static Entry entry(Finish finish) {
    Entry e;
    e.push_back(std::move(finish));
    return e;
  }

  /// Starts one finishing thread per member; `owner` is the spread they
  /// work for (spread_of_this_thread: a Sink fed there must not wait for a
  /// run of it). Throws std::system_error if a thread cannot start.
  MemberLanes(std::size_t members, const void* owner) : lanes_(members), ready_(members) {
    try {
      for (std::size_t m = 0; m < members; ++m) threads_.emplace_back([this, m, owner] { serve(m, owner); });
    } catch (...) {
      stop();
      throw;
    }
  }
  /// Finishes every piece in flight, then stops the threads. Blocks.
  ~MemberLanes() { stop(); }
  MemberLanes(const MemberLanes&) = delete;
  MemberLanes& operator=(const MemberLanes&) = delete;

  std::size_t members() const noexcept { return lanes_.size(); }
  /// Pieces member `m` has in flight.
  std::size_t in_flight(std::size_t m) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return lanes_.at(m).size();
  }

  /// Blocks until member `m` has fewer than `most` pieces in flight.
  void wait_room(std::size_t m, std::size_t most) {
    std::unique_lock<std::mutex> lock(mutex_);
    room_.wait(lock, [&] { return lanes_.at(m).size() < most; });
  }

  /// A piece just issued to member `m` (its entry()); m's thread finishes
  /// it after the ones before it. Never throws.
  void push(std::size_t m, Entry entry) noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto& lane = lanes_[m];
      lane.splice(lane.end(), entry);
    }
    ready_[m].notify_one();
  }

  /// Blocks until every piece pushed so far is finished (and with it,
  /// whatever its finishing completed).
  void wait_empty() {
    std::unique_lock<std::mutex> lock(mutex_);
    room_.wait(lock, [&] { return all_empty(); });
  }

 private:
  bool all_empty() const noexcept {
    for (const auto& l : lanes_) {
      if (!l.empty()) return false;
    }
    return true;
  }

  // Member m's finishing thread. The piece stays in its lane (in flight)
  // while it is finished; list references outlive pushes at the back.
  void serve(std::size_t m, const void* owner) {
    spread_of_this_thread = owner;
    auto& lane = lanes_[m];
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      ready_[m].wait(lock, [&] { return closing_ || !lane.empty(); });
      if (lane.empty()) return;
      Finish f = std::move(lane.front());
      lock.unlock();
      f();
      f = nullptr;  // what the piece held (its run, the member's ticket) goes before it counts as finished
      lock.lock();
      lane.pop_front();
      room_.notify_all();
    }
  }

  void stop() noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closing_ = true;
    }
    for (auto& cv : ready_) cv.notify_all();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

  mutable std::mutex mutex_;
  std::vector<std::list<Finish>> lanes_;
  std::vector<std::condition_variable> ready_;  // [m]: lane m has a piece, or closing
  std::condition_variable room_;               // a piece finished
  bool closing_ = false;
  std::vector<std::thread> threads_;
};

/// The started runs whose pieces the members take, oldest first, and one
/// thread per member that takes them: whenever its member has room (fewer
/// than `ahead` pieces in its lane), it takes the next piece of the oldest
/// run that has one left for it, issues it to the member and puts it in
/// the member's lane. So a run's pieces go to whichever member has room,
/// and a run started while another still has pieces out is taken up as
/// soon as a member runs out of the older one's. With `one_member_per_run`
/// (a Scan's spread: its carry passes from each piece to the next inside
/// one member's schedule) the first member to take a piece of a run takes
/// them all, in order, and takes no other run's until it has; the other
/// members take the runs after it. Thread-safe: one mutex.
class Handout {
 public:
  /// A started run, as the members' threads see it.
  class Run {
   public:
    virtual ~Run() = default;
    /// Member m takes the next piece, issues it and puts it in m's lane:
    /// got (an empty piece of a Source's end counts), none (no more, or the
    /// run stopped: its error is its own), full (its reorder bound).
    virtual PieceBook::Take take_one(std::size_t m) noexcept = 0;
    /// Blocks until take_one() may find other than full.
    virtual void wait_room() noexcept = 0;
    /// Every member found none: no piece of it will be issued any more.
    /// On the thread of the member that found none last.
    virtual void sealed() noexcept = 0;

   private:
    friend class Handout;
    std::vector<bool> done_for_;  // under the Handout's mutex: member m found none
    std::size_t members_done_ = 0;
  };

  /// Starts one thread per member; `owner` as for MemberLanes. Throws
  /// std::system_error if a thread cannot start.
  Handout(MemberLanes& lanes, std::size_t ahead, const void* owner, bool one_member_per_run = false)
      : lanes_(lanes), ahead_(ahead), one_member_(one_member_per_run) {
    try {
      for (std::size_t m = 0; m < lanes.members(); ++m) threads_.emplace_back([this, m, owner] { serve(m, owner); });
    } catch (...) {
      stop();
      throw;
    }
  }
  /// Stops the threads once every started run is sealed. Blocks.
  ~Handout() { stop(); }
  Handout(const Handout&) = delete;
  Handout& operator=(const Handout&) = delete;

  /// The members take r's pieces after those of every run started before.
  void start(std::shared_ptr<Run> r) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      r->done_for_.assign(threads_.size(), false);
      runs_.push_back(std::move(r));
    }
    work_.notify_all();
  }

 private:
  // Under mutex_: the oldest run member m has not found the end of.
  std::shared_ptr<Run> next_for(std::size_t m) const {
    for (const auto& r : runs_) {
      if (!r->done_for_[m]) return r;
    }
    return nullptr;
  }

  // Under mutex_: with one member a run, the member that picks a run first
  // owns it; to the others it is as if they had found its end. (Runs are
  // picked oldest first, so a member's own run, older than any run nobody
  // owns, is what next_for gives it until it finds that run's end.)
  void own(Run& r, std::size_t m) {
    if (!one_member_) return;
    for (std::size_t k = 0; k < r.done_for_.size(); ++k) {
      if (k != m && !r.done_for_[k]) {
        r.done_for_[k] = true;
        ++r.members_done_;
      }
    }
  }

  void serve(std::size_t m, const void* owner) {
    spread_of_this_thread = owner;
    for (;;) {
      lanes_.wait_room(m, ahead_);
      std::shared_ptr<Run> r;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        work_.wait(lock, [&] { return closing_ || next_for(m) != nullptr; });
        r = next_for(m);
        if (!r) return;  // closing, and nothing left to take
        own(*r, m);
      }
      const PieceBook::Take t = r->take_one(m);
      if (t == PieceBook::Take::full) {
        r->wait_room();
      } else if (t == PieceBook::Take::none) {
        bool last = false;
        {
          std::lock_guard<std::mutex> lock(mutex_);
          r->done_for_[m] = true;
          last = ++r->members_done_ == threads_.size();
          if (last) runs_.erase(std::find(runs_.begin(), runs_.end(), r));
        }
        if (last) r->sealed();
      }
    }
  }

  void stop() noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closing_ = true;
    }
    work_.notify_all();
    for (auto& t : threads_) {
      if (t.joinable()) t.join();
    }
  }

  MemberLanes& lanes_;
  const std::size_t ahead_;
  const bool one_member_;
  std::mutex mutex_;
  std::condition_variable work_;  // a run started, or closing
  std::deque<std::shared_ptr<Run>> runs_;
  bool closing_ = false;
  std::vector<std::thread> threads_;
};

/// The runs that were started and are not complete, completed in the order
/// they started (a ticket ready means every run queued before it is too,
/// and the spread's count of retired runs stays a count). A run is
/// complete once it is sealed (it takes no more pieces) and every piece it
/// issued finished; its completion (ticket, summary) then runs on the
/// thread that made it so, outside the lock, one run at a time.
/// Thread-safe: one mutex, held only to count.
class OpenRuns {
 public:
  /// One open run.
  class Run {
   public:
    explicit Run(std::function<void()> complete) : complete_(std::move(complete)) {}
    /// True once its completion ran (the spread's conflict check forgets it).
    bool completed() const noexcept { return completed_.load(std::memory_order_acquire); }

   private:
    friend class OpenRuns;
    bool done() const noexcept { return sealed_ && finished_ == issued_; }
    std::function<void()> complete_;
    std::function<void()> at_front_;         // when_front's, under the OpenRuns' mutex
    std::size_t issued_ = 0, finished_ = 0;  // under the OpenRuns' mutex
    bool sealed_ = false;                    // under the OpenRuns' mutex
    std::atomic<bool> completed_{false};
  };

  /// A run starts, after every run opened before it. `complete` must not
  /// throw.
  std::shared_ptr<Run> open(std::function<void()> complete) {
    auto r = std::make_shared<Run>(std::move(complete));
    std::lock_guard<std::mutex> lock(mutex_);
    open_.push_back(r);
    return r;
  }
  /// `r` issued one more piece (before the piece can finish).
  void issued(Run& r) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++r.issued_;
  }
  /// One of r's pieces finished.
  void finished(Run& r) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++r.finished_;
    }
    settle();
  }
  /// `r` takes no more pieces.
  void seal(Run& r) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      r.sealed_ = true;
    }
    settle();
  }
  /// Calls `fn` once every run opened before `r` is complete (their
  /// completions returned): here, now, if they are; otherwise on the
  /// thread that completes the last of them, after that completion. Once
  /// per run, before `r` can be done (a run that holds a piece back for
  /// it: its Sink is fed after the Sinks of the runs before it). `fn` must
  /// not throw.
  void when_front(Run& r, std::function<void()> fn) noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (completing_ || open_.empty() || open_.front().get() != &r) {
        r.at_front_ = std::move(fn);  // settle() calls it
        return;
      }
    }
    fn();
  }
  /// Blocks until every run opened so far is complete (its completion
  /// returned).
  void wait_idle() {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [&] { return open_.empty() && !completing_; });
  }
  /// Blocks until `r` is complete (its completion returned).
  void wait_completed(const Run& r) {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [&] { return r.completed(); });
  }
  /// Runs started and not yet complete.
  std::size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return open_.size();
  }

 private:
  // Completes the oldest runs while they are done. One thread completes at
  // a time: another that finds one completing leaves it to that one, which
  // looks again (under the lock) after each batch, so nothing done is left.
  void settle() {
    std::unique_lock<std::mutex> lock(mutex_);
    if (completing_) return;
    completing_ = true;
    for (;;) {
      std::vector<std::shared_ptr<Run>> ready;
      while (!open_.empty() && open_.front()->done()) {
        ready.push_back(std::move(open_.front()));
        open_.pop_front();
      }
      if (ready.empty()) {
        // The oldest open run waits for nothing before it now.
        if (!open_.empty() && open_.front()->at_front_) {
          std::function<void()> fn = std::move(open_.front()->at_front_);
          open_.front()->at_front_ = nullptr;
          lock.unlock();
          fn();
          lock.lock();
          continue;
        }
        completing_ = false;
        idle_.notify_all();
        return;
      }
      lock.unlock();
      for (const auto& r : ready) {
        r->complete_();
        r->complete_ = nullptr;  // what the completion holds goes now
        r->completed_.store(true, std::memory_order_release);
      }
      lock.lock();
      // Who waits for these (wait_completed) need not wait for what this
      // thread does next (a held run's deliveries, at_front_).
      idle_.notify_all();
    }
  }

  mutable std::mutex mutex_;
  std::condition_variable idle_;  // a batch of completions returned
  std::deque<std::shared_ptr<Run>> open_;
  bool completing_ = false;
};

}  // namespace detail
}  // namespace chunkpipe
