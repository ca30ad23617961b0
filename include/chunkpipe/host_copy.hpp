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

  /// The fewest threads whose rate is within `slack` of the best measured
  /// (more threads than that only take turns at the host's memory); 1 where
  /// nothing was measured. Never blocks or throws.
  int team(double slack = 0.05) const noexcept;
  /// The best rate measured (GB/s); 0 where nothing was measured.
  double best_gbps() const noexcept;
};

/// Measures memcpy from one ordinary host buffer of `bytes` into another
/// (both written first, so no page fault is timed) by teams of 1, 2, 4, 8,
/// ... threads up to `max_threads` (0: the hardware's threads; the largest
/// is always measured), each team taking the best of three copies, every
/// copy split over the team as a staging copy is (64-byte-aligned shares,
/// one a thread). Blocks for that: about 0.1 to 0.3 s at the default size
/// on the test machines. Throws config_error for `bytes` of 0 or
/// `max_threads` below 0, std::bad_alloc where the buffers cannot be had
/// and std::system_error where a thread cannot start.
HostCopyRates measure_host_copy(std::size_t bytes = std::size_t{64} << 20, int max_threads = 0);

}  // namespace chunkpipe

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/host_copy.inl>
#endif
