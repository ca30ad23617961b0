// SPDX-License-Identifier: MIT
// What the pieces of one counted spread run (Filter, Emit; detail/spread.hpp)
// emitted, as each piece's last chunk packs, in whatever order the members
// get there; and so where each piece's output starts in the run's: known
// for piece p once every piece before it is counted. A piece that asks
// while it is known packs straight into the run's outputs (PackedPlace,
// endpoints.hpp); one that asks earlier packs into its own buffer, which
// the spread copies over when it delivers. Host-only; tested on the CPU.
#pragma once

#include <chunkpipe/detail/endpoints.hpp>  // PackedPlace::unknown

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <vector>

namespace chunkpipe {
namespace detail {

/// The counts of one run's pieces, and the offset where the first piece
/// not yet counted starts. Thread-safe.
class PieceCounts {
 public:
  /// `bound`: most pieces out at once (PieceBook's bound): pieces counted
  /// ahead of the first uncounted one are at most that many past it.
  explicit PieceCounts(std::size_t bound) : ahead_(std::max<std::size_t>(bound, 1), 0) {}

  /// Where piece p's output starts in the run's, or PackedPlace::unknown
  /// while a piece before it is not counted. Never blocks beyond the lock.
  std::size_t base_of(std::size_t p) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return p == next_ ? base_ : PackedPlace::unknown;
  }

  /// Piece p emitted `emitted` elements in all. A piece counted twice, or
  /// further ahead than the bound, is ignored (the spread then copies every
  /// piece after it from its buffer, as it does without counts).
  void counted(std::size_t p, std::size_t emitted) noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    if (p < next_ || p - next_ >= ahead_.size()) return;
    ahead_[p % ahead_.size()] = emitted + 1;  // 0: not counted
    while (ahead_[next_ % ahead_.size()] != 0) {
      base_ += ahead_[next_ % ahead_.size()] - 1;
      ahead_[next_ % ahead_.size()] = 0;
      ++next_;
    }
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::size_t> ahead_;  // [piece % bound]: its count + 1, for pieces counted past next_
  std::size_t next_ = 0;            // the first piece not counted
  std::size_t base_ = 0;            // what the pieces before next_ emitted
};

}  // namespace detail
}  // namespace chunkpipe
