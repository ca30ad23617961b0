// SPDX-License-Identifier: MIT
// When and on which thread a GPU pipeline's run is issued, once CudaRunner
// has taken it in: held to join the runs it continues (Coalescer,
// coalescer.hpp), issued by the caller, or handed to the pipeline's issue
// thread (IssueWorker, issue_worker.hpp) so that run_async() returns
// before the run's host work is done. Runs are issued in the order they
// were submitted, whichever way each goes.
//
// Locks: the coalescer's, taken in submit() and flush() (under the owner's
// submit lock where the owner holds it), then the issuer's and the issue
// worker's. The issuer must outlive the route: the owner declares it
// first.
#pragma once

#include <chunkpipe/detail/coalescer.hpp>
#include <chunkpipe/detail/issue_worker.hpp>
#include <chunkpipe/detail/run_setup.hpp>
#include <chunkpipe/detail/run_state.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <utility>

namespace chunkpipe::detail {

#if !CHUNKPIPE_HEADER_ONLY
// The compiled part instantiates it once (<chunkpipe/compiled.hpp>).
extern template class Coalescer<RunState>;
#endif

/// `Issuer`: what issues a run (Issuer<Stages...>, issuer.cuh), with
/// `issue<In>(run, spec, n, index)`, which never throws.
template <class Issuer>
class IssueRoute {
 public:
  /// `new_run`: a fresh RunState with what every run of the owner gets, for
  /// a coalescer's carrier (see Coalescer::Hooks).
  IssueRoute(CoalesceRules rules, Issuer& issuer, std::function<std::shared_ptr<RunState>()> new_run)
      : issuer_(issuer), coalescer_(rules, worker_, {this, std::move(new_run), &IssueRoute::wait_done}) {}
  /// Issues what is held and queued, then stops. Never throws.
  ~IssueRoute() { close(); }
  IssueRoute(const IssueRoute&) = delete;
  IssueRoute& operator=(const IssueRoute&) = delete;

  const CoalesceRules& rules() const noexcept { return coalescer_.rules(); }

  /// Routes a run whose input types are In, of `n` elements over `spec`,
  /// numbered `index`: it joins the held runs where `joinable` allows
  /// (Coalescer::submit), else it goes after them. The caller issues it
  /// where nothing blocks it on the host (no staging, nothing queued on
  /// the issue thread, every run it follows issued: a run of another
  /// pipeline may still wait for that pipeline's thread); otherwise the
  /// issue thread does. `queued()` is called once the run is queued, before
  /// an issue by the caller (its ranges must be in flight by then) and
  /// whether or not it is held. A run of nothing is neither queued nor
  /// issued. Returns whether the run is held. Throws what `queued` throws
  /// and std::bad_alloc.
  template <class In, class Queued>
  bool submit(const std::shared_ptr<RunState>& run, const RunSpec& spec, std::size_t n, std::size_t index,
              bool joinable, Queued&& queued) {
    const bool held = coalescer_.submit(run, n, joinable, &IssueRoute::template issue_as<In>, index, [&] {
      bool inline_issue = !run->setup.host_work && worker_.idle();
      for (const auto& before : run->setup.after_runs) inline_issue = inline_issue && before->is_issued();
      if (!inline_issue) {
        worker_.push([this, run, spec, n, index] { issuer_.template issue<In>(run, spec, n, index); });
      }
      queued();
      if (inline_issue) issuer_.template issue<In>(run, spec, n, index);
    });
    if (held) queued();
    return held;
  }

  /// Issues the held runs now, if any. Never throws.
  void flush() noexcept { coalescer_.flush(); }
  /// Blocks until every run handed over so far is issued; held runs stay
  /// held.
  void wait_issued() { worker_.wait_idle(); }
  /// flush(), then wait_issued(): every run submitted so far is issued.
  void settle() {
    coalescer_.flush();
    worker_.wait_idle();
  }

  /// Runs issued together with others so far (ChunkedPipeline::runs_coalesced).
  std::size_t runs_coalesced() const noexcept { return coalescer_.runs_coalesced(); }

  /// Issues the held runs and lets go of the tickets' way back to them
  /// (Coalescer::close). Idempotent. Never throws.
  void close() noexcept { coalescer_.close(); }
  /// Issues what is queued on the issue thread and stops it. Never throws.
  void stop() noexcept { worker_.stop(); }

 private:
  // The coalescer's Issue for runs of input types In.
  template <class In>
  static void issue_as(void* self, const std::shared_ptr<RunState>& run, const RunSpec& spec, std::size_t n,
                       std::size_t index) noexcept {
    static_cast<IssueRoute*>(self)->issuer_.template issue<In>(run, spec, n, index);
  }

  // Where the coalescer's watcher waits for the run queued before the held
  // ones: in CUDA, on its completion events, rather than polling. Its
  // errors are its own wait's.
  static void wait_done(const std::shared_ptr<RunState>& run) {
    run->wait_issued();
    for (const Event& e : run->device_tails()) {
      if (e && cudaEventSynchronize(e.get()) != cudaSuccess) (void)cudaGetLastError();
    }
  }

  Issuer& issuer_;
  // Its own lock and watcher thread; issues on worker_. Closed before
  // worker_ stops; its jobs on worker_ use none of it.
  Coalescer<RunState> coalescer_;
  IssueWorker worker_;  // last: stopped first, before what its jobs use goes
};

}  // namespace chunkpipe::detail
