// SPDX-License-Identifier: MIT
// Definitions for options.hpp and detail/option_rules.hpp. Included at
// the bottom of options.hpp where chunkpipe is header-only, or once by
// <chunkpipe/compiled.hpp> (detail/linkage.hpp); do not include directly.
#pragma once

namespace chunkpipe::detail {

CHUNKPIPE_INLINE Executor choose_executor(const Options& o, const Geometry& g, bool all_elementwise, std::size_t chunks,
                                          bool staged, int seen, std::string* note) {
  if (o.executor == Executor::streams) return Executor::streams;
  const char* refusal = graph_refusal(o, staged);
  if (o.executor == Executor::graphs) {
    if (!refusal) return Executor::graphs;
    if (note) *note = refusal;
    return Executor::streams;
  }
  // Automatic: only where graphs measured faster (many small chunks, a
  // repeated shape), and only for Map stages, which a graph replays
  // exactly. A ChunkFn runs when its graph is built, not on every run, so
  // it gets graphs only when asked for.
  const bool small = g.policy == Policy::stage_streams ? g.chunk_elems <= stage_graph_max_elems
                                                       : g.chunk_elems < small_window_elems;
  const bool pays = all_elementwise && small && chunks >= graph_min_chunks && seen >= graph_after_runs;
  return !refusal && pays ? Executor::graphs : Executor::streams;
}

CHUNKPIPE_INLINE void validate_options(const Options& o) {
  if (o.chunk_elems == 0) throw config_error("chunkpipe: chunk_elems must be at least 1 (got 0)");
  if (o.depth < 1) throw config_error("chunkpipe: depth must be at least 1 (got " + std::to_string(o.depth) + ")");
  if (o.host_threads < 0 || o.host_threads > 256) {
    throw config_error("chunkpipe: host_threads must be 0 (default) to 256 (got " + std::to_string(o.host_threads) + ")");
  }
  if (o.device < -1) throw config_error("chunkpipe: device must be -1 or a device ordinal (got " +
                                        std::to_string(o.device) + ")");
  if (o.devices.size() > max_spread_devices) {
    throw config_error("chunkpipe: devices lists " + std::to_string(o.devices.size()) + " entries; at most " +
                       std::to_string(max_spread_devices));
  }
  for (std::size_t i = 0; i < o.devices.size(); ++i) {
    if (o.devices[i] < 0) {
      throw config_error("chunkpipe: devices[" + std::to_string(i) + "] must be a device ordinal (got " +
                         std::to_string(o.devices[i]) + ")");
    }
  }
  if (o.kernel_lanes < 0 || o.kernel_lanes > max_kernel_lanes) {
    throw config_error("chunkpipe: kernel_lanes must be 0 (the policy chooses) to " +
                       std::to_string(max_kernel_lanes) + " (got " + std::to_string(o.kernel_lanes) + ")");
  }
  if (o.kernel_lanes > 1 && (o.policy == Policy::serial || o.policy == Policy::slot_streams)) {
    throw config_error("chunkpipe: kernel_lanes " + std::to_string(o.kernel_lanes) + " is for stage_streams (or "
                       "the automatic policy); " + std::string(to_string(o.policy)) +
                       " runs each slot's kernels on that slot's own stream");
  }
}

CHUNKPIPE_INLINE Geometry resolve_geometry(const Options& o, bool all_elementwise, Target target,
                                           std::size_t unit_multiple) {
  const Resolved r = resolve(o.policy, o.depth);
  Geometry g{r.policy, r.depth, o.chunk_elems};
  const std::size_t m = unit_multiple == 0 ? 1 : unit_multiple;
  if (o.chunk_elems % m != 0 || o.grain_elems % m != 0) {
    const bool window = o.chunk_elems % m != 0;
    throw config_error(std::string("chunkpipe: a Reduce or a Scan works in segments of ") + std::to_string(m) +
                       " elements, and chunks must hold whole segments; " + (window ? "chunk_elems" : "grain_elems") +
                       " (" + std::to_string(window ? o.chunk_elems : o.grain_elems) +
                       ") is not a multiple of it (give reduce() or scan() a segment that divides it)");
  }
  std::size_t grain = o.grain_elems;
  const bool chosen = grain == 0 && o.policy == Policy::automatic;  // ours to adjust
  if (chosen) grain = std::max(m, default_grain_elems / m * m);
  if (chosen && all_elementwise && target == Target::device && o.chunk_elems < grain) {
    // Coarser units in the same ring: per-chunk costs (the host's calls,
    // each copy's fixed cost) are what bound a small window on the GPU, and
    // no Map stage can tell. At 512 FMAs a 4 MiB window in 4 MiB units came
    // further from the floor than the default window (benchmarks/RESULTS.md,
    // "Kernel lanes").
    const std::size_t budget = o.memory_elems != 0 ? o.memory_elems : default_chunk_elems * default_depth;
    const std::size_t unit = std::min(grain, budget / static_cast<std::size_t>(r.depth)) / m * m;
    if (unit > o.chunk_elems) g.chunk_elems = unit;
    return with_kernel_lanes(g, o);
  }
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
    // Whole segments per grain; rounding up may leave the last grain of
    // a window short, which costs a little memory, never correctness.
    g.chunk_elems = align_segments((o.chunk_elems + pieces - 1) / pieces, m);
    if (m > 1) pieces = (o.chunk_elems + g.chunk_elems - 1) / g.chunk_elems;
    g.depth = r.depth * static_cast<int>(pieces);
  }
  return with_kernel_lanes(g, o);
}

}  // namespace chunkpipe::detail
