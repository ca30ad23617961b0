// SPDX-License-Identifier: MIT
// The two sides a spread run's piece is issued with (detail/spread_run.inl):
// what its member reads and where it writes, by the kind of the run's own
// sides (ranges, a Source, a Sink) and whether its last stage emits a
// count. Host-only; tested on the CPU through the spread's tests.
//
// Why separate: the choice of a piece's sides is a table of four cases
// per direction that only depends on the run's side types and the piece
// buffers (PieceSlots); it holds no state and runs on whichever member
// thread issues the piece. Apart from the run, which decides when and to
// which member a piece goes, each case can be read against the one
// pipeline run it stands in for.
#pragma once

#include <chunkpipe/io.hpp>
#include <chunkpipe/stage.hpp>  // first_type
#include <chunkpipe/detail/piece_slots.hpp>

#include <cuda/std/span>

#include <cstddef>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

namespace chunkpipe {
namespace detail {

/// `count` elements of `s` from element `first`, held as `s` is.
template <class T>
HostSpan<T> slice(const HostSpan<T>& s, std::size_t first, std::size_t count) {
  return HostSpan<T>{s.data + first, count, s.memory};
}

/// Piece p's input side, `len` elements: the slices of the run's input
/// ranges from the piece's first element, or for a Source the piece's
/// input slot, which it was read into when the piece was taken
/// (PieceSource). Never blocks; throws what PieceSlots::input throws.
template <class InSide, template <class> class Buffer>
auto piece_in_side(InSide& ins, PieceSlots<Buffer>& slots, std::size_t p, std::size_t len) {
  using in_t = typename first_type<typename side_types<InSide>::type>::type;
  if constexpr (is_source<InSide>::value) {
    return inputs(HostSpan<const in_t>{slots.template input<in_t>(p), len, PieceSlots<Buffer>::memory});
  } else {
    const std::size_t first = p * slots.piece();
    return std::apply(
        [&](const auto&... s) {
          return Inputs<typename span_value<std::decay_t<decltype(s)>>::type...>{
              std::make_tuple(::chunkpipe::detail::slice(s, first, len)...)};
        },
        ins.spans);
  }
}

/// A counted piece's outputs: its own output slots, one per output of the
/// run's (`Spans`: their HostSpan types), each room for `len` elements.
template <class Spans, template <class> class Buffer, std::size_t... O>
auto piece_own_outputs(PieceSlots<Buffer>& slots, std::size_t p, std::size_t len, std::index_sequence<O...>) {
  return Outputs<typename span_value<std::tuple_element_t<O, Spans>>::type...>{
      std::make_tuple(HostSpan<typename span_value<std::tuple_element_t<O, Spans>>::type>{
          slots.template output<typename span_value<std::tuple_element_t<O, Spans>>::type>(p, O), len,
          PieceSlots<Buffer>::memory}...)};
}

/// Piece p's output side, for `len` input elements. Its records are the
/// run's from records(p * piece): pieces start on whole units, so on whole
/// segments and chunks. Into ranges, they go straight to that slice of
/// the run's output ranges; for a Sink, into the piece's output slot, for
/// the deliverer to pass on in order. A `Counted` piece (Filter, Emit)
/// packs into its own slots, at piece-local packed offsets, since where
/// its elements land in the run's depends on the pieces before it
/// (PieceDelivery copies or hands them on; a piece that may pack in place
/// is told so by its label, not by these sides). Never blocks; throws what
/// PieceSlots::output throws.
template <bool Counted, class OutSide, template <class> class Buffer>
auto piece_out_side(OutSide& outs, PieceSlots<Buffer>& slots, std::size_t p, std::size_t len) {
  using out_t = typename first_type<typename side_types<OutSide>::type>::type;
  constexpr bool sunk = is_sink<OutSide>::value;
  if constexpr (Counted && sunk) {
    out_t* buf = slots.template output<out_t>(p);
    return sink<out_t>([buf](std::size_t, std::size_t at, ::cuda::std::span<const out_t> data) {
      std::memcpy(static_cast<void*>(buf + at), data.data(), data.size() * sizeof(out_t));
    });
  } else if constexpr (Counted) {
    using spans_t = decltype(outs.spans);
    return ::chunkpipe::detail::piece_own_outputs<spans_t>(slots, p, len,
                                                           std::make_index_sequence<std::tuple_size<spans_t>::value>{});
  } else if constexpr (sunk) {
    return outputs(HostSpan<out_t>{slots.template output<out_t>(p), slots.records(len), PieceSlots<Buffer>::memory});
  } else {
    const std::size_t first = slots.records(p * slots.piece());
    const std::size_t count = slots.records(len);
    return std::apply(
        [&](const auto&... s) {
          return Outputs<typename span_value<std::decay_t<decltype(s)>>::type...>{
              std::make_tuple(::chunkpipe::detail::slice(s, first, count)...)};
        },
        outs.spans);
  }
}

}  // namespace detail
}  // namespace chunkpipe
