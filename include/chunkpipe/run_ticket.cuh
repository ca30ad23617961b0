// SPDX-License-Identifier: MIT
/// \file
/// RunTicket: the handle run_async() returns, and after(...), which orders
/// a run after other GPU work. The run behind a ticket is a
/// detail::RunState (detail/run_state.hpp).
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/options.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/result.hpp>
#include <chunkpipe/detail/run_state.hpp>

#include <cuda/stream_ref>
#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace chunkpipe {

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
    return state_->issue.executor;
  }
  /// Why a run that asked for graphs ran on streams; empty otherwise.
  /// Blocks as executor() does.
  std::string executor_note() const {
    if (!state_) return {};
    state_->issue_if_held();
    state_->wait_issued();
    return state_->issue.executor_note;
  }

  /// The run's timeline, with Options::profile on, after wait() returned.
  /// The reference lives as long as this ticket (or a copy of it). Throws
  /// pipeline_error otherwise.
  const Report& report() const {
    if (!state_ || !state_->setup.profile || !state_->completion.succeeded()) {
      throw pipeline_error("chunkpipe: no report: set Options::profile and wait() for the run first");
    }
    return state_->timeline.report;
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
