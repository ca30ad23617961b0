// SPDX-License-Identifier: MIT
// Definitions for detail/spread.hpp: one spread run (SpreadEngine::Run). Included
// at its bottom; do not include directly.
#pragma once

namespace chunkpipe {
namespace detail {

// One spread run over its two sides, as the members' threads take, issue,
// finish and deliver its pieces. Shared by its pieces in flight
// (MemberLanes), which finish it.
template <class Member, template <class> class Buffer>
template <class InSide, class OutSide>
struct SpreadEngine<Member, Buffer>::Run final : Handout::Run,
                                           std::enable_shared_from_this<typename SpreadEngine<Member, Buffer>::template Run<InSide, OutSide>> {
  using in_t = typename first_type<typename side_types<InSide>::type>::type;
  using out_t = typename first_type<typename side_types<OutSide>::type>::type;
  static constexpr bool sourced = is_source<InSide>::value;
  static constexpr bool sunk = is_sink<OutSide>::value;
  static constexpr bool counted = counted_;
  static constexpr std::size_t out_count = std::tuple_size<typename types_tuple<typename side_types<OutSide>::type>::type>::value;

  Run(SpreadEngine& s, InSide& i, OutSide& o, std::shared_ptr<void> keep, std::size_t n, std::size_t limit,
      std::size_t bound)
      : spread(s),
        keep(std::move(keep)),
        ins(i),
        outs(o),
        n(n),
        bound(bound),
        book(limit, bound),
        pack(bound),
        tally(s.members_.size()) {
    // The user's Source and Sink see the window (Options::chunk_elems),
    // whatever unit the members schedule (windows.hpp); the Source's end
    // tells the Sink where the output ends.
    const std::size_t w = s.options_.chunk_elems;
    auto window_end = std::make_shared<WindowEnd>();
    if constexpr (sourced) source.emplace(ins.fn, w, sunk ? window_end : nullptr, bound);
    if constexpr (sunk) {
      Window sw;
      sw.elems = w;
      sw.per_record = counted ? 0 : per();
      sw.delivery = counted ? w : w / per();
      if (n != unknown_length && !counted) sw.total = records(n);
      sink_windows.emplace(outs.fn, sw, window_end);
    }
    if constexpr (counted) {
      pack.emitted.assign(bound, 0);
      if constexpr (!sunk) {
        std::apply([&](const auto&... s) { ((pack.packed.capacity = std::min(pack.packed.capacity, s.size)), ...); },
                   outs.spans);
        // Pieces may pack straight into outputs a member copies into
        // directly (PackedPlace): pinned ones. Elsewhere a piece buffer
        // costs no more than a member's own staging would.
        pack.in_place_ok =
            std::apply([](const auto&... s) { return ((s.memory == Memory::pinned) && ...); }, outs.spans);
        pack.in_place.assign(bound, 0);
      }
    }
  }

  // The spread's, for every run: a piece's elements (piece_units whole
  // units), a unit's, and input elements per output record.
  std::size_t piece() const { return spread.piece_elems(); }
  std::size_t chunk() const { return spread.members_.front()->geometry().chunk_elems; }
  std::size_t per() const { return spread.per_record_; }

  // A run that keeps to itself, from start to end: the members take its
  // pieces (no other run's are out), then the Sink is finished.
  void go() {
    spread.handout_->start(this->shared_from_this());
    tally.wait_sealed();
    spread.lanes_->wait_empty();  // its pieces, finished
    // The error moves out of the book: a member's thread may let go of
    // this Run after the caller has its error, and must not drop the
    // last reference to what was thrown (see blocking()).
    if (std::exception_ptr e = book.take_error()) {
      abort_sink();
      std::rethrow_exception(e);
    }
    if constexpr (sunk) {
      try {
        sink_windows->flush();  // a last window that is not whole
      } catch (...) {
        abort_sink();
        throw;
      }
      if constexpr (has_finish<decltype(outs.fn)>::value) {
        try {
          outs.fn.finish();
        } catch (...) {
          abort_sink();  // as one pipeline does: finish() throwing is a failed run
          throw;
        }
      }
    }
    SpreadSummary& summary = tally.summary();
    summary.elems = sourced ? source->read() : n;
    summary.chunks = (summary.elems + chunk() - 1) / chunk();
    if constexpr (counted) {
      if constexpr (!sunk) check_packed(pack.packed);  // as one pipeline's run fails, once complete
      summary.written = pack.packed.written;
    }
  }

  void abort_sink() {
    if constexpr (sunk) {
      if constexpr (has_abort<decltype(outs.fn)>::value) {
        try {
          outs.fn.abort();
        } catch (...) {  // the run's own error wins
        }
      }
    }
  }

  // Member m's thread takes the next piece, issues it to m and puts it
  // in m's lane, which finishes it (Handout, MemberLanes).
  PieceBook::Take take_one(std::size_t m) noexcept override {
    try {
      std::size_t p = 0;
      const PieceBook::Take t = take(p);
      if (t != PieceBook::Take::got) return t;
      if constexpr (counted && !sunk) pack.in_place[p % bound] = 0;  // until the piece says otherwise (place_for)
      if (length_of(p) == 0) {  // a Source that ended at this piece's start
        finish_empty(p);
        return t;
      }
      // The piece's lane entry first: once it is issued, nothing can
      // fail before it is in the lane (an issued piece not finished would
      // let a run complete while it still writes).
      using Ticket = decltype(issue(*spread.members_[m], 0));
      auto ticket = std::make_shared<std::optional<Ticket>>();
      MemberLanes::Entry entry = MemberLanes::entry(
          [self = this->shared_from_this(), m, p, ticket] { self->finish_piece(m, p, **ticket); });
      ticket->emplace(issue(*spread.members_[m], p));
      if (open) spread.flowing_.runs().issued(*open);  // counted before the lane can finish it
      spread.lanes_->push(m, std::move(entry));
      tally.issued(m);
      return t;
    } catch (...) {
      book.stop(std::current_exception());  // the run's error; every member then finds none
      return PieceBook::Take::none;
    }
  }
  void wait_room() noexcept override { book.wait_room(); }
  void sealed() noexcept override {
    if (open) {
      tally.summary().elems = n;  // a flowing run: its pieces finish later, and complete it
      tally.summary().chunks = (n + chunk() - 1) / chunk();
      spread.flowing_.runs().seal(*open);
      return;
    }
    tally.seal();
  }

  // Finishes piece p (it ran on member m): the run's error if it failed.
  template <class Ticket>
  void finish_piece(std::size_t m, std::size_t p, Ticket& ticket) noexcept {
    try {
      finish(m, p, ticket);
    } catch (...) {
      book.stop(std::current_exception());
      try {
        ticket.wait();  // a delivery that threw: the piece itself is still waited for
      } catch (...) {  // the first error is the one the caller gets
      }
    }
    if (open) spread.flowing_.runs().finished(*open);
  }

  // Takes the next piece (PieceBook::try_take); for a Source, reads it,
  // in piece order (PieceSource).
  PieceBook::Take take(std::size_t& p) {
    if constexpr (!sourced) {
      return book.try_take(p);
    } else {
      return source->take(
          book, p, spread.piece_units, chunk(), [&](std::size_t q) { return in_buffer(q); },
          [&](std::size_t produced) {
            if constexpr (!sunk && !counted) check_fits(records(produced));
          });
    }
  }

  // A Source's output ranges must hold the records of what it produced
  // so far, as one pipeline's must.
  void check_fits(std::size_t produced) const {
    std::size_t o = 0;
    std::apply(
        [&](const auto&... s) {
          ((produced > s.size ? throw pipeline_error("chunkpipe: the source produced more than the " +
                                                     std::to_string(s.size) + (per() == 1 ? " elements" : " records") +
                                                     " output " + std::to_string(o) + " holds")
                              : void(++o)),
           ...);
        },
        outs.spans);
  }

  std::size_t length_of(std::size_t p) const {
    if constexpr (sourced) {
      return source->length(p);
    } else {
      return std::min(piece(), n - p * piece());
    }
  }

  // Piece p's buffers (the spread's pool: slot p % bound, which piece
  // p + bound takes only once p was delivered), made or grown when first
  // needed.
  in_t* in_buffer(std::size_t p) {
    return reinterpret_cast<in_t*>(spread.pools_.input(p % bound, piece() * sizeof(in_t)));
  }
  // Output `o` of piece p (of type T): several for an Emit of several outputs.
  template <class T = out_t>
  T* out_buffer(std::size_t p, std::size_t o = 0) {
    return reinterpret_cast<T*>(spread.pools_.output((p % bound) * out_count + o, records(piece()) * sizeof(T)));
  }
  // Output records of `elems` elements from a unit's start: elements
  // themselves (per 1), or a Reduce's segments, or chunks.
  std::size_t records(std::size_t elems) const noexcept { return (elems + per() - 1) / per(); }

  auto issue(Member& member, std::size_t p) {
    const std::size_t first = p * piece();
    const std::size_t len = length_of(p);
    auto in_side = [&] {
      if constexpr (sourced) {
        return inputs(HostSpan<const in_t>{in_buffer(p), len, Buffer<unsigned char>::memory});
      } else {
        return std::apply([&](const auto&... s) { return Inputs<typename span_value<std::decay_t<decltype(s)>>::type...>{
                                                       std::make_tuple(slice(s, first, len)...)}; },
                          ins.spans);
      }
    };
    auto out_side = [&] {
      // Piece p's records are the run's from records(first): pieces
      // start on whole units, so on whole segments and chunks.
      if constexpr (counted && sunk) {
        // The member packs what it kept into the piece's buffer, at its
        // piece-local packed offsets, for deliver() to pass on.
        out_t* buf = out_buffer(p);
        return sink<out_t>([buf](std::size_t, std::size_t at, ::cuda::std::span<const out_t> data) {
          std::memcpy(static_cast<void*>(buf + at), data.data(), data.size() * sizeof(out_t));
        });
      } else if constexpr (counted) {
        return piece_outputs(p, len, std::make_index_sequence<out_count>{});
      } else if constexpr (sunk) {
        return outputs(HostSpan<out_t>{out_buffer(p), records(len), Buffer<unsigned char>::memory});
      } else {
        return std::apply([&](const auto&... s) { return Outputs<typename span_value<std::decay_t<decltype(s)>>::type...>{
                                                       std::make_tuple(slice(s, records(first), records(len))...)}; },
                          outs.spans);
      }
    };
    // Its stages number its chunks as the spread run's: chunk k of the
    // piece is the run's chunk p * piece_units + k, at offset first + k * unit.
    RunLabel label{p * spread.piece_units, first};
    if constexpr (counted && !sunk) {
      if (pack.in_place_ok) label.place = place_for(p, len);
    }
    return RunAccess::run_async(member, label, in_side(), out_side());
  }

  // Where piece p may pack straight into the run's outputs: at the offset
  // where the pieces before it ended, if its first chunk that emits
  // anything finds them all counted (PieceCounts); it counts itself once
  // its last chunk packed. Its closures are called only by the piece's
  // host-out ops, while this Run waits for the piece (finish_piece).
  std::shared_ptr<PackedPlace> place_for(std::size_t p, std::size_t len) {
    auto place = std::make_shared<PackedPlace>();
    place->base = [this, p] {
      const std::size_t b = pack.counts.base_of(p);
      if (b != PackedPlace::unknown) pack.in_place[p % bound] = 1;  // read by deliver_counted, after the piece
      return b;
    };
    std::apply([&](const auto&... s) { (place->data.push_back(reinterpret_cast<std::byte*>(s.data)), ...); },
               outs.spans);
    place->capacity = pack.packed.capacity;
    place->chunks = (len + chunk() - 1) / chunk();
    place->done = [this, p](std::size_t got) noexcept { pack.counts.counted(p, got); };
    return place;
  }

  // A counted piece's outputs: its own buffers, one per output.
  template <std::size_t... O>
  auto piece_outputs(std::size_t p, std::size_t len, std::index_sequence<O...>) {
    using spans_t = typename types_tuple<typename side_types<OutSide>::type>::type;
    return Outputs<std::tuple_element_t<O, spans_t>...>{std::make_tuple(
        HostSpan<std::tuple_element_t<O, spans_t>>{
            out_buffer<std::tuple_element_t<O, spans_t>>(p, O), len,
            Buffer<unsigned char>::memory}...)};
  }

  template <class Ticket>
  void finish(std::size_t m, std::size_t p, Ticket& ticket) {
    ticket.wait();
    const auto& own = [&]() -> const auto& {
      if constexpr (counted) {
        return ticket.ticket();  // a ResultTicket's run
      } else {
        return ticket;
      }
    }();
    if constexpr (counted) pack.emitted[p % bound] = ticket.get();
    if constexpr (has_report<std::decay_t<decltype(own)>>::value) {
      if (spread.options_.profile) tally.add(PieceReport{m, p * spread.piece_units, own.report()});
    }
    deliver(book.done(p));
  }
  // A piece a Source ended before: nothing ran, and nothing was emitted
  // (its slot of `emitted` still holds the count of an earlier piece).
  void finish_empty(std::size_t p) {
    if constexpr (counted) {
      pack.emitted[p % bound] = 0;
      pack.counts.counted(p, 0);
    }
    deliver(book.done(p));
  }

  // Feeds the Sink the pieces this thread was handed, in order, and
  // then those that came done meanwhile.
  void deliver(std::vector<std::size_t> pieces) {
    while (!pieces.empty()) {
      for (std::size_t p : pieces) {
        if (book.error()) return;  // a member failed: the Sink gets no more
        if constexpr (counted) {
          deliver_counted(p);
        } else if constexpr (sunk) {
          // In windows, as one pipeline hands them over: its records,
          // numbered from the run's first (elements, where per is 1).
          sink_windows->put(records(p * piece()), out_buffer(p), records(length_of(p)));
        }
        book.delivered();
      }
      pieces = book.handed_back();
    }
  }

  // Piece p of a counted run, after every piece before it: into the
  // ranges at the run's packed offset, what fits (run_packed_out's rule),
  // or to the Sink chunk by chunk.
  void deliver_counted(std::size_t p) {
    Packed& packed = pack.packed;
    const std::size_t base = packed.emitted;  // what the pieces before p emitted
    const std::size_t got = pack.emitted[p % bound];
    if constexpr (sunk) {
      if (got != 0) sink_windows->put(base, out_buffer(p), got);
      packed.written = base + got;
    } else {
      const std::size_t room =
          packed.written == base && base < packed.capacity ? std::min(got, packed.capacity - base) : 0;
      if (room != 0) {
        // A piece that packed in place wrote these itself (place_for).
        if (!pack.in_place[p % bound]) copy_piece(p, base, room, std::make_index_sequence<out_count>{});
        packed.written = base + room;
      }
      if (pack.in_place[p % bound]) ++tally.summary().in_place;  // pieces are delivered one at a time
    }
    packed.emitted = base + got;
  }
  // Shared with the spread's copy team: one thread's memcpy of what a
  // piece kept would be slower than the members fill pieces.
  template <std::size_t... O>
  void copy_piece(std::size_t p, std::size_t at, std::size_t count, std::index_sequence<O...>) {
    using spans_t = typename types_tuple<typename side_types<OutSide>::type>::type;
    std::vector<Copy> copies{Copy{static_cast<void*>(std::get<O>(outs.spans).data + at),
                                  out_buffer<std::tuple_element_t<O, spans_t>>(p, O),
                                  count * sizeof(std::tuple_element_t<O, spans_t>)}...};
    spread.pools_.copy_team().copy(copies);
  }

  // A counted run's (Filter, Emit) packing.
  struct Packing {
    explicit Packing(std::size_t bound) : counts(bound) {}
    std::vector<std::size_t> emitted;  // [piece % bound]: what a counted piece emitted
    PieceCounts counts;                // the pieces' counts as their last chunks pack
    bool in_place_ok = false;          // pieces may pack into the run's outputs (place_for)
    std::vector<char> in_place;        // [piece % bound]: the piece packed straight into the outputs
    Packed packed;                     // as one pipeline's: emitted and written by the pieces delivered
  };

  SpreadEngine& spread;
  // A flowing run's two sides (start_flow); null for a run that keeps to
  // itself, whose sides are run_sides' own, so a Source or Sink is let
  // go of before its ticket is ready, wherever the Run is let go of.
  std::shared_ptr<void> keep;
  InSide& ins;
  OutSide& outs;
  const std::size_t n;
  const std::size_t bound;  // pieces taken and not yet delivered, at most
  PieceBook book;
  std::shared_ptr<OpenRuns::Run> open;  // a flowing run's place among the open runs (start_flow)
  // The user's Source and Sink, called in windows.
  std::optional<PieceSource<in_t, typename side_callback<InSide>::type>> source;
  std::optional<SinkWindows<out_t, typename side_callback<OutSide>::type>> sink_windows;
  Packing pack;
  SpreadTally tally;  // its summary, its pieces' reports, whether the handout is over
};

}  // namespace detail
}  // namespace chunkpipe
