// SPDX-License-Identifier: MIT
// Definitions for host_copy.hpp. Included at its bottom where chunkpipe is
// header-only, or once by <chunkpipe/compiled.hpp> (detail/linkage.hpp);
// do not include directly.
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/detail/copy_team.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

namespace chunkpipe {

CHUNKPIPE_INLINE int HostCopyRates::team(double slack) const noexcept {
  const double enough = best_gbps() * (1.0 - slack);
  for (const HostCopyRate& r : rates) {
    if (r.gbps >= enough) return std::max(r.threads, 1);
  }
  return 1;
}

CHUNKPIPE_INLINE double HostCopyRates::best_gbps() const noexcept {
  double best = 0.0;
  for (const HostCopyRate& r : rates) best = std::max(best, r.gbps);
  return best;
}

CHUNKPIPE_INLINE HostCopyRates measure_host_copy(std::size_t bytes, int max_threads) {
  if (bytes == 0) throw config_error("chunkpipe: measure_host_copy needs bytes above 0");
  if (max_threads < 0) {
    throw config_error("chunkpipe: measure_host_copy takes max_threads of 0 (the hardware's) or more, got " +
                       std::to_string(max_threads));
  }
  if (max_threads == 0) max_threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::unique_ptr<unsigned char[]> src(new unsigned char[bytes]), dst(new unsigned char[bytes]);
  // Not zeros: a page of zeros may be the kernel's shared zero page.
  for (std::size_t i = 0; i < bytes; ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
  std::memset(dst.get(), 0xA5, bytes);
  // In the pieces a staging copy takes (a chunk of the default unit), each
  // split over the team: the team's hand-over per piece is part of the cost.
  constexpr std::size_t piece = std::size_t{8} << 20;
  std::vector<int> sizes;
  for (int n = 1; n < max_threads; n *= 2) sizes.push_back(n);
  sizes.push_back(max_threads);
  HostCopyRates out;
  for (int n : sizes) {
    detail::CopyTeam team(n);
    double best = 0.0;
    for (int round = 0; round < 3; ++round) {
      const auto t0 = std::chrono::steady_clock::now();
      for (std::size_t at = 0; at < bytes; at += piece) {
        team.copy({detail::Copy{dst.get() + at, src.get() + at, std::min(piece, bytes - at)}});
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (s > 0) best = std::max(best, static_cast<double>(bytes) / s / 1e9);
    }
    out.rates.push_back(HostCopyRate{n, best});
  }
  return out;
}

}  // namespace chunkpipe
