// SPDX-License-Identifier: MIT
// A spread run's Source (detail/spread_run.inl), read in piece order by
// whichever member thread takes the next piece: the read lock is held from
// taking a piece to the end of reading it, and never while waiting, so
// pieces are read one after another and in order, as one pipeline reads
// its chunks. Host-only; tested on the CPU through the spread's tests.
#pragma once

#include <chunkpipe/detail/piece_book.hpp>
#include <chunkpipe/detail/windows.hpp>

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace chunkpipe {
namespace detail {

/// The Source of one spread run, called in windows (windows.hpp) and
/// read a piece at a time.
template <class T, class Fn>
class PieceSource {
 public:
  /// Calls `fn` with windows of `window` elements; `end` (or null) learns
  /// where the Source ended, for a Sink's windows. Remembers the lengths
  /// of the last `bound` pieces.
  PieceSource(Fn& fn, std::size_t window, std::shared_ptr<WindowEnd> end, std::size_t bound)
      : windows_(fn, window, std::move(end)), lengths_(bound, 0) {}

  /// Takes the next piece of `book` into `p` (PieceBook::try_take) and
  /// reads it into `dst`, `units` units of `unit` elements until the
  /// Source returns a short one; `check(produced)` then sees what the run
  /// read so far, with this piece. Returns none once the Source ended or
  /// the run stopped (another member failed: nothing more is read).
  /// Throws what the Source or `check` throws.
  template <class Dst, class Check>
  PieceBook::Take take(PieceBook& book, std::size_t& p, std::size_t units, std::size_t unit, Dst dst, Check check) {
    std::lock_guard<std::mutex> reading(mutex_);
    if (ended_) return PieceBook::Take::none;
    const PieceBook::Take t = book.try_take(p);
    if (t != PieceBook::Take::got) return t;
    try {
      T* to = dst(p);
      std::size_t got = 0;
      for (std::size_t c = 0; c < units; ++c) {
        if (book.error()) return PieceBook::Take::none;
        const std::size_t wrote = windows_.fill(to + c * unit, unit);
        got += wrote;
        if (wrote < unit) {
          ended_ = true;
          break;
        }
      }
      check(p * units * unit + got);
      lengths_[p % lengths_.size()] = got;
      read_ += got;
    } catch (...) {
      // Stopped before the lock goes: no member calls the Source again
      // (a member waiting for the lock finds it ended), and the members
      // go on to the next run's Source only after this one's last call.
      ended_ = true;
      book.stop(std::current_exception());
      throw;
    }
    if (ended_) book.end_after(p);
    return PieceBook::Take::got;
  }

  /// No more reading: waits for a read in progress (another member's) to
  /// return, then marks the Source ended. For an error outside take() (a
  /// piece that could not be issued), so that the next run's Source is
  /// never called while this one's is. Never throws.
  void stop() noexcept {
    std::lock_guard<std::mutex> reading(mutex_);
    ended_ = true;
  }

  /// Piece p's length, once it was taken (and until `bound` pieces later).
  std::size_t length(std::size_t p) const { return lengths_[p % lengths_.size()]; }

  /// Elements read in all; call once the reading threads are done.
  std::size_t read() const noexcept { return read_; }

 private:
  std::mutex mutex_;
  SourceWindows<T, Fn> windows_;
  bool ended_ = false;                // under mutex_
  std::size_t read_ = 0;              // under mutex_
  std::vector<std::size_t> lengths_;  // [piece % bound], written under mutex_
};

}  // namespace detail
}  // namespace chunkpipe
