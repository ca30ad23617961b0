// SPDX-License-Identifier: MIT
// Definitions for run_ticket.cuh. Included at its bottom where chunkpipe is
// header-only, or once by <chunkpipe/compiled.hpp> (detail/linkage.hpp); do
// not include directly.
#pragma once

namespace chunkpipe::detail {

// Out of line, as the destructor: its many members make both long.
CHUNKPIPE_INLINE RunState::RunState() = default;

CHUNKPIPE_INLINE RunState::~RunState() {
  if (pool) {
    pool->put(tails);
    pool->put(gates);
  }
}

CHUNKPIPE_INLINE void RunState::release() noexcept {
  // Let go of sources, sinks and endpoints now, so that (say) a file
  // source's descriptor closes now, not when the last ticket copy dies.
  ends.reset();
  after_runs.clear();
}

CHUNKPIPE_INLINE void RunState::enqueue_wait(cudaStream_t stream) {
  if (host_work) {
    throw pipeline_error(
        "chunkpipe: enqueue_wait: this run ends on host threads (it stages pageable memory or uses a Source or "
        "Sink), which a stream cannot wait for; call wait()");
  }
  // A run queued behind a staged run is issued by the pipeline's thread;
  // its completion events exist once it is.
  issue_if_held();
  wait_issued();
  if (failed()) std::rethrow_exception(completion.error());
  for (const Event& e : device_tails()) {
    if (e) CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(stream, e.get(), 0));
  }
}

CHUNKPIPE_INLINE void RunState::wait() {
  std::lock_guard<std::mutex> waiting(wait_mutex_);
  if (!waited_.load(std::memory_order_relaxed)) {
    // Whether or not it failed, nothing the run queued may still be running
    // when this returns.
    issue_if_held();
    wait_issued();
    if (carrier) {
      // Issued inside another run: complete when it is, failed if it failed.
      try {
        carrier->wait();
      } catch (...) {
        fail(std::current_exception());
      }
    }
    {
      std::unique_lock<std::mutex> lock(mutex);
      cv.wait(lock, [&] { return host_pending == 0; });
    }
    try {
      for (const Event& e : tails) {
        if (e) CHUNKPIPE_CUDA_TRY(cudaEventSynchronize(e.get()));
      }
      if (profile && !failed()) build_report();
    } catch (const cuda_error& e) {
      // A kernel that faulted shows up here, at the first synchronisation.
      // The first run to see a broken context reports the CUDA error; the
      // runs queued after it name that one.
      if (!is_sticky(e.code())) {
        fail(std::current_exception());
      } else if (health->claim(e.what())) {
        fail(std::current_exception());
      } else {
        fail(std::make_exception_ptr(pipeline_error(
            "chunkpipe: this run could not complete: an earlier failure broke the device context (" +
            health->reason() + ")")));
      }
    } catch (...) {
      fail(std::current_exception());
    }
    release();
    waited_.store(true, std::memory_order_release);
  }
  completion.conclude();
}

CHUNKPIPE_INLINE bool RunState::ready() {
  // A run waited for is over: no need to ask CUDA (a pipeline asks every
  // run it still remembers, and a stream of runs leaves hundreds).
  if (waited_.load(std::memory_order_acquire)) return true;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!issued || host_pending != 0) return false;
  }
  if (carrier) return carrier->ready();
  // `tails` is fixed once the run is issued.
  for (const Event& e : tails) {
    if (!e) continue;
    const cudaError_t s = cudaEventQuery(e.get());
    if (s == cudaErrorNotReady) return false;
    if (s != cudaSuccess) {
      (void)cudaGetLastError();
      return true;  // wait() will report it
    }
  }
  return true;
}

CHUNKPIPE_INLINE void RunState::build_report() {
  report.ops.clear();
  // Done by now (wait() found every stream past it), but an origin no
  // timed device op follows is waited for rather than assumed.
  if (origin) CHUNKPIPE_CUDA_TRY(cudaEventSynchronize(origin.get()));
  for (const Timed& t : timed) {
    TimedOp op = t.op;
    if (t.start) {
      float a = 0.f, b = 0.f;
      CHUNKPIPE_CUDA_TRY(cudaEventElapsedTime(&a, origin.get(), t.start.get()));
      CHUNKPIPE_CUDA_TRY(cudaEventElapsedTime(&b, origin.get(), t.end.get()));
      op.start_ms = a;
      op.end_ms = b;
    } else {
      // A host-in issued ahead of a Source that had already ended did
      // nothing: it has no times.
      if (t.host_end == std::chrono::steady_clock::time_point{}) continue;
      // Host ops are placed by the host clock, aligned at the origin event's
      // recording; the offset is the launch latency, microseconds.
      op.start_ms = std::chrono::duration<double, std::milli>(t.host_start - host_origin).count();
      op.end_ms = std::chrono::duration<double, std::milli>(t.host_end - host_origin).count();
    }
    report.ops.push_back(op);
  }
  if (clock_zero) {
    float since = 0.f;
    CHUNKPIPE_CUDA_TRY(cudaEventElapsedTime(&since, clock_zero->get(), origin.get()));
    report.clock_ms = since;
    report.clock_zero_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(host_clock_zero.time_since_epoch()).count();
  }
  report.chunks = chunks;
  report.elems = elems;
  const IoBytes bytes = ends ? io_bytes(*ends, elems) : IoBytes{};
  report.bytes_in = bytes.in;
  report.bytes_out = bytes.out;
}

}  // namespace chunkpipe::detail
