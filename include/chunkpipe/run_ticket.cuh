// SPDX-License-Identifier: MIT
/// \file
/// RunTicket: the handle run_async() returns, the state of one run behind
/// it, and after(...), which orders a run after other GPU work.
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/errors.hpp>
#include <chunkpipe/memory.cuh>
#include <chunkpipe/report.hpp>
#include <chunkpipe/result.hpp>
#include <chunkpipe/detail/completion.hpp>
#include <chunkpipe/detail/driver.hpp>  // RunLabel
#include <chunkpipe/detail/linkage.hpp>
#include <chunkpipe/detail/slots.hpp>

#include <cuda/stream_ref>
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace chunkpipe {

namespace detail {

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

/// Everything one run owns or needs to finish. Written by the thread that
/// issues the run and by host workers, read by whoever waits: every field
/// shared between them is atomic or guarded by `mutex`.
struct RunState {
  int device = 0;
  std::shared_ptr<Health> health;
  std::shared_ptr<EventPool> pool;
  RunCompletion completion;

  bool failed() const noexcept { return completion.failed(); }
  void fail(std::exception_ptr e) noexcept { completion.fail(std::move(e)); }

  // Set before the run is queued, read-only afterwards.
  bool host_work = false;  ///< the run ends on host threads (staging, a Source or a Sink)
  bool profile = false;
  std::shared_ptr<const Endpoints> ends;  ///< what its ops read and write
  std::vector<Event> gates;               ///< device work the run starts after (after(...))
  std::vector<std::shared_ptr<RunState>> after_runs;  ///< runs it starts after, kept alive for their tails
  RunLabel label;  ///< what its stages' contexts number chunk 0 (a spread piece's; driver.hpp)

  // Written by the issuing thread before `issued` is set, read after it.
  std::vector<Event> tails;  ///< recorded after the run's last ops: its completion on the device
  std::size_t chunks = 0;    ///< chunks that held elements
  std::size_t elems = 0;     ///< elements (a Source's, once it ended)
  Executor executor = Executor::streams;  ///< what issued it
  std::string executor_note;              ///< why it ran on streams when graphs were asked for

  std::atomic<bool> source_ended{false};  ///< a Source returned a short chunk

  // Coalescing (Options::coalesce). `holder` is set before the ticket is
  // handed out and never changed; `carrier`, the run this one was issued
  // inside, is written before `issued` is set and read after.
  std::weak_ptr<HeldRuns> holder;
  std::shared_ptr<RunState> carrier;

  /// Asks the pipeline to issue this run now if it holds it back. Never
  /// blocks on the GPU; call it holding none of the pipeline's locks.
  void issue_if_held() noexcept {
    if (holder.expired() || is_issued()) return;
    if (auto h = holder.lock()) h->issue_held();
  }
  /// The events that mark the run complete on the device: its carrier's
  /// when it was issued inside another run. Read once issued.
  const std::vector<Event>& device_tails() const noexcept { return carrier ? carrier->tails : tails; }

  /// Marks every op issued (or the run abandoned before its first).
  void mark_issued() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      issued = true;
    }
    cv.notify_all();
  }
  bool is_issued() {
    std::lock_guard<std::mutex> lock(mutex);
    return issued;
  }
  void wait_issued() {
    std::unique_lock<std::mutex> lock(mutex);
    cv.wait(lock, [&] { return issued; });
  }

  // Host tasks of this run not yet finished. Counted here rather than by
  // queue position so a ticket never needs the pipeline's queues, which may
  // be gone by the time it is waited on.
  void host_task_started() {
    std::lock_guard<std::mutex> lock(mutex);
    ++host_pending;
  }
  void host_task_finished() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      --host_pending;
    }
    cv.notify_all();
  }

  // Profiling (Options::profile).
  struct Timed {
    TimedOp op;
    Event start, end;                                             // device ops
    std::chrono::steady_clock::time_point host_start, host_end;  // host ops
  };
  Event origin;
  std::chrono::steady_clock::time_point host_origin;
  // The pipeline's profiling clock (Report::clock_ms): its zero, an event
  // recorded before the first profiled run's origin on the same stream,
  // and when the host recorded it.
  std::shared_ptr<const Event> clock_zero;
  std::chrono::steady_clock::time_point host_clock_zero;
  std::deque<Timed> timed;  // grows at the back only: host tasks write in place (profiling only)
  Report report;            // built by wait() when profiling

  RunState();
  RunState(const RunState&) = delete;
  RunState& operator=(const RunState&) = delete;
  /// Gives its events back to the pool.
  ~RunState();

  /// Blocks until everything the run queued is over, then finishes its
  /// Sink; throws its first error. Safe from several threads.
  void wait();
  bool ready();
  void enqueue_wait(cudaStream_t stream);

  std::mutex mutex;
  std::condition_variable cv;
  bool issued = false;
  std::size_t host_pending = 0;

 private:
  void build_report();
  void release() noexcept;
  std::mutex wait_mutex_;  // one waiter at a time does the work
  // Written under wait_mutex_; ready() reads it without.
  std::atomic<bool> waited_{false};
};

}  // namespace detail

class RunTicket;

/// What a run must start after, besides the pipeline's own schedule: work
/// queued on a stream, an event's last record, other runs. Build it with
/// chunkpipe::after(...). The run's first op on each of its queues waits
/// for all of it on the device; nothing blocks the host.
struct After {
  std::vector<cudaStream_t> streams;   ///< work queued on them when the run is started
  std::vector<cudaEvent_t> events;     ///< their latest record when the run is started
  std::vector<RunTicket> tickets;      ///< runs that must be complete (on the device)
};

/// A run in flight. Copyable; every copy refers to the same run. The ranges
/// given to run_async() must stay alive and untouched until wait() returns.
class RunTicket {
 public:
  RunTicket() = default;
  /// \cond CHUNKPIPE_INTERNAL
  // For chunkpipe's pipelines.
  explicit RunTicket(std::shared_ptr<detail::RunState> state) : state_(std::move(state)) {}
  /// \endcond

  /// Blocks until the run is complete: every output written, every stream
  /// and host task of the run finished; then finishes its Sink. Throws the
  /// run's first error (config_error, cuda_error, pipeline_error, or what a
  /// stage, source or sink threw), and the same error again on every later
  /// call. After a fault that broke the device context, the first run
  /// waited for that finds it throws the cuda_error, and the others
  /// pipeline_error naming it. Safe to call from several threads.
  void wait() {
    if (state_) state_->wait();
  }

  /// Makes `stream` wait, on the device, for everything this run does on
  /// the device, and returns at once: the run's cudaStreamWaitEvent. Use it
  /// to order your own GPU work, or a timing event, after a run without
  /// blocking the host. Only for runs whose ranges are all pinned or device
  /// memory; wait() is still needed to learn of errors a kernel raises.
  /// Blocks only if the run is queued behind a staged run that is still
  /// being issued (until it is issued); a run held back to share copies
  /// with the next (Options::coalesce) is issued first. Throws pipeline_error for a run that
  /// ends on host threads (it stages pageable memory, or reads a Source or
  /// feeds a Sink): a stream cannot wait for those, call wait(). Throws the
  /// run's own error if it failed while being issued, and cuda_error if
  /// CUDA fails.
  void enqueue_wait(::cuda::stream_ref stream) const {
    if (state_) state_->enqueue_wait(stream.get());
  }

  /// True once the run has finished (or failed; wait() says which). Never blocks.
  bool ready() const { return !state_ || state_->ready(); }

  /// What issued the run (Options::executor), and, for a run that asked
  /// for graphs and ran on streams, why. Blocks until the run is issued
  /// (only a run queued behind a staged run waits for that).
  Executor executor() const {
    if (!state_) return Executor::streams;
    state_->issue_if_held();
    state_->wait_issued();
    return state_->executor;
  }
  /// Why a run that asked for graphs ran on streams; empty otherwise.
  /// Blocks as executor() does.
  std::string executor_note() const {
    if (!state_) return {};
    state_->issue_if_held();
    state_->wait_issued();
    return state_->executor_note;
  }

  /// The run's timeline, with Options::profile on, after wait() returned.
  /// The reference lives as long as this ticket (or a copy of it). Throws
  /// pipeline_error otherwise.
  const Report& report() const {
    if (!state_ || !state_->profile || !state_->completion.succeeded()) {
      throw pipeline_error("chunkpipe: no report: set Options::profile and wait() for the run first");
    }
    return state_->report;
  }

  /// \cond CHUNKPIPE_INTERNAL
  // For chunkpipe's pipelines: the run behind the ticket.
  const std::shared_ptr<detail::RunState>& state() const noexcept { return state_; }
  /// \endcond

 private:
  std::shared_ptr<detail::RunState> state_;
};

namespace detail {
inline void add_after(After& a, ::cuda::stream_ref s) { a.streams.push_back(s.get()); }
inline void add_after(After& a, cudaEvent_t e) { a.events.push_back(e); }
inline void add_after(After& a, const RunTicket& t) { a.tickets.push_back(t); }
template <class R>
void add_after(After& a, const ResultTicket<R, RunTicket>& t) {
  a.tickets.push_back(t.ticket());
}
inline void add_after(After& a, const After& b) {
  a.streams.insert(a.streams.end(), b.streams.begin(), b.streams.end());
  a.events.insert(a.events.end(), b.events.begin(), b.events.end());
  a.tickets.insert(a.tickets.end(), b.tickets.begin(), b.tickets.end());
}
}  // namespace detail

/// Orders a run after GPU work it depends on, without blocking the host:
///   pipe.run_async(in, out, chunkpipe::after(my_stream));      // data a kernel of yours made
///   pipe.run_async(b, c, chunkpipe::after(ticket_that_wrote_b));
/// Takes any mix of streams (::cuda::stream_ref or cudaStream_t: the work
/// queued on them when the run is started), events (cudaEvent_t: their
/// latest record then) and RunTickets or the ResultTickets of folding and
/// counting runs (those runs complete; only runs that end on the device,
/// see RunTicket::enqueue_wait). A run ordered after a ticket may overlap
/// that run's ranges.
template <class... T>
After after(const T&... what) {
  After a;
  (::chunkpipe::detail::add_after(a, what), ...);
  return a;
}

}  // namespace chunkpipe

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/run_ticket.inl>
#endif
