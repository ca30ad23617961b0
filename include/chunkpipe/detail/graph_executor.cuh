// SPDX-License-Identifier: MIT
// The CUDA graph executor: a pinned run's plan built once into a CUDA
// graph, instantiated, and launched as one unit; a later run of the same
// shape launches the cached graph again, re-pointing its copies first
// when its host ranges differ.
//
// Why: on streams every op is a CUDA call the issuing thread makes, about
// 3 us each, so at small chunks the host, not the link, sets the pace (a
// 64 KiB chunk moves in about 1.2 us each way on the H200). A graph launch
// is one call for the whole run, and the GPU walks its nodes.
//
// It takes whole runs rather than ops from the driver (driver.hpp): a
// graph is built from a plan of the run alone, chunks numbered from 0,
// which the issuer hands over (PipelineFront::graph_plan), so that one
// graph serves every run of that length; in the lifetime schedule each
// run's chunks, slots and waits differ with what came before. How a plan
// becomes a graph: graph_builder.hpp; the cache and the launch:
// graph_ops.hpp.
//
// What a graph cannot do it leaves to streams (choose_executor, detail/option_rules.hpp):
// staged runs (their host work would be host nodes, tens of us each),
// profiled runs (per-op events). A graph run starts after everything
// queued before it and everything after it waits for it: its first copies
// cannot overlap the previous run's last ones, which is why the automatic
// executor keeps short runs on streams.
#pragma once

#include <chunkpipe/run_ticket.cuh>
#include <chunkpipe/detail/copy_kernel.cuh>
#include <chunkpipe/detail/graph_ops.hpp>
#include <chunkpipe/detail/stage_launch.cuh>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

/// The graph executor for a pipeline of `Stages`: GraphOps (graph_ops.hpp),
/// which caches, builds and launches graphs, with each stage op's nodes and
/// the copy kernels compiled here. The only part that depends on the
/// stages, so that the rest is compiled once (detail/linkage.hpp).
template <class... Stages>
class GraphExecutor : public GraphOps {
 public:
  GraphExecutor(std::tuple<Stages...>& stages, std::shared_ptr<EventPool> pool)
      : GraphOps(&stages,
                 GraphKernels{reinterpret_cast<const void*>(&write_range_table<>),
                              reinterpret_cast<const void*>(&copy_with_table<>)},
                 std::move(pool)) {}

  /// Issues the run `st` of `n` elements, whose inputs are `In`, as one
  /// graph launch ordered between the `count` `streams`
  /// (GraphOps::issue_run); a graph not cached is built from `planner`'s
  /// plan. Throws graph_build_error when a stage cannot be captured or the
  /// graph cannot be instantiated (then nothing was launched), cuda_error
  /// when CUDA fails.
  template <class In>
  Path issue(RunState& st, std::size_t n, const Stream* streams, std::size_t count, GraphStats& stats,
             const Planner& planner) {
    return issue_run(st, n, &type_tag<In>::id, streams, count, stats, planner, &GraphExecutor::template nodes<In>);
  }

 private:
  // A graph's kernels are those of one input type list (runs of other
  // types may share the slot layout, and so the pipeline's schedule).
  template <class T>
  struct type_tag {
    static constexpr char id = 0;
  };

  // A StageNodesFn (graph_builder.hpp) for runs whose inputs are `In`. A
  // graph's own plan numbers its run from chunk 0: runs labelled otherwise
  // (RunLabel, a spread piece's) never come here when a stage sees its
  // context (the Dispatcher sends them to streams).
  template <class In>
  static void nodes(void* stages, const SlotMemory& mem, const Step& step, const Op& op, const OpWork& w,
                    cudaGraph_t graph, const std::vector<cudaGraphNode_t>& deps, std::vector<cudaGraphNode_t>& mine,
                    GraphCapture& capture) {
    ::chunkpipe::detail::add_stage_nodes<In>(*static_cast<std::tuple<Stages...>*>(stages), mem, step, op, op.chunk,
                                             w.offset, w.count, graph, deps, mine, capture);
  }
};

}  // namespace chunkpipe::detail
