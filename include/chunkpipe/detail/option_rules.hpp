// SPDX-License-Identifier: MIT
// Part of options.hpp, which includes it after the types it uses (Options,
// Geometry, Executor): the rules the engine applies to a pipeline's
// Options. validate_options, the geometry a window resolves to
// (resolve_geometry, with_kernel_lanes), the executor a run gets
// (choose_executor, graph_refusal; only the Dispatcher calls them) and the
// staging threads a run uses (host_threads_for). Their non-template code
// is in detail/options.inl. Not API; do not include directly.
#pragma once

#include <chunkpipe/detail/linkage.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace chunkpipe {
namespace detail {

/// Staging threads per direction for `o`: Options::host_threads, or
/// default_host_threads() where it is 0. Never blocks or throws.
inline int host_threads_for(const Options& o) noexcept {
  return o.host_threads > 0 ? o.host_threads : ::chunkpipe::default_host_threads();
}

/// Why a run cannot be a graph, or nullptr if it can.
inline const char* graph_refusal(const Options& o, bool staged) noexcept {
  if (o.profile) return "profiling times each op with CUDA events on streams";
  if (o.staging == Staging::direct) return "Staging::direct measures plain cudaMemcpyAsync calls, op by op";
  if (staged) {
    return "the run ends on host threads (it stages pageable memory, uses a Source or Sink, or its last stage "
           "emits a count only the device knows), work a graph would have to wait for in host nodes (tens of us each)";
  }
  return nullptr;
}

/// The executor a run uses (Options::executor): `chunks` of the geometry's
/// unit, `staged` if any side goes through host threads, `seen` runs of
/// this shape before it. For a run that asked for graphs and cannot have
/// them, `note` says why.
Executor choose_executor(const Options& o, const Geometry& g, bool all_elementwise, std::size_t chunks, bool staged,
                         int seen, std::string* note = nullptr);

/// Most entries Options::devices may list.
inline constexpr std::size_t max_spread_devices = 64;

/// Throws config_error naming the first bad field.
void validate_options(const Options& o);

/// `n` rounded up to a multiple of `m`.
inline std::size_t align_segments(std::size_t n, std::size_t m) noexcept { return (n + m - 1) / m * m; }

/// Most slots a grain split may create; each costs an event and bookkeeping.
inline constexpr std::size_t max_slots = 4096;

/// Where a pipeline runs: the GPU's automatic policy may also coarsen a
/// small window (Options::memory_elems); the host backend keeps it, since
/// it exists to run the schedules a window implies.
enum class Target : std::uint8_t { device, host };

/// `g` with the kernel lanes `o` asks for: stage_streams only, and never
/// more than the slots (a lane beyond them would never get a chunk).
inline Geometry with_kernel_lanes(Geometry g, const Options& o) noexcept {
  const int lanes = o.kernel_lanes != 0 ? o.kernel_lanes : default_kernel_lanes;
  g.kernel_lanes = g.policy == Policy::stage_streams ? std::max(1, std::min(lanes, g.depth)) : 1;
  return g;
}

/// The geometry `o` resolves to for a pipeline whose stages cannot see
/// chunk boundaries (`all_elementwise`: Map stages, and a Reduce at the
/// end) or not. Every unit is a multiple of `unit_multiple` (a Reduce's
/// segment). Throws config_error for a grain that would need more than
/// max_slots slots, and for a window, or an explicit grain, that is not a
/// multiple of `unit_multiple`.
Geometry resolve_geometry(const Options& o, bool all_elementwise, Target target, std::size_t unit_multiple = 1);

}  // namespace detail
}  // namespace chunkpipe
