// SPDX-License-Identifier: MIT
// What ChunkedPipeline does between a call and the executor: the device,
// staging decisions and registrations, the checks on a run's ranges, slot
// memory, the lifetime schedule (the driver) and who issues each run.
//
// Each piece lives in its own place: ranges and their checks in
// run_setup.hpp, the slots and their memory in slot_arena.cuh, the
// schedule in driver.hpp and plan.hpp, the CUDA work in
// stream_executor.cuh, the thread that issues staged runs in
// issue_worker.hpp, holding small runs to issue them together in
// coalescer.hpp, which executor a run gets in dispatcher.hpp, a run's
// state in run_ticket.cuh. This file wires them.
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/errors.hpp>
#include <chunkpipe/memory.cuh>
#include <chunkpipe/options.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/result.hpp>
#include <chunkpipe/run_ticket.cuh>
#include <chunkpipe/detail/coalescer.hpp>
#include <chunkpipe/detail/dispatcher.hpp>
#include <chunkpipe/detail/driver.hpp>
#include <chunkpipe/detail/front.hpp>
#include <chunkpipe/detail/graph_executor.cuh>
#include <chunkpipe/detail/issue_worker.hpp>
#include <chunkpipe/detail/run_setup.hpp>
#include <chunkpipe/detail/slot_arena.cuh>
#include <chunkpipe/detail/slots.hpp>
#include <chunkpipe/detail/stream_executor.cuh>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

/// Whether a host range must be staged through pinned slots.
inline bool needs_staging(const void* p, Memory memory) {
  if (memory == Memory::pinned) return false;
  if (memory == Memory::pageable) return true;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // not a pointer CUDA knows: plain host memory
    return true;
  }
  return a.type == cudaMemoryTypeUnregistered;
}

/// Staging threads per direction for Options::host_threads.
inline int host_threads_for(const Options& o) {
  return o.host_threads > 0 ? o.host_threads : ::chunkpipe::default_host_threads();
}

template <class... Stages>
class CudaRunner {
 public:
  /// Throws config_error for bad options or a device that does not exist,
  /// cuda_error if CUDA fails. Where CUDA has no device to give (no driver,
  /// none present) it is built all the same, with device() -1: its runs
  /// check their ranges and then throw no_device_error.
  CudaRunner(Options options, Stages... stages)
      : front_(Target::device, options, std::move(stages)...), device_(pick_device(front_.options(), no_device_)),
        exec_(front_.stages(), device_, host_threads_for(options), health_, pool_), graphs_(front_.stages(), pool_) {
    exec_.set_logging(options.record_issued);
    graphs_.set_logging(options.record_issued);
    graphs_.set_table_memory(options.device_memory);
  }

  ~CudaRunner() {
    // Tickets may outlive the pipeline: from now on they hold no run.
    coalescer_.close();
    quiesce();
    unregister_all();
  }
  CudaRunner(const CudaRunner&) = delete;
  CudaRunner& operator=(const CudaRunner&) = delete;

  PipelineFront<Stages...>& front() noexcept { return front_; }
  const PipelineFront<Stages...>& front() const noexcept { return front_; }
  /// The device runs use; -1 where there is none (no_device_error).
  int device() const noexcept { return device_; }
  bool healthy() const noexcept { return !health_->broken; }
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
    if (device_ < 0) throw no_device_error(no_device_);  // its records would be pinned memory
    auto folding = Traits::make(std::get<sizeof...(Stages) - 1>(front_.stages()));
    std::shared_ptr<void> keep;
    auto outs = ::chunkpipe::detail::folding_outputs(folding, n, front_.records_for(n), [&](std::size_t bytes) {
      auto got = arena_.records(bytes);
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
    RunTicket t = start_impl(::chunkpipe::detail::as_inputs(std::forward<In>(in)),
                             ::chunkpipe::detail::as_outputs(std::forward<Out>(out)), order, nullptr, packed, label);
    return ResultTicket<std::size_t, RunTicket>(std::move(t), std::make_shared<WrittenCount<Packed>>(std::move(packed)));
  }

  /// Waits for every run queued so far, ignoring their errors (their
  /// tickets report them). Blocks.
  /// The next profiled run records a fresh zero for Report::clock_ms.
  /// Runs in flight keep theirs. Never blocks beyond the issue lock.
  void restart_profile_clock() {
    std::lock_guard<std::mutex> lock(issue_mutex_);
    exec_.restart_clock();
  }

  void wait_all() {
    coalescer_.flush();
    drain_all();
  }

  /// Runs issued together with others (Options::coalesce) so far.
  std::size_t runs_coalesced() const noexcept { return coalescer_.runs_coalesced(); }

  /// Waits for everything issued and being issued; held runs stay held.
  void drain_all() {
    worker_.wait_idle();
    if (device_ < 0) return;  // no device: nothing was ever issued
    std::lock_guard<std::mutex> lock(issue_mutex_);
    DeviceGuard guard(device_);
    exec_.drain();
    graphs_.drain();
  }

  /// Waits for the most recent run; throws its error.
  void wait_last() {
    std::shared_ptr<RunState> last;
    {
      std::lock_guard<std::mutex> lock(submit_mutex_);
      last = last_;
    }
    if (last) last->wait();
  }

  /// A copy of the most recent run's report (profiling on, run waited for).
  Report report() const {
    std::shared_ptr<RunState> last;
    {
      std::lock_guard<std::mutex> lock(submit_mutex_);
      last = last_;
    }
    return RunTicket(last).report();
  }

  GraphStats graph_stats() const { return dispatcher_.stats(); }

  /// The most recent graph built, with its edges read back (Options::record_issued).
  IssuedGraph issued_graph() {
    coalescer_.flush();
    worker_.wait_idle();
    std::lock_guard<std::mutex> lock(issue_mutex_);
    return graphs_.last_built();
  }

  /// Every op issued so far, as the executor issued it (Options::record_issued).
  Plan issued_plan() {
    coalescer_.flush();
    worker_.wait_idle();
    std::lock_guard<std::mutex> lock(issue_mutex_);
    if (!driver_) return Plan{};
    return ::chunkpipe::detail::issued_plan(driver_->builder(), exec_.log(), runs_log_);
  }

  /// Waits for work in flight and unregisters every range Staging::registered
  /// pinned. Throws cuda_error if unregistering fails.
  void release_registrations() {
    std::lock_guard<std::mutex> lock(submit_mutex_);
    coalescer_.flush();
    drain_all();
    if (device_ < 0) return;  // no device: no run registered anything
    DeviceGuard guard(device_);
    {
      // Cached graphs may copy from those ranges: forget them first.
      std::lock_guard<std::mutex> issuing(issue_mutex_);
      graphs_.forget();
    }
    for (const auto& [p, bytes] : registered_) CHUNKPIPE_CUDA_TRY(cudaHostUnregister(const_cast<void*>(p)));
    registered_.clear();
  }

  /// Ranges this pipeline registered, as (address, bytes).
  std::vector<std::pair<const void*, std::size_t>> registrations() const {
    std::lock_guard<std::mutex> lock(submit_mutex_);
    return registered_;
  }

 private:
  // Options::device, or the current device. Where CUDA has no device to
  // give (means_no_device(), or none counted) returns -1 and says why in
  // `why`, so that the pipeline is built and each run can check its ranges
  // before saying so. Throws config_error for a device that does not
  // exist, cuda_error for other failures.
  static int pick_device(const Options& options, std::string& why) {
    int count = 0;
    const cudaError_t counted = cudaGetDeviceCount(&count);
    if (counted != cudaSuccess && !::chunkpipe::detail::means_no_device(counted)) {
      ::chunkpipe::detail::throw_cuda_error(counted, "cudaGetDeviceCount(&count)", __FILE__, __LINE__);
    }
    if (counted != cudaSuccess || count == 0) {
      why = ::chunkpipe::detail::no_device_message(counted, count);
      return -1;
    }
    if (options.device >= count) {
      throw config_error("chunkpipe: device " + std::to_string(options.device) + " does not exist (" +
                         std::to_string(count) + " CUDA devices)");
    }
    if (options.device >= 0) return options.device;
    int d = 0;
    CHUNKPIPE_CUDA_TRY(cudaGetDevice(&d));
    return d;
  }

  // A run of a pipeline with no device: its ranges are checked as any
  // run's are (validate_run() before this, then overlaps within the run;
  // none can overlap a run in flight, as none ever ran), and then it is
  // refused. Touches no CUDA.
  template <class InSide, class OutSide>
  [[noreturn]] void refuse_without_device(const InSide& ins, const OutSide& outs) const {
    if constexpr (!is_source<InSide>::value && !is_sink<OutSide>::value) {
      auto direct = [](const auto&) { return false; };
      ::chunkpipe::detail::check_run_ranges(RunRanges(::chunkpipe::detail::make_endpoints(ins, outs, direct)));
    }
    throw no_device_error(no_device_);
  }

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
    if (device_ < 0) refuse_without_device(ins, outs);
    // A run this one follows may be held back by its pipeline (this one
    // included): it must be issued before this run can wait for it.
    for (const RunTicket& t : order.tickets) {
      if (t.state()) t.state()->issue_if_held();
    }
    std::lock_guard<std::mutex> lock(submit_mutex_);
    if (health_->broken) {
      throw pipeline_error("chunkpipe: this pipeline is unusable: an earlier CUDA error broke the device context (" +
                           health_->reason() + ")");
    }
    DeviceGuard guard(device_);

    // How each pageable range crosses (Options::staging). Registering
    // blocks here, before anything is queued.
    const Staging mode = front_.options().staging;
    auto staged = [&](const auto& s) {
      if (s.size == 0 || !::chunkpipe::detail::needs_staging(s.data, s.memory)) return false;
      if (mode == Staging::registered) {
        register_range(s.data, s.size * sizeof(*s.data));
        return false;
      }
      return mode != Staging::direct;
    };
    // A spread's piece (labelled) has the spread's own buffers and Sink as
    // its ends: the spread cuts the user's Source and Sink into windows.
    const Window window = piece ? Window{} : front_.window_for(n);
    Endpoints made = ::chunkpipe::detail::make_endpoints(std::move(ins), std::move(outs), staged, window);
    if (PipelineFront<Stages...>::counted && !packed) packed = std::make_shared<Packed>();
    ::chunkpipe::detail::complete_endpoints(made, front_.per_record(), std::move(packed), std::move(keep));
    auto ends = std::make_shared<const Endpoints>(std::move(made));
    RunRanges ranges(*ends);
    ::chunkpipe::detail::check_run_ranges(ranges);
    std::vector<const RunState*> exempt;
    for (const RunTicket& t : order.tickets) {
      if (!t.state()) continue;
      if (t.state()->host_work) {
        throw pipeline_error(
            "chunkpipe: after(ticket): that run ends on host threads (it stages pageable memory or uses a Source "
            "or Sink), which the device cannot wait for; wait() for it first");
      }
      exempt.push_back(t.state().get());
    }
    in_flight_.check(ranges, exempt);

    const RunSpec spec = ::chunkpipe::detail::spec_for(*ends, n, front_.geometry().chunk_elems);
    if (n != 0) {
      prepare(::chunkpipe::detail::flow_of<in_types, Stages...>(), spec.stage_in || spec.stage_out,
              [this] { return out_shape<in_types>(); });
    }
    std::string note;
    const Executor executor =
        dispatcher_.choose(n, spec.chunks, spec.stage_in || spec.stage_out, label != RunLabel{}, note);

    std::shared_ptr<RunState> run = new_run();
    run->ends = ends;
    run->host_work = spec.stage_in || spec.stage_out;
    run->label = label;
    run->profile = front_.options().profile;
    run->completion.set_hooks(ends->finish, ends->abort);
    run->executor = executor;
    run->executor_note = note;
    for (const RunTicket& t : order.tickets) {
      if (t.state()) run->after_runs.push_back(t.state());
    }
    for (cudaStream_t s : order.streams) {
      Event e = pool_->get();
      CHUNKPIPE_CUDA_TRY(cudaEventRecord(e.get(), s));
      run->gates.push_back(std::move(e));
    }
    for (cudaEvent_t user : order.events) {
      // The event's latest record, taken now: a stream of ours waits for
      // it and records one of ours.
      if (!gate_) gate_ = Stream::create();
      Event e = pool_->get();
      CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(gate_.get(), user, 0));
      CHUNKPIPE_CUDA_TRY(cudaEventRecord(e.get(), gate_.get()));
      run->gates.push_back(std::move(e));
    }
    if (run->profile) {
      Report& r = run->report;
      const Geometry& g = front_.geometry();
      r.label = run_label(g.kernel_lanes);
      r.policy = g.policy;
      r.depth = g.depth;
      r.chunk_elems = g.chunk_elems;
      r.link = link_;
      r.executor = executor;
      r.executor_note = note;
      const Options& o = front_.options();
      const int threads = host_threads_for(o);
      r.io = ::chunkpipe::detail::describe_io(
          *ends,
          std::to_string(threads) + (threads == 1 ? " thread" : " threads") +
              (o.host_threads > 0 ? " (Options::host_threads)" : " (the default: min(8, hardware threads))"),
          "into " + std::to_string(g.depth) + " free slots" +
              (o.policy == Policy::automatic ? " (the automatic policy's depth)" : " (Options::depth)"));
    }
    // Options::coalesce (coalescer.hpp): a small run that continues the
    // held ones joins them; any other run goes alone, after them, so runs
    // keep their order. A run of nothing queues nothing (wait() still
    // finishes a Sink).
    const bool ordered = !order.streams.empty() || !order.events.empty() || !order.tickets.empty();
    const bool joinable =
        coalescer_.rules().joinable(n, run->host_work, ordered, label != RunLabel{}) && executor == Executor::streams;
    const std::size_t index = runs_started_;
    // What every queued run leaves behind here, held or issued.
    auto queued = [&] {
      ++runs_started_;
      in_flight_.add(run, ranges);
      last_ = run;
    };
    const bool held = coalescer_.submit(run, n, joinable, &CudaRunner::template issue_as<in_types>, index, [&] {
      // The caller issues a run that nothing blocks on the host: no
      // staging, nothing queued before it here, and every run it follows
      // issued (a run of another pipeline may still wait for that
      // pipeline's thread).
      bool inline_issue = !run->host_work && worker_.idle();
      for (const auto& before : run->after_runs) inline_issue = inline_issue && before->is_issued();
      if (!inline_issue) worker_.push([this, run, spec, n, index] { issue<in_types>(run, spec, n, index); });
      queued();
      if (inline_issue) issue<in_types>(run, spec, n, index);
    });
    if (n == 0) {
      run->mark_issued();
      last_ = run;
    } else if (held) {
      queued();
    }
    return RunTicket(run);
  }

  // A run with what every run of this pipeline gets (a coalescer's carrier too).
  std::shared_ptr<RunState> new_run() const {
    auto run = std::make_shared<RunState>();
    run->device = device_;
    run->health = health_;
    run->pool = pool_;
    return run;
  }

  // The coalescer's Issue for runs of input types In.
  template <class In>
  static void issue_as(void* self, const std::shared_ptr<RunState>& run, const RunSpec& spec, std::size_t n,
                       std::size_t index) noexcept {
    static_cast<CudaRunner*>(self)->template issue<In>(run, spec, n, index);
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

  // Issues one run through the driver. Never throws: what goes wrong is
  // the run's error; a schedule left torn by a CUDA call that failed is
  // dropped, after everything in flight has stopped, for a fresh one.
  template <class In>
  void issue(const std::shared_ptr<RunState>& run, const RunSpec& spec, std::size_t n, std::size_t index) noexcept {
    std::lock_guard<std::mutex> lock(issue_mutex_);
    if (run->executor == Executor::graphs) {
      // A run queued before a stage was found not to capture goes on streams too.
      std::string refused = dispatcher_.refusal();
      if (!refused.empty()) {
        run->executor = Executor::streams;
        run->executor_note = refused;
      } else if (issue_graph<In>(run, n, index)) {
        run->mark_issued();
        return;
      }
    }
    try {
      DeviceGuard guard(device_);
      if (!driver_) fresh_schedule();
      NvtxRange range(run_name_, index);
      typename StreamExecutor<Stages...>::Run r;
      r.state = run;
      r.index = index;
      RunSpec lanes_spec = spec;
      lanes_spec.kernel_lanes = lanes_for_run(n);
      if (run->profile) {
        run->report.queues = driver_->builder().queues();
        run->report.label = run_label(lanes_spec.kernel_lanes);  // the lanes it got
        std::lock_guard<std::mutex> stats(stats_mutex_);
        if (decision_) run->report.decision = decision_->why;
      }
      const PlanRun done = driver_->template issue_run<In>(exec_, r, lanes_spec, n);
      if (cal_) settle_locked(false);  // a check's (or a late first) decision, while the GPU runs this run
      run->elems = n == unknown_length ? done.elems : n;
      run->chunks = (run->elems + driver_->chunk_elems() - 1) / driver_->chunk_elems();
      if (front_.options().record_issued) runs_log_.push_back(done);
    } catch (...) {
      run->fail(std::current_exception());
      exec_.drain();
      graphs_.drain();
      driver_.reset();
    }
    run->mark_issued();
  }

  // A profiled run's report label: "stage_streams, depth 3, 2 kernel lanes".
  std::string run_label(int lanes) const {
    const Geometry& g = front_.geometry();
    return std::string(to_string(g.policy)) + ", depth " + std::to_string(g.depth) +
           (lanes > 1 ? ", " + std::to_string(lanes) + " kernel lanes" : std::string());
  }

  // -- Calibration (the automatic policy; calibration.cuh) -------------------

  // The kernel lanes the next run gets: those decided once the calibrated
  // chunks are done, the geometry's until then. Under issue_mutex_.
  // Only the first decision is made here, before the run is issued, so
  // that the run after the timed chunks already gets it; a check's is made
  // after a run was issued (issue()), where deciding (a simulated run per
  // lane count: under a millisecond of host time) overlaps the GPU's work instead
  // of delaying the run's first op (benchmarks/probes/default_gap.cu found
  // each run that followed a check 0.5 ms slower when it was made here).
  int lanes_for_run(std::size_t n) {
    if (!cal_) return front_.geometry().kernel_lanes;
    if (!cal_->decided()) settle_locked(false);
    cal_->note_run(n == unknown_length ? 0 : n, run_lanes_);
    return run_lanes_;
  }

  // Makes a decision if the calibrated chunks are done (any timed at all,
  // if `final`), and publishes it: the first, and any later check's that
  // found the work moved (CalibrationState::recheck_chunks, moved_margin).
  // Never blocks. Under issue_mutex_, on the pipeline's device.
  void settle_locked(bool final) {
    if (!cal_) return;
    std::optional<Decision> d = cal_->settle(final);
    if (!d) return;
    run_lanes_ = d->chosen.geometry.kernel_lanes;
    std::lock_guard<std::mutex> stats(stats_mutex_);
    decision_ = std::move(*d);
  }

 public:
  /// What the calibration decided (ChunkedPipeline::decision()). Never
  /// blocks: while a run is being issued it answers with what was decided
  /// before.
  std::optional<Decision> decision() {
    {
      std::unique_lock<std::mutex> issuing(issue_mutex_, std::try_to_lock);
      if (issuing.owns_lock() && cal_) {
        DeviceGuard guard(device_);
        settle_locked(false);
      }
    }
    std::lock_guard<std::mutex> stats(stats_mutex_);
    return decision_;
  }

  /// Waits for every run, then decides on whatever chunks were timed
  /// (tune()). Blocks.
  std::optional<Decision> settle_decision() {
    wait_all();
    {
      std::lock_guard<std::mutex> issuing(issue_mutex_);
      if (cal_) {
        DeviceGuard guard(device_);
        settle_locked(true);
      }
    }
    std::lock_guard<std::mutex> stats(stats_mutex_);
    return decision_;
  }

  /// The plan a run of `elems` elements would follow now (with the lanes
  /// decided, if any). Never blocks.
  Plan plan_for(std::size_t elems, bool stage_in, bool stage_out) const {
    int lanes = 0;
    {
      std::lock_guard<std::mutex> stats(stats_mutex_);
      if (decision_) lanes = decision_->chosen.geometry.kernel_lanes;
    }
    return front_.plan_for(elems, stage_in, stage_out, lanes);
  }

 private:
  // Issues a pinned run as one graph launch. Returns false if the run is
  // to go on streams after all (the automatic executor, when a stage
  // cannot be captured); true when it is issued or has failed. Never throws.
  template <class In>
  bool issue_graph(const std::shared_ptr<RunState>& run, std::size_t n, std::size_t index) noexcept {
    try {
      DeviceGuard guard(device_);
      if (!driver_) fresh_schedule();  // the streams the graph orders itself between
      NvtxRange range(graph_run_name_, index);
      graph_streams_.clear();  // reused: a replay allocates nothing here
      for (std::size_t q = 0; q < exec_.device_queues(); ++q) graph_streams_.push_back(exec_.stream(q));
      GraphStats times;
      const auto path = graphs_.template issue<In>(*run, n, graph_streams_, times);
      run->elems = n;
      run->chunks = (n + front_.geometry().chunk_elems - 1) / front_.geometry().chunk_elems;
      dispatcher_.graph_issued(path, times, graphs_.cached());
      return true;
    } catch (const graph_build_error& e) {
      // Nothing was launched: the pipeline is fine, the run's graph is not.
      // What the failed capture left in CUDA's last error is ours, not the
      // next run's.
      (void)cudaGetLastError();
      if (!dispatcher_.build_failed(e.what(), e.every_shape)) {
        run->fail(std::current_exception());
        return true;
      }
      run->executor = Executor::streams;
      run->executor_note = e.what();
      return false;
    } catch (const cuda_error& e) {
      if (is_sticky(e.code())) health_->mark(e.what());
      run->fail(std::current_exception());
      exec_.drain();
      graphs_.drain();
      driver_.reset();
      return true;
    } catch (...) {
      run->fail(std::current_exception());
      exec_.drain();
      graphs_.drain();
      driver_.reset();
      return true;
    }
  }

  // What the last stage's slot buffer holds beyond its outputs: a Filter's
  // count and CUB scratch (sized for a full unit).
  template <class In>
  OutShape out_shape() {
    OutShape o;
    o.records = front_.unit_records();
    o.counted = PipelineFront<Stages...>::counted;
    using Last = typename PipelineFront<Stages...>::last_stage;
    if constexpr (is_filter<Last>::value) {
      using io = std::tuple_element_t<sizeof...(Stages) - 1, typename chain<In, Stages...>::ios>;
      // Unqualified: argument-dependent lookup finds filter_kernel.cuh's
      // overload (<chunkpipe/filter.cuh>; stage_launch.cuh, FilterFound).
      o.scratch_bytes = filter_device_scratch(FilterFound{}, std::get<sizeof...(Stages) - 1>(front_.stages()).pred,
                                              static_cast<const first_type_t<typename io::in>*>(nullptr),
                                              front_.geometry().chunk_elems);
    }
    return o;
  }

  // The slots and schedule for runs of this flow (element types). The first
  // run allocates them; a run whose element types lay the slots out
  // differently waits for every run in flight first. Throws config_error
  // when the slots do not fit in free device memory, and what the arena's
  // allocations throw (SlotArena: the program's MemoryResources).
  template <class OutShapeFn>
  void prepare(const Flow& flow, bool staged, OutShapeFn&& out_shape_of) {
    if (flow_ && *flow_ == flow && (!staged || arena_.has_pinned())) return;
    // Held runs are issued with the slots they were queued for.
    coalescer_.flush();
    worker_.wait_idle();
    std::lock_guard<std::mutex> lock(issue_mutex_);
    const bool fresh = !flow_ || *flow_ != flow;
    if (fresh) {
      exec_.drain();
      graphs_.drain();
      if (cal_) {
        // Everything timed has run: decide on it before the new schedule
        // numbers its chunks afresh (fresh_schedule restarts the round).
        DeviceGuard guard(device_);
        settle_locked(true);
      }
      // Until the new slots exist, no flow is prepared: if allocating them
      // throws, the next run starts here again.
      driver_.reset();
      flow_ = nullptr;
      const Geometry& g = front_.geometry();
      PlanBuilder probe(g.policy, g.depth, front_.lifetime_shape());
      arena_.lay_out(::chunkpipe::detail::make_slot_layout(probe.steps(), probe.buffers().size(), flow,
                                                           g.chunk_elems, g.depth, out_shape_of()));
      flow_ = &flow;
    }
    // Pinned slots only for pipelines that stage; no op uses them before
    // the first staged run, so they can appear without a drain.
    if (staged) arena_.ensure_pinned();
    exec_.set_memory(arena_.memory());
    if (fresh) {
      // Graphs name the device slots; pinned slots are never theirs. Other
      // element types may capture where these did not.
      const Geometry& g = front_.geometry();
      // A graph is one run with the geometry's lanes: the lanes a
      // calibration decides are for stream runs, whose streams they are.
      PlanShape shape = front_.lifetime_shape();
      shape.kernel_lanes = g.kernel_lanes;
      shape.lanes_vary = false;
      graphs_.configure(g.policy, g.depth, shape, g.chunk_elems, arena_.memory());
      dispatcher_.new_flow();
    }
  }

  // A new lifetime schedule: chunk and op numbers start again. Only when
  // nothing is in flight (the first run, new element types, or after a
  // schedule was torn).
  void fresh_schedule() {
    const Geometry& g = front_.geometry();
    driver_.emplace(g.policy, g.depth, front_.lifetime_shape(), g.chunk_elems);
    exec_.configure(driver_->builder(), arena_.memory());
    runs_log_.clear();
    if (front_.calibrates() && !cal_) {
      // Its events belong to this device; a schedule made again later (new
      // element types) keeps what was decided (prepare() settles what was
      // timed first; after a failure the round in progress starts over).
      cal_.emplace(front_.options(), static_cast<int>(sizeof...(Stages)), front_.lane_capacity(), g.chunk_elems);
      exec_.set_calibration(&*cal_);
    } else if (cal_) {
      cal_->restart();  // the chunk numbers start over
    }
  }

  /// Pins a pageable range in place for Staging::registered, once: the
  /// registration is cached until release_registrations(). Blocks (pinning
  /// takes tens to hundreds of ms per GiB); throws cuda_error on failure.
  void register_range(const void* p, std::size_t bytes) {
    for (const auto& [q, b] : registered_) {
      if (p >= q && static_cast<const std::byte*>(p) + bytes <= static_cast<const std::byte*>(q) + b) return;
    }
    CHUNKPIPE_CUDA_TRY(cudaHostRegister(const_cast<void*>(p), bytes, cudaHostRegisterDefault));
    registered_.emplace_back(p, bytes);
  }

  void unregister_all() noexcept {
    for (const auto& [p, bytes] : registered_) {
      if (cudaHostUnregister(const_cast<void*>(p)) != cudaSuccess) (void)cudaGetLastError();
    }
    registered_.clear();
  }

  /// Everything stopped, for the destructor. Never throws.
  void quiesce() noexcept {
    worker_.stop();
    if (device_ < 0) return;  // no device: nothing was ever issued
    int previous = 0;
    const bool switched =
        cudaGetDevice(&previous) == cudaSuccess && previous != device_ && cudaSetDevice(device_) == cudaSuccess;
    exec_.drain();
    graphs_.drain();
    if (switched) (void)cudaSetDevice(previous);
  }

  PipelineFront<Stages...> front_;
  std::string no_device_;  // why device_ is -1 (no_device_error's message); before device_, which sets it
  int device_ = 0;
  std::shared_ptr<Health> health_ = std::make_shared<Health>();
  std::shared_ptr<EventPool> pool_ = std::make_shared<EventPool>();
  LinkModel link_;

  // Guarded by submit_mutex_: what run_async() reads and writes.
  mutable std::mutex submit_mutex_;
  InFlightRanges<RunState> in_flight_;
  std::shared_ptr<RunState> last_;
  std::vector<std::pair<const void*, std::size_t>> registered_;  // Staging::registered ranges
  Stream gate_;  // takes snapshots of user events (after(event))
  std::size_t runs_started_ = 0;

  // Guarded by issue_mutex_ (and changed only when nothing is being issued):
  // the schedule, the executor and slot memory.
  std::mutex issue_mutex_;
  const Flow* flow_ = nullptr;
  SlotArena arena_{device_, front_.options()};  // slot layout, arenas, record pool (slot_arena.cuh)
  StreamExecutor<Stages...> exec_;
  GraphExecutor<Stages...> graphs_;
  std::vector<cudaStream_t> graph_streams_;  // the stream executor's, for graphs_.issue()
  std::optional<Driver<StreamExecutor<Stages...>>> driver_;
  std::vector<PlanRun> runs_log_;
  std::optional<Calibration> cal_;  // a pipeline that calibrates, from its first schedule on
  int run_lanes_ = 1;               // the lanes stream runs get (settle_locked)
  NvtxName run_name_{"chunkpipe run"};
  NvtxName graph_run_name_{"chunkpipe graph run"};

  // Which executor each run gets, and GraphStats (dispatcher.hpp); its own lock.
  Dispatcher dispatcher_{front_.options(), front_.geometry(), PipelineFront<Stages...>::all_elementwise};

  mutable std::mutex stats_mutex_;
  std::optional<Decision> decision_;  // guarded by stats_mutex_: what the calibration decided

  // Options::coalesce: its own lock and watcher thread; issues on worker_.
  // Closed first by ~CudaRunner; its jobs on worker_ use none of it.
  Coalescer<RunState> coalescer_{
      CoalesceRules::of(front_), worker_, {this, [this] { return new_run(); }, &CudaRunner::wait_done}};
  IssueWorker worker_;  // last: stopped first, before what its jobs use goes
};

}  // namespace chunkpipe::detail
