// SPDX-License-Identifier: MIT
// Coalescing (Options::coalesce): small runs that continue each other are
// held while the work queued before them is still running, and issued as
// one run over their joined ranges (the carrier); each keeps its own
// ticket, which completes with the carrier. A copy costs about 3 us
// besides its bytes (options.hpp), so 1 MiB runs issued one by one leave a
// fifth of the link idle.
//
// Host-only. The coalescer owns what it holds, its lock and the thread
// that watches the work ahead; it issues through a callback and knows a
// run only by the members listed at Coalescer, so the CPU tests drive it
// with runs of their own and CudaRunner hands it RunStates.
#pragma once

#include <chunkpipe/io.hpp>
#include <chunkpipe/options.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/detail/issue_worker.hpp>
#include <chunkpipe/detail/run_setup.hpp>
#include <chunkpipe/detail/slots.hpp>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

/// Which runs of a pipeline may be held to join others. Fixed once the
/// pipeline is built.
struct CoalesceRules {
  /// Options::coalesce, for a pipeline of Map stages (which cannot see
  /// where one run ended and the next began), not profiled (a profiled
  /// run's report times its own ops), not under Executor::graphs.
  bool enabled = false;
  /// The scheduling unit (Geometry::chunk_elems): only shorter runs join,
  /// and a unit's worth held is issued at once.
  std::size_t unit = 0;

  /// The rules of a PipelineFront (or anything with its static traits,
  /// options() and geometry()).
  template <class Front>
  static CoalesceRules of(const Front& front) noexcept {
    const Options& o = front.options();
    CoalesceRules r;
    r.enabled = o.coalesce && Front::all_elementwise && !Front::folds_result && !Front::counted &&
                o.executor != Executor::graphs && !o.profile;
    r.unit = front.geometry().chunk_elems;
    return r;
  }

  /// Whether a run of `n` elements may be held: known, not empty, shorter
  /// than a unit, not `staged` (nothing on host threads: no staging, Source
  /// or Sink), not `ordered` (no after(...): what it waits for is the
  /// caller's business, not to be delayed further), and not `labelled` (a
  /// spread piece whose stages see its chunk numbers: joined, they would
  /// see the carrier's). Never throws.
  bool joinable(std::size_t n, bool staged, bool ordered, bool labelled) const noexcept {
    return enabled && n != 0 && n != unknown_length && n < unit && !staged && !ordered && !labelled;
  }
};

/// Holds small runs that continue each other and issues them together.
///
/// `Run` is what a ticket shares with the pipeline (RunState on the GPU).
/// The coalescer uses only these of its members:
///   setup.ends (std::shared_ptr<const Endpoints>)  the run's ranges (read at submit)
///   setup.holder (std::weak_ptr<H>)  set when held; H has `virtual void issue_held() noexcept`
///                                    (HeldRuns), which a wait calls to have it issued
///   issue.carrier (std::shared_ptr<Run>)  the run it was issued inside, set before mark_issued()
///   issue.executor                  copied from the carrier
///   issue.elems, issue.chunks       set when held (n, 1)
///   failed(), fail(std::exception_ptr), completion.error(), mark_issued(), ready()
///
/// Locks: the owner's (CudaRunner::submit_mutex_) may be held when calling
/// in; the coalescer's own lock is held while it issues, so the issue
/// callback and `alone` must never call back into it, nor wait for the
/// watcher. Everything is safe from several threads.
template <class Run>
class Coalescer {
  using HeldBase = typename decltype(std::declval<Run&>().setup.holder)::element_type;

 public:
  /// Issues one run: a held run alone, or the carrier of several, over
  /// `spec` (`n` elements), numbered `index` (the first held run's number).
  /// Never throws: what goes wrong is the run's error, and once it returns
  /// the run is issued (or has failed). Runs join only runs of the same
  /// Issue (the same input types, whose slots and launches they share).
  using Issue = void (*)(void* owner, const std::shared_ptr<Run>& run, const RunSpec& spec, std::size_t n,
                         std::size_t index) noexcept;

  /// What the coalescer asks of its owner besides issuing.
  struct Hooks {
    void* owner = nullptr;  ///< handed to every Issue
    /// A fresh run for a carrier, with what every run of the owner gets;
    /// the coalescer sets its ranges. May throw (memory): the held runs
    /// are then issued one by one.
    std::function<std::shared_ptr<Run>()> new_run;
    /// Blocks until `run` is issued and done (on the device). Its errors
    /// are its own wait's, not to be thrown here.
    std::function<void(const std::shared_ptr<Run>&)> wait_done;
  };

  /// `worker`: the owner's issue thread, which issues its runs in order;
  /// held runs are issued on it when it is busy (behind what it has), on
  /// the calling thread when it is idle. It must outlive close().
  Coalescer(CoalesceRules rules, IssueWorker& worker, Hooks hooks)
      : rules_(rules), worker_(worker), hooks_(std::move(hooks)) {
    holder_->self = this;
  }
  /// close(). Never throws.
  ~Coalescer() { close(); }
  Coalescer(const Coalescer&) = delete;
  Coalescer& operator=(const Coalescer&) = delete;

  const CoalesceRules& rules() const noexcept { return rules_; }

  /// The one call for each run the owner starts, with `joinable` from
  /// rules().joinable() (and anything else of the owner's that rules a run
  /// out, such as its executor). Under the coalescer's lock:
  ///  - the held runs go first (issued, in order) unless `run` may join
  ///    them: joinable, of the same `issue`, and continuing their ranges
  ///    exactly (continues());
  ///  - a joinable run is held if it joins the held runs, or if it
  ///    continues the run queued just before it while that run is not yet
  ///    done (holding it then would only delay it); a unit's worth held is
  ///    issued at once;
  ///  - any other run goes alone: `alone()` is called, after the held runs
  ///    were issued, to queue and issue it as the owner does.
  /// A run of no elements queues nothing: the held runs go first, and
  /// `alone` is not called. Returns whether `run` is held. Throws what
  /// `alone` throws (the run is then not remembered) and std::bad_alloc.
  template <class Alone>
  bool submit(const std::shared_ptr<Run>& run, std::size_t n, bool joinable, Issue issue, std::size_t index,
              Alone&& alone) {
    std::lock_guard<std::mutex> lock(mutex_);
    const std::shared_ptr<const Endpoints>& ends = run->setup.ends;
    const bool joins =
        held_ && joinable && held_->issue == issue && ::chunkpipe::detail::continues(held_->ends, held_->elems, *ends, n);
    if (held_ && !joins) release_or_apart_locked();
    if (n == 0) return false;
    if (joinable && hold_locked(run, *ends, n, issue, index)) {
      remember_locked(ends, n);
      if (held_ && held_->elems >= rules_.unit) release_or_apart_locked();
      return true;
    }
    // Nothing is held here: a run that does not join them issued them above.
    std::forward<Alone>(alone)();
    remember_locked(ends, n);
    on_gpu_ = run;
    return false;
  }

  /// Issues the held runs now, if any (something waits for them, or is
  /// about to change what they would be issued with). Never throws.
  void flush() noexcept {
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      release_or_apart_locked();
    } catch (...) {
      // The lock itself failed: the watcher still issues them.
    }
  }

  /// Issues the held runs and stops: tickets that outlive the coalescer
  /// hold nothing of it any more. Idempotent. Never throws.
  void close() noexcept {
    flush();
    {
      std::lock_guard<std::mutex> lock(holder_->mutex);
      holder_->self = nullptr;
    }
    watcher_.stop();
  }

  /// Runs issued together with others so far (ChunkedPipeline::runs_coalesced).
  std::size_t runs_coalesced() const noexcept { return coalesced_.load(std::memory_order_relaxed); }

  /// Runs held now.
  std::size_t held_runs() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return held_ ? held_->runs.size() : 0;
  }

 private:
  struct Held {
    std::vector<std::shared_ptr<Run>> runs;  // the tickets' runs, in order
    Endpoints ends;                          // their joined ranges
    std::size_t elems = 0;
    std::size_t index = 0;    // the first run's number
    Issue issue = nullptr;    // the runs' input types
  };

  // What tickets call (HeldRuns) to have their held run issued; outlives
  // the coalescer.
  struct Holder final : HeldBase {
    std::mutex mutex;
    Coalescer* self = nullptr;         // guarded by mutex; null once the coalescer is closed
    std::atomic<bool> holding{false};  // whether any run is held: else nothing to take a lock for
    void issue_held() noexcept override {
      if (!holding.load(std::memory_order_acquire)) return;
      try {
        std::lock_guard<std::mutex> lock(mutex);
        if (self) self->flush();
      } catch (...) {
        // The lock failed: the watcher still issues them.
      }
    }
  };

  void remember_locked(const std::shared_ptr<const Endpoints>& ends, std::size_t n) {
    last_ends_ = ends;
    last_elems_ = n;
  }

  // Joins `run` to the held runs (which it continues), or holds it if it
  // continues the run queued just before it and that run is not done.
  // False: issue it now. Throws only std::bad_alloc, having changed
  // nothing.
  bool hold_locked(const std::shared_ptr<Run>& run, const Endpoints& ends, std::size_t n, Issue issue,
                   std::size_t index) {
    if (held_) {
      held_->runs.push_back(run);
      ::chunkpipe::detail::append_run(held_->ends, ends);
      held_->elems += n;
    } else {
      // Runs that do not continue each other (a double buffer's two halves)
      // are never held: holding one would only delay it.
      if (!on_gpu_ || !last_ends_ || !::chunkpipe::detail::continues(*last_ends_, last_elems_, ends, n)) return false;
      if (on_gpu_->ready()) return false;  // holding would only leave the GPU idle
      Held h;
      h.runs.push_back(run);
      h.ends = ends;
      h.elems = n;
      h.index = index;
      h.issue = issue;
      const std::uint64_t gen = gen_;
      try {
        watcher_.push([this, gen] { watch(gen); });
      } catch (...) {
        return false;  // no watcher to be had (a thread, memory): issue it now
      }
      held_.emplace(std::move(h));
      holder_->holding.store(true, std::memory_order_release);
    }
    run->setup.holder = holder_;
    run->issue.elems = n;
    run->issue.chunks = 1;
    return true;
  }

  // Issues the held runs, if any: as themselves if only one, else as one
  // carrier. Throws only std::bad_alloc, and then the runs are still held
  // (and watched).
  void release_locked() {
    if (!held_) return;
    const Held& h = *held_;
    std::shared_ptr<Run> carrier = h.runs.front();
    std::vector<std::shared_ptr<Run>> members;
    if (h.runs.size() > 1) {
      carrier = hooks_.new_run();
      carrier->setup.ends = std::make_shared<const Endpoints>(h.ends);
      members = h.runs;
    }
    const RunSpec spec = ::chunkpipe::detail::spec_for(*carrier->setup.ends, h.elems, rules_.unit);
    std::function<void()> job = [owner = hooks_.owner, carrier, members, spec, n = h.elems, index = h.index,
                                 issue = h.issue] {
      issue(owner, carrier, spec, n, index);
      for (const auto& r : members) {
        r->issue.carrier = carrier;
        r->issue.executor = carrier->issue.executor;
        if (carrier->failed()) r->fail(carrier->completion.error());
        r->mark_issued();
      }
    };
    const bool inline_issue = worker_.idle();
    if (!inline_issue) worker_.push(job);
    // Committed: nothing below throws.
    ++gen_;  // the watcher of these stops
    coalesced_.fetch_add(members.size(), std::memory_order_relaxed);
    held_.reset();
    holder_->holding.store(false, std::memory_order_release);
    on_gpu_ = carrier;
    if (inline_issue) job();
  }

  // When even that fails for memory: each held run on its own, on this
  // thread, which needs nothing allocated here.
  void release_apart_locked() noexcept {
    if (!held_) return;
    worker_.wait_idle();  // what was queued before them goes first
    ++gen_;
    for (const auto& r : held_->runs) {
      held_->issue(hooks_.owner, r, ::chunkpipe::detail::spec_for(*r->setup.ends, r->issue.elems, rules_.unit),
                   r->issue.elems, held_->index);
      on_gpu_ = r;
    }
    held_.reset();
    holder_->holding.store(false, std::memory_order_release);
  }

  void release_or_apart_locked() noexcept {
    try {
      release_locked();
    } catch (...) {
      release_apart_locked();
    }
  }

  // On the watcher thread: issues the held runs once the run queued before
  // them is done, unless something issued them first. Blocks in
  // Hooks::wait_done rather than polling, so it neither crowds the lock nor
  // the owner's issue thread; nothing that holds the lock ever waits for
  // this thread.
  void watch(std::uint64_t gen) noexcept {
    try {
      std::shared_ptr<Run> ahead;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (gen_ != gen) return;
        ahead = on_gpu_;
      }
      if (ahead) hooks_.wait_done(ahead);
      for (;;) {
        {
          std::lock_guard<std::mutex> lock(mutex_);
          if (gen_ != gen) return;
          if (!on_gpu_ || on_gpu_->ready()) {
            release_or_apart_locked();
            return;
          }
        }
        // The run ahead stages: its host side is still at work.
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    } catch (...) {
      // A lock that failed: the runs' waits issue them.
    }
  }

  const CoalesceRules rules_;
  IssueWorker& worker_;
  const Hooks hooks_;

  mutable std::mutex mutex_;  // guards what follows, but for the two atomics
  std::optional<Held> held_;
  std::shared_ptr<Run> on_gpu_;                  // the last run queued to be issued
  std::shared_ptr<const Endpoints> last_ends_;  // the ranges of the last run queued (a run lets go of its own)
  std::size_t last_elems_ = 0;
  std::uint64_t gen_ = 0;                        // bumped whenever held runs are issued
  std::atomic<std::size_t> coalesced_{0};        // runs issued together with others
  std::shared_ptr<Holder> holder_ = std::make_shared<Holder>();

  IssueWorker watcher_;  // runs watch(); last: stopped (close()) before what it uses goes
};

}  // namespace chunkpipe::detail
