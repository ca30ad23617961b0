// SPDX-License-Identifier: MIT
/// \file
/// Pipeline options, shared by the GPU pipeline and the host backend.
/// Host-only C++, no CUDA.
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/memory_resource.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/detail/linkage.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include <thread>

namespace chunkpipe {

/// Elements per chunk when the caller does not say: 8 MiB of float.
inline constexpr std::size_t default_chunk_elems = std::size_t{1} << 21;

/// Elements per grain when the automatic policy splits a window (below).
inline constexpr std::size_t default_grain_elems = std::size_t{1} << 21;

/// Windows below this many elements (2 MiB of float) are host-bound on the
/// GPU: issuing a chunk's CUDA calls takes about the same host time at any
/// size while the link's time shrinks with the chunk, and below this size
/// the issuing thread, not the link, sets the pace (benchmarks/RESULTS.md,
/// "A pipeline as a stream of runs"). See Options::memory_elems.
inline constexpr std::size_t small_window_elems = std::size_t{1} << 19;

/// How pageable host memory (a std::vector, say) crosses to the GPU. Pinned
/// or device memory is always copied directly; sources and sinks always
/// work in the pipeline's pinned slots.
enum class Staging : std::uint8_t {
  /// `threads`: the choice that is fast on every run without touching the
  /// caller's memory. (Registering pays only on repeated runs over one
  /// buffer and pins it beyond the call, so it is never picked silently.)
  automatic,
  /// Host worker threads copy each chunk into a pinned slot (and out of one
  /// after D2H) while the GPU works on other chunks: host_in/host_out ops.
  threads,
  /// cudaHostRegister the range in place on first use and copy directly.
  /// Costs tens to hundreds of ms per GiB once; the registration is cached
  /// by the pipeline (so repeated runs over the same buffer pay nothing)
  /// until release_registrations() or the pipeline's destruction. The
  /// range must stay allocated until then.
  registered,
  /// Plain cudaMemcpyAsync from pageable memory: the runtime stages it
  /// through its own small pinned buffer, synchronously, at a fraction of
  /// the link's speed. Only for measuring what the other modes save.
  direct,
};

/// How a pipeline runs. Aggregate, so `{.chunk_elems = 4 << 20, .depth = 3}`
/// works where designated initialisers do.
struct Options {
  /// The window: the most elements one stage sees at once, and what sizes
  /// every slot buffer unless the pipeline schedules another unit
  /// (grain_elems, memory_elems; geometry() says). Must be at least 1.
  std::size_t chunk_elems = default_chunk_elems;
  /// Slots in the ring: how many chunks can be in flight. Must be at least 1;
  /// serial always uses one.
  int depth = default_depth;
  /// Which schedule to build (plan.hpp).
  Policy policy = Policy::automatic;
  /// Scheduling grain for pipelines whose stages are all Map (or Map stages
  /// ending in a Reduce or a Filter, which cannot see chunks either). Element-wise
  /// work cannot see chunk boundaries, so the window's memory (depth x
  /// chunk_elems) can be cycled in finer grains: the first copy-in and the
  /// last copy-out, which nothing overlaps, shrink with the grain. 0 lets
  /// the automatic policy choose (default_grain_elems) and leaves explicit
  /// policies at the window; a value applies to stage_streams (and auto),
  /// whose stream count does not grow with the number of slots.
  std::size_t grain_elems = 0;
  /// Device memory the automatic policy may give a Map-only pipeline (or
  /// one ending in a Reduce or a Filter) on the
  /// GPU, in elements per slot buffer (slots x unit). A window smaller than
  /// default_grain_elems pays for its chunks there: below small_window_elems
  /// the host's CUDA calls set the pace (at 64 KiB, issuing a chunk takes
  /// several times as long as moving it), and above it each copy's fixed
  /// cost still does (benchmarks/RESULTS.md, "A pipeline as a stream of
  /// runs" and "What the sweep shows"). Element-wise work
  /// cannot see chunk boundaries, so such a window is scheduled in units of
  /// up to default_grain_elems within this budget.
  /// 0: what the default window uses (default_depth x default_chunk_elems);
  /// set it to bound memory. Explicit policies, a grain_elems, a ChunkFn
  /// stage and the host backend keep the window.
  std::size_t memory_elems = 0;
  /// What issues the runs (plan.hpp): CUDA streams, CUDA graphs, or a
  /// choice per run. The host backend ignores it.
  Executor executor = Executor::automatic;
  /// CUDA device ordinal; -1 uses the device current when the pipeline is built.
  int device = -1;
  /// Time every operation with CUDA events so report() can draw the run.
  /// Adds two event records per operation and changes no dependency.
  bool profile = false;
  /// How pageable ranges cross (see Staging).
  Staging staging = Staging::automatic;
  /// Threads that share each staging copy (per direction); 0 picks
  /// default_host_threads(). One thread's memcpy is far slower than a PCIe
  /// Gen5 link, so staging at link speed takes several. A spread's members
  /// share one team of twice this many, whatever their count; where this
  /// is 0, every spread of the process shares one team, sized by measuring
  /// the host's memcpy (measure_host_copy(), host_copy.hpp) the first time
  /// one stages or delivers (Spread::copy_threads()).
  int host_threads = 0;
  /// Keep every op as the executor issued it (its real waits and events),
  /// for check_hazards(pipe.issued_plan()). For tests: the record grows
  /// with every op of every run.
  bool record_issued = false;
  /// Let back-to-back small runs share copies on the GPU. A run over pinned
  /// or device memory, shorter than the scheduling unit, queued while the
  /// run before it is still on the GPU, and whose every range continues
  /// where that run's ended (consecutive slices of the same arrays), is
  /// held and issued together with it and the runs after it, up to a unit:
  /// each copy has a fixed cost besides its bytes, large next to a small
  /// copy's, so small runs issued one by one leave much of the link idle
  /// (benchmarks/RESULTS.md, "A pipeline as a stream of runs", runs 4 and 5).
  /// Only for pipelines of Map stages, which cannot see chunk boundaries;
  /// never for runs with after(...), with profile on, or under
  /// Executor::graphs. A held run is issued when the chunk is full, when
  /// the GPU has finished the work queued before it, when a run that does
  /// not continue it is queued, or when anything waits for it (wait(),
  /// enqueue_wait(), executor()); each keeps its own ticket, and if their
  /// shared issue fails, each fails with that error. Runs join on their
  /// addresses alone: two pinned allocations that happen to lie next to each
  /// other are copied as one range, which CUDA may then treat as pageable
  /// memory (correct, but slower and synchronous); turn this off for such
  /// buffers. false: every run is issued as it comes. The host backend
  /// ignores it.
  bool coalesce = true;
  /// stage_streams (and the automatic policy): streams each stage's
  /// kernels take turns on, chunk by chunk (PlanShape::kernel_lanes), so a
  /// compute-bound stage's kernels of consecutive chunks overlap. 0 lets
  /// the policy choose: runs start with default_kernel_lanes, and a GPU
  /// pipeline of Map stages under the automatic policy (resolving to
  /// stage_streams at depth 2 or more, executor not graphs) times its first
  /// chunks and moves to 2 lanes from a later run on if the simulator
  /// predicts that faster (ChunkedPipeline::decision(), tune()); runs the
  /// automatic executor gives a graph keep the geometry's lanes.
  /// At most max_kernel_lanes, and never more than the slots. serial and
  /// slot_streams take only 0 or 1 (their kernels already run on one
  /// stream per slot).
  int kernel_lanes = 0;
  /// Devices to spread runs over: a SpreadPipeline (HostSpreadPipeline on
  /// the host backend, where they are virtual devices) builds one member
  /// pipeline per entry, with that entry as its `device`; an entry may
  /// repeat (each member has its own slots, streams and host threads).
  /// ChunkedPipeline and HostPipeline take at most one entry, which then
  /// names the device as `device` does. Empty: `device` alone.
  std::vector<int> devices{};
  /// Where the device slots come from (memory_resource.hpp): the device
  /// arena every run's chunks pass through, a graph's range tables, and on
  /// the host backend the host memory that stands for them. Null: cudaMalloc
  /// (ordinary host memory on the host backend). It must give memory of the
  /// pipeline's device or managed memory (a GPU run refuses other memory
  /// with config_error). It is asked when the slots are laid out (the first
  /// run, and a run whose element types differ, after the pipeline's own
  /// work on the old slots has drained) and for each CUDA graph the
  /// pipeline builds, and every byte goes back by the pipeline's
  /// destruction. With a resource the pipeline does not compare the slots
  /// with cudaMemGetInfo's free memory first: the resource says whether it
  /// has them. A resource that throws makes the run throw pipeline_error
  /// naming what was being allocated, the resource's exception nested; the
  /// pipeline stays usable, and its next run asks again. Members of a
  /// spread share it.
  std::shared_ptr<MemoryResource> device_memory{};
  /// Where the pinned (page-locked) host memory comes from: the pinned
  /// slots staged runs copy through, the records a Reduce or Accumulate run
  /// folds (which live as long as its result ticket), and a spread's piece
  /// buffers. Null: cudaMallocHost (ordinary host memory on the host
  /// backend). It must give page-locked memory (cudaMallocHost,
  /// cudaHostAlloc, cudaHostRegister) or managed memory (a GPU run refuses
  /// other memory with config_error); otherwise as device_memory.
  std::shared_ptr<MemoryResource> pinned_memory{};
};

/// Staging threads per direction that a machine with enough cores gets by
/// default: on the 16-core test machine 8 staged several times faster than
/// a plain pageable cudaMemcpyAsync, 4 were slower than 8, and 12 gained
/// little or nothing over 8 (benchmarks/RESULTS.md, "Pageable memory
/// (benchmarks/staging_bench)").
inline constexpr int preferred_host_threads = 8;

/// Staging threads per direction when Options::host_threads is 0:
/// preferred_host_threads, but no more than the machine's hardware threads
/// (more threads than cores only take turns).
inline int default_host_threads() noexcept {
  const unsigned hw = std::thread::hardware_concurrency();
  return hw == 0 ? preferred_host_threads : std::min(preferred_host_threads, static_cast<int>(hw));
}

/// The geometry runs actually use: the resolved policy, the unit chunks are
/// scheduled in (the window, or a grain of it) and how many slots of that
/// unit the window's memory holds. See Options::grain_elems.
struct Geometry {
  Policy policy;             ///< the schedule runs follow (resolved: never automatic)
  int depth;                 ///< slots of `chunk_elems` each
  std::size_t chunk_elems;   ///< scheduling unit
  int kernel_lanes = 1;      ///< streams per stage that runs start with (stage_streams; 1 otherwise)
};

/// Kernel lanes the automatic choice (Options::kernel_lanes 0) gives stage_streams.
inline constexpr int default_kernel_lanes = 1;
/// Most kernel lanes Options::kernel_lanes may ask for.
inline constexpr int max_kernel_lanes = 8;

/// Fewest chunks a run needs before the automatic executor gives it a
/// graph. A graph run starts after everything before it and ends before
/// anything after it starts, so its first copy in and last copy out overlap
/// nothing; over a short run that costs more than the per-op calls it saves.
inline constexpr std::size_t graph_min_chunks = 64;

/// Largest unit (elements, of float) at which the automatic executor gives
/// a stage_streams run a graph: 256 KiB, the largest whose copies the graph
/// executor makes kernels. With copy nodes (1 and 4 MiB units) a
/// stage_streams graph replayed slower than the same runs on streams, and
/// so did CUDA's own capture of that schedule
/// (benchmarks/probes/graph_edges.cu); slot_streams and serial graphs were
/// as fast or faster up to small_window_elems (benchmarks/RESULTS.md,
/// "CUDA graphs", run 4).
inline constexpr std::size_t stage_graph_max_elems = std::size_t{1} << 16;

/// Runs of one shape (element count) the automatic executor issues on
/// streams before it builds that shape's graph: building costs about as
/// much host time as issuing the run a few times over, so only a shape
/// that repeats earns it back.
inline constexpr int graph_after_runs = 2;

}  // namespace chunkpipe

// The rules the engine applies to Options (validation, the geometry a
// window resolves to, the executor a run gets): machinery, not API.
#include <chunkpipe/detail/option_rules.hpp>

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/options.inl>
#endif
