// SPDX-License-Identifier: MIT
// The issuing side of a GPU pipeline: everything a run touches once it is
// issued, behind one lock. It owns the executors (streams and graphs), the
// lifetime schedule (the Driver) of stream runs, the slot memory
// (SlotArena) and the lane tuner, and issues one run at a time, on the
// executor the Dispatcher chose. CudaRunner (cuda_runner.cuh) takes runs
// in and decides when each is issued; this class is how.
//
// Lock order: CudaRunner's submit lock, then the coalescer's, then this
// class's issue lock, then the tuner's and the dispatcher's own (leaves).
// Nothing here calls back into CudaRunner.
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/errors.hpp>
#include <chunkpipe/memory.cuh>
#include <chunkpipe/options.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/run_ticket.cuh>
#include <chunkpipe/detail/copy_team.hpp>  // SharedCopyTeam
#include <chunkpipe/detail/dispatcher.hpp>
#include <chunkpipe/detail/driver.hpp>
#include <chunkpipe/detail/front.hpp>
#include <chunkpipe/detail/graph_executor.cuh>
#include <chunkpipe/detail/lane_tuner.cuh>
#include <chunkpipe/detail/nvtx.hpp>
#include <chunkpipe/detail/run_setup.hpp>
#include <chunkpipe/detail/slot_arena.cuh>
#include <chunkpipe/detail/slots.hpp>
#include <chunkpipe/detail/stream_executor.cuh>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

/// What the last stage's slot buffer holds beyond its outputs, for runs
/// whose inputs are `In`: a Filter's count and CUB scratch (sized for a
/// full unit).
template <class In, class... Stages>
OutShape out_shape(PipelineFront<Stages...>& front) {
  using Front = PipelineFront<Stages...>;
  OutShape o;
  o.records = front.unit_records();
  o.counted = Front::counted;
  using Last = typename Front::last_stage;
  if constexpr (is_filter<Last>::value) {
    using io = std::tuple_element_t<sizeof...(Stages) - 1, typename chain<In, Stages...>::ios>;
    // Unqualified: argument-dependent lookup finds filter_kernel.cuh's
    // overload (<chunkpipe/filter.cuh>; stage_launch.cuh, FilterFound).
    o.scratch_bytes = filter_device_scratch(FilterFound{}, std::get<sizeof...(Stages) - 1>(front.stages()).pred,
                                            static_cast<const first_type_t<typename io::in>*>(nullptr),
                                            front.geometry().chunk_elems);
  }
  return o;
}

template <class... Stages>
class Issuer {
  using Front = PipelineFront<Stages...>;

 public:
  /// `front`, `dispatcher`: the pipeline's, which outlive this. Builds the
  /// executors; touches no slot memory until the first prepare().
  Issuer(Front& front, int device, std::shared_ptr<Health> health, const std::shared_ptr<EventPool>& pool,
         Dispatcher& dispatcher, int host_threads)
      : front_(front),
        health_(std::move(health)),
        dispatcher_(dispatcher),
        arena_(device, front.options()),
        exec_(front.stages(), device, host_threads, health_, pool),
        graphs_(front.stages(), pool),
        tuner_(front.geometry().kernel_lanes) {
    const Options& o = front.options();
    exec_.set_logging(o.record_issued);
    graphs_.set_logging(o.record_issued);
    graphs_.set_table_memory(o.device_memory);
  }
  Issuer(const Issuer&) = delete;
  Issuer& operator=(const Issuer&) = delete;

  /// Whether runs of `flow` can be issued with the slots there are (pinned
  /// ones too, if `staged`). Changed only by prepare(), which the caller
  /// serialises with this (CudaRunner's submit lock).
  bool prepared(const Flow& flow, bool staged) const noexcept {
    return flow_ && *flow_ == flow && (!staged || arena_.has_pinned());
  }

  /// The slots and schedule for runs of this flow (element types). The
  /// first run allocates them; a run whose element types lay the slots out
  /// differently waits for every run in flight first (the caller has
  /// issued what it holds). Throws config_error when the slots do not fit
  /// in free device memory, and what the arena's allocations throw
  /// (SlotArena: the program's MemoryResources).
  template <class In>
  void prepare(const Flow& flow, bool staged) {
    std::lock_guard<std::mutex> lock(mutex_);
    const bool fresh = !flow_ || *flow_ != flow;
    if (fresh) {
      drain_locked();
      // Everything timed has run: decide on it before the new schedule
      // numbers its chunks afresh (fresh_schedule restarts the round).
      if (tuner_.has_calibration()) {
        DeviceGuard guard(arena_.device());
        tuner_.settle(true);
      }
      // Until the new slots exist, no flow is prepared: if allocating them
      // throws, the next run starts here again.
      driver_.reset();
      flow_ = nullptr;
      const Geometry& g = front_.geometry();
      PlanBuilder probe(g.policy, g.depth, front_.lifetime_shape());
      arena_.lay_out(::chunkpipe::detail::make_slot_layout(probe.steps(), probe.buffers().size(), flow, g.chunk_elems,
                                                           g.depth, out_shape<In>(front_), front_.carry_segment()));
      flow_ = &flow;
    }
    // Pinned slots only for pipelines that stage; no op uses them before
    // the first staged run, so they can appear without a drain.
    if (staged) arena_.ensure_pinned();
    exec_.set_memory(arena_.memory());
    if (fresh) {
      // Graphs name the device slots; pinned slots are never theirs.
      graphs_.configure(front_.geometry().chunk_elems, arena_.memory());
      // Other element types may capture where these did not.
      dispatcher_.new_flow();
    }
  }

  /// Issues one run on the executor it was given. Never throws: what goes
  /// wrong is the run's error; a schedule left torn by a CUDA call that
  /// failed is dropped, after everything in flight has stopped, for a
  /// fresh one. Marks the run issued.
  template <class In>
  void issue(const std::shared_ptr<RunState>& run, const RunSpec& spec, std::size_t n, std::size_t index) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    if (run->issue.executor == Executor::graphs) {
      // A run queued before a stage was found not to capture goes on streams too.
      std::string refused = dispatcher_.refusal();
      if (!refused.empty()) {
        run->issue.executor = Executor::streams;
        run->issue.executor_note = refused;
      } else if (issue_graph<In>(run, n, index)) {
        run->mark_issued();
        return;
      }
    }
    try {
      DeviceGuard guard(arena_.device());
      if (!driver_) fresh_schedule();
      NvtxRange range(names_.run, index);
      typename StreamExecutor<Stages...>::Run r;
      r.state = run;
      r.index = index;
      RunSpec lanes_spec = spec;
      lanes_spec.kernel_lanes = tuner_.lanes_for_run(n);
      if (run->setup.profile) {
        run->timeline.report.queues = driver_->builder().queues();
        run->timeline.report.label = run_label(front_.geometry(), lanes_spec.kernel_lanes);  // the lanes it got
        run->timeline.report.decision = tuner_.why();
      }
      const PlanRun done = driver_->template issue_run<In>(exec_, r, lanes_spec, n);
      tuner_.settle(false);  // a check's (or a late first) decision, while the GPU runs this run
      run->issue.elems = n == unknown_length ? done.elems : n;
      run->issue.chunks = (run->issue.elems + driver_->chunk_elems() - 1) / driver_->chunk_elems();
      if (front_.options().record_issued) runs_log_.push_back(done);
    } catch (...) {
      run->fail(std::current_exception());
      tear_down();
    }
    run->mark_issued();
  }

  /// Waits for everything issued. Blocks.
  void drain() {
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceGuard guard(arena_.device());
    drain_locked();
  }

  /// Everything stopped, for the pipeline's destructor, from any current
  /// device. Never throws.
  void quiesce() noexcept {
    int previous = 0;
    const int device = arena_.device();
    const bool switched =
        cudaGetDevice(&previous) == cudaSuccess && previous != device && cudaSetDevice(device) == cudaSuccess;
    drain_locked();
    if (switched) (void)cudaSetDevice(previous);
  }

  /// Forgets cached graphs (they may copy from ranges about to be
  /// unregistered). Call with nothing in flight.
  void forget_graphs() {
    std::lock_guard<std::mutex> lock(mutex_);
    graphs_.forget();
  }

  /// The next profiled run records a fresh zero for Report::clock_ms.
  void restart_profile_clock() {
    std::lock_guard<std::mutex> lock(mutex_);
    exec_.restart_clock();
  }

  /// Staged runs copy with `team` (StreamExecutor::share_copy_team).
  void share_copy_team(std::shared_ptr<SharedCopyTeam> team) {
    std::lock_guard<std::mutex> lock(mutex_);
    exec_.share_copy_team(std::move(team));
  }

  /// The most recent graph built, with its edges read back (Options::record_issued).
  IssuedGraph issued_graph() {
    std::lock_guard<std::mutex> lock(mutex_);
    return graphs_.last_built();
  }

  /// Every op issued so far on streams (Options::record_issued).
  Plan issued_plan() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!driver_) return Plan{};
    return ::chunkpipe::detail::issued_plan(driver_->builder(), exec_.log(), runs_log_);
  }

  /// What the calibration decided. Never blocks: while a run is being
  /// issued it answers with what was decided before.
  std::optional<Decision> decision() {
    {
      std::unique_lock<std::mutex> issuing(mutex_, std::try_to_lock);
      if (issuing.owns_lock() && tuner_.has_calibration()) {
        DeviceGuard guard(arena_.device());
        tuner_.settle(false);
      }
    }
    return tuner_.decision();
  }

  /// Decides on whatever chunks were timed (the caller has waited for
  /// every run). Blocks for the issue lock.
  std::optional<Decision> settle_decision() {
    {
      std::lock_guard<std::mutex> issuing(mutex_);
      if (tuner_.has_calibration()) {
        DeviceGuard guard(arena_.device());
        tuner_.settle(true);
      }
    }
    return tuner_.decision();
  }

  /// The lanes decided, 0 where nothing was. Never blocks on the issue lock.
  int decided_lanes() const { return tuner_.decided_lanes(); }

  /// Pinned records for a folding run's results (RecordPool); any thread.
  auto records(std::size_t bytes) { return arena_.records(bytes); }

 private:
  // Issues a pinned run as one graph launch. Returns false if the run is
  // to go on streams after all (the automatic executor, when a stage
  // cannot be captured); true when it is issued or has failed. Never throws.
  template <class In>
  bool issue_graph(const std::shared_ptr<RunState>& run, std::size_t n, std::size_t index) noexcept {
    try {
      DeviceGuard guard(arena_.device());
      if (!driver_) fresh_schedule();  // the streams the graph orders itself between
      NvtxRange range(names_.graph_run, index);
      GraphStats times;
      const auto path = graphs_.template issue<In>(*run, n, exec_.device_streams(), exec_.device_queues(), times,
                                                   GraphOps::Planner{&front_, &Issuer::graph_plan});
      run->issue.elems = n;
      run->issue.chunks = (n + front_.geometry().chunk_elems - 1) / front_.geometry().chunk_elems;
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
      run->issue.executor = Executor::streams;
      run->issue.executor_note = e.what();
      return false;
    } catch (const cuda_error& e) {
      if (is_sticky(e.code())) health_->mark(e.what());
      run->fail(std::current_exception());
      tear_down();
      return true;
    } catch (...) {
      run->fail(std::current_exception());
      tear_down();
      return true;
    }
  }

  // The plan a graph run follows (GraphOps::Planner): the pipeline's.
  static Plan graph_plan(const void* front, std::size_t elems) {
    return static_cast<const Front*>(front)->graph_plan(elems);
  }

  // A new lifetime schedule: chunk and op numbers start again. Only when
  // nothing is in flight (the first run, new element types, or after a
  // schedule was torn). Under the issue lock, on the device.
  void fresh_schedule() {
    const Geometry& g = front_.geometry();
    driver_.emplace(g.policy, g.depth, front_.lifetime_shape(), g.chunk_elems);
    exec_.configure(driver_->builder(), arena_.memory());
    runs_log_.clear();
    // A schedule made again later (new element types) keeps what was
    // decided (prepare() settles what was timed first; after a failure the
    // round in progress starts over).
    if (Calibration* c = tuner_.new_schedule(front_.calibrates(), front_.options(),
                                             static_cast<int>(sizeof...(Stages)), front_.lane_capacity(),
                                             g.chunk_elems)) {
      exec_.set_calibration(c);
    }
  }

  // Under the issue lock (or with nothing else left: quiesce). Any current
  // device will do: a stream synchronises from any (tear_down calls this
  // from catch blocks, after the DeviceGuard is gone).
  void drain_locked() noexcept {
    exec_.drain();
    graphs_.drain();
  }

  // After a failed issue: everything in flight stops, and the next run
  // gets a fresh schedule.
  void tear_down() noexcept {
    drain_locked();
    driver_.reset();
  }

  Front& front_;
  std::shared_ptr<Health> health_;
  Dispatcher& dispatcher_;  // which executor each run gets; its own lock (dispatcher.hpp)

  // Guarded by mutex_ (flow_ and the arena's layout change only in
  // prepare(), which the caller serialises with prepared()).
  std::mutex mutex_;
  const Flow* flow_ = nullptr;
  SlotArena arena_;  // slot layout, arenas, record pool (slot_arena.cuh)
  StreamExecutor<Stages...> exec_;
  GraphExecutor<Stages...> graphs_;
  std::optional<Driver<StreamExecutor<Stages...>>> driver_;
  std::vector<PlanRun> runs_log_;
  LaneTuner tuner_;  // kernel lanes of stream runs; its own lock for the decision (lane_tuner.cuh)
  struct {
    NvtxName run{"chunkpipe run"};
    NvtxName graph_run{"chunkpipe graph run"};
  } names_;  // what NVTX calls a run's range
};

}  // namespace chunkpipe::detail
