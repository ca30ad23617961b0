// SPDX-License-Identifier: MIT
// What becomes of a spread run's finished pieces (detail/spread_run.inl):
// a Sink is fed their records in windows and finished once the run is
// complete, and a counted run's (Filter, Emit) pieces are packed one after
// another into the run's outputs or its Sink, at the run's packed offsets.
// Host-only; tested on the CPU through the spread's tests.
//
// Why separate: a piece is delivered by one thread at a time, in piece
// order (PieceBook hands the pieces out), long after the member thread
// that issued it moved on; the state delivery needs (the Sink's windows,
// what each piece emitted, where the packed output has got to) is touched
// only there and by the pieces' own packing callbacks, never by the code
// that takes and issues pieces. Held apart, the run that takes pieces
// cannot reach into it, and the ordering argument stays in one file.
#pragma once

#include <chunkpipe/io.hpp>
#include <chunkpipe/spread_ticket.hpp>     // SpreadSummary
#include <chunkpipe/stage.hpp>             // first_type
#include <chunkpipe/detail/endpoints.hpp>  // Packed, PackedPlace, has_finish, has_abort
#include <chunkpipe/detail/piece_counts.hpp>
#include <chunkpipe/detail/piece_slots.hpp>
#include <chunkpipe/detail/run_setup.hpp>    // check_packed
#include <chunkpipe/detail/slots.hpp>        // Copy
#include <chunkpipe/detail/spread_runs.hpp>  // side_callback
#include <chunkpipe/detail/windows.hpp>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

namespace chunkpipe {
namespace detail {

/// The delivery side of one spread run over output side `OutSide` (ranges
/// or a Sink); `Counted`: its last stage emits a count. Pieces are handed
/// to deliver_*() one at a time, in piece order, each after every piece
/// before it (PieceBook); the other calls are as each says.
template <class OutSide, template <class> class Buffer, bool Counted>
class PieceDelivery {
  using out_t = typename first_type<typename side_types<OutSide>::type>::type;
  static constexpr bool sunk = is_sink<OutSide>::value;

 public:
  /// A run of `n` input elements (unknown_length: a Source decides) whose
  /// user Sink, if any, sees windows of `window` elements (its Source's,
  /// Options::chunk_elems), over `slots`, which must outlive it. Throws
  /// std::bad_alloc.
  PieceDelivery(OutSide& outs, PieceSlots<Buffer>& slots, std::size_t n, std::size_t window)
      : outs_(outs), slots_(slots), end_(std::make_shared<WindowEnd>()), counts_(slots.bound()) {
    if constexpr (sunk) {
      Window sw;
      sw.elems = window;
      sw.per_record = Counted ? 0 : slots.per();
      sw.delivery = Counted ? window : window / slots.per();
      if (n != unknown_length && !Counted) sw.total = slots.records(n);
      sink_windows_.emplace(outs.fn, sw, end_);
    }
    if constexpr (Counted) {
      emitted_.assign(slots.bound(), 0);
      if constexpr (!sunk) {
        std::apply([&](const auto&... s) { ((packed_.capacity = std::min(packed_.capacity, s.size)), ...); },
                   outs.spans);
        // Pieces may pack straight into outputs a member copies into
        // directly (PackedPlace): pinned ones. Elsewhere a piece buffer
        // costs no more than a member's own staging would.
        in_place_ok_ = std::apply([](const auto&... s) { return ((s.memory == Memory::pinned) && ...); }, outs.spans);
        in_place_.assign(slots.bound(), 0);
      }
    }
  }

  /// Where the run's Source ended, for the Sink's windows: the run hands
  /// it to its Source (its last window then leaves with its unit).
  const std::shared_ptr<WindowEnd>& window_end() const noexcept { return end_; }

  /// Piece p was taken: it has not packed in place (yet: place_for). On
  /// the taking member's thread, before the piece is issued.
  void taken(std::size_t p) noexcept {
    if constexpr (Counted && !sunk) in_place_[p % slots_.bound()] = 0;
  }

  /// Where counted piece p, of `len` elements, may pack straight into the
  /// run's outputs (RunLabel::place), or null where they are not all
  /// pinned. At the offset where the pieces before it ended, if its first
  /// chunk that emits anything finds them all counted (PieceCounts); it
  /// counts itself once its last chunk packed. The closures are called
  /// only by the piece's host-out ops, while the run waits for the piece,
  /// so before the piece is delivered. Throws std::bad_alloc.
  std::shared_ptr<PackedPlace> place_for(std::size_t p, std::size_t len) {
    if (!in_place_ok_) return nullptr;
    auto place = std::make_shared<PackedPlace>();
    place->base = [this, p] {
      const std::size_t b = counts_.base_of(p);
      if (b != PackedPlace::unknown) in_place_[p % slots_.bound()] = 1;  // read by deliver_counted, after the piece
      return b;
    };
    std::apply([&](const auto&... s) { (place->data.push_back(reinterpret_cast<std::byte*>(s.data)), ...); },
               outs_.spans);
    place->capacity = packed_.capacity;
    place->chunks = slots_.units(len);
    place->done = [this, p](std::size_t got) noexcept { counts_.counted(p, got); };
    return place;
  }

  /// Counted piece p ran and emitted `got` elements. On the thread that
  /// finished it, before it is delivered.
  void emitted(std::size_t p, std::size_t got) noexcept { emitted_[p % slots_.bound()] = got; }
  /// Counted piece p ran nothing (a Source ended before it); its slot of
  /// emitted_ still holds an earlier piece's count until this.
  void emitted_nothing(std::size_t p) noexcept {
    emitted_[p % slots_.bound()] = 0;
    counts_.counted(p, 0);
  }

  /// Hands piece p's records to the Sink, in windows, as one pipeline
  /// hands them over: numbered from the run's first (elements, where per
  /// is 1); `len`: the piece's input elements. Throws what the Sink throws.
  void deliver_records(std::size_t p, std::size_t len) {
    sink_windows_->put(slots_.records(p * slots_.piece()), slots_.template output<out_t>(p), slots_.records(len));
  }

  /// Counted piece p, after every piece before it: into the ranges at the
  /// run's packed offset, what fits (run_packed_out's rule), copied by the
  /// spread's copy team (blocks until copied) unless the piece packed
  /// there itself, which `summary` counts; or to the Sink chunk by chunk.
  /// Throws what the Sink or a copy throws.
  void deliver_counted(std::size_t p, SpreadSummary& summary) {
    const std::size_t base = packed_.emitted;  // what the pieces before p emitted
    const std::size_t got = emitted_[p % slots_.bound()];
    if constexpr (sunk) {
      if (got != 0) sink_windows_->put(base, slots_.template output<out_t>(p), got);
      packed_.written = base + got;
    } else {
      const std::size_t room =
          packed_.written == base && base < packed_.capacity ? std::min(got, packed_.capacity - base) : 0;
      if (room != 0) {
        // A piece that packed in place wrote these itself (place_for).
        if (!in_place_[p % slots_.bound()]) {
          copy_piece(p, base, room, std::make_index_sequence<std::tuple_size<spans_t>::value>{});
        }
        packed_.written = base + room;
      }
      if (in_place_[p % slots_.bound()]) ++summary.in_place;  // pieces are delivered one at a time
    }
    packed_.emitted = base + got;
  }

  /// Once every piece was delivered: the Sink's last window that is not
  /// whole, then its finish(). If either throws, the Sink is aborted and
  /// that error rethrown, as one pipeline's run fails.
  void finish_sink() {
    if constexpr (sunk) {
      try {
        sink_windows_->flush();
      } catch (...) {
        abort_sink();
        throw;
      }
      if constexpr (has_finish<decltype(outs_.fn)>::value) {
        try {
          outs_.fn.finish();
        } catch (...) {
          abort_sink();
          throw;
        }
      }
    }
  }

  /// The run failed: the Sink's abort(), if it has one. What abort()
  /// throws is dropped: the run's own error wins.
  void abort_sink() noexcept {
    if constexpr (sunk) {
      if constexpr (has_abort<decltype(outs_.fn)>::value) {
        try {
          outs_.fn.abort();
        } catch (...) {
        }
      }
    }
  }

  /// A counted run's elements written, once every piece was delivered.
  /// Into ranges, throws pipeline_error if what was emitted did not fit,
  /// as one pipeline's run fails once complete (check_packed).
  std::size_t written() const {
    if constexpr (!sunk) ::chunkpipe::detail::check_packed(packed_);
    return packed_.written;
  }

 private:
  using spans_t = typename types_tuple<typename side_types<OutSide>::type>::type;

  // Shared with the spread's copy team: one thread's memcpy of what a
  // piece kept would be slower than the members fill pieces.
  template <std::size_t... O>
  void copy_piece(std::size_t p, std::size_t at, std::size_t count, std::index_sequence<O...>) {
    std::vector<Copy> copies{Copy{static_cast<void*>(std::get<O>(outs_.spans).data + at),
                                  slots_.template output<std::tuple_element_t<O, spans_t>>(p, O),
                                  count * sizeof(std::tuple_element_t<O, spans_t>)}...};
    slots_.copy_team().copy(copies);
  }

  OutSide& outs_;
  PieceSlots<Buffer>& slots_;
  std::shared_ptr<WindowEnd> end_;
  std::optional<SinkWindows<out_t, typename side_callback<OutSide>::type>> sink_windows_;  // a Sink's
  // A counted run's packing, as one pipeline's Packed and more: pieces
  // finish out of order, and are delivered in order.
  std::vector<std::size_t> emitted_;  // [piece % bound]: what the piece emitted
  PieceCounts counts_;                // the pieces' counts as their last chunks pack
  bool in_place_ok_ = false;          // pieces may pack into the run's outputs (place_for)
  std::vector<char> in_place_;        // [piece % bound]: the piece packed straight into the outputs
  Packed packed_;                     // emitted and written by the pieces delivered
};

}  // namespace detail
}  // namespace chunkpipe
