// SPDX-License-Identifier: MIT
// Definitions for detail/run_state.hpp. Included at its bottom where chunkpipe is
// header-only, or once by <chunkpipe/compiled.hpp> (detail/linkage.hpp); do
// not include directly.
#pragma once

namespace chunkpipe::detail {

// Out of line, as the destructor: its many members make both long.
CHUNKPIPE_INLINE RunState::RunState() = default;

CHUNKPIPE_INLINE RunState::~RunState() {
  if (pool) {
    pool->put(issue.tails);
    pool->put(setup.gates);
  }
}

CHUNKPIPE_INLINE void RunState::release() noexcept {
  // Let go of sources, sinks and endpoints now, so that (say) a file
  // source's descriptor closes now, not when the last ticket copy dies.
  setup.ends.reset();
  setup.after_runs.clear();
}

CHUNKPIPE_INLINE void RunState::enqueue_wait(cudaStream_t stream) {
  if (setup.host_work) {
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
  if (progress.begin_wait()) {
    // Whether or not it failed, nothing the run queued may still be running
    // when this returns.
    try {
      issue_if_held();
      wait_issued();
      progress.wait_host_tasks();
    } catch (...) {
      progress.end_wait(false);  // the next waiter tries again
      throw;
    }
    finish();
    progress.end_wait(true);
  }
  completion.conclude();
}

CHUNKPIPE_INLINE void RunState::finish() noexcept {
  if (issue.carrier) {
    // Issued inside another run: complete when it is, failed if it failed.
    try {
      issue.carrier->wait();
    } catch (...) {
      fail(std::current_exception());
    }
  }
  try {
    for (const Event& e : issue.tails) {
      if (e) CHUNKPIPE_CUDA_TRY(cudaEventSynchronize(e.get()));
    }
    if (setup.profile && !failed()) timeline.build(issue.chunks, issue.elems, setup.ends.get());
  } catch (const cuda_error& e) {
    // A kernel that faulted shows up here, at the first synchronisation.
    // The first run to see a broken context reports the CUDA error; the
    // runs queued after it name that one.
    if (!is_sticky(e.code())) {
      fail(std::current_exception());
    } else if (health->claim(e.what())) {
      fail(std::current_exception());
    } else {
      fail(std::make_exception_ptr(
          pipeline_error("chunkpipe: this run could not complete: an earlier failure broke the device context (" +
                         health->reason() + ")")));
    }
  } catch (...) {
    fail(std::current_exception());
  }
  release();
}

CHUNKPIPE_INLINE bool RunState::ready() {
  // A run waited for is over: no need to ask CUDA (a pipeline asks every
  // run it still remembers, and a stream of runs leaves hundreds).
  if (progress.waited()) return true;
  if (!progress.issued_and_host_done()) return false;
  if (issue.carrier) return issue.carrier->ready();
  // `issue.tails` is fixed once the run is issued.
  for (const Event& e : issue.tails) {
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

}  // namespace chunkpipe::detail
