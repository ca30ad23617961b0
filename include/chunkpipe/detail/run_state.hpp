// SPDX-License-Identifier: MIT
// The state of one GPU run behind its tickets (run_ticket.cuh), and what a
// pipeline shares with them: whether its device context is still usable
// (Health), events for ordering (EventPool), and who may hold a run back
// (HeldRuns).
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/errors.hpp>
#include <chunkpipe/memory.cuh>
#include <chunkpipe/options.hpp>
#include <chunkpipe/detail/completion.hpp>
#include <chunkpipe/detail/driver.hpp>  // RunLabel
#include <chunkpipe/detail/endpoints.hpp>
#include <chunkpipe/detail/linkage.hpp>
#include <chunkpipe/detail/run_timeline.hpp>

#include <cuda_runtime_api.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

/// Whether a pipeline's device context is still usable; shared with its
/// tickets so a fault found by any of them marks the pipeline.
struct Health {
  std::atomic<bool> broken{false};
  std::mutex mutex;
  std::string why;

  /// Marks the context broken (keeping the first reason). Never throws
  /// but std::bad_alloc.
  void mark(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!broken.exchange(true)) why = reason;
  }
  /// For the first run that waits and finds the context broken: marks it,
  /// and returns true if no run has reported the fault yet (that run
  /// reports the CUDA error; the others, that they could not complete).
  bool claim(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!broken.exchange(true)) why = reason;
    if (claimed) return false;
    claimed = true;
    return true;
  }
  bool claimed = false;  // guarded by mutex
  std::string reason() {
    std::lock_guard<std::mutex> lock(mutex);
    return why;
  }
};

/// Events for ordering only, reused: creating one costs microseconds, and a
/// run needs a few (its completion, its ordering after other work). Shared
/// by a pipeline and its tickets, which may outlive it.
class EventPool {
 public:
  Event get() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!free_.empty()) {
        Event e = std::move(free_.back());
        free_.pop_back();
        return e;
      }
    }
    return Event::create();
  }
  void put(std::vector<Event>& events) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    for (Event& e : events) {
      if (e) free_.push_back(std::move(e));
    }
    events.clear();
  }

 private:
  std::mutex mutex_;
  std::vector<Event> free_;
};

/// Whoever may hold a run back before issuing it (a pipeline coalescing
/// small runs, Options::coalesce): asked to issue what it holds now,
/// because something is about to wait for it.
class HeldRuns {
 public:
  virtual void issue_held() noexcept = 0;

 protected:
  ~HeldRuns() = default;
};

/// A run's progress through issue and completion: whether every op is
/// issued, how many of its host tasks are still to finish, and which
/// waiter does the work of wait(). Its one lock guards all of it; a
/// RunState's other fields are written before the run is queued or before
/// it is marked issued, and read after.
class RunProgress {
 public:
  /// Marks every op issued (or the run abandoned before its first).
  void mark_issued() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      issued_ = true;
    }
    cv_.notify_all();
  }
  bool is_issued() {
    std::lock_guard<std::mutex> lock(mutex_);
    return issued_;
  }
  /// Blocks until mark_issued().
  void wait_issued() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return issued_; });
  }

  // Host tasks of the run not yet finished. Counted here rather than by
  // queue position so a ticket never needs the pipeline's queues, which
  // may be gone by the time it is waited on.
  void host_task_started() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++host_pending_;
  }
  void host_task_finished() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --host_pending_;
    }
    cv_.notify_all();
  }
  /// Blocks until every host task started has finished.
  void wait_host_tasks() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return host_pending_ == 0; });
  }
  /// Issued, with no host task left. Never blocks on the run.
  bool issued_and_host_done() {
    std::lock_guard<std::mutex> lock(mutex_);
    return issued_ && host_pending_ == 0;
  }

  /// One waiter at a time does wait()'s work: true for the caller that is
  /// to do it now (then it calls end_wait), false once it was done (after
  /// blocking while another waiter does it).
  bool begin_wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return !waiting_; });
    if (waited_.load(std::memory_order_relaxed)) return false;
    waiting_ = true;
    return true;
  }
  /// The work begun is over: `done` (later waiters skip it) or not (it
  /// threw; the next waiter tries again).
  void end_wait(bool done) noexcept {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      waiting_ = false;
      if (done) waited_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
  }
  /// wait()'s work was done. Never blocks.
  bool waited() const noexcept { return waited_.load(std::memory_order_acquire); }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool issued_ = false;
  std::size_t host_pending_ = 0;
  bool waiting_ = false;
  std::atomic<bool> waited_{false};  // written under mutex_; waited() reads it without
};

/// Everything one run owns or needs to finish, shared by its tickets, the
/// thread that issues it and the host workers that run its host ops. Its
/// fields are grouped by who writes them when: `setup` before the run is
/// queued, `issue` before it is marked issued (both read-only afterwards);
/// the rest is atomic or guarded by its own lock.
struct RunState {
  // The pipeline's, set when the run is made.
  int device = 0;
  std::shared_ptr<Health> health;
  std::shared_ptr<EventPool> pool;

  RunCompletion completion;
  bool failed() const noexcept { return completion.failed(); }
  void fail(std::exception_ptr e) noexcept { completion.fail(std::move(e)); }

  /// Set before the run is queued, read-only afterwards.
  struct Setup {
    bool host_work = false;  ///< the run ends on host threads (staging, a Source or a Sink)
    bool profile = false;
    std::shared_ptr<const Endpoints> ends;              ///< what its ops read and write
    std::vector<Event> gates;                           ///< device work the run starts after (after(...))
    std::vector<std::shared_ptr<RunState>> after_runs;  ///< runs it starts after, kept alive for their tails
    RunLabel label;  ///< what its stages' contexts number chunk 0 (a spread piece's; driver.hpp)
    /// Whoever holds the run back before issuing it (Options::coalesce);
    /// set before the ticket is handed out.
    std::weak_ptr<HeldRuns> holder;
  } setup;

  /// Written by the issuing thread before the run is marked issued, read after.
  struct Issue {
    std::vector<Event> tails;               ///< recorded after the run's last ops: its completion on the device
    std::size_t chunks = 0;                 ///< chunks that held elements
    std::size_t elems = 0;                  ///< elements (a Source's, once it ended)
    Executor executor = Executor::streams;  ///< what issued it
    std::string executor_note;              ///< why it ran on streams when graphs were asked for
    std::shared_ptr<RunState> carrier;      ///< the run it was issued inside (coalesced), or null
  } issue;

  std::atomic<bool> source_ended{false};  ///< a Source returned a short chunk

  /// Its timeline (Options::profile): written by the issuing thread and by
  /// host tasks in place, read by wait().
  RunTimeline timeline;

  RunProgress progress;

  /// Asks the pipeline to issue this run now if it holds it back. Never
  /// blocks on the GPU; call it holding none of the pipeline's locks.
  void issue_if_held() noexcept {
    if (setup.holder.expired() || progress.is_issued()) return;
    if (auto h = setup.holder.lock()) h->issue_held();
  }
  /// The events that mark the run complete on the device: its carrier's
  /// when it was issued inside another run. Read once issued.
  const std::vector<Event>& device_tails() const noexcept {
    return issue.carrier ? issue.carrier->issue.tails : issue.tails;
  }
  void mark_issued() { progress.mark_issued(); }
  bool is_issued() { return progress.is_issued(); }
  void wait_issued() { progress.wait_issued(); }

  RunState();
  RunState(const RunState&) = delete;
  RunState& operator=(const RunState&) = delete;
  /// Gives its events back to the pool.
  ~RunState();

  /// Blocks until everything the run queued is over, then finishes its
  /// Sink; throws its first error. Safe from several threads.
  void wait();
  /// Whether wait() would return at once. Never blocks.
  bool ready();
  /// `stream` waits on the device for the run (RunTicket::enqueue_wait).
  void enqueue_wait(cudaStream_t stream);

 private:
  // wait()'s work, done once.
  void finish() noexcept;
  void release() noexcept;
};

}  // namespace chunkpipe::detail

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/run_state.inl>
#endif
