// SPDX-License-Identifier: MIT
// The driver: the one loop that turns a pipeline's lifetime schedule into
// calls on an executor, run after run. Host-only.
//
// The driver owns the PlanBuilder, which lives as long as the pipeline, so
// chunk and op numbers continue across runs and a run's first chunk waits
// only for its slot's previous occupant. For each run it opens a run in the
// builder, walks its ticks, works out each op's elements, learns a Source's
// length from its host-in ops, and turns a failed run's remaining ops into
// no-ops (they still wait and signal, so the schedule stays whole and the
// runs after it are unaffected). An executor does the rest:
//
//   struct Executor {
//     void begin_run(Run&, std::size_t first_chunk);  // before the run's first op
//     template <class In> void issue(const Op&, const OpWork&, Run&);
//     void wait_host(std::size_t op_id);          // until that host op has run
//     void end_run(Run&, const PlanRun&);         // after its last op
//   };
//
// where Run is the executor's per-run state, with `bool failed() const`.
// issue() gets ops in issue order and must honour each op's waits (queue
// order is its own business) and record its completion when op.signal is
// set; an op of count 0 moves nothing but still waits and signals. The CUDA
// stream executor (stream_executor.cuh) and the host backend
// (host_executor.hpp) are the two; a new executor is one more such class.
// (The graph executor, graph_executor.cuh, takes whole runs instead: a
// graph replayed for every run of one length is built from that run's own
// plan, not from the lifetime schedule.)
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/io.hpp>
#include <chunkpipe/plan.hpp>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

struct PackedPlace;  // endpoints.hpp

/// The numbers a run's chunk 0 is labelled with in the ChunkContext its
/// stages get (chunk, offset): a run that is one piece of a larger one (a
/// spread run's piece, spread.hpp) gives its ChunkFn stages the larger
/// run's numbers. Chunk k of the run is context chunk `chunk + k` at
/// context offset `offset + k * unit`. Internal: only stage contexts see
/// it (never a Source, a Sink, a report or NVTX, which number the run's own
/// chunks); the default labels a run as itself.
struct RunLabel {
  RunLabel() = default;
  RunLabel(std::size_t chunk, std::size_t offset) noexcept : chunk(chunk), offset(offset) {}
  std::size_t chunk = 0;
  std::size_t offset = 0;
  /// A spread run's piece (RunAccess sets it): its ends are the spread's
  /// own buffers and Sink, and the spread cuts the user's Source and Sink
  /// into windows itself. Not part of the numbers (==).
  bool piece = false;
  /// A counted piece's: where it may pack straight into the spread run's
  /// outputs (endpoints.hpp). Not part of the numbers either.
  std::shared_ptr<PackedPlace> place;
  bool operator==(const RunLabel& o) const noexcept { return chunk == o.chunk && offset == o.offset; }
  bool operator!=(const RunLabel& o) const noexcept { return !(*this == o); }
};

/// How chunkpipe's own code starts a labelled run on a pipeline
/// (ChunkedPipeline, HostPipeline: both befriend it): as run_async(in, out)
/// with no order, the run's stages seeing `label`'s numbers, a folding
/// pipeline's records going to `out`. Not public.
struct RunAccess {
  template <class Pipeline, class In, class Out>
  static auto run_async(Pipeline& p, RunLabel label, In&& in, Out&& out) {
    label.piece = true;
    return p.labelled_run_async(label, std::forward<In>(in), std::forward<Out>(out));
  }
  /// Input elements per output record of `p`'s runs: 1, a Reduce's
  /// segment, or the unit for per-chunk records.
  template <class Pipeline>
  static std::size_t per_record(const Pipeline& p) noexcept {
    return p.per_record();
  }
  /// The next profiled run of `p` starts its profiling clock again
  /// (Report::clock_ms); a pipeline that does not profile ignores it.
  /// Call with none of p's runs in flight.
  template <class Pipeline>
  static void restart_profile_clock(Pipeline& p) {
    p.restart_profile_clock();
  }
  /// What `order` (the pipeline backend's after(...)) names, taken now, as
  /// a wait for another thread: the call blocks until that work ended,
  /// done or failed, and never throws. Empty where it names nothing.
  /// Throws what taking it throws (a CUDA error recording an event).
  template <class Pipeline, class Order>
  static std::function<void()> hold(Pipeline& p, const Order& order) {
    return p.hold_order(order);
  }
  /// `p`'s staged runs copy with `team` (a spread's SharedCopyTeam, shared
  /// by its members) from now on. Call before p's first staged run.
  template <class Pipeline, class Team>
  static void share_copy_team(Pipeline& p, Team team) {
    p.share_copy_team(std::move(team));
  }
};

/// What one op does within its run.
struct OpWork {
  std::size_t offset = 0;  ///< index of the chunk's first element in the run
  std::size_t count = 0;   ///< elements it moves or computes; 0: waits and signals only
  /// Host-in of a run whose Source decides its length: where the host task
  /// writes how many elements the Source produced (count is the capacity).
  std::size_t* produced = nullptr;
};

template <class Executor>
class Driver {
 public:
  /// Throws config_error for a bad geometry (what PlanBuilder throws).
  Driver(Policy policy, int depth, PlanShape shape, std::size_t chunk_elems)
      : builder_(policy, depth, std::move(shape)),
        chunk_elems_(chunk_elems),
        counts_(builder_.reach(), 0),
        host_in_ops_(builder_.reach(), 0) {}

  const PlanBuilder& builder() const noexcept { return builder_; }
  std::size_t chunk_elems() const noexcept { return chunk_elems_; }

  /// Issues every op of one run of `n` elements (unknown_length: a Source
  /// ends it) through `exec`, and returns the run as the schedule holds it.
  /// Blocks only where the executor does (a device op that needs a host op
  /// done first; a Source's length). Throws what the executor throws from
  /// begin_run(), and std::logic_error for an internal inconsistency;
  /// failures of the run itself are the executor's to record in `run`.
  template <class In, class Run>
  PlanRun issue_run(Executor& exec, Run& run, const RunSpec& spec, std::size_t n) {
    builder_.begin_run(spec);
    const std::size_t base = builder_.run_first_chunk();
    const bool open_ended = n == unknown_length;
    const std::size_t ring = counts_.size();
    exec.begin_run(run, base);
    bool noop = false;        // ops from here on do no work (the run failed)
    bool cut = false;         // the run's chunk count was cut to where it failed
    std::size_t learned = 0;  // a Source's elements so far
    for (;;) {
      const std::size_t t = builder_.run_tick();
      if (!cut && run.failed()) {
        // Stop at this tick: its chunk is the last, and issues nothing.
        noop = cut = true;
        if (t < builder_.run_chunks()) builder_.set_run_chunks(t + 1);
      }
      batch_.clear();
      if (!builder_.begin_tick(batch_)) break;
      issue_batch<In>(exec, run, base, n, noop);
      if (open_ended) {
        // Every op of chunk t but its host-in needs its size: wait for the
        // Source to have filled the slot.
        const std::size_t chunk = base + t;
        exec.wait_host(host_in_ops_[chunk % ring]);
        std::size_t count = counts_[chunk % ring];
        if (run.failed()) {
          noop = true;
          count = 0;
        }
        learned += count;
        if (count < chunk_elems_) builder_.set_run_chunks(t + 1);
      }
      batch_.clear();
      builder_.finish_tick(batch_);
      issue_batch<In>(exec, run, base, n, noop);
    }
    PlanRun done = builder_.end_run();
    if (open_ended) done.elems = learned;
    exec.end_run(run, done);
    return done;
  }

  /// Elements of a Source's chunk once its host-in has run.
  std::size_t learned(std::size_t chunk) const noexcept { return counts_[chunk % counts_.size()]; }

 private:
  template <class In, class Run>
  void issue_batch(Executor& exec, Run& run, std::size_t base, std::size_t n, bool& noop) {
    const bool open_ended = n == unknown_length;
    const std::size_t ring = counts_.size();
    for (const Op& op : batch_) {
      if (!noop && run.failed()) noop = true;
      OpWork w;
      w.offset = (op.chunk - base) * chunk_elems_;
      if (noop) {
        w.count = 0;
        if (op.kind == OpKind::host_in && open_ended) {
          counts_[op.chunk % ring] = 0;
          host_in_ops_[op.chunk % ring] = op.id;
        }
      } else if (open_ended) {
        if (op.kind == OpKind::host_in) {
          w.count = chunk_elems_;
          w.produced = &counts_[op.chunk % ring];
          host_in_ops_[op.chunk % ring] = op.id;
        } else {
          w.count = counts_[op.chunk % ring];
        }
      } else {
        w.count = w.offset < n ? std::min(chunk_elems_, n - w.offset) : 0;
      }
      exec.template issue<In>(op, w, run);
    }
  }

  PlanBuilder builder_;
  std::size_t chunk_elems_;
  std::vector<std::size_t> counts_;       // [chunk % reach]: what a Source produced
  std::vector<std::size_t> host_in_ops_;  // [chunk % reach]: id of the chunk's host-in
  OpBatch batch_;
};

}  // namespace chunkpipe::detail
