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
  if (!(slack >= 0.0)) slack = 0.0;  // NaN too
  if (slack > 1.0) slack = 1.0;
  const double enough = best_gbps() * (1.0 - slack);
  int fewest = 0;
  for (const HostCopyRate& r : rates) {
    if (r.gbps >= enough && r.threads > 0 && (fewest == 0 || r.threads < fewest)) fewest = r.threads;
  }
  return fewest == 0 ? 1 : fewest;
}

CHUNKPIPE_INLINE double HostCopyRates::best_gbps() const noexcept {
  double best = 0.0;
  for (const HostCopyRate& r : rates) best = std::max(best, r.gbps);
  return best;
}

CHUNKPIPE_INLINE HostCopyRates measure_host_copy(std::size_t bytes, int max_threads) {
  if (bytes == 0) throw config_error("chunkpipe: measure_host_copy needs bytes above 0");
  if (max_threads < 0 || max_threads > max_measured_copy_threads) {
    throw config_error("chunkpipe: measure_host_copy takes max_threads from 0 (the hardware's) to " +
                       std::to_string(max_measured_copy_threads) + ", got " + std::to_string(max_threads));
  }
  if (max_threads == 0) {
    max_threads = std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, default_max_copy_threads);
  }
  std::unique_ptr<unsigned char[]> src(new unsigned char[bytes]), dst(new unsigned char[bytes]);
  // Not zeros: a page of zeros may be the kernel's shared zero page. (One
  // memset each, not a loop: under a sanitizer a loop of stores is slow.)
  std::memset(src.get(), 0x5A, bytes);
  std::memset(dst.get(), 0xA5, bytes);
  // In the pieces a staging copy takes (a chunk of the default unit), each
  // split over the team: the team's hand-over per piece is part of the cost.
  constexpr std::size_t piece = std::size_t{8} << 20;
  // Each round copies the buffer over and over for at least this long, so
  // that a round is not one lucky millisecond; a team's rate is the median
  // of its rounds.
  constexpr auto round_time = std::chrono::milliseconds(8);
  constexpr int rounds = 3;
  std::vector<int> sizes;
  for (int n = 1; n < max_threads; n *= 2) sizes.push_back(n);
  sizes.push_back(max_threads);
  HostCopyRates out;
  for (int n : sizes) {
    detail::CopyTeam team(n);
    std::vector<double> gbps;
    for (int round = 0; round < rounds; ++round) {
      const auto t0 = std::chrono::steady_clock::now();
      std::size_t copied = 0;
      auto t1 = t0;
      do {
        for (std::size_t at = 0; at < bytes; at += piece) {
          team.copy({detail::Copy{dst.get() + at, src.get() + at, std::min(piece, bytes - at)}});
        }
        copied += bytes;
        t1 = std::chrono::steady_clock::now();
      } while (t1 - t0 < round_time);
      const double s = std::chrono::duration<double>(t1 - t0).count();
      gbps.push_back(s > 0 ? static_cast<double>(copied) / s / 1e9 : 0.0);
    }
    std::sort(gbps.begin(), gbps.end());
    out.rates.push_back(HostCopyRate{n, gbps[gbps.size() / 2]});
  }
  return out;
}

}  // namespace chunkpipe
