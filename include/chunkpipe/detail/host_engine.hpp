// SPDX-License-Identifier: MIT
// The host backend's engine: everything a HostPipeline does behind its
// face, under one lock (HostEngineBase::mutex). It takes a run's ends and
// checks them against the runs in flight (the intake both backends share,
// run_intake.hpp), lays out the slots for its element types, and issues it
// through the lifetime Driver to the HostExecutor; and it runs a given plan
// on an executor of its own (HostPipeline::run_plan). The face
// (host_backend.hpp) owns the tickets: it hands the engine the runs a new
// run is ordered after and makes a HostTicket of the run the engine
// returns. Host-only.
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/options.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/stage.hpp>
#include <chunkpipe/detail/driver.hpp>
#include <chunkpipe/detail/front.hpp>
#include <chunkpipe/detail/host_executor.hpp>
#include <chunkpipe/detail/run_intake.hpp>
#include <chunkpipe/detail/run_setup.hpp>
#include <chunkpipe/detail/slots.hpp>

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

#if !CHUNKPIPE_HEADER_ONLY
// The compiled part instantiates it once (<chunkpipe/compiled.hpp>).
extern template class InFlightRanges<HostRun>;
#endif

/// What a HostTicket needs of its pipeline, whatever its stages.
struct HostEngineBase {
  virtual ~HostEngineBase() = default;
  /// Runs the pipeline's ops until `run` has none left.
  virtual void finish(HostRun& run) = 0;
  std::mutex mutex;
};

template <class... Stages>
class HostEngine : public HostEngineBase {
 public:
  using Front = PipelineFront<Stages...>;

  template <class... S>
  explicit HostEngine(Options options, S&&... stages)
      : front(Target::host, options, std::forward<S>(stages)...),
        exec(front.stages(), 1, options.device_memory, options.pinned_memory) {}

  void finish(HostRun& run) override { exec.finish(run); }

  /// Takes a run over its two sides and issues it: `after`, the runs of
  /// this engine it is ordered after (their ranges may overlap its; they
  /// run first); `keep`, storage the outputs point into that the run owns
  /// (a folding run's records); `packed`, a counted run's packing; `label`,
  /// what its stages' contexts number chunk 0. Takes the lock. Throws
  /// config_error for bad ranges or a race with a run in flight, before
  /// anything is issued, and what allocating the slots throws.
  template <class InSide, class OutSide>
  std::shared_ptr<HostRun> start(InSide ins, OutSide outs, const std::vector<std::shared_ptr<HostRun>>& after,
                                 std::shared_ptr<void> keep, std::shared_ptr<Packed> packed, const RunLabel& label) {
    using in_types = typename side_types<InSide>::type;
    using out_types = typename side_types<OutSide>::type;
    static_assert(run_types<in_types, out_types, Stages...>::ok);
    const std::size_t n = ::chunkpipe::detail::validate_run(ins, outs, front.output_rule());
    const Staging mode = front.options().staging;
    const bool stage_pageable = mode == Staging::automatic || mode == Staging::threads;
    auto staged = [&](const auto& span) { return span.memory != Memory::pinned && stage_pageable; };
    std::lock_guard<std::mutex> lock(mutex);
    std::vector<const HostRun*> exempt;
    for (const auto& r : after) exempt.push_back(r.get());
    // A spread's piece has the spread's own ends (it cuts the user's Source
    // and Sink into windows itself).
    RunEnds taken = intake_.take(front, std::move(ins), std::move(outs), n, staged, label.piece, std::move(packed),
                                 std::move(keep), exempt);
    const std::shared_ptr<const Endpoints> ends = std::move(taken.ends);

    auto run = std::make_shared<HostRun>();
    run->ends = ends;
    run->label = label;
    run->completion.set_hooks(ends->finish, ends->abort);
    run->profile = front.options().profile;
    if (run->profile) describe(run->report);
    if (n == 0) {  // nothing to move; wait() still finishes a Sink
      run->issued = true;
      intake_.empty(run);
      return run;
    }
    // Ordered after earlier runs: run theirs first. On a CPU that orders
    // nothing the schedule does not, and costs no parallelism worth having.
    for (const auto& r : after) exec.finish(*r);
    prepare(flow_of<in_types, Stages...>());
    if (run->profile) run->report.queues = driver_->builder().queues();
    HostRunRef ref{run};
    const RunSpec spec = ::chunkpipe::detail::spec_for(*ends, n, front.geometry().chunk_elems);
    issue<in_types>(ref, spec, n);
    if (n != unknown_length) {
      run->elems = n;
      run->chunks = front.chunks_for(n);
    }
    intake_.queued(run, taken.ranges);
    return run;
  }

  /// Runs a given plan (HostPipeline::run_plan, run_plan_runs) on an
  /// executor of its own, so that the pipeline's schedule is untouched:
  /// `by_runs` false, every op of the plan over the one pair of sides
  /// (chunk c at element c * unit); true, one pair per plan run, at its own
  /// chunks. Takes the lock; blocks until every run is done. Throws
  /// config_error for a plan that does not fit the pipeline or the ranges,
  /// and the first error of a run.
  template <class InSide, class OutSide>
  void run_plan(const Plan& plan, std::vector<InSide> ins, std::vector<OutSide> outs, bool by_runs) {
    using in_types = typename side_types<InSide>::type;
    using out_types = typename side_types<OutSide>::type;
    static_assert(run_types<in_types, out_types, Stages...>::ok);
    // A carrying stage's ops need their carry buffer (PlanShape::carries).
    const bool carries[] = {stage_kind<Stages>::carries...};
    for (std::size_t i = 0; i < sizeof...(Stages); ++i) {
      if (carries[i] && (plan.shape.carries.size() <= i || !plan.shape.carries[i])) {
        throw config_error("chunkpipe: run_plan: stage " + std::to_string(i) +
                           " carries a value from chunk to chunk (a Scan); plan it with PlanShape::carries[" +
                           std::to_string(i) + "] set");
      }
    }
    const std::size_t chunk = front.geometry().chunk_elems;
    std::vector<std::shared_ptr<HostRun>> runs;
    std::vector<std::size_t> lengths;
    for (std::size_t r = 0; r < ins.size(); ++r) {
      const std::size_t n = ::chunkpipe::detail::validate_run(ins[r], outs[r], front.output_rule());
      if (by_runs && n > plan.runs[r].chunks * chunk) {
        throw config_error("chunkpipe: run_plan_runs: run " + std::to_string(r) + " has " +
                           std::to_string(plan.runs[r].chunks) + " chunks of " + std::to_string(chunk) +
                           " elements, too few for its " + std::to_string(n) + " elements");
      }
      auto staged = [](const auto& span) { return span.memory != Memory::pinned; };
      Endpoints made = ::chunkpipe::detail::make_endpoints(std::move(ins[r]), std::move(outs[r]), staged);
      ::chunkpipe::detail::complete_endpoints(made, front.per_record(),
                                              Front::counted ? std::make_shared<Packed>() : nullptr, nullptr);
      auto run = std::make_shared<HostRun>();
      run->ends = std::make_shared<const Endpoints>(std::move(made));
      run->completion.set_hooks(run->ends->finish, run->ends->abort);
      run->first_chunk = by_runs ? plan.runs[r].first_chunk : 0;
      runs.push_back(std::move(run));
      lengths.push_back(n);
    }
    std::lock_guard<std::mutex> lock(mutex);
    const SlotLayout layout = ::chunkpipe::detail::make_slot_layout(
        plan.steps, plan.buffers.size(), flow_of<in_types, Stages...>(), chunk, plan.depth,
        OutShape{front.unit_records(), Front::counted, 0}, front.carry_segment());
    HostExecutor<Stages...> own(front.stages(), exec.seed(), front.options().device_memory,
                                front.options().pinned_memory);
    own.reset(plan.steps, plan.queues.size(), layout);
    for (std::size_t r = 0; r < runs.size(); ++r) {
      HostRunRef ref{runs[r]};
      const std::size_t first_op = by_runs ? plan.runs[r].first_op : 0;
      const std::size_t ops = by_runs ? plan.runs[r].ops : plan.ops.size();
      for (std::size_t i = first_op; i < first_op + ops; ++i) {
        const Op& op = plan.ops[i];
        OpWork w;
        w.offset = (op.chunk - runs[r]->first_chunk) * chunk;
        w.count = w.offset < lengths[r] ? std::min(chunk, lengths[r] - w.offset) : 0;
        own.template issue<in_types>(op, w, ref);
      }
      runs[r]->issued = true;
    }
    for (const auto& run : runs) {
      own.finish(*run);
      run->completion.conclude();
    }
  }

  /// A profiled run's report header, as a GPU run's (its label names the
  /// schedule), but with no link: nothing on the host bounds the copies the
  /// way PCIe bounds a GPU's, so the report shows no floor or efficiency.
  void describe(Report& r) const {
    const Geometry& g = front.geometry();
    r.label = "host backend, " + std::string(to_string(g.policy)) + ", depth " + std::to_string(g.depth);
    r.policy = g.policy;
    r.depth = g.depth;
    r.chunk_elems = g.chunk_elems;
    r.link = LinkModel{};
    r.link.name = "host backend: copies are memcpy, no PCIe link";
  }

  /// Every op the schedule has issued, over every run, as a plan. Takes
  /// the lock.
  Plan issued_plan() {
    std::lock_guard<std::mutex> lock(mutex);
    if (!driver_) return Plan{};
    return ::chunkpipe::detail::issued_plan(driver_->builder(), exec.issued_ops(), runs_);
  }

  /// The most recent run started, or null. Takes the lock.
  std::shared_ptr<HostRun> last_run() {
    std::lock_guard<std::mutex> lock(mutex);
    return intake_.last();
  }

  /// Runs the ops still pending, so that no queued run is lost. Never throws.
  void drain() noexcept {
    try {
      std::lock_guard<std::mutex> lock(mutex);
      exec.drain();
    } catch (...) {
    }
  }

  Front front;
  HostExecutor<Stages...> exec;  ///< under the lock, but for its stages' construction

 private:
  // The schedule and slots for runs of this flow; a new flow (other
  // element types) lays the slots out anew, after everything issued ran.
  // Throws what allocating the slots throws (Options::device_memory,
  // pinned_memory); then no flow is prepared, and the next run starts here
  // again. Under the lock.
  void prepare(const Flow& f) {
    if (driver_ && flow_ && *flow_ == f) return;
    exec.drain();
    flow_ = nullptr;
    const Geometry& g = front.geometry();
    driver_.emplace(g.policy, g.depth, front.lifetime_shape(), g.chunk_elems);
    const PlanBuilder& b = driver_->builder();
    try {
      exec.reset(b.steps(), b.queues().size(),
                 ::chunkpipe::detail::make_slot_layout(b.steps(), b.buffers().size(), f, g.chunk_elems, g.depth,
                                                       OutShape{front.unit_records(), Front::counted, 0},
                                                       front.carry_segment()));
    } catch (...) {
      driver_.reset();
      throw;
    }
    flow_ = &f;
    runs_.clear();
  }

  // Under the lock.
  template <class In>
  void issue(HostRunRef& ref, const RunSpec& spec, std::size_t n) {
    try {
      runs_.push_back(driver_->template issue_run<In>(exec, ref, spec, n));
    } catch (...) {
      // The schedule may be left with a run open: run what was issued and
      // start the next run on a fresh one.
      ref.run->issued = true;
      exec.drain();
      driver_.reset();
      flow_ = nullptr;
      throw;
    }
  }

  std::optional<Driver<HostExecutor<Stages...>>> driver_;
  const Flow* flow_ = nullptr;
  std::vector<PlanRun> runs_;
  RunIntake<HostRun> intake_;  // ends, in-flight ranges, the last run (run_intake.hpp)
};

}  // namespace chunkpipe::detail
