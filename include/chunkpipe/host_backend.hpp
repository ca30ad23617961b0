// SPDX-License-Identifier: MIT
/// \file
/// The host backend: runs a pipeline's schedule on the CPU. Host-only C++
/// (CCCL's span and tuple, no CUDA runtime calls); compiles with any C++17
/// compiler given the CUDA toolkit's headers.
///
/// A HostPipeline takes the same options, stages and ranges as
/// ChunkedPipeline and follows the same lifetime schedule, built by the same
/// driver (detail/driver.hpp); only the executor differs
/// (detail/host_executor.hpp): copies are memcpy, Map functors marked
/// CHUNKPIPE_HOST_DEVICE run on the host, and ops run in a seeded random
/// order that the schedule allows, across every run in flight. That is how CI
/// tests data movement, staging, sources, sinks and back-to-back runs end to
/// end without a GPU, and how a broken schedule shows up in the data.
/// With Options::profile, each op that ran is timed on the host's steady
/// clock, and report() gives the same Report a GPU run gives, without a link
/// floor: the host has no PCIe link to bound it. HostSpreadPipeline, a run
/// spread over virtual devices, is in spread.hpp (not included here).
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/hazards.hpp>
#include <chunkpipe/host_ticket.hpp>
#include <chunkpipe/io.hpp>
#include <chunkpipe/options.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/result.hpp>
#include <chunkpipe/scan.hpp>
#include <chunkpipe/stage.hpp>
#include <chunkpipe/detail/copy_team.hpp>  // SharedCopyTeam
#include <chunkpipe/detail/driver.hpp>
#include <chunkpipe/detail/front.hpp>
#include <chunkpipe/detail/host_engine.hpp>
#include <chunkpipe/detail/host_executor.hpp>
#include <chunkpipe/detail/resource_buffer.hpp>
#include <chunkpipe/detail/run_setup.hpp>
#include <chunkpipe/detail/slots.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace chunkpipe {

/// A pipeline that runs on the CPU. Same options, stages and ranges as
/// ChunkedPipeline; the options that choose CUDA devices, streams and
/// graphs have nothing to choose here, and Options::profile times each op
/// on the host clock (report()). Safe to use from several threads (one run
/// is issued at a time; waiting runs the ops on the waiting thread).
template <class... Stages>
class HostPipeline {
  using Front = detail::PipelineFront<Stages...>;
  using Engine = detail::HostEngine<Stages...>;

 public:
  /// Default-constructed stages. Throws config_error for bad options.
  explicit HostPipeline(Options options = {}) : engine_(std::make_shared<Engine>(options, Stages{}...)) {}
  /// Throws config_error for bad options.
  HostPipeline(Options options, Stages... stages) : engine_(std::make_shared<Engine>(options, std::move(stages)...)) {}

  /// Takes `other`'s schedule, slots and runs in flight; `other` may then
  /// only be destroyed or assigned to. Never blocks.
  HostPipeline(HostPipeline&&) noexcept = default;
  /// Runs every op this pipeline still has pending, as the destructor does
  /// (a run queued and not waited for still reaches its outputs and its
  /// Sink), then takes `other`'s pipeline in its place; `other` may then
  /// only be destroyed or assigned to. Never throws.
  HostPipeline& operator=(HostPipeline&& other) noexcept {
    if (this != &other) {
      drain();
      engine_ = std::move(other.engine_);
    }
    return *this;
  }
  /// Runs every op still pending. Never throws.
  ~HostPipeline() { drain(); }

  /// The options it was built with.
  const Options& options() const noexcept { return engine_->front.options(); }
  /// The policy, slot count and scheduling unit runs use.
  const Geometry& geometry() const noexcept { return engine_->front.geometry(); }
  /// The planner's view of one run, given which ends it stages.
  PlanShape shape(bool stage_in, bool stage_out) const { return engine_->front.shape(stage_in, stage_out); }
  /// The plan a run of `elems` elements would follow on its own.
  Plan plan_for(std::size_t elems, bool stage_in = false, bool stage_out = false) const {
    return engine_->front.plan_for(elems, stage_in, stage_out);
  }

  /// Seed of the execution order; 0 runs ops in issue order.
  void set_seed(std::uint64_t seed) {
    std::lock_guard<std::mutex> lock(engine_->mutex);
    engine_->exec.set_seed(seed);
  }

  /// Runs `in` through the stages into `out` and returns when it is done.
  /// `in` is ranges (or inputs(...)) or a Source, `out` ranges (or
  /// outputs(...)) or a Sink. Ranges marked pinned are copied directly; with
  /// Staging::threads (and automatic) all others pass through pinned slots
  /// by host_in/host_out ops, as pageable memory does on the GPU;
  /// registered and direct copy them directly. Blocks; throws config_error
  /// for bad ranges before doing anything, and whatever a stage, source or
  /// sink throws.
  template <class In, class Out CHUNKPIPE_WHEN(!(Front::folds_result || Front::counted))>
  void run(In&& in, Out&& out) {
    run_async(std::forward<In>(in), std::forward<Out>(out)).wait();
  }

  /// For a pipeline whose last stage emits a count (Filter, Emit): runs
  /// `in` into `out`, packed, and returns how many elements it wrote, as
  /// ChunkedPipeline::run does. Blocks; throws as run(in, out) does, and
  /// pipeline_error for an output too short for what was emitted.
  template <class In, class Out CHUNKPIPE_WHEN(Front::counted)>
  std::size_t run(In&& in, Out&& out) {
    return run_async(std::forward<In>(in), std::forward<Out>(out)).get();
  }

  /// Issues such a run; get() on the ticket runs it and says how many
  /// elements it wrote.
  template <class In, class Out CHUNKPIPE_WHEN(Front::counted)>
  [[nodiscard]] ResultTicket<std::size_t, HostTicket> run_async(In&& in, Out&& out, const HostAfter& order = {}) {
    auto packed = std::make_shared<detail::Packed>();
    HostTicket t = start(detail::as_inputs(std::forward<In>(in)), detail::as_outputs(std::forward<Out>(out)), order,
                         nullptr, packed);
    return ResultTicket<std::size_t, HostTicket>(std::move(t),
                                                 std::make_shared<detail::WrittenCount<detail::Packed>>(packed));
  }

  /// For a pipeline whose last stage folds (Reduce, Accumulate): runs `in`
  /// and returns the result, as ChunkedPipeline::run(in) does, to the same
  /// bits for a Reduce. Blocks; throws as run(in, out) does.
  template <class In CHUNKPIPE_WHEN(Front::folds_result)>
  auto run(In&& in) {
    return run_async(std::forward<In>(in)).get();
  }

  /// \cond CHUNKPIPE_WRONG_CALLS
  // run() called the wrong way for the last stage, caught so that the
  // compiler says why in one sentence (as ChunkedPipeline's do).
  // Compile-time only: nothing runs, blocks or throws.
  template <class In, class Out, bool F = Front::folds_result, std::enable_if_t<F, int> = 0>
  void run(In&&, Out&&) {
    static_assert(!F, "chunkpipe: a Reduce (or Accumulate) pipeline's run takes its input and returns the value: "
                      "auto total = pipe.run(x);  (it takes no output ranges; run_async(x) queues such a run)");
  }
  template <class In, bool F = Front::folds_result, std::enable_if_t<!F, int> = 0>
  void run(In&&) {
    static_assert(F, "chunkpipe: this pipeline writes its results to outputs: give run() an output, "
                     "pipe.run(x, out);  or make the last stage a reduce/accumulate (chunkpipe::reduce, "
                     "chunkpipe::accumulate), whose pipe.run(x) returns the value");
  }
  /// \endcond

  /// Issues a folding run; get() on the ticket runs it and returns the result.
  template <class In CHUNKPIPE_WHEN(Front::folds_result)>
  [[nodiscard]] auto run_async(In&& in, const HostAfter& order = {}) {
    using Traits = detail::fold_traits<typename Front::last_stage>;
    using R = typename Traits::result;
    auto ins = detail::as_inputs(std::forward<In>(in));
    const std::size_t n = detail::input_length(ins);
    auto folding = Traits::make(std::get<Front::stage_count - 1>(engine_->front.stages()));
    std::shared_ptr<void> keep;
    auto outs = detail::folding_outputs(folding, n, engine_->front.records_for(n), [&](std::size_t bytes) {
      // Where the GPU's records are pinned: from Options::pinned_memory if set.
      auto b = std::make_shared<detail::ResourceBuffer>(detail::host_buffer(
          options().pinned_memory, bytes, alignof(R) > detail::slot_alignment ? alignof(R) : detail::slot_alignment,
          "the records of a folding run (Reduce, Accumulate)"));
      if (b->data() != nullptr) std::memset(b->data(), 0, b->size());  // as the std::vector it replaced
      keep = b;
      return std::pair<std::shared_ptr<void>, void*>(b, b->data());
    });
    HostTicket t = outs.ranges ? start(std::move(ins), std::move(*outs.ranges), order, std::move(keep))
                               : start(std::move(ins), std::move(*outs.sink), order, nullptr);
    return ResultTicket<R, HostTicket>(std::move(t), std::move(folding));
  }

  /// Issues the run and returns its ticket; its ops run, in the seeded
  /// order and mixed with other runs', when a ticket is waited for (or, for
  /// a Source, as far as learning its length needs). The ranges must stay
  /// alive until the ticket is waited for. Runs in flight must not race:
  /// a run whose ranges overlap those of a run in flight, where either
  /// writes, throws config_error unless it is ordered after that run with
  /// `after(ticket)`. Throws config_error for bad ranges before issuing.
  template <class In, class Out CHUNKPIPE_WHEN(!(Front::folds_result || Front::counted))>
  [[nodiscard]] HostTicket run_async(In&& in, Out&& out, const HostAfter& order = {}) {
    return start(detail::as_inputs(std::forward<In>(in)), detail::as_outputs(std::forward<Out>(out)), order, nullptr);
  }

  /// Runs a given single-run plan, which may be hand-built or broken on
  /// purpose, over ranges of known length, in the seeded order; the plan's
  /// staging must match the ranges (pinned ranges are direct). For tests of
  /// the planner and the hazard check. Blocks; independent of the
  /// pipeline's own schedule.
  template <class In, class Out>
  void run_plan(const Plan& plan, In&& in, Out&& out) {
    using InSide = decltype(detail::as_inputs(std::forward<In>(in)));
    using OutSide = decltype(detail::as_outputs(std::forward<Out>(out)));
    std::vector<InSide> ins;
    std::vector<OutSide> outs;
    ins.push_back(detail::as_inputs(std::forward<In>(in)));
    outs.push_back(detail::as_outputs(std::forward<Out>(out)));
    run_plan_sides(plan, std::move(ins), std::move(outs), false);
  }

  /// Runs a plan of several runs (plan.runs, as make_plan() builds from
  /// RunSpecs, each run's own kernel lanes included): run r over ins[r]
  /// into outs[r], every run's ops issued before any is run, so the seeded
  /// order mixes runs as a GPU may. Each pair must fit its run's chunks;
  /// staging as for run_plan(). For tests of plans whose runs differ.
  /// Blocks; throws config_error for a count of ranges that is not one pair
  /// per run, or a pair longer than its run's chunks.
  template <class In, class Out>
  void run_plan_runs(const Plan& plan, const std::vector<In>& ins, const std::vector<Out>& outs) {
    if (ins.size() != plan.runs.size() || outs.size() != plan.runs.size()) {
      throw config_error("chunkpipe: run_plan_runs: the plan has " + std::to_string(plan.runs.size()) +
                         " runs; give one input and one output per run (got " + std::to_string(ins.size()) + " and " +
                         std::to_string(outs.size()) + ")");
    }
    using InSide = decltype(detail::as_inputs(ins.front()));
    using OutSide = decltype(detail::as_outputs(outs.front()));
    std::vector<InSide> in_sides;
    std::vector<OutSide> out_sides;
    for (std::size_t r = 0; r < ins.size(); ++r) {
      in_sides.push_back(detail::as_inputs(ins[r]));
      out_sides.push_back(detail::as_outputs(outs[r]));
    }
    run_plan_sides(plan, std::move(in_sides), std::move(out_sides), true);
  }

  /// The last run's elements and chunks (after a Source, what it produced),
  /// once waited for.
  RunSummary last_run() const {
    const std::shared_ptr<detail::HostRun> last = engine_->last_run();
    std::lock_guard<std::mutex> lock(engine_->mutex);  // its counts are set under the lock
    return last ? RunSummary{last->elems, last->chunks} : RunSummary{};
  }

  /// A copy of the most recent run's timeline (HostTicket::report()): with
  /// Options::profile on, once that run has been waited for. Print it with
  /// `std::cout << report`, draw it with ascii_timeline(), write_svg() or
  /// write_chrome_trace(), as a GPU run's. Never blocks. Throws
  /// pipeline_error for a pipeline built without Options::profile, before
  /// any run, and when the last run was not waited for or failed.
  Report report() const {
    if (!options().profile) {
      throw pipeline_error("chunkpipe: no report: this HostPipeline was built without Options::profile; set "
                           "Options::profile = true to time each op on the host clock");
    }
    const std::shared_ptr<detail::HostRun> last = engine_->last_run();
    if (!last) throw pipeline_error("chunkpipe: no report: no run yet; run() first");
    return HostTicket(last, engine_).report();
  }

  /// Every op this pipeline's schedule has issued, over every run, as a
  /// plan: what check_hazards() proves safe. Starts afresh when a run's
  /// element types change the slot layout.
  Plan issued_plan() const { return engine_->issued_plan(); }

 private:
  // run_plan() and run_plan_runs(): the engine runs the plan on an
  // executor of its own (HostEngine::run_plan).
  template <class InSide, class OutSide>
  void run_plan_sides(const Plan& plan, std::vector<InSide> ins, std::vector<OutSide> outs, bool by_runs) {
    engine_->run_plan(plan, std::move(ins), std::move(outs), by_runs);
  }

  friend struct detail::RunAccess;

  // A run whose stages' contexts number its chunks from `label`
  // (detail::RunLabel; a spread run's piece). A folding pipeline's run
  // takes its records as outputs here (the spread folds them). Internal:
  // detail::RunAccess.
  template <class In, class Out CHUNKPIPE_WHEN(!Front::counted)>
  HostTicket labelled_run_async(const detail::RunLabel& label, In&& in, Out&& out) {
    return start(detail::as_inputs(std::forward<In>(in)), detail::as_outputs(std::forward<Out>(out)), HostAfter{},
                 nullptr, nullptr, label);
  }
  // The same for a pipeline whose last stage emits a count: get() on the
  // ticket says how many elements the run wrote.
  template <class In, class Out CHUNKPIPE_WHEN(Front::counted)>
  ResultTicket<std::size_t, HostTicket> labelled_run_async(const detail::RunLabel& label, In&& in, Out&& out) {
    auto packed = std::make_shared<detail::Packed>();
    packed->place = label.place;  // a spread's piece may pack straight into the spread run's outputs
    HostTicket t = start(detail::as_inputs(std::forward<In>(in)), detail::as_outputs(std::forward<Out>(out)),
                         HostAfter{}, nullptr, packed, label);
    return ResultTicket<std::size_t, HostTicket>(std::move(t),
                                                 std::make_shared<detail::WrittenCount<detail::Packed>>(packed));
  }
  // Input elements per output record (detail::Endpoints::per_record).
  std::size_t per_record() const noexcept { return engine_->front.per_record(); }
  // A spread run ordered after these host runs (RunAccess::hold): waiting
  // for a ticket runs its ops on the waiting thread, the spread's. What
  // they threw stays with their tickets.
  std::function<void()> hold_order(const HostAfter& order) const {
    if (order.tickets.empty()) return {};
    return [tickets = order.tickets]() mutable {
      for (HostTicket& t : tickets) {
        try {
          t.wait();
        } catch (...) {  // the ticket keeps it
        }
      }
    };
  }
  // The next profiled run starts the profiling clock again
  // (Report::clock_ms): a spread restarts its members' together, so that
  // their zeros are close.
  void restart_profile_clock() {
    std::lock_guard<std::mutex> lock(engine_->mutex);
    engine_->exec.restart_clock();
  }

  // Issues a run over its two sides; `keep` is storage the outputs point
  // into that the run owns (a folding run's records); `label`, what its
  // stages' contexts number chunk 0.
  template <class InSide, class OutSide>
  HostTicket start(InSide ins, OutSide outs, const HostAfter& order, std::shared_ptr<void> keep,
                   std::shared_ptr<detail::Packed> packed = nullptr, const detail::RunLabel& label = {}) {
    std::vector<std::shared_ptr<detail::HostRun>> after;
    for (const HostTicket& t : order.tickets) {
      if (!t.run_) continue;
      if (t.engine_.lock() != engine_) {
        throw config_error("chunkpipe: after(ticket) on a HostPipeline takes tickets of the same pipeline only; "
                           "wait() for a run of another one first");
      }
      after.push_back(t.run_);
    }
    return HostTicket(engine_->start(std::move(ins), std::move(outs), after, std::move(keep), std::move(packed), label),
                      engine_);
  }

  // Runs the ops still pending (on the host backend ops run only when
  // someone waits), so that no queued run is lost. Never throws.
  void drain() noexcept {
    if (engine_) engine_->drain();
  }

  std::shared_ptr<Engine> engine_;
};

namespace detail {
// What a spread (spread.hpp, which this header does not include) needs to
// know of its members.
template <class Member>
struct spread_member;
template <class T>
struct HostPieceBuffer;

template <class... Stages>
struct spread_member<HostPipeline<Stages...>> {
  template <class T>
  using piece_buffer = HostPieceBuffer<T>;
  using order = HostAfter;
  // A host pipeline's copies are its worker's own memcpy: nothing to share.
  static void share_copy_team(HostPipeline<Stages...>&, const std::shared_ptr<SharedCopyTeam>&) noexcept {}
};
}  // namespace detail

/// Builds a HostPipeline, deducing its stage types: the way to run a
/// pipeline on a machine with no GPU (or in a CPU-only test), with the
/// same options, stages and ranges a ChunkedPipeline takes:
///
///     chunkpipe::Options o;
///     o.profile = true;                  // time each op: report()
///     auto pipe = chunkpipe::make_host_pipeline(o, chunkpipe::map(Scale{2.0f}));
///     pipe.run(in, out);                 // blocks; ops run on this thread
///     std::cout << pipe.last_run() << '\n' << pipe.report();
///
/// Map functors must be CHUNKPIPE_HOST_DEVICE to run here. Builds no slots
/// (the first run does) and never blocks. Throws config_error for bad
/// options, as the HostPipeline constructor does.
template <class... Stages>
HostPipeline<Stages...> make_host_pipeline(Options options, Stages... stages) {
  return HostPipeline<Stages...>(options, std::move(stages)...);
}

}  // namespace chunkpipe
