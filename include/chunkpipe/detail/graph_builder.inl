// SPDX-License-Identifier: MIT
// Definitions for detail/graph_builder.hpp. Included at its bottom where
// chunkpipe is header-only, or once by <chunkpipe/compiled.hpp>
// (detail/linkage.hpp); do not include directly.
#pragma once

#include <algorithm>
#include <chrono>
#include <exception>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace chunkpipe::detail {

namespace graph_detail {

inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

inline RangeTable table_of(const Endpoints& ends) {
  RangeTable t{};
  std::size_t k = 0;
  for (const auto& in : ends.in)
    t.at[k++] = const_cast<unsigned char*>(reinterpret_cast<const unsigned char*>(in.data));
  for (const auto& out : ends.out) t.at[k++] = reinterpret_cast<unsigned char*>(out.data);
  return t;
}

// The table node's parameters: `args` must outlive their use.
inline cudaKernelNodeParams table_params(const void* kernel, RangeTable*& where, RangeTable& table, void** args) {
  args[0] = &where;
  args[1] = &table;
  cudaKernelNodeParams kp{};
  kp.func = const_cast<void*>(kernel);
  kp.gridDim = dim3(1);
  kp.blockDim = dim3(1);
  kp.kernelParams = args;
  return kp;
}

// The graph's edges as CUDA holds them, between ops.
// `table`: the copy kernels' table node (or null), which belongs to no op;
// every other node must be an op's. A graph with a table must have it as
// its only root, or a copy kernel could read the table before it is
// written: that is checked here too (std::logic_error), since the edges
// returned leave the table node out.
inline PlanGraph read_back(cudaGraph_t graph, std::size_t ops,
                           const std::unordered_map<cudaGraphNode_t, std::size_t>& owner, cudaGraphNode_t table) {
  if (table != nullptr) {
    std::size_t roots = 0;
    CHUNKPIPE_CUDA_TRY(cudaGraphGetRootNodes(graph, nullptr, &roots));
    std::vector<cudaGraphNode_t> root(roots);
    CHUNKPIPE_CUDA_TRY(cudaGraphGetRootNodes(graph, root.data(), &roots));
    if (roots != 1 || root[0] != table) {
      throw std::logic_error("chunkpipe: a graph of copy kernels has " + std::to_string(roots) +
                             " root nodes; its range table's must be the only one");
    }
  }
  std::size_t count = 0;
  CHUNKPIPE_CUDA_TRY(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &count));
  std::vector<cudaGraphNode_t> from(count), to(count);
  CHUNKPIPE_CUDA_TRY(cudaGraphGetEdges(graph, from.data(), to.data(), nullptr, &count));
  PlanGraph g;
  g.deps.resize(ops);
  for (std::size_t i = 0; i < count; ++i) {
    if (table != nullptr && from[i] == table) continue;  // every op without a wait follows it
    const std::size_t a = owner.at(from[i]), b = owner.at(to[i]);
    if (a != b) g.deps[b].push_back(a);
  }
  for (auto& d : g.deps) {
    std::sort(d.begin(), d.end());
    d.erase(std::unique(d.begin(), d.end()), d.end());
  }
  return g;
}

}  // namespace graph_detail

// -- TableMemory --------------------------------------------------------------

CHUNKPIPE_INLINE TableMemory::TableMemory(cudaStream_t stream, std::shared_ptr<MemoryResource> resource)
    : stream_(stream) {
  if (resource) {
    held_ = DeviceBuffer(sizeof(RangeTable), std::move(resource), "a CUDA graph's range table");
    table_ = reinterpret_cast<RangeTable*>(held_.data());
    return;
  }
  void* p = nullptr;
  CHUNKPIPE_CUDA_TRY(cudaMallocAsync(&p, sizeof(RangeTable), stream));
  table_ = static_cast<RangeTable*>(p);
}

CHUNKPIPE_INLINE TableMemory::TableMemory(TableMemory&& o) noexcept
    : table_(o.table_), stream_(o.stream_), held_(std::move(o.held_)) {
  o.table_ = nullptr;
}

CHUNKPIPE_INLINE TableMemory& TableMemory::operator=(TableMemory&& o) noexcept {
  if (this != &o) {
    release();
    table_ = o.table_;
    stream_ = o.stream_;
    held_ = std::move(o.held_);
    o.table_ = nullptr;
  }
  return *this;
}

CHUNKPIPE_INLINE void TableMemory::release() noexcept {
  if (table_ && held_.data()) {
    if (cudaStreamSynchronize(stream_) != cudaSuccess) (void)cudaGetLastError();
    held_ = DeviceBuffer();
  } else if (table_ && cudaFreeAsync(table_, stream_) != cudaSuccess) {
    (void)cudaGetLastError();
  }
  table_ = nullptr;
}

// -- GraphEntry ---------------------------------------------------------------

CHUNKPIPE_INLINE bool GraphEntry::points_at(const Endpoints& ends) const noexcept {
  if (pointers.size() != ends.in.size() + ends.out.size()) return false;
  std::size_t k = 0;
  for (const auto& in : ends.in) {
    if (pointers[k++] != in.data) return false;
  }
  for (const auto& out : ends.out) {
    if (pointers[k++] != out.data) return false;
  }
  return true;
}

CHUNKPIPE_INLINE void GraphEntry::remember(const Endpoints& ends) {
  pointers.resize(ends.in.size() + ends.out.size());
  std::size_t k = 0;
  for (const auto& in : ends.in) pointers[k++] = in.data;
  for (const auto& out : ends.out) pointers[k++] = out.data;
}

// -- GraphCapture -------------------------------------------------------------

// A ChunkFn is called once on a capturing stream, and what it launched
// becomes one child graph node, moved into the run's graph (a moved child
// may hold the allocation nodes of stream-ordered memory, cudaMallocAsync
// or thrust_policy, which a cloned one may not). Capturing into a graph of
// its own costs the same at any size, where capturing into the run's
// graph (cudaStreamBeginCaptureToGraph) cost time growing with the graph,
// 30 s for 16384 chunks on the H200. A broken context is the context's
// fault, not the stage's: that alone throws (cuda_error).
CHUNKPIPE_INLINE void GraphCapture::run(void (*fn)(void*, cudaStream_t), void* launch) {
  CHUNKPIPE_CUDA_TRY(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  std::exception_ptr broken;
  try {
    fn(launch, stream_);
  } catch (const cuda_error& x) {
    if (is_sticky(x.code())) broken = std::current_exception();
    failure_ = x.what();
  } catch (const std::exception& x) {
    failure_ = x.what();
  } catch (...) {
    failure_ = "an exception that is not a std::exception";
  }
  cudaGraph_t raw = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream_, &raw);
  GraphHandle child(raw);
  if (broken) std::rethrow_exception(broken);
  if (is_sticky(end)) throw cuda_error(end, "cudaStreamEndCapture", __FILE__, __LINE__);
  if (failure_.empty() && end != cudaSuccess) {
    failure_ = std::string(cudaGetErrorName(end)) + ": " + cudaGetErrorString(end);
  }
  if (!failure_.empty() || !child) return;
  std::size_t nodes = 0;
  CHUNKPIPE_CUDA_TRY(cudaGraphGetNodes(child.get(), nullptr, &nodes));
  if (nodes == 0) return;  // it launched nothing: the caller keeps the op's place
  cudaGraphNodeParams p{};
  p.type = cudaGraphNodeTypeGraph;
  p.graph.graph = child.get();
  p.graph.ownership = cudaGraphChildGraphOwnershipMove;
  cudaGraphNode_t node = nullptr;
  const cudaError_t added = cudaGraphAddNode(&node, graph_, deps_.data(), nullptr, deps_.size(), &p);
  if (added != cudaSuccess) {
    (void)cudaGetLastError();
    if (is_sticky(added)) throw cuda_error(added, "cudaGraphAddNode", __FILE__, __LINE__);
    failure_ = std::string("what it launched cannot be a child graph (") + cudaGetErrorName(added) + ": " +
               cudaGetErrorString(added) + ")";
    return;
  }
  (void)child.release();  // the run's graph owns it now
  mine_.push_back(node);
}

// -- GraphBuilder -------------------------------------------------------------

CHUNKPIPE_INLINE OpWork GraphBuilder::work_of(const Op& op, std::size_t n) const {
  OpWork w;
  w.offset = op.chunk * unit_;
  w.count = w.offset < n ? std::min(unit_, n - w.offset) : 0;
  return w;
}

// Whether a run's copies may be kernels: every range one a kernel can
// address, nothing staged or packed, few enough ranges, a unit of at most
// max_copy_kernel_bytes per range, and stream-ordered allocation (or the
// program's device memory resource) for the table. All of the run's
// copies or none: one graph has one kind.
CHUNKPIPE_INLINE bool GraphBuilder::kernels_can_copy(const Endpoints& ends) const {
  if (ends.packed || ends.in.size() + ends.out.size() > max_copy_kernel_ranges) return false;
  int device = 0, pools = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (pools == 0 && !table_memory_) return false;  // cudaMallocAsync needs them
  for (const auto& in : ends.in) {
    if (in.staged || in.produce || unit_ * in.elem_size > max_copy_kernel_bytes) return false;
    if (!device_addressable(in.data)) return false;
  }
  for (const auto& out : ends.out) {
    if (out.staged || out.consume || unit_ * out.elem_size > max_copy_kernel_bytes) return false;
    if (!device_addressable(out.data)) return false;
  }
  return true;
}

// The executable graph's table node at `ends`: one node's parameters,
// which the next launch uses.
CHUNKPIPE_INLINE bool GraphBuilder::set_table(GraphEntry& e, const Endpoints& ends) {
  RangeTable* where = e.table.get();
  RangeTable table = graph_detail::table_of(ends);
  void* args[2];
  const cudaKernelNodeParams kp = graph_detail::table_params(kernels_.write_table, where, table, args);
  if (cudaGraphExecKernelNodeSetParams(e.exec.get(), e.table_node, &kp) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return true;
}

CHUNKPIPE_INLINE bool GraphBuilder::repoint(GraphEntry& e, const Endpoints& ends) {
  if (e.copy_kernels) {
    if (!kernels_can_copy(ends)) return false;
    return set_table(e, ends);
  }
  const std::size_t n = e.plan.runs.front().elems;
  std::size_t k = 0;
  for (const Op& op : e.plan.ops) {
    if (op.kind != OpKind::h2d && op.kind != OpKind::d2h) continue;
    const OpWork w = work_of(op, n);
    ::chunkpipe::detail::copies_of(op, e.plan.steps[static_cast<std::size_t>(op.step)], mem_, ends, w.offset, w.count,
                                   copies_);
    for (const Copy& c : copies_) {
      if (cudaGraphExecMemcpyNodeSetParams1D(e.exec.get(), e.copy_nodes[k++], c.dst, c.src, c.bytes,
                                             cudaMemcpyDefault) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
      }
    }
  }
  return true;
}

// The table node, first: every op without a wait follows it, so every copy
// kernel does.
CHUNKPIPE_INLINE cudaGraphNode_t GraphBuilder::add_table_node(GraphEntry& e, const Endpoints& ends) {
  RangeTable* where = e.table.get();
  RangeTable table = graph_detail::table_of(ends);
  void* args[2];
  const cudaKernelNodeParams kp = graph_detail::table_params(kernels_.write_table, where, table, args);
  cudaGraphNode_t node = nullptr;
  CHUNKPIPE_CUDA_TRY(cudaGraphAddKernelNode(&node, e.graph.get(), nullptr, 0, &kp));
  return node;
}

// A copy the op makes, as a kernel node: copy `j` of an h2d op is input
// j's (copies_of's order), of a d2h op output j's.
CHUNKPIPE_INLINE cudaGraphNode_t GraphBuilder::add_copy_kernel(GraphEntry& e, const Op& op, std::size_t j,
                                                               const Copy& c, const Endpoints& ends,
                                                               const std::vector<cudaGraphNode_t>& deps) {
  const bool in = op.kind == OpKind::h2d;
  unsigned range = static_cast<unsigned>(in ? j : ends.in.size() + j);
  const std::byte* base = in ? ends.in[j].data : ends.out[j].data;
  const std::byte* far = static_cast<const std::byte*>(in ? c.src : static_cast<const void*>(c.dst));
  std::size_t offset = static_cast<std::size_t>(far - base);
  unsigned char* slot = static_cast<unsigned char*>(in ? c.dst : const_cast<void*>(c.src));
  std::size_t bytes = c.bytes;
  const RangeTable* table = e.table.get();
  bool to_slot = in;
  void* args[] = {&table, &range, &offset, &slot, &bytes, &to_slot};
  cudaKernelNodeParams kp{};
  kp.func = const_cast<void*>(kernels_.copy);
  kp.gridDim = dim3(copy_kernel_blocks(bytes));
  kp.blockDim = dim3(copy_kernel_threads);
  kp.kernelParams = args;
  cudaGraphNode_t node = nullptr;
  CHUNKPIPE_CUDA_TRY(cudaGraphAddKernelNode(&node, e.graph.get(), deps.data(), deps.size(), &kp));
  return node;
}

// A stage op as nodes of `graph` after `deps` (StageNodesFn); `mine` gets
// the nodes later ops must follow. Throws graph_build_error naming the
// stage when it does what a capture cannot hold (synchronises, uses
// another stream, allocates outside a stream-ordered pool).
CHUNKPIPE_INLINE void GraphBuilder::add_stage(cudaGraph_t graph, const Op& op, const Step& step, const OpWork& w,
                                              const std::vector<cudaGraphNode_t>& deps,
                                              std::vector<cudaGraphNode_t>& mine, StageNodesFn nodes) {
  if (!capture_) capture_ = Stream::create();
  GraphCapture capture(capture_.get(), graph, deps, mine);
  nodes(stages_, mem_, step, op, w, graph, deps, mine, capture);
  if (!capture.failure().empty()) {
    (void)cudaGetLastError();
    throw graph_build_error("chunkpipe: stage " + std::to_string(op.stage) +
                                " cannot be captured into a CUDA graph: " + capture.failure() +
                                ". Under Executor::graphs a stage may only launch work on ctx.stream (no "
                                "synchronisation, no other stream, no allocation outside a stream-ordered pool); "
                                "use Executor::streams for this pipeline",
                            true);
  }
}

CHUNKPIPE_INLINE GraphEntry GraphBuilder::build(Plan plan, const Endpoints& ends, cudaStream_t launch,
                                                StageNodesFn nodes, GraphStats& stats) {
  const auto t0 = std::chrono::steady_clock::now();
  GraphEntry e;
  e.plan = std::move(plan);
  const std::size_t n = e.plan.runs.front().elems;
  const PlanGraph pg = ::chunkpipe::graph_of(e.plan);
  cudaGraph_t raw = nullptr;
  CHUNKPIPE_CUDA_TRY(cudaGraphCreate(&raw, 0));
  e.graph.reset(raw);
  std::vector<std::vector<cudaGraphNode_t>> exits(e.plan.ops.size());
  std::vector<cudaGraphNode_t> deps;
  std::unordered_map<cudaGraphNode_t, std::size_t> owner;  // logging only: node -> op
  e.copy_kernels = kernels_can_copy(ends);
  if (e.copy_kernels) {
    e.table = TableMemory(launch, table_memory_);
    e.table_node = add_table_node(e, ends);
  }
  for (const Op& op : e.plan.ops) {
    deps.clear();
    for (std::size_t d : pg.deps[op.id]) deps.insert(deps.end(), exits[d].begin(), exits[d].end());
    if (deps.empty() && e.copy_kernels) deps.push_back(e.table_node);
    const OpWork w = work_of(op, n);
    const Step& step = e.plan.steps[static_cast<std::size_t>(op.step)];
    std::vector<cudaGraphNode_t>& mine = exits[op.id];
    if (op.kind == OpKind::stage) {
      add_stage(e.graph.get(), op, step, w, deps, mine, nodes);
    } else {
      ::chunkpipe::detail::copies_of(op, step, mem_, ends, w.offset, w.count, copies_);
      for (std::size_t j = 0; j < copies_.size(); ++j) {
        const Copy& c = copies_[j];
        cudaGraphNode_t node = nullptr;
        if (e.copy_kernels) {
          node = add_copy_kernel(e, op, j, c, ends, deps);
        } else {
          CHUNKPIPE_CUDA_TRY(cudaGraphAddMemcpyNode1D(&node, e.graph.get(), deps.data(), deps.size(), c.dst, c.src,
                                                      c.bytes, cudaMemcpyDefault));
        }
        mine.push_back(node);
        e.copy_nodes.push_back(node);
      }
    }
    if (mine.empty()) {
      // Nothing to do (an empty chunk, a stage that launched nothing): an
      // empty node keeps the op's place in the order.
      cudaGraphNode_t node = nullptr;
      CHUNKPIPE_CUDA_TRY(cudaGraphAddEmptyNode(&node, e.graph.get(), deps.data(), deps.size()));
      mine.push_back(node);
    }
    if (logging_) {
      for (cudaGraphNode_t node : mine) owner.emplace(node, op.id);  // every node the op added
    }
  }
  stats.build_ms = graph_detail::ms_since(t0);
  stats.copy_kernels = e.copy_kernels;
  const auto t1 = std::chrono::steady_clock::now();
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, e.graph.get(), 0);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (is_sticky(err)) throw cuda_error(err, "cudaGraphInstantiate", __FILE__, __LINE__);
    throw graph_build_error(std::string("chunkpipe: the run's CUDA graph (") + std::to_string(e.plan.ops.size()) +
                                " ops) could not be instantiated: " + cudaGetErrorName(err) + ": " +
                                cudaGetErrorString(err),
                            false);
  }
  e.exec.reset(exec);
  stats.instantiate_ms = graph_detail::ms_since(t1);
  if (logging_) {
    issued_ = IssuedGraph{e.plan, graph_detail::read_back(e.graph.get(), e.plan.ops.size(), owner, e.table_node)};
  }
  return e;
}

}  // namespace chunkpipe::detail
