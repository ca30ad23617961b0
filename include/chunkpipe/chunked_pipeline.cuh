// SPDX-License-Identifier: MIT
/// \file
/// ChunkedPipeline: streams host data through the GPU in chunks, so that
/// copies in, kernels and copies out of different chunks overlap;
/// make_pipeline and tune. SpreadPipeline, over several GPUs, is in
/// spread.hpp (not included here: a program of single pipelines does not
/// compile the spread).
///
/// \code
/// #include <chunkpipe/chunked_pipeline.cuh>
///
/// struct Fma {
///   float a, b;
///   __device__ float operator()(float x) const { return fmaf(x, a, b); }
/// };
/// chunkpipe::ChunkedPipeline<chunkpipe::Map<Fma>> pipe({.chunk_elems = 4 << 20, .depth = 3},
///                                                      chunkpipe::Map<Fma>{{0.999f, 0.0625f}});
/// pipe.run(in, out);   // host ranges, pinned or pageable
/// \endcode
///
/// This header brings in what a pipeline's runs take and give (stages,
/// ranges, sources and sinks, options, plans, reports, results, tickets,
/// errors) and every stage kind's device side except Filter's: a Filter
/// runs CUB's DeviceSelect, whose headers cost a file that never filters
/// about a fifth of its compile time (issue 33), so a pipeline with a
/// Filter stage also needs <chunkpipe/filter.cuh> (without it, building
/// one fails with a static_assert that says so). The umbrella
/// <chunkpipe/pipeline.cuh> includes both, and the simulator, the decision
/// and the measurements besides.
#pragma once

// A host compiler gets one #error here, and nothing below it.
#include <chunkpipe/detail/needs_nvcc.hpp>
#if defined(__CUDACC__)

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/decide.hpp>
#include <chunkpipe/errors.hpp>
#include <chunkpipe/io.hpp>
#include <chunkpipe/memory.cuh>
#include <chunkpipe/options.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/result.hpp>
#include <chunkpipe/run_ticket.cuh>
#include <chunkpipe/stage.hpp>
#include <chunkpipe/detail/cuda_runner.cuh>
#include <chunkpipe/detail/copy_team.hpp>  // SharedCopyTeam

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

namespace chunkpipe {

/// A pipeline of stages that owns its slots (device buffers, and pinned
/// host buffers when it stages pageable memory), its streams and its host
/// worker threads, all allocated once and reused by every run.
///
/// Each chunk goes host -> device, through the stages in order, and back,
/// following the plan of Options::policy. Runs form one continuing
/// schedule: a run queued while others are in flight overlaps them on the
/// GPU, its first chunks waiting only for the slots they reuse. Runs whose
/// ranges overlap where one writes are refused unless ordered (see
/// run_async). A ChunkedPipeline is move-only; a moved-from pipeline may
/// only be destroyed or assigned to. Its members may be called from
/// several threads; runs are ordered as their calls take its lock.
template <class... Stages>
class ChunkedPipeline {
  static constexpr bool folds_ = detail::PipelineFront<Stages...>::folds_result;
  static constexpr bool counted_ = detail::PipelineFront<Stages...>::counted;

 public:
  /// Builds the pipeline with default-constructed stages. Allocates nothing
  /// on the device yet (the first run does, once) and waits for no GPU
  /// work; it asks CUDA how many devices there are. Throws
  /// config_error for bad options or, on a machine with CUDA devices, for an
  /// Options::device that does not exist; cuda_error if CUDA fails. Where
  /// CUDA has no device to give (no NVIDIA driver, one older than the CUDA
  /// runtime, no device) it is built all the same, device() is -1, and each
  /// run checks its ranges (config_error) and then throws no_device_error,
  /// whose message names HostPipeline, the backend that needs no GPU.
  explicit ChunkedPipeline(Options options = {})
      : runner_(std::make_unique<detail::CudaRunner<Stages...>>(options, Stages{}...)) {}

  /// Builds the pipeline with the given stage objects (functors with state).
  /// Throws as the constructor above does.
  ChunkedPipeline(Options options, Stages... stages)
      : runner_(std::make_unique<detail::CudaRunner<Stages...>>(options, std::move(stages)...)) {}

  /// Takes `other`'s slots, streams, threads and runs in flight; `other`
  /// may then only be destroyed or assigned to. Never blocks.
  ChunkedPipeline(ChunkedPipeline&&) noexcept = default;
  /// Waits for this pipeline's runs in flight and frees its resources, as
  /// the destructor does, then takes `other`'s; `other` may then only be
  /// destroyed or assigned to. Never throws.
  ChunkedPipeline& operator=(ChunkedPipeline&&) noexcept = default;

  /// Waits for every run in flight (ignoring their errors, which their
  /// tickets keep) and frees everything. Never throws.
  ~ChunkedPipeline() = default;

  /// Runs `in` through the stages into `out` and returns when every output
  /// element is written. `in`/`out` are ranges or inputs(...)/outputs(...);
  /// `in` may also be a Source and `out` a Sink (io.hpp), and then the
  /// length need not be known up front. Pageable ranges are staged as
  /// Options::staging says. Throws config_error for bad ranges before
  /// anything is queued; on a CUDA failure cuda_error, on a failing stage,
  /// source or sink what it threw, and always only after every stream and
  /// host task of the run has stopped.
  template <class In, class Out CHUNKPIPE_WHEN(!(folds_ || counted_))>
  void run(In&& in, Out&& out) {
    runner_->start(std::forward<In>(in), std::forward<Out>(out), After{}).wait();
  }

  /// For a pipeline whose last stage emits a count (Filter, Emit): runs
  /// `in` into `out` and returns how many elements it wrote to each
  /// output, packed from its start. Only what was emitted crosses back: a
  /// chunkpipe thread reads each chunk's count once its copy out arrived
  /// and copies that many; no stream waits for a count, and a slot's device
  /// buffer is reused once its copy out is done. Outputs may be shorter
  /// than the input; one too short for what was emitted is filled to its
  /// end and no further, and the run throws pipeline_error saying how many
  /// elements were needed. Blocks; throws as below.
  template <class In, class Out CHUNKPIPE_WHEN(counted_)>
  std::size_t run(In&& in, Out&& out) {
    return runner_->start_counted(std::forward<In>(in), std::forward<Out>(out), After{}).get();
  }

  /// Queues such a run; get() on the ticket waits and says how many
  /// elements it wrote.
  template <class In, class Out CHUNKPIPE_WHEN(counted_)>
  [[nodiscard]] ResultTicket<std::size_t, RunTicket> run_async(In&& in, Out&& out, const After& order = {}) {
    return runner_->start_counted(std::forward<In>(in), std::forward<Out>(out), order);
  }

  /// For a pipeline whose last stage folds (Reduce, Accumulate): runs `in`
  /// (ranges, inputs(...) or a Source) and returns the result. Only the
  /// records cross back: a Reduce's partials, one per segment, or one
  /// Accumulate state per chunk, into pinned memory the pipeline reuses;
  /// they are folded in order on the calling thread (a Source's run folds
  /// them as they arrive, on a chunkpipe thread). An empty run returns the
  /// Reduce's init, or the Accumulate's identity. Blocks; throws as
  /// run(in, out) does.
  template <class In CHUNKPIPE_WHEN(folds_)>
  auto run(In&& in) {
    return runner_->start_fold(std::forward<In>(in), After{}).get();
  }

  /// \cond CHUNKPIPE_WRONG_CALLS
  // run() called the wrong way for the last stage, caught so that the
  // compiler says why in one sentence instead of listing every run()
  // that does not fit. Compile-time only: instantiating one fails; nothing
  // runs, blocks or throws. Each takes only what the right overloads
  // refuse, so it never competes with them.
  template <class In, class Out, bool F = folds_, std::enable_if_t<F, int> = 0>
  void run(In&&, Out&&) {
    static_assert(!F, "chunkpipe: a Reduce (or Accumulate) pipeline's run takes its input and returns the value: "
                      "auto total = pipe.run(x);  (it takes no output ranges; run_async(x) queues such a run)");
  }
  template <class In, bool F = folds_, std::enable_if_t<!F, int> = 0>
  void run(In&&) {
    static_assert(F, "chunkpipe: this pipeline writes its results to outputs: give run() an output, "
                     "pipe.run(x, out);  or make the last stage a reduce/accumulate (chunkpipe::reduce, "
                     "chunkpipe::accumulate), whose pipe.run(x) returns the value");
  }
  /// \endcond

  /// Queues a folding run and returns at once: get() on the ticket blocks
  /// until it is complete and returns its result. Everything else is as
  /// for run_async(in, out), `order` included.
  template <class In CHUNKPIPE_WHEN(folds_)>
  [[nodiscard]] auto run_async(In&& in, const After& order = {}) {
    return runner_->start_fold(std::forward<In>(in), order);
  }

  /// Queues the same run and returns its ticket at once: wait() blocks
  /// until it is complete and throws its errors. The run continues the
  /// pipeline's schedule, so back-to-back runs overlap on the GPU. A run
  /// over pinned (or device) memory is issued by the calling thread when
  /// nothing is queued before it; a run that stages pageable memory or uses
  /// a Source or Sink, and any run queued behind one, by a chunkpipe
  /// thread, so run_async() never waits for earlier runs. The ranges must stay alive
  /// and untouched until the run is waited for. A small run that continues
  /// the one before it, queued while that one is still on the GPU, may be
  /// held a little and issued together with it and the next ones
  /// (Options::coalesce); waiting for its ticket issues it at once.
  ///
  /// A run whose ranges overlap those of a run still in flight, where
  /// either writes (its input is that run's output, say), is refused with
  /// config_error unless `order` starts it after that run:
  /// `after(ticket)`. `order` may also name streams and events of yours
  /// whose work the run must follow (data a kernel of yours produced);
  /// the run's ops wait for them on the device.
  ///
  /// Under Executor::graphs (or the automatic executor's choice) the first
  /// run of a length builds and instantiates its graph on the issuing
  /// thread, inside run_async() when the run is issued there, at a host
  /// cost that grows with the run's chunks (benchmarks/RESULTS.md, "CUDA
  /// graphs"); later runs of that length launch it. graph_stats() says what
  /// the last build cost.
  ///
  /// Throws config_error for bad ranges and pipeline_error for an unusable
  /// pipeline, before anything is queued; cuda_error if CUDA fails. The
  /// first run allocates the slots (and the first staged run the pinned
  /// ones); a run whose element types lay the slots out differently from
  /// the run before waits for the runs in flight first.
  template <class In, class Out CHUNKPIPE_WHEN(!(folds_ || counted_))>
  [[nodiscard]] RunTicket run_async(In&& in, Out&& out, const After& order = {}) {
    return runner_->start(std::forward<In>(in), std::forward<Out>(out), order);
  }

  /// Waits for the most recent run; throws its error.
  void wait() { runner_->wait_last(); }

  /// The options it was built with.
  const Options& options() const noexcept { return runner_->front().options(); }
  /// The policy, slot count and scheduling unit runs use (see Options::grain_elems).
  const Geometry& geometry() const noexcept { return runner_->front().geometry(); }
  /// The plan a run of `elems` elements follows on its own; pageable inputs
  /// or outputs add host staging ops. Never blocks, needs no device.
  Plan plan_for(std::size_t elems, bool stage_in = false, bool stage_out = false) const {
    return runner_->plan_for(elems, stage_in, stage_out);
  }
  /// What the automatic policy decided after calibrating, or nullopt: not
  /// yet, or never (calibrates() is false). A pipeline of Map stages built
  /// with the automatic policy, kernel_lanes 0 and an executor other than
  /// graphs (on stage_streams, depth 2 or more) times the first chunks it
  /// issues with CUDA events (a few event pairs, nothing waited for), and
  /// once they are done the simulator chooses the kernel lanes (1 or 2)
  /// for the runs after: two where its kernels, not the link, bound the
  /// work. The slots are laid out once, so policy, depth and unit stay what
  /// geometry() says. A run is issued long before its first kernel ends,
  /// so the decision applies from a later run on; until then runs use
  /// geometry().kernel_lanes, as do runs the automatic executor gives a
  /// graph. Every 128 whole chunks after a decision (1 GiB of float at the
  /// default unit) it times five chunks again and decides again (after
  /// issuing a run, so that deciding does not delay one's first op); that
  /// decision replaces this one only if a stage's time or a copy rate moved
  /// by more than 10% from what was timed on the same lanes, or, with none
  /// such, if it chooses other lanes: work that changes is followed, and
  /// noise does not flip the lanes. The Decision (the
  /// latest) says what bound the work, what was timed (measured), the
  /// chosen Options (to_string() prints them for pasting) and the
  /// simulator's figure for each candidate. Never blocks.
  std::optional<Decision> decision() { return runner_->decision(); }
  /// decision(), after waiting for every run queued so far, and deciding
  /// on whatever chunks those timed even if fewer than calibration needs.
  /// Blocks. tune() is the usual way to call it.
  std::optional<Decision> decide_now() { return runner_->settle_decision(); }
  /// With Options::record_issued: every op issued on streams so far, over
  /// all runs, as the executor issued it (the waits and events it really
  /// made), for check_hazards(). Graph runs are not in it: issued_graph()
  /// has the last graph built. Waits for runs still being issued.
  Plan issued_plan() { return runner_->issued_plan(); }
  /// With Options::record_issued: the plan of the most recent graph built
  /// and the edges of that CUDA graph as CUDA reports them, for
  /// check_hazards(graph.plan, graph.graph). Empty before the first.
  /// Waits for runs still being issued.
  IssuedGraph issued_graph() { return runner_->issued_graph(); }
  /// Whether the automatic policy calibrates this pipeline (decision()).
  bool calibrates() const noexcept { return runner_->front().calibrates(); }
  /// The device it runs on: Options::device, or the device current when it
  /// was built; -1 where CUDA had none to give (its runs throw
  /// no_device_error). Never blocks.
  int device() const noexcept { return runner_->device(); }

  /// False once a CUDA error has broken the device context (a kernel that
  /// faulted): every later run then throws pipeline_error.
  bool healthy() const noexcept { return runner_->healthy(); }

  /// Unregisters the ranges Staging::registered pinned in place (they stay
  /// registered across runs, so repeated runs over a buffer pay once).
  /// Waits for work in flight first. Call it before freeing such a range
  /// while the pipeline lives. Throws cuda_error if CUDA fails.
  void release_registrations() { runner_->release_registrations(); }

  /// The link the reports' floor is computed against (see measure.cuh).
  void set_link(const LinkModel& link) { runner_->set_link(link); }

  /// How many runs so far were issued together with others, sharing their
  /// copies (Options::coalesce). Never blocks.
  std::size_t runs_coalesced() const noexcept { return runner_->runs_coalesced(); }

  /// What the graph executor has done: graphs built, updated and replayed,
  /// and what the last of each cost on the host. Never blocks on the GPU.
  GraphStats graph_stats() const { return runner_->graph_stats(); }

  /// A copy of the most recent run's timeline, when Options::profile is on
  /// and the run has been waited for. Throws pipeline_error otherwise.
  Report report() const { return runner_->report(); }

 private:
  friend struct detail::RunAccess;

  // A run whose stages' contexts number its chunks from `label`
  // (detail::RunLabel; a spread run's piece). A folding pipeline's run
  // takes its records as outputs here (the spread folds them). Internal:
  // detail::RunAccess.
  template <class In, class Out CHUNKPIPE_WHEN(!counted_)>
  RunTicket labelled_run_async(const detail::RunLabel& label, In&& in, Out&& out) {
    return runner_->start(std::forward<In>(in), std::forward<Out>(out), After{}, label);
  }
  // The same for a pipeline whose last stage emits a count: get() on the
  // ticket says how many elements the run wrote.
  template <class In, class Out CHUNKPIPE_WHEN(counted_)>
  ResultTicket<std::size_t, RunTicket> labelled_run_async(const detail::RunLabel& label, In&& in, Out&& out) {
    return runner_->start_counted(std::forward<In>(in), std::forward<Out>(out), After{}, label);
  }
  // Input elements per output record (detail::Endpoints::per_record).
  std::size_t per_record() const noexcept { return runner_->front().per_record(); }
  // The next profiled run starts the profiling clock again (Report::clock_ms).
  void restart_profile_clock() { runner_->restart_profile_clock(); }
  // A spread run ordered after `order` (RunAccess::hold).
  std::function<void()> hold_order(const After& order) { return runner_->hold(order); }
  // Staged runs copy with the spread's team (RunAccess::share_copy_team).
  void share_copy_team(std::shared_ptr<detail::SharedCopyTeam> team) { runner_->share_copy_team(std::move(team)); }

  std::unique_ptr<detail::CudaRunner<Stages...>> runner_;
};

/// Runs `in` through `pipe` into `out` once (as run() does: blocking,
/// throwing what it throws) and returns the Options its automatic policy
/// decided on: the pipeline's own options with kernel_lanes set. Print them
/// with to_string() and paste them to fix the schedule without
/// calibrating. Throws config_error, before running anything, for a
/// pipeline that does not calibrate (calibrates(): one with an explicit
/// policy or kernel_lanes, the graphs executor, one slot, or a stage that
/// is not a Map), what run() throws, and pipeline_error if the run timed
/// nothing to decide on (it was shorter than one unit, or every op it
/// timed was below the events' resolution).
template <class... Stages, class In, class Out>
Options tune(ChunkedPipeline<Stages...>& pipe, In&& in, Out&& out) {
  if (!pipe.calibrates()) {
    throw config_error("chunkpipe: tune: this pipeline does not calibrate: only pipelines of Map stages built "
                       "with Policy::automatic, kernel_lanes 0, depth 2 or more and an executor other than "
                       "graphs decide their schedule (its options: " +
                       to_string(pipe.options()) + ")");
  }
  pipe.run(std::forward<In>(in), std::forward<Out>(out));
  const std::optional<Decision> d = pipe.decide_now();
  if (!d) throw pipeline_error("chunkpipe: tune: the run timed no chunk to decide on");
  // Kept options carry kernel_lanes 0, which would calibrate again.
  Options o = d->chosen.options;
  o.kernel_lanes = d->chosen.geometry.kernel_lanes;
  return o;
}

namespace detail {
/// A SpreadPipeline's piece buffer (a Source's input, a Sink's output):
/// pinned, so its pieces are copied directly; from `pinned`
/// (Options::pinned_memory) or cudaMallocHost where it is null.
template <class T>
struct PinnedPieceBuffer {
  static constexpr Memory memory = Memory::pinned;
  PinnedPieceBuffer(std::size_t n, std::shared_ptr<MemoryResource> pinned)
      : buffer(n * sizeof(T), std::move(pinned), "a spread's piece buffer") {}
  T* data() noexcept { return reinterpret_cast<T*>(buffer.data()); }
  PinnedBuffer buffer;
};

// What a spread (spread.hpp, which this header does not include) needs to
// know of its members.
template <class Member>
struct spread_member;

template <class... Stages>
struct spread_member<ChunkedPipeline<Stages...>> {
  template <class T>
  using piece_buffer = PinnedPieceBuffer<T>;
  using order = After;
  // The member's staged runs copy with the spread's one team.
  static void share_copy_team(ChunkedPipeline<Stages...>& m, std::shared_ptr<SharedCopyTeam> team) {
    RunAccess::share_copy_team(m, std::move(team));
  }
};
}  // namespace detail

/// Builds a ChunkedPipeline, deducing the stage types:
///   auto pipe = chunkpipe::make_pipeline(opts, chunkpipe::map(Fma{a, b}));
template <class... Stages>
ChunkedPipeline<Stages...> make_pipeline(Options options, Stages... stages) {
  return ChunkedPipeline<Stages...>(options, std::move(stages)...);
}

}  // namespace chunkpipe

#endif  // defined(__CUDACC__)
