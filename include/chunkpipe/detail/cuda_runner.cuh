// SPDX-License-Identifier: MIT
// What ChunkedPipeline does between a call and the executor: the device,
// staging decisions and registrations, the checks on a run's ranges, and
// when and on which thread each run is issued.
//
// Each piece lives in its own place: the device in device_pick.cuh, ranges
// and their checks in run_intake.hpp and run_setup.hpp, staging and
// registrations in registrations.cuh, after(streams, events) as events of
// ours in hold_after.cuh, which executor a run gets in dispatcher.hpp,
// when and on which thread a run is issued (held to join others, by the
// caller or on the issue thread) in issue_route.cuh, a run's state in
// run_state.hpp, and everything a run touches once it is issued (the
// executors, the schedule, slot memory, kernel lanes) in issuer.cuh. This
// file wires them. Lock order: submit_mutex_ (which also guards the
// in-flight ranges, the registrations and the gates, none of which has a
// lock of its own), the coalescer holder's and the coalescer's, the
// issuer's, then the leaves: the dispatcher's, the lane tuner's, the issue
// worker's, the event pool's and each run's state.
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/errors.hpp>
#include <chunkpipe/memory.cuh>
#include <chunkpipe/options.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/result.hpp>
#include <chunkpipe/run_ticket.cuh>
#include <chunkpipe/detail/coalescer.hpp>  // CoalesceRules
#include <chunkpipe/detail/device_pick.cuh>
#include <chunkpipe/detail/copy_team.hpp>  // SharedCopyTeam
#include <chunkpipe/detail/dispatcher.hpp>
#include <chunkpipe/detail/front.hpp>
#include <chunkpipe/detail/hold_after.cuh>
#include <chunkpipe/detail/issue_route.cuh>
#include <chunkpipe/detail/issuer.cuh>
#include <chunkpipe/detail/registrations.cuh>
#include <chunkpipe/detail/run_intake.hpp>
#include <chunkpipe/detail/run_setup.hpp>
#include <chunkpipe/detail/slots.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

#if !CHUNKPIPE_HEADER_ONLY
// The compiled part instantiates it once (<chunkpipe/compiled.hpp>).
extern template class InFlightRanges<RunState>;
#endif

template <class... Stages>
class CudaRunner {
 public:
  /// Throws config_error for bad options or a device that does not exist,
  /// cuda_error if CUDA fails. Where CUDA has no device to give (no driver,
  /// none present) it is built all the same, with device() -1: its runs
  /// check their ranges and then throw no_device_error.
  CudaRunner(Options options, Stages... stages)
      : front_(Target::device, options, std::move(stages)...), device_(DevicePick::of(front_.options())),
        issuer_(front_, device_.id, shared_.health, shared_.pool, dispatcher_, host_threads_for(options)) {}

  ~CudaRunner() {
    // Tickets may outlive the pipeline: from now on they hold no run.
    route_.close();
    quiesce();
    registered_.release_all();
  }
  CudaRunner(const CudaRunner&) = delete;
  CudaRunner& operator=(const CudaRunner&) = delete;

  PipelineFront<Stages...>& front() noexcept { return front_; }
  const PipelineFront<Stages...>& front() const noexcept { return front_; }
  /// The device runs use; -1 where there is none (no_device_error).
  int device() const noexcept { return device_.id; }
  bool healthy() const noexcept { return !shared_.health->broken; }
  void set_link(const LinkModel& link) {
    std::lock_guard<std::mutex> lock(submit_mutex_);
    link_ = link;
  }

  /// Queues a run and returns its ticket; see ChunkedPipeline::run_async.
  /// `label`: what the run's stages' contexts number its chunk 0 (a spread
  /// piece's numbers; RunLabel).
  template <class In, class Out>
  RunTicket start(In&& in, Out&& out, const After& order, const RunLabel& label = {}) {
    return start_impl(::chunkpipe::detail::as_inputs(std::forward<In>(in)), ::chunkpipe::detail::as_outputs(std::forward<Out>(out)), order,
                      nullptr, nullptr, label);
  }

  /// Queues a run of a pipeline whose last stage folds (Reduce,
  /// Accumulate) and returns the ticket of its result; see
  /// ChunkedPipeline::run_async(in).
  template <class In>
  auto start_fold(In&& in, const After& order) {
    using Traits = fold_traits<typename PipelineFront<Stages...>::last_stage>;
    using R = typename Traits::result;
    auto ins = ::chunkpipe::detail::as_inputs(std::forward<In>(in));
    const std::size_t n = ::chunkpipe::detail::input_length(ins);
    if (device_.id < 0) throw no_device_error(device_.why);  // its records would be pinned memory
    auto folding = Traits::make(std::get<sizeof...(Stages) - 1>(front_.stages()));
    std::shared_ptr<void> keep;
    auto outs = ::chunkpipe::detail::folding_outputs(folding, n, front_.records_for(n), [&](std::size_t bytes) {
      auto got = issuer_.records(bytes);
      keep = got.first;
      return got;
    });
    RunTicket ticket = outs.ranges ? start_impl(std::move(ins), std::move(*outs.ranges), order, std::move(keep))
                                   : start_impl(std::move(ins), std::move(*outs.sink), order, nullptr);
    return ResultTicket<R, RunTicket>(std::move(ticket), std::move(folding));
  }

  /// Queues a run of a pipeline whose last stage emits a count (Filter,
  /// Emit); its ticket's get() says how many elements it wrote.
  template <class In, class Out>
  ResultTicket<std::size_t, RunTicket> start_counted(In&& in, Out&& out, const After& order,
                                                     const RunLabel& label = {}) {
    auto packed = std::make_shared<Packed>();
    packed->place = label.place;  // a spread's piece may pack straight into the spread run's outputs
    RunTicket t = start_impl(::chunkpipe::detail::as_inputs(std::forward<In>(in)),
                             ::chunkpipe::detail::as_outputs(std::forward<Out>(out)), order, nullptr, packed, label);
    return ResultTicket<std::size_t, RunTicket>(std::move(t), std::make_shared<WrittenCount<Packed>>(std::move(packed)));
  }

  /// What `order` names, taken now, as a wait for another thread (a spread
  /// run ordered after it: RunAccess::hold; hold_after.cuh). Throws
  /// no_device_error for streams or events without a device, and what
  /// hold_after() throws.
  std::function<void()> hold(const After& order) {
    if ((!order.streams.empty() || !order.events.empty()) && device_.id < 0) throw no_device_error(device_.why);
    return ::chunkpipe::detail::hold_after(order, device_.id);
  }

  /// The next profiled run records a fresh zero for Report::clock_ms.
  /// Runs in flight keep theirs. Never blocks beyond the issue lock.
  void restart_profile_clock() { issuer_.restart_profile_clock(); }

  /// Staged runs copy with a spread's team from now on (the first run that
  /// stages starts it); call before such a run.
  void share_copy_team(std::shared_ptr<SharedCopyTeam> team) { issuer_.share_copy_team(std::move(team)); }

  /// Waits for every run queued so far, ignoring their errors (their
  /// tickets report them). Blocks.
  void wait_all() {
    route_.flush();
    drain_all();
  }

  /// Runs issued together with others (Options::coalesce) so far.
  std::size_t runs_coalesced() const noexcept { return route_.runs_coalesced(); }

  /// Waits for everything issued and being issued; held runs stay held.
  void drain_all() {
    route_.wait_issued();
    if (device_.id < 0) return;  // no device: nothing was ever issued
    issuer_.drain();
  }

  /// Waits for the most recent run; throws its error.
  void wait_last() {
    std::shared_ptr<RunState> last;
    {
      std::lock_guard<std::mutex> lock(submit_mutex_);
      last = intake_.last();
    }
    if (last) last->wait();
  }

  /// A copy of the most recent run's report (profiling on, run waited for).
  Report report() const {
    std::shared_ptr<RunState> last;
    {
      std::lock_guard<std::mutex> lock(submit_mutex_);
      last = intake_.last();
    }
    return RunTicket(last).report();
  }

  GraphStats graph_stats() const { return dispatcher_.stats(); }

  /// The most recent graph built, with its edges read back (Options::record_issued).
  IssuedGraph issued_graph() {
    route_.settle();
    return issuer_.issued_graph();
  }

  /// Every op issued so far, as the executor issued it (Options::record_issued).
  Plan issued_plan() {
    route_.settle();
    return issuer_.issued_plan();
  }

  /// Waits for work in flight and unregisters every range Staging::registered
  /// pinned. Throws cuda_error if unregistering fails.
  void release_registrations() {
    std::lock_guard<std::mutex> lock(submit_mutex_);
    route_.flush();
    drain_all();
    if (device_.id < 0) return;  // no device: no run registered anything
    DeviceGuard guard(device_.id);
    issuer_.forget_graphs();  // cached graphs may copy from those ranges
    registered_.release();
  }

  /// Ranges this pipeline registered, as (address, bytes).
  std::vector<std::pair<const void*, std::size_t>> registrations() const {
    std::lock_guard<std::mutex> lock(submit_mutex_);
    return registered_.ranges();
  }

  /// What the calibration decided (ChunkedPipeline::decision()). Never
  /// blocks: while a run is being issued it answers with what was decided
  /// before.
  std::optional<Decision> decision() { return issuer_.decision(); }

  /// Waits for every run, then decides on whatever chunks were timed
  /// (tune()). Blocks.
  std::optional<Decision> settle_decision() {
    wait_all();
    return issuer_.settle_decision();
  }

  /// The plan a run of `elems` elements would follow now (with the lanes
  /// decided, if any). Never blocks.
  Plan plan_for(std::size_t elems, bool stage_in, bool stage_out) const {
    return front_.plan_for(elems, stage_in, stage_out, issuer_.decided_lanes());
  }

 private:
  // `keep`: storage the run's outputs point into (a folding run's
  // records), held until the run is released. `label`: what its stages'
  // contexts number chunk 0 (RunLabel).
  template <class InSide, class OutSide>
  RunTicket start_impl(InSide ins, OutSide outs, const After& order, std::shared_ptr<void> keep = nullptr,
                       std::shared_ptr<Packed> packed = nullptr, RunLabel label = {}) {
    // Map stages see no context: their runs carry no label, so a labelled
    // run of them coalesces and takes graphs as any other. A run whose
    // label matters is never coalesced (joinable(): Map pipelines only).
    const bool piece = label.piece;
    if constexpr (PipelineFront<Stages...>::all_elementwise) label = RunLabel{};
    using in_types = typename side_types<InSide>::type;
    static_assert(run_types<in_types, typename side_types<OutSide>::type, Stages...>::ok);
    const std::size_t n = ::chunkpipe::detail::validate_run(ins, outs, front_.output_rule());
    if (device_.id < 0) ::chunkpipe::detail::refuse_run(ins, outs, device_.why);
    // A run this one follows may be held back by its pipeline (this one
    // included): it must be issued before this run can wait for it.
    for (const RunTicket& t : order.tickets) {
      if (t.state()) t.state()->issue_if_held();
    }
    std::lock_guard<std::mutex> lock(submit_mutex_);
    if (shared_.health->broken) {
      throw pipeline_error("chunkpipe: this pipeline is unusable: an earlier CUDA error broke the device context (" +
                           shared_.health->reason() + ")");
    }
    DeviceGuard guard(device_.id);

    // How each pageable range crosses (Options::staging). Registering
    // blocks here, before anything is queued.
    auto staged = [&](const auto& s) {
      return registered_.staged(s.data, s.size * sizeof(*s.data), s.memory, front_.options().staging);
    };
    // A spread's piece (labelled) has the spread's own buffers and Sink as
    // its ends: the spread cuts the user's Source and Sink into windows.
    RunEnds taken = intake_.take(front_, std::move(ins), std::move(outs), n, staged, piece, std::move(packed),
                                 std::move(keep), ::chunkpipe::detail::device_after_runs(order));
    const std::shared_ptr<const Endpoints> ends = std::move(taken.ends);

    const RunSpec spec = ::chunkpipe::detail::spec_for(*ends, n, front_.geometry().chunk_elems);
    if (n != 0) {
      prepare<in_types>(::chunkpipe::detail::flow_of<in_types, Stages...>(), spec.stage_in || spec.stage_out);
    }
    std::string note;
    const Executor executor =
        dispatcher_.choose(n, spec.chunks, spec.stage_in || spec.stage_out, label != RunLabel{}, note);

    std::shared_ptr<RunState> run = new_run();
    run->setup.ends = ends;
    run->setup.host_work = spec.stage_in || spec.stage_out;
    run->setup.label = label;
    run->setup.profile = front_.options().profile;
    run->completion.set_hooks(ends->finish, ends->abort);
    run->issue.executor = executor;
    run->issue.executor_note = note;
    for (const RunTicket& t : order.tickets) {
      if (t.state()) run->setup.after_runs.push_back(t.state());
    }
    run->setup.gates = gates_.take(order, *shared_.pool);
    if (run->setup.profile) {
      run->timeline.describe(front_.geometry(), front_.options(), *ends, link_, executor, note);
    }
    // Options::coalesce (coalescer.hpp): a small run that continues the
    // held ones joins them; any other run goes alone, after them, so runs
    // keep their order. A run of nothing queues nothing (wait() still
    // finishes a Sink).
    const bool ordered = !order.streams.empty() || !order.events.empty() || !order.tickets.empty();
    const bool joinable = route_.rules().joinable(n, run->setup.host_work, ordered, label != RunLabel{}) &&
                          executor == Executor::streams;
    // What every queued run leaves behind here, held or issued.
    route_.template submit<in_types>(run, spec, n, intake_.started(), joinable,
                                     [&] { intake_.queued(run, taken.ranges); });
    if (n == 0) {
      run->mark_issued();
      intake_.empty(run);
    }
    return RunTicket(run);
  }

  // A run with what every run of this pipeline gets (a coalescer's carrier too).
  std::shared_ptr<RunState> new_run() const {
    auto run = std::make_shared<RunState>();
    run->device = device_.id;
    run->health = shared_.health;
    run->pool = shared_.pool;
    return run;
  }

  // The slots and schedule for runs of this flow (Issuer::prepare). New
  // slots wait for every run in flight, and held runs are issued with the
  // slots they were queued for first. Under submit_mutex_.
  template <class In>
  void prepare(const Flow& flow, bool staged) {
    if (issuer_.prepared(flow, staged)) return;
    route_.settle();
    issuer_.template prepare<In>(flow, staged);
  }

  /// Everything stopped, for the destructor. Never throws.
  void quiesce() noexcept {
    route_.stop();
    if (device_.id < 0) return;  // no device: nothing was ever issued
    issuer_.quiesce();
  }

  PipelineFront<Stages...> front_;
  DevicePick device_;  // -1 where CUDA has none, with why (device_pick.cuh)
  // What every run of this pipeline shares with it (new_run) and with its
  // executors: whether the device context still works, and spare events.
  struct {
    std::shared_ptr<Health> health = std::make_shared<Health>();
    std::shared_ptr<EventPool> pool = std::make_shared<EventPool>();
  } shared_;

  // Guarded by submit_mutex_: what run_async() reads and writes.
  mutable std::mutex submit_mutex_;
  RunIntake<RunState> intake_;  // ends, in-flight ranges, the last run (run_intake.hpp)
  LinkModel link_;              // what profiled runs' reports measure against (set_link)
  Registrations registered_;    // Staging::registered ranges (registrations.cuh)
  AfterGates gates_;            // after(streams, events) as events of ours (hold_after.cuh)

  // Which executor each run gets, and GraphStats (dispatcher.hpp); its own lock.
  Dispatcher dispatcher_{front_.options(), front_.geometry(), PipelineFront<Stages...>::all_elementwise};
  // Everything a run touches once issued: executors, schedule, slots, lanes (issuer.cuh); its own lock.
  Issuer<Stages...> issuer_;
  // When and on which thread each run is issued (Options::coalesce, the
  // issue thread: issue_route.cuh). Last: closed and stopped first, before
  // what its jobs use goes.
  IssueRoute<Issuer<Stages...>> route_{CoalesceRules::of(front_), issuer_, [this] { return new_run(); }};
};

}  // namespace chunkpipe::detail
