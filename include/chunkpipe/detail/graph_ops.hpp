// SPDX-License-Identifier: MIT
// The CUDA graph executor's part that does not depend on the stages: which
// graph a run launches (a cache of executable graphs, one per run shape,
// each built by GraphBuilder from the plan it is handed, re-pointed when
// the run's host ranges differ) and the launch itself, ordered between the
// stream executor's streams. GraphExecutor<Stages...>
// (graph_executor.cuh) binds the stages' part.
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/memory.cuh>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/run_ticket.cuh>
#include <chunkpipe/detail/graph_builder.hpp>
#include <chunkpipe/detail/linkage.hpp>
#include <chunkpipe/detail/run_state.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

/// The graph executor over stage ops it adds through a StageNodesFn. Not a
/// template, so that a program compiles it once (detail/linkage.hpp).
class GraphOps {
 public:
  /// Executable graphs kept at once, one per run shape, least recently used
  /// dropped first. Each holds its nodes on the device as well as the host.
  static constexpr std::size_t max_cached = 8;

  /// How a run's graph was got.
  enum class Path : std::uint8_t { built, updated, replayed };

  /// The plan a graph run of `elems` elements follows, from the pipeline
  /// (PipelineFront::graph_plan): asked for only when a graph is built.
  struct Planner {
    const void* owner = nullptr;
    Plan (*plan)(const void* owner, std::size_t elems) = nullptr;
  };

  /// `stages` goes to every StageNodesFn as it is.
  GraphOps(void* stages, GraphKernels kernels, std::shared_ptr<EventPool> pool)
      : builder_(stages, kernels), pool_(std::move(pool)) {}
  GraphOps(const GraphOps&) = delete;
  GraphOps& operator=(const GraphOps&) = delete;
  /// Waits for every graph launched. Never throws.
  ~GraphOps() { drain(); }

  /// The unit and slots every graph uses; forgets every cached graph (they
  /// name the old slots). Nothing may be in flight.
  void configure(std::size_t unit, const SlotMemory& mem) {
    builder_.configure(unit, mem);
    cache_.clear();
  }

  void set_logging(bool on) noexcept { builder_.set_logging(on); }
  /// Where range tables come from (Options::device_memory; null:
  /// cudaMallocAsync on the launch stream). Before the first issue.
  void set_table_memory(std::shared_ptr<MemoryResource> resource) noexcept {
    builder_.set_table_memory(std::move(resource));
  }
  /// The most recent graph built, its edges read back from CUDA (logging only).
  const IssuedGraph& last_built() const noexcept { return builder_.last_built(); }
  std::size_t cached() const noexcept { return cache_.size(); }

  /// Forgets every cached graph (their ranges may be gone). Nothing may be
  /// in flight that the caller has not drained.
  void forget() noexcept { cache_.clear(); }

  /// Waits for every graph launched. Never throws.
  void drain() noexcept;

 protected:
  /// Issues the run `st` of `n` elements whose inputs are the types
  /// `types` names (pinned, no Source or Sink) as one graph launch on the
  /// executor's stream, after all work queued so far on the `count`
  /// `streams` and the run's gates; then makes `streams` wait for it. A graph not cached is
  /// built from `planner`'s plan, its stage ops added by `nodes`. Returns
  /// how the graph was got, with the host times in `stats`. Throws
  /// graph_build_error when a stage cannot be captured or the graph cannot
  /// be instantiated (then nothing was launched), cuda_error when CUDA
  /// fails.
  Path issue_run(RunState& st, std::size_t n, const void* types, const Stream* streams, std::size_t count,
                 GraphStats& stats, const Planner& planner, StageNodesFn nodes);

 private:
  using Key = std::pair<std::size_t, const void*>;  // run elements, input types

  GraphEntry* find(const Key& key);
  // Room for one more graph: the least recently launched leaves (a launch
  // in flight keeps its graph until it ends: cudaGraphExecDestroy).
  void make_room();
  // `launch_` after everything queued on `streams`, the run's gates and
  // the runs it follows.
  void order_launch(const RunState& st, const Stream* streams, std::size_t count);

  GraphBuilder builder_;
  std::shared_ptr<EventPool> pool_;
  Stream launch_;             // graph launches, in order
  std::vector<Event> joins_;  // [stream]: what launch_ waits for
  std::map<Key, GraphEntry> cache_;
  std::uint64_t clock_ = 0;  // launches so far: GraphEntry::used
};

}  // namespace chunkpipe::detail

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/graph_ops.inl>
#endif
