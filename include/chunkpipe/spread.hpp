// SPDX-License-Identifier: MIT
/// \file
/// A pipeline that spreads each run over several member pipelines of the
/// same stages: Spread<Member>, named SpreadPipeline<Stages...> over GPUs
/// (with <chunkpipe/chunked_pipeline.cuh>) and HostSpreadPipeline<Stages...>
/// over the host backend's virtual devices (with
/// <chunkpipe/host_backend.hpp>). Those headers do not include this one, so
/// that a program of single pipelines does not compile the spread: include
/// it (or the umbrella <chunkpipe/pipeline.cuh>) to spread runs. Host-only
/// C++: the members do all device work; detail/spread.hpp says how the
/// pieces are handed out, finished and delivered.
///
/// \code
/// chunkpipe::SpreadPipeline<chunkpipe::Map<F>> spread({.devices = {0, 1}}, chunkpipe::map(f));
/// chunkpipe::SpreadSummary s = spread.run(x, y);             // blocks
/// auto a = spread.run_async(x, y);                           // queued; returns at once
/// auto b = other.run_async(y, z, chunkpipe::after(a));       // starts once a ended
/// b.wait();
/// \endcode
#pragma once

#include <chunkpipe/options.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/spread_ticket.hpp>
#include <chunkpipe/stage.hpp>  // CHUNKPIPE_WHEN
#include <chunkpipe/detail/spread.hpp>

#include <cstddef>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace chunkpipe {

/// A pipeline that spreads each run over several pipelines of the same
/// stages, one per entry of Options::devices (an entry may repeat: each
/// member has its own slots, streams and host threads). Each member takes
/// the next piece of the run (piece_units whole units) when it has room, so
/// a slower link or a busier GPU takes fewer. Outputs land in place; a
/// Source is read and a Sink fed in chunk order, as by one pipeline, and
/// the chunk numbers, offsets and counts that they and a ChunkFn's context
/// see are the run's. Takes Map, ChunkFn, record stages (Reduce,
/// Accumulate, PerChunk), Filter, Emit and Scan. A Reduce or Accumulate run
/// returns one pipeline's result to the bit; a Filter or Emit run packs what
/// one pipeline packs and returns its count; a Scan run writes one
/// pipeline's bits, all its pieces on the one member that takes its first
/// (the carry passes from piece to piece in that member's schedule), so one
/// Scan run goes at one member's rate while queued ones use the others.
///
/// `Member` is ChunkedPipeline<Stages...> (SpreadPipeline) or
/// HostPipeline<Stages...> (HostSpreadPipeline). Each member has its own
/// copy of the stages, called on its own threads. Not copyable or movable;
/// every call is safe from several threads.
template <class Member>
class Spread {
  using Kind = detail::spread_member<Member>;
  using Engine = detail::SpreadEngine<Member, Kind::template piece_buffer>;
  using Front = typename detail::member_front<Member>::type;
  static constexpr bool folds_ = Front::folds_result;
  static constexpr bool counted_ = Front::counted;
  template <class T>
  static constexpr bool is_order_v = std::is_same_v<T, SpreadAfter> || std::is_same_v<T, typename Kind::order>;

 public:
  /// What run(in, out) returns and a queued run's ticket gives: a Filter's
  /// or Emit's count, or else the SpreadSummary.
  using RunResult = std::conditional_t<counted_, std::size_t, SpreadSummary>;
  /// Pieces a member may have in flight: two keep its schedule fed across
  /// the hand-over from one piece to the next.
  static constexpr std::size_t ahead = Engine::ahead;
  /// Whole units a piece holds: long enough that a piece's own start and
  /// end cost little (64 MiB of float at the default unit: spread_bench
  /// measured one member's pieces no slower than one run, RESULTS.md),
  /// short enough that the last pieces balance the members.
  static constexpr std::size_t piece_units = Engine::piece_units;

  /// One member per entry of options.devices (at least one), each built
  /// with that entry as its device and copies of `stages` (one argument per
  /// stage). Does not block. Throws config_error for bad options, an empty
  /// device list, Options::device set (the list names the devices),
  /// Staging::registered (each member would register its own pieces, whose
  /// edge pages their neighbours share), and what a member's constructor
  /// throws.
  template <class... S>
  explicit Spread(const Options& options, const S&... stages) : engine_(options, stages...) {}

  /// Waits for every run queued (run_async) to complete, and so for what
  /// they are ordered after(...), then lets go of the members. Blocks. Not
  /// to be called from inside one of its runs (a Source, Sink or
  /// finish()), which it would wait for.
  ~Spread() = default;
  Spread(const Spread&) = delete;
  Spread& operator=(const Spread&) = delete;

  /// The member pipelines, one per Options::devices entry, in that order.
  std::size_t members() const noexcept { return engine_.members(); }
  /// Member `i`; throws std::out_of_range past the last. Runs of its own
  /// share its slots with the spread's pieces.
  Member& member(std::size_t i) { return engine_.member(i); }
  /// The options the spread was built with.
  const Options& options() const noexcept { return engine_.options(); }
  /// Elements in a piece: piece_units of the members' unit.
  std::size_t piece_elems() const { return engine_.piece_elems(); }
  /// Threads in the one team the members stage pageable memory with (and
  /// read and write positional Sources and Sinks with), which the spread
  /// also copies counted pieces out with: twice Options::host_threads
  /// where that is set; where it is 0, the team every such spread of the
  /// process shares, sized by measure_host_copy() (host_copy.hpp) once per
  /// process (twice default_host_threads() where it cannot measure).
  /// Starts the team if no run has; blocks for the measurement the first
  /// time in a process (about 0.2 to 0.5 s; otherwise the first run that
  /// stages or copies pieces out takes that time). Throws
  /// std::system_error where a thread cannot start.
  int copy_threads() { return engine_.copy_threads(); }

  /// For a pipeline whose last stage does not fold: runs `in` (ranges,
  /// inputs(...) or a Source) through the stages into `out` (ranges,
  /// outputs(...) or a Sink), spread over the members, and
  /// returns when every piece is done (a Sink's finish() called): the
  /// SpreadSummary, or for a Filter or Emit the elements it wrote. A
  /// PerChunk pipeline's outputs are its records, one per chunk. A Filter's
  /// or Emit's outputs are packed in chunk order, as one pipeline packs
  /// them (a Sink gets each chunk that emitted anything, with the run's
  /// chunk number and packed offset); an output too short gets what fits,
  /// and the run then throws pipeline_error saying how much was emitted.
  /// Into ranges declared Memory::pinned, a piece whose predecessors are
  /// all counted packs straight into them; the others pack into a piece
  /// buffer that is then copied over (SpreadSummary::in_place).
  ///
  /// Blocks; behaves as run_async(in, out).get(), in turn with the runs
  /// queued before it. Throws config_error for bad ranges (overlaps
  /// included) before doing anything, pipeline_error for a Source that
  /// produced more than the outputs hold, and the first error of any
  /// member (the others stop taking pieces; what they had in flight is
  /// waited for; a Sink is abort()ed, finish() throwing included). From
  /// inside a run of the same spread (its Source, Sink or finish()) it
  /// throws pipeline_error: it would wait for that run to end.
  template <class In, class Out CHUNKPIPE_WHEN(!folds_)>
  RunResult run(In&& in, Out&& out) {
    return engine_.run(std::forward<In>(in), std::forward<Out>(out));
  }

  /// For a pipeline whose last stage does not fold: queues the run that
  /// run(in, out) makes and returns its ticket at once; get() blocks until
  /// it is complete and returns what run() returns. `order...`: what the
  /// run starts after, any number of after(...) results: of SpreadTickets
  /// (SpreadAfter), and of what the members' backend orders after
  /// (chunkpipe::after of streams, events and RunTickets for a
  /// SpreadPipeline; of HostTickets for a HostSpreadPipeline; a folding or
  /// counting run's ResultTicket as well). What a stream or event holds is
  /// taken now. The spread's thread waits for it all to end (done or
  /// failed: their errors stay with them) before the run starts; the caller
  /// never waits for it. Unlike one pipeline's run, a spread run may follow
  /// runs that end on host threads (a Source, a Sink, pageable ranges):
  /// waiting for a HostTicket runs its ops, Sources and Sinks on the
  /// spread's thread. What those call must not wait for a run of this
  /// spread queued after this one (nor run() on it: refused), and a run of
  /// another spread that this one follows must not wait for this one:
  /// either would wait for itself.
  ///
  /// Queued runs start in the order they were queued, on a thread of the
  /// spread's, and complete in that order. A run of ranges in and ranges
  /// out continues the runs before it: its pieces start while theirs are
  /// still in flight, unless its ranges meet theirs where either writes,
  /// in which case it waits for them (so a run may read what a run queued
  /// before it writes); so do a run from a Source into ranges (its Source
  /// is read once the Sources queued before it ended, but may be read
  /// while earlier runs still write: a Source that reads what a run queued
  /// before it writes must be ordered after(ticket) that run; on a Scan's
  /// spread, a Source's run keeps to itself) and a Filter's or an
  /// Emit's run into ranges (the piece buffers of such runs are their own:
  /// at most two of them are open at once, so a spread may hold twice one
  /// run's piece buffers), and a Reduce's or an Accumulate's run(in) of
  /// ranges (its records are its own), and a run into a Sink (its pieces
  /// run while the runs before it are in flight, held in piece buffers of
  /// its own, and its Sink is fed once those runs are complete, their
  /// Sinks finished, so Sinks are fed one run after another as one
  /// pipeline feeds them; what a Sink writes is not among the ranges the
  /// spread checks, so a run that reads it must be ordered after(ticket)
  /// the Sink's run). Profiled runs start once the runs before them
  /// are complete; a run ordered
  /// after(...) something holds the runs queued after it until it starts.
  /// The ranges, and what a Source or Sink refers to, must stay alive and
  /// untouched until the run is complete. A Sink's finish() (or abort()) is
  /// called on the spread's thread as the run ends, before its ticket is
  /// ready. Throws config_error for bad ranges (overlaps within the run)
  /// before anything is queued or taken, and what taking `order` throws (a
  /// CUDA error recording an event); the run's own errors reach its
  /// ticket, and the runs after it still run.
  template <class In, class Out, class... Order CHUNKPIPE_WHEN(!folds_)>
  [[nodiscard]] SpreadTicket<RunResult> run_async(In&& in, Out&& out, const Order&... order) {
    static_assert((is_order_v<Order> && ...), "chunkpipe: a spread run's run_async(in, out, order...) takes what "
                                               "chunkpipe::after(...) gives, of spread tickets or of the members' "
                                               "own kind");
    return engine_.run_async(std::forward<In>(in), std::forward<Out>(out), [&] { return hold(order...); });
  }

  /// For a pipeline whose last stage folds (Reduce, Accumulate): runs `in`
  /// (ranges or a Source) spread over the members and returns the result,
  /// to the same bits as one pipeline with these options (the same
  /// records, folded in the same order: detail/folding.hpp). An empty run returns
  /// the Reduce's init (the Accumulate's identity). Blocks; throws as
  /// run(in, out) does.
  template <class In CHUNKPIPE_WHEN(folds_)>
  auto run(In&& in) {
    return engine_.run(std::forward<In>(in));
  }

  /// For a pipeline whose last stage folds: queues the run that run(in)
  /// makes, as run_async(in, out, order...) queues others;
  /// get() on the ticket waits and returns the result.
  template <class In, class... Order CHUNKPIPE_WHEN(folds_)>
  [[nodiscard]] auto run_async(In&& in, const Order&... order) {
    static_assert((is_order_v<Order> && ...), "chunkpipe: a Reduce or Accumulate spread's run_async(in, "
                                               "order...) takes no output (get() gives the result), then only what "
                                               "chunkpipe::after(...) gives, of spread tickets or of the members' "
                                               "own kind");
    return engine_.run_async(std::forward<In>(in), [&] { return hold(order...); });
  }

  /// How the pieces of the latest run went (run(in, out) also returns it;
  /// run(in) of a folding pipeline returns the result instead): empty while
  /// a run is in progress and after one that failed. Thread-safe; does not
  /// block on runs.
  SpreadSummary last_summary() const { return engine_.last_summary(); }

  /// With Options::profile (GPU members; a SpreadPipeline has it, a
  /// HostSpreadPipeline not): the latest run's timeline, every
  /// piece's ops on one time axis, one row set per member in its pictures
  /// (Report::devices, TimedOp::device; detail/spread_report.hpp says how
  /// the members' clocks are lined up). Profiling moves the timing a little,
  /// as for one pipeline: each profiled piece starts only once its member's
  /// first stream has finished what the pieces before it queued there.
  /// Thread-safe; throws pipeline_error while a run is in progress, after
  /// one that failed, and before the first. A call refused before anything
  /// was queued (bad ranges) is no run: the latest run's report and summary
  /// stay.
  template <class M = Member CHUNKPIPE_WHEN(detail::has_report<M>::value)>
  Report report() const {
    return engine_.report();
  }

  /// The members' names in reports: "m0 (device 0)", one per
  /// Options::devices entry.
  std::vector<std::string> member_names() const { return engine_.member_names(); }

 private:
  // What the run starts after, taken now (a stream's work queued so far),
  // as waits for the spread's thread.
  template <class... Order>
  std::vector<std::function<void()>> hold(const Order&... order) {
    std::vector<std::function<void()>> waits;
    (add_waits(waits, order), ...);
    return waits;
  }
  void add_waits(std::vector<std::function<void()>>& waits, const SpreadAfter& order) {
    for (const auto& run : order.runs) waits.emplace_back([run] { run->wait_ended(); });
  }
  template <class O, std::enable_if_t<!std::is_same_v<O, SpreadAfter>, int> = 0>
  void add_waits(std::vector<std::function<void()>>& waits, const O& order) {
    if (std::function<void()> w = detail::RunAccess::hold(engine_.member(0), order)) waits.push_back(std::move(w));
  }

  Engine engine_;
};

// The members' classes, declared only: each is defined by its own header
// (chunked_pipeline.cuh, host_backend.hpp), which a program includes
// beside this one.
template <class... Stages>
class ChunkedPipeline;
template <class... Stages>
class HostPipeline;

/// A pipeline that spreads each run over several GPUs: one ChunkedPipeline
/// per entry of Options::devices (an entry may repeat), each taking the
/// next piece of the run when it has room. Its runs may start after(...)
/// spread tickets and what one pipeline's after(...) takes (streams,
/// events, RunTickets). Needs <chunkpipe/chunked_pipeline.cuh> (nvcc).
///   chunkpipe::SpreadPipeline<chunkpipe::Map<F>> spread({.devices = {0, 1}}, chunkpipe::map(f));
///   chunkpipe::SpreadSummary s = spread.run(in, out);   // blocks
///   auto t = spread.run_async(in, out, chunkpipe::after(stream));  // queued; returns at once
template <class... Stages>
using SpreadPipeline = Spread<ChunkedPipeline<Stages...>>;

/// Runs spread over virtual devices: one HostPipeline per entry of
/// Options::devices (the ordinals are labels), each with its own schedule
/// and slots, taking pieces of a run as it has room; Map, ChunkFn, record,
/// Filter and Emit stages, a ChunkFn seeing the run's chunk numbers. How CI
/// tests the spreading's order, bounds and failures. Its runs may start
/// after(...) spread tickets and HostTickets. Needs
/// <chunkpipe/host_backend.hpp>.
template <class... Stages>
using HostSpreadPipeline = Spread<HostPipeline<Stages...>>;

}  // namespace chunkpipe
