// SPDX-License-Identifier: MIT
// Where one spread run's pieces lie (detail/spread_run.inl): their size in
// elements, units and records, and which of the spread's kept buffers
// (PiecePools) each piece reads from and writes to. Host-only; tested on
// the CPU through the spread's tests.
//
// Why separate: taking, issuing and delivering a piece (SpreadEngine::Run,
// piece_sides.hpp, piece_delivery.hpp) all need the same arithmetic and
// the same slot rule (piece p uses slot p % bound, which piece p + bound
// takes only once p was delivered). Kept in one place, the rule cannot
// drift between the code that fills a slot and the code that empties it.
#pragma once

#include <chunkpipe/io.hpp>  // Memory
#include <chunkpipe/detail/copy_team.hpp>
#include <chunkpipe/detail/piece_pools.hpp>

#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>

namespace chunkpipe {
namespace detail {

/// One run's piece geometry and its view of the spread's piece buffers
/// (Buffer<unsigned char>: see PiecePools), those of a group lent to the
/// run alone when it first asks for a slot (a run of ranges that lands in
/// place never does). The numbers are fixed when the run is made; the
/// buffers are made or grown when first needed, under the pools' lock, so
/// any thread may ask for a slot.
template <template <class> class Buffer>
class PieceSlots {
 public:
  /// How the slots' memory is held (Buffer's `memory`), for the spans a
  /// member is given over them.
  static constexpr Memory memory = Buffer<unsigned char>::memory;

  /// `piece`: elements a piece holds (whole units); `unit`: a unit's
  /// elements (the members' chunk); `per`: input elements per output
  /// record, at least 1; `bound`: pieces taken and not yet delivered, at
  /// most; `outs`: output buffers a piece needs (an Emit's outputs).
  PieceSlots(PiecePools<Buffer>& pools, std::size_t piece, std::size_t unit, std::size_t per, std::size_t bound,
             std::size_t outs) noexcept
      : pools_(pools), piece_(piece), unit_(unit), per_(per), bound_(bound), outs_(outs) {}

  /// Gives the group of slots back to the pools (PiecePools::lend_group),
  /// for the next run: once every piece is delivered (nothing asks for a
  /// slot after). Never throws.
  void release() noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    group_.first.reset();
  }

  std::size_t piece() const noexcept { return piece_; }
  std::size_t unit() const noexcept { return unit_; }
  std::size_t per() const noexcept { return per_; }
  std::size_t bound() const noexcept { return bound_; }

  /// Output records of `elems` elements from a unit's start: elements
  /// themselves (per 1), or a Reduce's segments, or chunks.
  std::size_t records(std::size_t elems) const noexcept { return (elems + per_ - 1) / per_; }
  /// Units (the members' chunks) that `elems` elements take.
  std::size_t units(std::size_t elems) const noexcept { return (elems + unit_ - 1) / unit_; }

  /// Piece p's input buffer, a piece of T. Never blocks beyond the pools'
  /// lock; throws what Buffer throws (the slot is then unchanged).
  template <class T>
  T* input(std::size_t p) {
    return reinterpret_cast<T*>(pools_.input(group(), p % bound_, piece_ * sizeof(T)));
  }
  /// Output `o` of piece p, the records of a piece of T; as input().
  template <class T>
  T* output(std::size_t p, std::size_t o = 0) {
    return reinterpret_cast<T*>(pools_.output(group(), (p % bound_) * outs_ + o, records(piece_) * sizeof(T)));
  }

  /// The spread's copy team, to copy out of these slots with (started by
  /// the first that asks: PiecePools::copy_team).
  CopyTeam& copy_team() { return pools_.copy_team(); }

 private:
  // The run's group, lent by the first call. Throws std::bad_alloc.
  std::size_t group() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!group_.first) group_ = pools_.lend_group();
    return group_.second;
  }

  PiecePools<Buffer>& pools_;
  std::mutex mutex_;                                     // held only to lend or release the group
  std::pair<std::shared_ptr<void>, std::size_t> group_;  // its owner (null until lent, and once released), number
  const std::size_t piece_, unit_, per_, bound_, outs_;
};

}  // namespace detail
}  // namespace chunkpipe
