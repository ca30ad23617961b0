// SPDX-License-Identifier: MIT
// Sources and Sinks see the window the user set (Options::chunk_elems),
// whatever unit the schedule moves underneath. Host-only.
//
// The automatic policy may schedule a pipeline whose stages cannot see
// chunk boundaries in units other than its window: coarser units for a
// small window on the GPU, finer grains for a large one (resolve_geometry).
// A Source written to produce fixed-size messages, or a Sink that writes
// fixed-size records, must not notice. So a unit's host-in asks the Source
// for whole windows, in order, and a unit's host-out hands the Sink whole
// windows, in order; a window that straddles two units passes through a
// carry buffer (one copy of that window), every other one is read into, or
// handed out of, the pinned slot itself.
#pragma once

#include <chunkpipe/errors.hpp>

#include <cuda/std/span>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace chunkpipe::detail {

/// How a run's Source and Sink are cut: `elems` elements a call (0: as the
/// schedule's units, when they are the window), and `delivery` output
/// records a Sink call (the window's records: elements, a Reduce's
/// segments, one per chunk; a counted stage's packed elements).
struct Window {
  std::size_t elems = 0;
  std::size_t delivery = 0;
  /// Output records the run makes, where known before it runs: the Sink's
  /// last window is then handed over with the unit that completes it.
  /// Otherwise (a Source decides the length, a Filter packs) it is handed
  /// over when the run completes, before the Sink's finish().
  std::size_t total = std::numeric_limits<std::size_t>::max();
  /// Input elements per output record, to learn the output's length from
  /// a Source's; 0 for packed outputs, whose length no input tells.
  std::size_t per_record = 1;
};

/// The run's length as its Source revealed it, shared by the run's Source
/// and Sink windows (so that a Sink's last window leaves with its unit).
struct WindowEnd {
  static constexpr std::size_t open = std::numeric_limits<std::size_t>::max();
  std::atomic<std::size_t> input{open};  ///< elements, once the Source ended
};

/// Element storage for a carry: uninitialised, suitably aligned for T
/// (elements that cross a pipeline are trivially copyable).
template <class T>
class CarryBuffer {
 public:
  CarryBuffer() = default;
  CarryBuffer(const CarryBuffer&) = delete;
  CarryBuffer& operator=(const CarryBuffer&) = delete;
  ~CarryBuffer() {
    if (data_) std::allocator<T>().deallocate(data_, n_);
  }
  /// Storage for `n` elements, allocated on first use (every use asks the same n).
  T* get(std::size_t n) {
    if (!data_) {
      data_ = std::allocator<T>().allocate(n);
      n_ = n;
    }
    return data_;
  }

 private:
  T* data_ = nullptr;
  std::size_t n_ = 0;
};

/// Calls a Source `fn(window_index, span of elems)` window after window and
/// deals what it produced into units of any size. Not thread-safe: a run's
/// host-in ops call it one at a time, in chunk order.
template <class T, class Fn>
class SourceWindows {
 public:
  SourceWindows(Fn& fn, std::size_t elems, std::shared_ptr<WindowEnd> end = nullptr)
      : fn_(fn), elems_(elems), end_(std::move(end)) {}

  /// Fills dst[0, capacity) with the next elements of the input and
  /// returns how many it wrote: fewer than `capacity` once the Source has
  /// ended (a call that returned less than a window). Throws what the
  /// Source throws, and pipeline_error for a Source that returns more than
  /// a window.
  std::size_t fill(T* dst, std::size_t capacity) {
    std::size_t filled = 0;
    while (filled < capacity) {
      if (carry_at_ < carry_n_) {
        const std::size_t take = std::min(carry_n_ - carry_at_, capacity - filled);
        std::memcpy(static_cast<void*>(dst + filled), carry_.get(elems_) + carry_at_, take * sizeof(T));
        carry_at_ += take;
        filled += take;
        continue;
      }
      if (ended_) break;
      if (capacity - filled >= elems_) {
        filled += call(dst + filled);  // straight into the slot
      } else {
        carry_n_ = call(carry_.get(elems_));  // straddles this unit's end
        carry_at_ = 0;
      }
    }
    read_ += filled;
    if (ended_ && carry_at_ == carry_n_ && end_) end_->input.store(read_, std::memory_order_release);
    return filled;
  }

 private:
  std::size_t call(T* at) {
    const std::size_t n = fn_(next_++, ::cuda::std::span<T>(at, elems_));
    if (n > elems_) {
      throw pipeline_error("chunkpipe: a source returned " + std::to_string(n) + " elements for a slot of " +
                           std::to_string(elems_));
    }
    if (n < elems_) ended_ = true;
    return n;
  }

  Fn& fn_;
  std::size_t elems_;
  std::shared_ptr<WindowEnd> end_;
  CarryBuffer<T> carry_;
  std::size_t carry_n_ = 0, carry_at_ = 0;
  std::size_t next_ = 0;  // the next window's index
  std::size_t read_ = 0;  // elements handed out
  bool ended_ = false;
};

/// Hands a Sink `fn(window_index, first_record, span)` whole windows of
/// `delivery` records, taking units of any size. Not thread-safe: a run's
/// host-out ops call it one at a time, in chunk order.
template <class U, class Fn>
class SinkWindows {
 public:
  /// `end`: the run's Source's length, once known (Window::per_record).
  SinkWindows(Fn& fn, const Window& w, std::shared_ptr<WindowEnd> end = nullptr)
      : fn_(fn), delivery_(w.delivery), total_(w.total), per_record_(w.per_record), end_(std::move(end)) {}

  /// Takes the next `count` records of the output, which start at record
  /// `first`, and hands every window they complete to the Sink. Throws
  /// what the Sink throws, and std::logic_error for records out of order
  /// (an internal error).
  void put(std::size_t first, const U* data, std::size_t count) {
    if (first != taken_) {
      throw std::logic_error("chunkpipe: internal: a sink got records from " + std::to_string(first) +
                             " after " + std::to_string(taken_));
    }
    taken_ += count;
    const bool last = taken_ >= total();
    if (carry_n_ != 0) {
      const std::size_t take = std::min(delivery_ - carry_n_, count);
      std::memcpy(static_cast<void*>(carry_.get(delivery_) + carry_n_), data, take * sizeof(U));
      carry_n_ += take;
      data += take;
      count -= take;
      if (carry_n_ == delivery_ || (last && count == 0)) flush();
    }
    while (count >= delivery_ || (last && count != 0)) {
      const std::size_t n = std::min(delivery_, count);
      hand(data, n);  // straight from the slot
      data += n;
      count -= n;
    }
    if (count != 0) {
      std::memcpy(static_cast<void*>(carry_.get(delivery_)), data, count * sizeof(U));
      carry_n_ = count;
    }
  }

  /// Hands over a last window that is not whole (the run's end). Throws
  /// what the Sink throws.
  void flush() {
    if (carry_n_ == 0) return;
    const std::size_t n = carry_n_;
    carry_n_ = 0;
    hand(carry_.get(delivery_), n);
  }

 private:
  std::size_t total() const noexcept {
    if (total_ != std::numeric_limits<std::size_t>::max() || !end_ || per_record_ == 0) return total_;
    const std::size_t in = end_->input.load(std::memory_order_acquire);
    return in == WindowEnd::open ? total_ : (in + per_record_ - 1) / per_record_;
  }
  void hand(const U* data, std::size_t n) {
    const std::size_t k = next_++;
    fn_(k, k * delivery_, ::cuda::std::span<const U>(data, n));
  }

  Fn& fn_;
  std::size_t delivery_;
  std::size_t total_;
  std::size_t per_record_;
  std::shared_ptr<WindowEnd> end_;
  CarryBuffer<U> carry_;
  std::size_t carry_n_ = 0;
  std::size_t taken_ = 0;  // records taken so far
  std::size_t next_ = 0;   // the next window's index
};

}  // namespace chunkpipe::detail
