// SPDX-License-Identifier: MIT
/// \file
/// What the host's memory gives a team of threads that copy, measured the
/// way measure.cuh measures the link: how many threads stage pageable
/// memory before more only take turns at the memory. A spread's members
/// share one team per process sized by this (Options::host_threads).
/// Host-only.
///
/// \code
/// const chunkpipe::HostCopyRates r = chunkpipe::measure_host_copy();
/// std::printf("%d threads copy %.1f GB/s\n", r.team(), r.best_gbps());
/// \endcode
#pragma once

#include <chunkpipe/detail/linkage.hpp>

#include <cstddef>
#include <vector>

namespace chunkpipe {

/// One team size and what it copied (measure_host_copy()).
struct HostCopyRate {
  int threads = 0;    ///< threads that shared each copy, the caller's included
  double gbps = 0.0;  ///< bytes copied per second, 1e9 a GB
};

/// What measure_host_copy() found: one rate per team size, fewest threads
/// first.
struct HostCopyRates {
  std::vector<HostCopyRate> rates;

  /// The fewest threads whose rate is within `slack` (a share of the best,
  /// taken between 0 and 1) of the best measured: more threads than that
  /// only take turns at the host's memory. 1 where nothing was measured.
  /// Never blocks or throws.
  int team(double slack = 0.05) const noexcept;
  /// The best rate measured (GB/s); 0 where nothing was measured.
  double best_gbps() const noexcept;
};

/// Most threads measure_host_copy() measures when asked for the hardware's
/// (max_threads 0).
inline constexpr int default_max_copy_threads = 64;
/// Most threads measure_host_copy() takes at all.
inline constexpr int max_measured_copy_threads = 1024;

/// Measures memcpy from one ordinary host buffer of `bytes` into another
/// (both written first, so no page fault is timed) by teams of 1, 2, 4, 8,
/// ... threads up to `max_threads` (0: the hardware's threads, at most
/// default_max_copy_threads; the largest is always measured), each copy
/// split over the team as a staging copy is: in 8 MiB pieces, each in
/// 64-byte-aligned shares, one a thread (a piece under 1 MiB is not split,
/// so measure with tens of MiB or more). A team's rate is the median of
/// three rounds of at least 8 ms each. The default size, two buffers of
/// 128 MiB, is larger than most hosts' last-level cache, so that the rate
/// is the memory's. Blocks for that: about 0.2 to 0.5 s at the default
/// size. Throws config_error for `bytes` of 0 or `max_threads` below 0 or
/// above max_measured_copy_threads, std::bad_alloc where the buffers
/// cannot be had and std::system_error where a thread cannot start.
HostCopyRates measure_host_copy(std::size_t bytes = std::size_t{128} << 20, int max_threads = 0);

}  // namespace chunkpipe

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/host_copy.inl>
#endif
