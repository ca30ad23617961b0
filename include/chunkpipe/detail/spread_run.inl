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
        slots(s.pools_, s.piece_elems(), s.members_.front()->geometry().chunk_elems, s.per_record_, bound, out_count),
        book(limit, bound),
        // The user's Source and Sink see the window (Options::chunk_elems),
        // whatever unit the members schedule (windows.hpp); the Source's end
        // tells the Sink where the output ends.
        delivery(o, slots, n, s.options_.chunk_elems),
        tally(s.members_.size()) {
    if constexpr (sourced) {
      source.emplace(ins.fn, s.options_.chunk_elems, sunk ? delivery.window_end() : nullptr, bound);
    }
  }

  // A run that keeps to itself, from start to end: the members take its
  // pieces (no other run's are out), then the Sink is finished.
  void go() {
    spread.handout_->start(this->shared_from_this());
    tally.wait_sealed();
    spread.lanes_->wait_empty();  // its pieces, finished
    slots.release();              // and delivered: the next run may have them
    // The error moves out of the book: a member's thread may let go of
    // this Run after the caller has its error, and must not drop the
    // last reference to what was thrown (see spread_blocking_result()).
    if (std::exception_ptr e = book.take_error()) {
      delivery.abort_sink();
      std::rethrow_exception(e);
    }
    delivery.finish_sink();
    SpreadSummary& summary = tally.summary();
    summary.elems = sourced ? source->read() : n;
    summary.chunks = slots.units(summary.elems);
    if constexpr (counted) summary.written = delivery.written();
  }

  // Member m's thread takes the next piece, issues it to m and puts it
  // in m's lane, which finishes it (Handout, MemberLanes).
  PieceBook::Take take_one(std::size_t m) noexcept override {
    try {
      std::size_t p = 0;
      const PieceBook::Take t = take(p);
      if (t != PieceBook::Take::got) return t;
      delivery.taken(p);
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
      if constexpr (sourced) source->stop();  // and no member reads on (a read in progress returns first)
      return PieceBook::Take::none;
    }
  }
  void wait_room() noexcept override { book.wait_room(); }
  void sealed() noexcept override {
    if (open) {
      // A flowing run: its pieces finish later, and complete it. A
      // Source's reading is over (every member found its end).
      const std::size_t elems = sourced ? source->read() : n;
      tally.summary().elems = elems;
      tally.summary().chunks = slots.units(elems);
      spread.flowing_.runs().seal(*open);
      return;
    }
    tally.seal();
  }

  // A flowing run whose Sink waits for the runs before it (their Sinks
  // finished): once they are complete (OpenRuns::when_front), the pieces
  // done meanwhile are delivered here, in order, and later ones by the
  // threads that finish them; then the piece the run held back for this
  // (start_flowing_run) counts as finished.
  void release_deliveries() noexcept {
    try {
      deliver(book.handed_back());
    } catch (...) {
      book.stop(std::current_exception());
    }
    spread.flowing_.runs().finished(*open);
  }

  // A flowing run failed before its Sink's finish(): the Sink's abort().
  void abandon() noexcept { delivery.abort_sink(); }

  // Lets go of a flowing run's Source and sides (the user's Source, its
  // ranges) before its ticket is ready, as a kept run does: once it is
  // sealed and its every piece finished and delivered, nothing reads them.
  void let_go() noexcept {
    source.reset();
    keep.reset();
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
          book, p, spread.piece_units, slots.unit(), [&](std::size_t q) { return slots.template input<in_t>(q); },
          [&](std::size_t produced) {
            if constexpr (!sunk && !counted) check_fits(slots.records(produced));
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
                                                     std::to_string(s.size) +
                                                     (slots.per() == 1 ? " elements" : " records") +
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
      return std::min(slots.piece(), n - p * slots.piece());
    }
  }

  // Piece p, issued to `member`: its sides (piece_sides.hpp), its chunks
  // numbered as the spread run's (chunk k of the piece is the run's chunk
  // p * piece_units + k, at offset first + k * unit), and, for a counted
  // run into pinned ranges, where it may pack in place (PieceDelivery).
  auto issue(Member& member, std::size_t p) {
    const std::size_t len = length_of(p);
    RunLabel label{p * spread.piece_units, p * slots.piece()};
    if constexpr (counted && !sunk) label.place = delivery.place_for(p, len);
    return RunAccess::run_async(member, label, ::chunkpipe::detail::piece_in_side(ins, slots, p, len),
                                ::chunkpipe::detail::piece_out_side<counted>(outs, slots, p, len));
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
    if constexpr (counted) delivery.emitted(p, ticket.get());
    if constexpr (has_report<std::decay_t<decltype(own)>>::value) {
      if (spread.options_.profile) tally.add(PieceReport{m, p * spread.piece_units, own.report()});
    }
    deliver(book.done(p));
  }
  // A piece a Source ended before: nothing ran, and nothing was emitted
  // (its slot of `emitted` still holds the count of an earlier piece).
  void finish_empty(std::size_t p) {
    if constexpr (counted) delivery.emitted_nothing(p);
    deliver(book.done(p));
  }

  // Feeds the Sink the pieces this thread was handed, in order, and
  // then those that came done meanwhile.
  void deliver(std::vector<std::size_t> pieces) {
    while (!pieces.empty()) {
      for (std::size_t p : pieces) {
        if (book.error()) return;  // a member failed: the Sink gets no more
        if constexpr (counted) {
          delivery.deliver_counted(p, tally.summary());
        } else if constexpr (sunk) {
          delivery.deliver_records(p, length_of(p));
        }
        book.delivered();
      }
      pieces = book.handed_back();
    }
  }

  SpreadEngine& spread;
  // A flowing run's two sides (start_flow); null for a run that keeps to
  // itself, whose sides are run_sides' own, so a Source or Sink is let
  // go of before its ticket is ready, wherever the Run is let go of.
  std::shared_ptr<void> keep;
  InSide& ins;
  OutSide& outs;
  const std::size_t n;
  PieceSlots<Buffer> slots;  // its pieces' sizes and buffers; bound: pieces taken and not yet delivered, at most
  PieceBook book;
  std::shared_ptr<OpenRuns::Run> open;  // a flowing run's place among the open runs (start_flow)
  std::optional<PieceSource<in_t, typename side_callback<InSide>::type>> source;  // a Source's, read in windows
  PieceDelivery<OutSide, Buffer, counted> delivery;  // a Sink's windows, a count's packing
  SpreadTally tally;  // its summary, its pieces' reports, whether the handout is over
};

}  // namespace detail
}  // namespace chunkpipe
