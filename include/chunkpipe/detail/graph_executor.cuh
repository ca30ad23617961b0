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
// The graph is the plan as data: node i is op i (a copy per range it
// copies, as a copy node or a copy kernel; a kernel node for a Map stage;
// a child graph of what a ChunkFn launched, captured once), and its edges
// are graph_of(plan): each op's waits and the op before it on its queue. The
// same description is what check_hazards(plan, graph) proves safe on the
// CPU, and with Options::record_issued the executor reads the edges back
// from the graph it built, so a test can prove the real graph too.
//
// It takes whole runs rather than ops from the driver (driver.hpp): a
// graph is built from the run's own plan, chunks numbered from 0, so that
// one graph serves every run of that length; in the lifetime schedule each
// run's chunks, slots and waits differ with what came before.
//
// A run whose copies are all small (a unit of at most max_copy_kernel_bytes
// per range) and between the slots and ranges a kernel can address has its
// copies built as kernels that read the ranges' addresses from a table in
// device memory, written by the graph's first node (copy_kernel.cuh): such
// a graph replays faster than one of copy nodes, and is pointed at new
// ranges by setting that one node. Any other run's graph has copy nodes,
// re-pointed one by one. The kind is chosen when the graph is built.
//
// What a graph cannot do it leaves to streams (choose_executor, options.hpp):
// staged runs (their host work would be host nodes, tens of us each),
// profiled runs (per-op events). A graph run starts after everything
// queued before it and everything after it waits for it: its first copies
// cannot overlap the previous run's last ones, which is why the automatic
// executor keeps short runs on streams.
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/errors.hpp>
#include <chunkpipe/memory.cuh>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/run_ticket.cuh>
#include <chunkpipe/detail/copy_kernel.cuh>
#include <chunkpipe/detail/driver.hpp>
#include <chunkpipe/detail/nvtx.hpp>
#include <chunkpipe/detail/slots.hpp>
#include <chunkpipe/detail/stage_launch.cuh>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
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
  TableMemory(cudaStream_t stream, std::shared_ptr<MemoryResource> resource) : stream_(stream) {
    if (resource) {
      held_ = DeviceBuffer(sizeof(RangeTable), std::move(resource), "a CUDA graph's range table");
      table_ = reinterpret_cast<RangeTable*>(held_.data());
      return;
    }
    void* p = nullptr;
    CHUNKPIPE_CUDA_TRY(cudaMallocAsync(&p, sizeof(RangeTable), stream));
    table_ = static_cast<RangeTable*>(p);
  }
  TableMemory(TableMemory&& o) noexcept : table_(o.table_), stream_(o.stream_), held_(std::move(o.held_)) {
    o.table_ = nullptr;
  }
  TableMemory& operator=(TableMemory&& o) noexcept {
    if (this != &o) {
      release();
      table_ = o.table_;
      stream_ = o.stream_;
      held_ = std::move(o.held_);
      o.table_ = nullptr;
    }
    return *this;
  }
  ~TableMemory() { release(); }
  RangeTable* get() const noexcept { return table_; }

 private:
  void release() noexcept {
    if (table_ && held_.data()) {
      if (cudaStreamSynchronize(stream_) != cudaSuccess) (void)cudaGetLastError();
      held_ = DeviceBuffer();
    } else if (table_ && cudaFreeAsync(table_, stream_) != cudaSuccess) {
      (void)cudaGetLastError();
    }
    table_ = nullptr;
  }
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

template <class... Stages>
class GraphExecutor {
 public:
  /// Executable graphs kept at once, one per run shape, least recently used
  /// dropped first. Each holds its nodes on the device as well as the host.
  static constexpr std::size_t max_cached = 8;

  /// How a run's graph was got.
  enum class Path : std::uint8_t { built, updated, replayed };

  GraphExecutor(std::tuple<Stages...>& stages, std::shared_ptr<EventPool> pool)
      : stages_(&stages), pool_(std::move(pool)) {}
  GraphExecutor(const GraphExecutor&) = delete;
  GraphExecutor& operator=(const GraphExecutor&) = delete;
  ~GraphExecutor() { drain(); }

  /// The schedule every graph follows and the slots it uses; forgets every
  /// cached graph (they name the old slots). Nothing may be in flight.
  void configure(Policy policy, int depth, const PlanShape& shape, std::size_t unit, const SlotMemory& mem) {
    policy_ = policy;
    depth_ = depth;
    shape_ = shape;
    unit_ = unit;
    mem_ = mem;
    cache_.clear();
  }

  void set_logging(bool on) noexcept { logging_ = on; }
  /// Where range tables come from (Options::device_memory; null:
  /// cudaMallocAsync on the launch stream). Before the first issue().
  void set_table_memory(std::shared_ptr<MemoryResource> resource) noexcept { table_memory_ = std::move(resource); }
  /// The most recent graph built, its edges read back from CUDA (logging only).
  const IssuedGraph& last_built() const noexcept { return issued_; }
  std::size_t cached() const noexcept { return cache_.size(); }

  /// Issues the run `st` of `n` elements (pinned, no Source or Sink) as one
  /// graph launch on the executor's stream, after all work queued so far
  /// on `streams` and the run's gates; then makes `streams` wait for it.
  /// Returns how the graph was got, with the host times in `stats`. Throws
  /// graph_build_error when a stage cannot be captured or the graph cannot
  /// be instantiated (then nothing was launched), cuda_error when CUDA
  /// fails.
  template <class In>
  Path issue(RunState& st, std::size_t n, const std::vector<cudaStream_t>& streams, GraphStats& stats) {
    if (!launch_) launch_ = Stream::create();
    if (!capture_) capture_ = Stream::create();
    for (const auto& before : st.setup.after_runs) before->wait_issued();
    Path path = Path::replayed;
    const Key key{n, &type_tag<In>::id};
    Entry* e = find(key);
    if (e && !points_at(*e, *st.setup.ends)) {
      path = Path::updated;
      const auto t0 = std::chrono::steady_clock::now();
      if (!repoint(*e, *st.setup.ends)) {
        cache_.erase(key);  // the new ranges' memory kinds differ: build afresh
        e = nullptr;
      } else {
        stats.update_ms = ms_since(t0);
      }
    }
    if (!e) {
      path = Path::built;
      e = &build<In>(key, *st.setup.ends, stats);
    }
    remember_pointers(*e, *st.setup.ends);
    e->used = ++clock_;

    // Everything queued before the run, then the run, then everything after.
    cudaStream_t L = launch_.get();
    while (joins_.size() < streams.size()) joins_.push_back(Event::create());
    for (std::size_t q = 0; q < streams.size(); ++q) {
      CHUNKPIPE_CUDA_TRY(cudaEventRecord(joins_[q].get(), streams[q]));
      CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(L, joins_[q].get(), 0));
    }
    for (const Event& g : st.setup.gates) CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(L, g.get(), 0));
    for (const auto& before : st.setup.after_runs) {
      for (const Event& t : before->device_tails()) CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(L, t.get(), 0));
    }
    const auto t0 = std::chrono::steady_clock::now();
    CHUNKPIPE_CUDA_TRY(cudaGraphLaunch(e->exec.get(), L));
    stats.launch_ms = ms_since(t0);
    Event tail = pool_->get();
    CHUNKPIPE_CUDA_TRY(cudaEventRecord(tail.get(), L));
    for (cudaStream_t s : streams) CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(s, tail.get(), 0));
    st.issue.tails.push_back(std::move(tail));
    return path;
  }

  /// Forgets every cached graph (their ranges may be gone). Nothing may be
  /// in flight that the caller has not drained.
  void forget() noexcept { cache_.clear(); }

  /// Waits for every graph launched. Never throws.
  void drain() noexcept {
    if (launch_ && cudaStreamSynchronize(launch_.get()) != cudaSuccess) (void)cudaGetLastError();
  }

 private:
  struct Entry {
    Plan plan;
    GraphHandle graph;
    GraphExecHandle exec;
    std::vector<cudaGraphNode_t> copy_nodes;  // in op order, each op's copies in copies_of order (copy nodes or kernels)
    std::vector<const void*> pointers;        // the host ranges it was last pointed at
    std::uint64_t used = 0;
    // Copies as kernels (copy_kernel.cuh): the table they read the ranges'
    // addresses from, and the node that writes it, first in the graph.
    bool copy_kernels = false;
    TableMemory table;
    cudaGraphNode_t table_node = nullptr;
  };

  static double ms_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }

  // Whether the entry's copies point at these ranges. Allocates
  // nothing: a replay is meant to cost one launch.
  static bool points_at(const Entry& e, const Endpoints& ends) {
    if (e.pointers.size() != ends.in.size() + ends.out.size()) return false;
    std::size_t k = 0;
    for (const auto& in : ends.in) {
      if (e.pointers[k++] != in.data) return false;
    }
    for (const auto& out : ends.out) {
      if (e.pointers[k++] != out.data) return false;
    }
    return true;
  }
  static void remember_pointers(Entry& e, const Endpoints& ends) {
    e.pointers.resize(ends.in.size() + ends.out.size());
    std::size_t k = 0;
    for (const auto& in : ends.in) e.pointers[k++] = in.data;
    for (const auto& out : ends.out) e.pointers[k++] = out.data;
  }

  // A graph's kernels are those of one input type list (runs of other
  // types may share the slot layout, and so the pipeline's schedule).
  template <class T>
  struct type_tag {
    static constexpr char id = 0;
  };
  using Key = std::pair<std::size_t, const void*>;  // run elements, input types

  Entry* find(const Key& key) {
    auto it = cache_.find(key);
    return it == cache_.end() ? nullptr : &it->second;
  }

  OpWork work_of(const Op& op, std::size_t n) const {
    OpWork w;
    w.offset = op.chunk * unit_;
    w.count = w.offset < n ? std::min(unit_, n - w.offset) : 0;
    return w;
  }

  // Every copy node at the new ranges' addresses, in the order build() added
  // them, or, for copy kernels, the table node at them. False when CUDA
  // refuses (a range of another memory kind) or a kernel could not address
  // a new range.
  bool repoint(Entry& e, const Endpoints& ends) {
    if (e.copy_kernels) {
      if (!kernels_can_copy(ends)) return false;
      return set_table(e, ends);
    }
    std::size_t k = 0;
    for (const Op& op : e.plan.ops) {
      if (op.kind != OpKind::h2d && op.kind != OpKind::d2h) continue;
      const OpWork w = work_of(op, ends_elems(e));
      ::chunkpipe::detail::copies_of(op, e.plan.steps[static_cast<std::size_t>(op.step)], mem_, ends, w.offset,
                                     w.count, copies_);
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
  static std::size_t ends_elems(const Entry& e) { return e.plan.runs.front().elems; }

  // Whether a run's copies may be kernels: every range one a kernel can
  // address, nothing staged or packed, few enough ranges, a unit of at most
  // max_copy_kernel_bytes per range, and stream-ordered allocation (or the
  // program's device memory resource) for the table. All of the run's
  // copies or none: one graph has one kind.
  bool kernels_can_copy(const Endpoints& ends) const {
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
  static RangeTable table_of(const Endpoints& ends) {
    RangeTable t{};
    std::size_t k = 0;
    for (const auto& in : ends.in) t.at[k++] = const_cast<unsigned char*>(reinterpret_cast<const unsigned char*>(in.data));
    for (const auto& out : ends.out) t.at[k++] = reinterpret_cast<unsigned char*>(out.data);
    return t;
  }
  static cudaKernelNodeParams table_params(RangeTable*& where, RangeTable& table, void** args) {
    args[0] = &where;
    args[1] = &table;
    cudaKernelNodeParams kp{};
    kp.func = reinterpret_cast<void*>(&write_range_table<>);
    kp.gridDim = dim3(1);
    kp.blockDim = dim3(1);
    kp.kernelParams = args;
    return kp;
  }
  // The executable graph's table node at `ends`: one node's parameters,
  // which the next launch uses.
  bool set_table(Entry& e, const Endpoints& ends) {
    RangeTable* where = e.table.get();
    RangeTable table = table_of(ends);
    void* args[2];
    const cudaKernelNodeParams kp = table_params(where, table, args);
    if (cudaGraphExecKernelNodeSetParams(e.exec.get(), e.table_node, &kp) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return true;
  }
  // A copy the op makes, as a kernel node: copy `j` of an h2d op is input
  // j's (copies_of's order), of a d2h op output j's.
  cudaGraphNode_t add_copy_kernel(Entry& e, const Op& op, std::size_t j, const Copy& c, const Endpoints& ends,
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
    kp.func = reinterpret_cast<void*>(&copy_with_table<>);
    kp.gridDim = dim3(copy_kernel_blocks(bytes));
    kp.blockDim = dim3(copy_kernel_threads);
    kp.kernelParams = args;
    cudaGraphNode_t node = nullptr;
    CHUNKPIPE_CUDA_TRY(cudaGraphAddKernelNode(&node, e.graph.get(), deps.data(), deps.size(), &kp));
    return node;
  }

  template <class In>
  Entry& build(const Key& key, const Endpoints& ends, GraphStats& stats) {
    const std::size_t n = key.first;
    if (cache_.size() >= max_cached) {
      auto oldest = std::min_element(cache_.begin(), cache_.end(),
                                     [](const auto& a, const auto& b) { return a.second.used < b.second.used; });
      cache_.erase(oldest);  // a launch in flight keeps its graph until it ends (cudaGraphExecDestroy)
    }
    const auto t0 = std::chrono::steady_clock::now();
    Entry e;
    const std::size_t chunks = (n + unit_ - 1) / unit_;
    e.plan = ::chunkpipe::make_plan(policy_, depth_, shape_, std::vector<RunSpec>{RunSpec{chunks, false, false, n}});
    const PlanGraph pg = ::chunkpipe::graph_of(e.plan);
    cudaGraph_t raw = nullptr;
    CHUNKPIPE_CUDA_TRY(cudaGraphCreate(&raw, 0));
    e.graph.reset(raw);
    std::vector<std::vector<cudaGraphNode_t>> exits(e.plan.ops.size());
    std::vector<cudaGraphNode_t> deps;
    std::unordered_map<cudaGraphNode_t, std::size_t> owner;  // logging only: node -> op
    e.copy_kernels = kernels_can_copy(ends);
    if (e.copy_kernels) {
      // The table node first: every op without a wait follows it, so every
      // copy kernel does.
      e.table = TableMemory(launch_.get(), table_memory_);
      RangeTable* where = e.table.get();
      RangeTable table = table_of(ends);
      void* args[2];
      const cudaKernelNodeParams kp = table_params(where, table, args);
      CHUNKPIPE_CUDA_TRY(cudaGraphAddKernelNode(&e.table_node, e.graph.get(), nullptr, 0, &kp));
    }
    for (const Op& op : e.plan.ops) {
      deps.clear();
      for (std::size_t d : pg.deps[op.id]) deps.insert(deps.end(), exits[d].begin(), exits[d].end());
      if (deps.empty() && e.copy_kernels) deps.push_back(e.table_node);
      const OpWork w = work_of(op, n);
      const Step& step = e.plan.steps[static_cast<std::size_t>(op.step)];
      std::vector<cudaGraphNode_t>& mine = exits[op.id];
      if (op.kind == OpKind::stage) {
        add_stage<In>(e.graph.get(), op, step, w, deps, mine);
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
        // Nothing to do (an empty chunk, a stage that launched nothing):
        // an empty node keeps the op's place in the order.
        cudaGraphNode_t node = nullptr;
        CHUNKPIPE_CUDA_TRY(cudaGraphAddEmptyNode(&node, e.graph.get(), deps.data(), deps.size()));
        mine.push_back(node);
      }
      if (logging_) {
        for (cudaGraphNode_t node : mine) owner.emplace(node, op.id);  // every node the op added
      }
    }
    stats.build_ms = ms_since(t0);
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
    stats.instantiate_ms = ms_since(t1);
    if (logging_) issued_ = IssuedGraph{e.plan, read_back(e.graph.get(), e.plan.ops.size(), owner, e.table_node)};
    return cache_[key] = std::move(e);
  }

  // A stage op as nodes of `graph` after `deps`; `mine` gets the nodes
  // later ops must follow. A Map stage is kernel nodes. A ChunkFn is called
  // once on a capturing stream, and what it launched becomes one child
  // graph node, moved into the run's graph (a moved child may hold the
  // allocation nodes of stream-ordered memory, cudaMallocAsync or
  // thrust_policy, which a cloned one may not). Capturing into a graph of
  // its own costs the same at any size, where capturing into the run's
  // graph (cudaStreamBeginCaptureToGraph) cost time growing with the graph,
  // 30 s for 16384 chunks on the H200. Throws graph_build_error naming the
  // stage when it does what a capture cannot hold (synchronises, uses
  // another stream, allocates outside a stream-ordered pool), and
  // cuda_error for a broken context, which is the context's fault, not the
  // stage's.
  template <class In>
  void add_stage(cudaGraph_t graph, const Op& op, const Step& step, const OpWork& w,
                 const std::vector<cudaGraphNode_t>& deps, std::vector<cudaGraphNode_t>& mine) {
    std::string failure;
    auto capture = [&](auto&& launch) {
      cudaStream_t s = capture_.get();
      CHUNKPIPE_CUDA_TRY(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      std::exception_ptr broken;
      try {
        launch(s);
      } catch (const cuda_error& x) {
        if (is_sticky(x.code())) broken = std::current_exception();
        failure = x.what();
      } catch (const std::exception& x) {
        failure = x.what();
      } catch (...) {
        failure = "an exception that is not a std::exception";
      }
      cudaGraph_t raw = nullptr;
      const cudaError_t end = cudaStreamEndCapture(s, &raw);
      GraphHandle child(raw);
      if (broken) std::rethrow_exception(broken);
      if (is_sticky(end)) throw cuda_error(end, "cudaStreamEndCapture", __FILE__, __LINE__);
      if (failure.empty() && end != cudaSuccess) failure = std::string(cudaGetErrorName(end)) + ": " + cudaGetErrorString(end);
      if (!failure.empty() || !child) return;
      std::size_t nodes = 0;
      CHUNKPIPE_CUDA_TRY(cudaGraphGetNodes(child.get(), nullptr, &nodes));
      if (nodes == 0) return;  // it launched nothing: the caller keeps the op's place
      cudaGraphNodeParams p{};
      p.type = cudaGraphNodeTypeGraph;
      p.graph.graph = child.get();
      p.graph.ownership = cudaGraphChildGraphOwnershipMove;
      cudaGraphNode_t node = nullptr;
      const cudaError_t added = cudaGraphAddNode(&node, graph, deps.data(), nullptr, deps.size(), &p);
      if (added != cudaSuccess) {
        (void)cudaGetLastError();
        if (is_sticky(added)) throw cuda_error(added, "cudaGraphAddNode", __FILE__, __LINE__);
        failure = std::string("what it launched cannot be a child graph (") + cudaGetErrorName(added) + ": " +
                  cudaGetErrorString(added) + ")";
        return;
      }
      (void)child.release();  // the run's graph owns it now
      mine.push_back(node);
    };
    // A graph's own plan numbers its run from chunk 0: runs labelled
    // otherwise (RunLabel, a spread piece's) never come here when a stage
    // sees its context (CudaRunner::executor_for sends them to streams).
    ::chunkpipe::detail::add_stage_nodes<In>(*stages_, mem_, step, op, op.chunk, w.offset, w.count, graph, deps, mine,
                                             capture);
    if (!failure.empty()) {
      (void)cudaGetLastError();
      throw graph_build_error("chunkpipe: stage " + std::to_string(op.stage) +
                                  " cannot be captured into a CUDA graph: " + failure +
                                  ". Under Executor::graphs a stage may only launch work on ctx.stream (no "
                                  "synchronisation, no other stream, no allocation outside a stream-ordered pool); "
                                  "use Executor::streams for this pipeline",
                              true);
    }
  }

  // The graph's edges as CUDA holds them, between ops.
  // `table`: the copy kernels' table node (or null), which belongs to no op;
  // every other node must be an op's. A graph with a table must have it as
  // its only root, or a copy kernel could read the table before it is
  // written: that is checked here too (std::logic_error), since the edges
  // returned leave the table node out.
  static PlanGraph read_back(cudaGraph_t graph, std::size_t ops,
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

  std::tuple<Stages...>* stages_;
  std::shared_ptr<EventPool> pool_;
  Policy policy_ = Policy::serial;
  int depth_ = 1;
  PlanShape shape_;
  std::size_t unit_ = 1;
  SlotMemory mem_;
  std::shared_ptr<MemoryResource> table_memory_;  // range tables' (null: cudaMallocAsync)
  Stream launch_;   // graph launches, in order
  Stream capture_;  // a ChunkFn's launches captured into graphs; never runs work
  std::vector<Event> joins_;
  std::map<Key, Entry> cache_;
  std::uint64_t clock_ = 0;
  std::vector<Copy> copies_;
  bool logging_ = false;
  IssuedGraph issued_;
};

}  // namespace chunkpipe::detail
