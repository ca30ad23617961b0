// SPDX-License-Identifier: MIT
// Pipeline options, shared by the GPU pipeline and the host backend.
// Host-only C++, no CUDA.
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/plan.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>

namespace chunkpipe {

/// Elements per chunk when the caller does not say: 8 MiB of float.
inline constexpr std::size_t default_chunk_elems = std::size_t{1} << 21;

/// Elements per grain when the automatic policy splits a window (below).
inline constexpr std::size_t default_grain_elems = std::size_t{1} << 21;

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
  /// every slot buffer. Must be at least 1.
  std::size_t chunk_elems = default_chunk_elems;
  /// Slots in the ring: how many chunks can be in flight. Must be at least 1;
  /// serial always uses one.
  int depth = default_depth;
  /// Which schedule to build (plan.hpp).
  Policy policy = Policy::automatic;
  /// Scheduling grain for pipelines whose stages are all Map. Element-wise
  /// work cannot see chunk boundaries, so the window's memory (depth x
  /// chunk_elems) can be cycled in finer grains: the first copy-in and the
  /// last copy-out, which nothing overlaps, shrink with the grain. 0 lets
  /// the automatic policy choose (default_grain_elems) and leaves explicit
  /// policies at the window; a value applies to stage_streams (and auto),
  /// whose stream count does not grow with the number of slots.
  std::size_t grain_elems = 0;
  /// CUDA device ordinal; -1 uses the device current when the pipeline is built.
  int device = -1;
  /// Time every operation with CUDA events so report() can draw the run.
  /// Adds two event records per operation and changes no dependency.
  bool profile = false;
  /// How pageable ranges cross (see Staging).
  Staging staging = Staging::automatic;
  /// Threads that share each staging copy (per direction); 0 picks
  /// default_host_threads(). One thread's memcpy is far slower than a PCIe
  /// Gen5 link, so staging at link speed takes several.
  int host_threads = 0;
  /// Keep every op as the executor issued it (its real waits and events),
  /// for check_hazards(pipe.issued_plan()). For tests: the record grows
  /// with every op of every run.
  bool record_issued = false;
};

/// Staging threads per direction that a machine with enough cores gets by
/// default. On the H200 machine (16 cores) 8 staged 1 GiB each way 3.7x
/// faster than a plain pageable cudaMemcpyAsync; 4 gave 3.2x, 12 no more
/// than 8 (benchmarks/RESULTS.md).
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
  Policy policy;
  int depth;                 ///< slots of `chunk_elems` each
  std::size_t chunk_elems;   ///< scheduling unit
};

namespace detail {

/// Throws config_error naming the first bad field.
inline void validate_options(const Options& o) {
  if (o.chunk_elems == 0) throw config_error("chunkpipe: chunk_elems must be at least 1 (got 0)");
  if (o.depth < 1) throw config_error("chunkpipe: depth must be at least 1 (got " + std::to_string(o.depth) + ")");
  if (o.host_threads < 0 || o.host_threads > 256) {
    throw config_error("chunkpipe: host_threads must be 0 (default) to 256 (got " + std::to_string(o.host_threads) + ")");
  }
  if (o.device < -1) throw config_error("chunkpipe: device must be -1 or a device ordinal (got " +
                                        std::to_string(o.device) + ")");
}

/// Most slots a grain split may create; each costs an event and bookkeeping.
inline constexpr std::size_t max_slots = 4096;

inline Geometry resolve_geometry(const Options& o, bool all_elementwise) {
  const Resolved r = resolve(o.policy, o.depth);
  Geometry g{r.policy, r.depth, o.chunk_elems};
  std::size_t grain = o.grain_elems;
  const bool chosen = grain == 0 && o.policy == Policy::automatic;  // ours to adjust
  if (chosen) grain = default_grain_elems;
  if (all_elementwise && r.policy == Policy::stage_streams && grain != 0 && grain < o.chunk_elems) {
    // Same memory, finer steps: p grains per window, depth x p slots.
    std::size_t pieces = (o.chunk_elems + grain - 1) / grain;
    const std::size_t most = std::max<std::size_t>(1, max_slots / static_cast<std::size_t>(r.depth));
    if (pieces > most) {
      if (!chosen) {
        throw config_error("chunkpipe: grain_elems " + std::to_string(grain) + " cuts a window of " +
                           std::to_string(o.chunk_elems) + " elements into " + std::to_string(pieces) +
                           " grains; depth x grains may be at most " + std::to_string(max_slots));
      }
      pieces = most;  // a huge window: coarser grains rather than too many slots
    }
    g.chunk_elems = (o.chunk_elems + pieces - 1) / pieces;
    g.depth = r.depth * static_cast<int>(pieces);
  }
  return g;
}

}  // namespace detail
}  // namespace chunkpipe
