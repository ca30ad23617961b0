// SPDX-License-Identifier: MIT
// How the graph executor (graph_executor.cuh) makes one CUDA graph: from
// the plan it is handed, node i is op i (a copy per range it copies, as a
// copy node or a copy kernel; kernel nodes for a Map stage; a child graph
// of what a ChunkFn launched, captured once), and its edges are
// graph_of(plan): each op's waits and the op before it on its queue. The
// same description is what check_hazards(plan, graph) proves safe on the
// CPU; with Options::record_issued the builder reads the edges back from
// the graph it built, so that a test can prove the real graph too.
//
// A run whose copies are all small (a unit of at most max_copy_kernel_bytes
// per range) and between the slots and ranges a kernel can address has its
// copies built as kernels that read the ranges' addresses from a table in
// device memory, written by the graph's first node (copy_kernel.cuh): such
// a graph replays faster than one of copy nodes, and is pointed at new
// ranges by setting that one node. Any other run's graph has copy nodes,
// re-pointed one by one. The kind is chosen when the graph is built.
//
// Not a template: the stages' part (a stage op's nodes, and the copy
// kernels, which only the CUDA compiler can name) comes in through
// StageNodesFn and GraphKernels, so that the rest is compiled once
// (detail/linkage.hpp).
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/errors.hpp>
#include <chunkpipe/memory.cuh>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/detail/driver.hpp>  // OpWork
#include <chunkpipe/detail/linkage.hpp>
#include <chunkpipe/detail/range_table.hpp>
#include <chunkpipe/detail/slots.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace chunkpipe::detail {

// A failed destroy (a graph left behind by an invalidated capture) must
// not leave its error for the next CUDA call to report as its own.
struct GraphDeleter {
  void operator()(cudaGraph_t g) const noexcept {
    if (cudaGraphDestroy(g) != cudaSuccess) (void)cudaGetLastError();
  }
};
struct GraphExecDeleter {
  void operator()(cudaGraphExec_t g) const noexcept {
    if (cudaGraphExecDestroy(g) != cudaSuccess) (void)cudaGetLastError();
  }
};
using GraphHandle = std::unique_ptr<std::remove_pointer_t<cudaGraph_t>, GraphDeleter>;
using GraphExecHandle = std::unique_ptr<std::remove_pointer_t<cudaGraphExec_t>, GraphExecDeleter>;

/// A graph's range table in device memory. Without a MemoryResource it is
/// allocated and freed in order on the stream its graph is launched on
/// (cudaMallocAsync), so freed after the last launch that reads it; from
/// the program's resource (Options::device_memory) it is allocated at once
/// and given back after that stream has been synchronised (a graph leaves
/// the cache rarely: a ninth shape, other element types, forget()).
class TableMemory {
 public:
  TableMemory() = default;
  /// Allocates it: from `resource` where given, else in order on `stream`.
  /// Throws cuda_error, and what DeviceBuffer throws for a resource.
  TableMemory(cudaStream_t stream, std::shared_ptr<MemoryResource> resource);
  TableMemory(TableMemory&& o) noexcept;
  TableMemory& operator=(TableMemory&& o) noexcept;
  ~TableMemory() { release(); }
  RangeTable* get() const noexcept { return table_; }

 private:
  void release() noexcept;
  RangeTable* table_ = nullptr;
  cudaStream_t stream_ = nullptr;
  DeviceBuffer held_;  // from a MemoryResource, or empty
};

/// A graph build that failed in a way the user can act on; the pipeline
/// itself is fine. `every_shape`: a stage that cannot be captured, which no
/// run of this pipeline can then have as a graph (an instantiation that
/// fails may be the run's size alone).
struct graph_build_error : pipeline_error {
  graph_build_error(const std::string& what, bool every) : pipeline_error(what), every_shape(every) {}
  bool every_shape;
};

/// One executable graph and what re-pointing it needs.
struct GraphEntry {
  Plan plan;
  GraphHandle graph;
  GraphExecHandle exec;
  std::vector<cudaGraphNode_t> copy_nodes;  // in op order, each op's copies in copies_of order (copy nodes or kernels)
  std::vector<const void*> pointers;        // the host ranges it was last pointed at
  std::uint64_t used = 0;                   // when it was last launched (GraphOps' cache)
  // Copies as kernels (copy_kernel.cuh): the table they read the ranges'
  // addresses from, and the node that writes it, first in the graph.
  bool copy_kernels = false;
  TableMemory table;
  cudaGraphNode_t table_node = nullptr;

  /// Whether its copies point at these ranges. Allocates nothing: a replay
  /// is meant to cost one launch.
  bool points_at(const Endpoints& ends) const noexcept;
  void remember(const Endpoints& ends);
};

/// The copy kernels, as the code compiled for the stages names them
/// (copy_kernel.cuh: write_range_table, copy_with_table).
struct GraphKernels {
  const void* write_table = nullptr;
  const void* copy = nullptr;
};

/// Captures what a stage launches into a child graph node: a stage's
/// StageNodesFn calls it with a function of the stream to launch on. A
/// stage that does what a capture cannot hold leaves failure() set.
class GraphCapture {
 public:
  GraphCapture(cudaStream_t stream, cudaGraph_t graph, const std::vector<cudaGraphNode_t>& deps,
               std::vector<cudaGraphNode_t>& mine)
      : stream_(stream), graph_(graph), deps_(deps), mine_(mine) {}

  /// Runs `launch(stream)` under capture, and adds what it launched (if
  /// anything) as one node after the op's waits. Throws cuda_error for a
  /// broken context only.
  template <class Launch>
  void operator()(Launch&& launch) {
    run(&call<std::remove_reference_t<Launch>>, &launch);
  }
  const std::string& failure() const noexcept { return failure_; }

 private:
  template <class L>
  static void call(void* launch, cudaStream_t s) {
    (*static_cast<L*>(launch))(s);
  }
  void run(void (*fn)(void*, cudaStream_t), void* launch);

  cudaStream_t stream_;
  cudaGraph_t graph_;
  const std::vector<cudaGraphNode_t>& deps_;
  std::vector<cudaGraphNode_t>& mine_;
  std::string failure_;
};

/// Adds stage op `op` (of step `step`) of `stages` (what the owner handed
/// over) to `graph` after `deps`, over `w.count` elements of its slots in
/// `mem`; `mine` gets the nodes later ops follow. A stage that launches
/// its own work goes through `capture`.
using StageNodesFn = void (*)(void* stages, const SlotMemory& mem, const Step& step, const Op& op, const OpWork& w,
                              cudaGraph_t graph, const std::vector<cudaGraphNode_t>& deps,
                              std::vector<cudaGraphNode_t>& mine, GraphCapture& capture);

/// Builds graphs of plans over the pipeline's slots, and points built ones
/// at new ranges.
class GraphBuilder {
 public:
  /// `stages` goes to every StageNodesFn as it is.
  GraphBuilder(void* stages, GraphKernels kernels) : stages_(stages), kernels_(kernels) {}

  /// The slots and unit every graph uses from now on.
  void configure(std::size_t unit, const SlotMemory& mem) {
    unit_ = unit;
    mem_ = mem;
  }
  void set_logging(bool on) noexcept { logging_ = on; }
  /// Where range tables come from (Options::device_memory; null:
  /// cudaMallocAsync on the launch stream).
  void set_table_memory(std::shared_ptr<MemoryResource> resource) noexcept { table_memory_ = std::move(resource); }
  /// The most recent graph built, its edges read back from CUDA (logging only).
  const IssuedGraph& last_built() const noexcept { return issued_; }

  /// The graph of `plan` (one run, chunks from 0) for a run at `ends`,
  /// instantiated; its range table (if any) in order on `launch`. Records
  /// the host times in `stats`. Throws graph_build_error when a stage
  /// cannot be captured or the graph cannot be instantiated, cuda_error
  /// when CUDA fails.
  GraphEntry build(Plan plan, const Endpoints& ends, cudaStream_t launch, StageNodesFn nodes, GraphStats& stats);

  /// Points `e` at `ends`: every copy node, in the order build() added
  /// them, or, for copy kernels, the table node. False when CUDA refuses
  /// (a range of another memory kind) or a kernel could not address a new
  /// range: the caller builds afresh.
  bool repoint(GraphEntry& e, const Endpoints& ends);

 private:
  OpWork work_of(const Op& op, std::size_t n) const;
  bool kernels_can_copy(const Endpoints& ends) const;
  bool set_table(GraphEntry& e, const Endpoints& ends);
  cudaGraphNode_t add_table_node(GraphEntry& e, const Endpoints& ends);
  cudaGraphNode_t add_copy_kernel(GraphEntry& e, const Op& op, std::size_t j, const Copy& c, const Endpoints& ends,
                                  const std::vector<cudaGraphNode_t>& deps);
  void add_stage(cudaGraph_t graph, const Op& op, const Step& step, const OpWork& w,
                 const std::vector<cudaGraphNode_t>& deps, std::vector<cudaGraphNode_t>& mine, StageNodesFn nodes);

  void* stages_;  // the owner's, for its StageNodesFn
  GraphKernels kernels_;
  std::size_t unit_ = 1;
  SlotMemory mem_;
  std::shared_ptr<MemoryResource> table_memory_;  // range tables' (null: cudaMallocAsync)
  Stream capture_;                                // a ChunkFn's launches captured into graphs; never runs work
  std::vector<Copy> copies_;                      // the copies of the op being added
  bool logging_ = false;
  IssuedGraph issued_;
};

}  // namespace chunkpipe::detail

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/graph_builder.inl>
#endif
