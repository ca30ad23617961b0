// SPDX-License-Identifier: MIT
// RunTicket: the handle run_async() returns, and the state of one run.
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/errors.hpp>
#include <chunkpipe/memory.cuh>
#include <chunkpipe/report.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
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

  void mark(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!broken.exchange(true)) why = reason;
  }
  std::string reason() {
    std::lock_guard<std::mutex> lock(mutex);
    return why;
  }
};

/// Everything one run owns or needs to finish.
struct RunState {
  int device = 0;
  std::shared_ptr<Health> health;

  // First failure wins; once set, nothing more is issued and host tasks skip
  // their work, so the run drains quickly.
  std::mutex mutex;
  std::exception_ptr error;
  std::atomic<bool> aborted{false};
  void fail(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mutex);
    if (!error) error = e;
    aborted = true;
  }

  // A Sink's finish() and abort(), run from wait(): finish() once if the run
  // succeeded, abort() once if it failed (finish() throwing included).
  std::function<void()> on_success, on_failure;
  bool finish_called = false, abort_called = false;
  std::atomic<bool> source_ended{false};  // a Source returned a short chunk

  std::thread driver;  // set when a chunkpipe thread drives the run
  std::vector<std::shared_ptr<const void>> keep_alive;  // what host tasks read: endpoints, slot layout
  std::atomic<bool> issuing{false};  // the driver has not finished issuing
  std::vector<Event> tails;  // one per stream the run used, after its last op
  bool host_work = false;    // the run ends on host threads (staging, a Source or a Sink)
  bool finished = false;  // wait() succeeded

  // Host tasks of this run not yet finished. Counted here rather than by
  // queue position so a ticket never needs the pipeline's queues, which may
  // be gone by the time it is waited on.
  std::size_t host_pending = 0;
  std::condition_variable host_cv;
  void host_task_started() {
    std::lock_guard<std::mutex> lock(mutex);
    ++host_pending;
  }
  void host_task_finished() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      --host_pending;
    }
    host_cv.notify_all();
  }
  /// Blocks until the driver has finished issuing and every host task ran.
  void wait_host() {
    if (driver.joinable()) driver.join();
    std::unique_lock<std::mutex> lock(mutex);
    host_cv.wait(lock, [&] { return host_pending == 0; });
  }

  // Profiling (Options::profile).
  struct Timed {
    TimedOp op;
    cudaEvent_t start = nullptr;  // device ops
    cudaEvent_t end = nullptr;
    std::chrono::steady_clock::time_point host_start, host_end;  // host ops
  };
  bool profile = false;
  Event origin;
  std::chrono::steady_clock::time_point host_origin;
  std::vector<Event> events;  // owns every Timed event
  std::deque<Timed> timed;    // grows at the back only: host tasks write in place
  Report report;              // filled by wait() when profiling

  /// Waits for everything the run queued; throws its first error.
  void wait();
  /// Lets go of the run's sources, sinks and endpoints once it is over, so
  /// that (say) a file source's descriptor closes now, not at the next run.
  void release() {
    keep_alive.clear();
    on_success = nullptr;
    on_failure = nullptr;
  }
  bool ready();
  void build_report();
  void enqueue_wait(cudaStream_t stream);
};

inline void RunState::enqueue_wait(cudaStream_t stream) {
  if (host_work) {
    throw pipeline_error(
        "chunkpipe: enqueue_wait: this run ends on host threads (it stages pageable memory or uses a Source or "
        "Sink), which a stream cannot wait for; call wait()");
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (error) std::rethrow_exception(error);
  }
  for (Event& e : tails) CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(stream, e.get(), 0));
}

inline void RunState::wait() {
  if (finished) return;
  wait_host();
  std::exception_ptr failure;
  {
    std::lock_guard<std::mutex> lock(mutex);
    failure = error;
  }
  if (!failure) {
    try {
      for (Event& e : tails) CHUNKPIPE_CUDA_TRY(cudaEventSynchronize(e.get()));
      if (profile) build_report();
      if (!finish_called && on_success) {
        finish_called = true;
        on_success();
      }
    } catch (const cuda_error& e) {
      // A kernel that faulted shows up here, at the first synchronisation.
      if (is_sticky(e.code())) health->mark(e.what());
      fail(std::current_exception());
    } catch (...) {
      fail(std::current_exception());
    }
    std::lock_guard<std::mutex> lock(mutex);
    failure = error;
  }
  if (failure) {
    if (!abort_called && on_failure) {
      abort_called = true;
      try {
        on_failure();
      } catch (...) {
        // The run's own error is the one to report.
      }
    }
    release();
    std::rethrow_exception(failure);
  }
  finished = true;
  release();
}

inline bool RunState::ready() {
  if (finished) return true;
  if (issuing) return false;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (host_pending != 0) return false;
  }
  for (Event& e : tails) {
    const cudaError_t s = cudaEventQuery(e.get());
    if (s == cudaErrorNotReady) return false;
    if (s != cudaSuccess) return true;  // wait() will report it
  }
  return true;
}

inline void RunState::build_report() {
  report.ops.clear();
  for (const Timed& t : timed) {
    TimedOp op = t.op;
    if (t.start != nullptr) {
      float a = 0.f, b = 0.f;
      CHUNKPIPE_CUDA_TRY(cudaEventElapsedTime(&a, origin.get(), t.start));
      CHUNKPIPE_CUDA_TRY(cudaEventElapsedTime(&b, origin.get(), t.end));
      op.start_ms = a;
      op.end_ms = b;
    } else {
      // Host ops are placed by the host clock, aligned at the origin event's
      // recording; the offset is the launch latency, microseconds.
      op.start_ms = std::chrono::duration<double, std::milli>(t.host_start - host_origin).count();
      op.end_ms = std::chrono::duration<double, std::milli>(t.host_end - host_origin).count();
    }
    report.ops.push_back(op);
  }
}

}  // namespace detail

/// A run in flight. Copyable; every copy refers to the same run. The ranges
/// given to run_async() must stay alive and untouched until wait() returns.
class RunTicket {
 public:
  RunTicket() = default;
  explicit RunTicket(std::shared_ptr<detail::RunState> state) : state_(std::move(state)) {}

  /// Blocks until the run is complete: every output written, every stream
  /// and host task of the run finished. Throws the run's first error
  /// (config_error, cuda_error, pipeline_error, or what a stage or source
  /// threw); calling it again after a failure throws the same error again.
  /// Not to be called from two threads at once.
  void wait() {
    if (state_) state_->wait();
  }

  /// Makes `stream` wait, on the device, for everything this run does on
  /// the device, and returns at once: the run's cudaStreamWaitEvent. Use it
  /// to order your own GPU work, or a timing event, after a run without
  /// blocking the host. Only for runs whose ranges are all pinned or device
  /// memory; wait() is still needed to learn of errors a kernel raises.
  /// Throws pipeline_error for a run that ends on host threads (it stages
  /// pageable memory, or reads a Source or feeds a Sink): a stream cannot
  /// wait for those, call wait(). Throws the run's own error if it failed
  /// while being issued, and cuda_error if CUDA fails.
  void enqueue_wait(cudaStream_t stream) const {
    if (state_) state_->enqueue_wait(stream);
  }

  /// True once the run has finished (or failed; wait() says which). Never blocks.
  bool ready() const { return !state_ || state_->ready(); }

  /// The run's timeline, with Options::profile on, after wait() returned.
  /// Throws pipeline_error otherwise.
  const Report& report() const {
    if (!state_ || !state_->profile || !state_->finished) {
      throw pipeline_error("chunkpipe: no report: set Options::profile and wait() for the run first");
    }
    return state_->report;
  }

 private:
  std::shared_ptr<detail::RunState> state_;
};

}  // namespace chunkpipe
