// SPDX-License-Identifier: MIT
// One run's chunks spread over several pipelines of the same stages: one
// per entry of Options::devices (SpreadPipeline on GPUs, pipeline.cuh;
// HostSpreadPipeline's virtual devices, host_backend.hpp). Host-only C++:
// the member pipelines do all device work.
//
// How: the run is cut into pieces of piece_units whole units. Each member
// has a host thread that takes the next piece when it has room (at most
// `ahead` of its pieces in flight), so a slower link or a busier GPU takes
// fewer pieces and holds no one back. A piece is a run of its member over
// the slices of the run's ranges, so outputs land in place and each
// member's schedule overlaps its own pieces as it does back-to-back runs.
// A Source is read in piece order into piece buffers (one thread at a time,
// in chunk order, as a pipeline reads it), and a Sink gets each piece's
// output from its buffer, in chunk order, once every piece before it was
// delivered: the buffers are the reorder buffer, and a piece is taken only
// while fewer than `bound` pieces are taken and not yet delivered, so its
// size is bounded whatever the members' speeds. The buffers are kept from
// one run to the next.
// The first error stops every member from taking more pieces (and the
// Source from being read, the Sink from being fed); the pieces in flight
// are waited for, and the caller gets that error (a Sink's abort(), never
// its finish()).
// Map and ChunkFn stages: a piece is a run of its member labelled with the
// spread run's numbers for its first chunk (RunLabel, driver.hpp), so a
// ChunkFn sees the chunk numbers, offsets and counts one pipeline over the
// whole run gives it. Pieces are whole units of the members' geometry, the
// same as one pipeline's with these options (a ChunkFn's unit is the
// window), so piece p's chunk k is the run's chunk p * piece_units + k, at
// offset p * piece_elems + k * unit.
// Records (a Reduce's partials, one per segment; a PerChunk's or an
// Accumulate's, one per chunk): pieces are whole units, so whole segments
// and chunks, and piece p's records are its own slice of the run's: a
// Reduce or Accumulate spread run lands them in one buffer and folds them
// as one pipeline does (detail/folding.hpp), to the same bits; a Source's fold
// takes them in chunk order as the Sink would.
// Filter and Emit (a count the GPU decides): where a piece's elements go
// depends on what every piece before it emitted. Into pinned output
// ranges, a piece whose first chunk that emits anything finds every piece
// before it counted (each counts itself as its last chunk packs:
// PieceCounts) packs straight into the ranges at that offset, as one
// pipeline would (PackedPlace, endpoints.hpp). Any other piece packs into
// its own buffers (Sink or not), bounded as for a Sink, and the pieces are
// delivered in order: copied into the output ranges at the run's packed
// offset (what fits, as one pipeline writes it, and the run fails once
// complete if a range was too short), or handed to the Sink chunk by chunk
// with the run's chunk numbers and packed offsets. The deliverer's copy
// is the one extra host pass over what such pieces kept.
// Scan (a carry from chunk to chunk): a run's pieces all go to the member
// that takes its first piece (Handout's one member a run), issued in
// order. A piece's first chunk is at the run's offset, not 0, so it starts
// from the carry its member's schedule holds, which the piece before left
// there: the carry is a ring-wide buffer of the member's lifetime schedule,
// so its waits order it across runs as within one. The bits are one
// pipeline's. The other members take the runs queued after it.
// Runs, blocking or queued (run_async), start in the order they were
// started, on one thread of the spread's (started by the first), which
// first waits for what a run was ordered after (after(...), taken when it
// was queued: chunkpipe::Spread::run_async). A run of
// ranges in and ranges out flows: it takes pieces while the runs before it
// still have pieces in flight, each member's room shared by all of them
// (detail/spread_flow.hpp), unless its ranges meet an unfinished run's
// where either writes; runs complete in order all the same. So do a
// count into ranges (its piece buffers are a group lent to it alone,
// PiecePools::lend_group; its count is known once its last piece is
// delivered) and a fold of ranges in (its records are a buffer lent to it
// alone, PiecePools::lend_records, folded on the thread that finishes its
// last piece), and a run from a Source into ranges (its input pieces are a
// group lent to it alone; the members take its pieces, and so read its
// Source, once every run before it has none left, so Sources are read in
// queue order; not on a carrying spread, whose members take whole runs;
// what a Source reads is not among the checked ranges: after(...) orders
// it), and a run into a Sink (its output pieces are a group lent to it
// alone; its deliveries are held until every run before it is complete,
// OpenRuns::when_front, so Sinks are fed, and finished, in queue order). A
// profiled run keeps to itself: it starts once every run before it is
// complete. run() behaves as run_async().get().
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/io.hpp>
#include <chunkpipe/options.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/result.hpp>
#include <chunkpipe/spread_ticket.hpp>
#include <chunkpipe/detail/driver.hpp>  // RunLabel, RunAccess
#include <chunkpipe/detail/front.hpp>
#include <chunkpipe/detail/last_spread_run.hpp>
#include <chunkpipe/detail/piece_book.hpp>
#include <chunkpipe/detail/piece_counts.hpp>
#include <chunkpipe/detail/piece_delivery.hpp>
#include <chunkpipe/detail/piece_pools.hpp>
#include <chunkpipe/detail/piece_sides.hpp>  // slice
#include <chunkpipe/detail/piece_slots.hpp>
#include <chunkpipe/detail/piece_source.hpp>
#include <chunkpipe/detail/spread_blocking.hpp>
#include <chunkpipe/detail/spread_flow.hpp>
#include <chunkpipe/detail/spread_flow_start.hpp>
#include <chunkpipe/detail/spread_member.hpp>
#include <chunkpipe/detail/spread_outcome.hpp>
#include <chunkpipe/detail/spread_queue.hpp>
#include <chunkpipe/detail/spread_report.hpp>
#include <chunkpipe/detail/spread_tally.hpp>
#include <chunkpipe/detail/spread_runs.hpp>
#include <chunkpipe/detail/resource_buffer.hpp>
#include <chunkpipe/detail/run_setup.hpp>  // check_packed
#include <chunkpipe/detail/slots.hpp>  // has_finish, has_abort

#include <cuda/std/span>

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace chunkpipe {
namespace detail {

template <class Member, template <class> class Buffer>
class SpreadEngine {
  static_assert(member_front<Member>::spreadable,
                "chunkpipe: a spread pipeline takes Map, ChunkFn, record stages (Reduce, Accumulate, PerChunk), "
                "Filter, Emit and stages that carry a value from chunk to chunk");
  using Front = typename member_front<Member>::type;
  static constexpr bool folds_ = Front::folds_result;
  static constexpr bool counted_ = Front::counted;
  // What run(in, out) gives: a Filter's or Emit's count, or the summary.
  using RunResult = std::conditional_t<counted_, std::size_t, SpreadSummary>;

 public:
  /// Pieces a member may have in flight: two keep its schedule fed across
  /// the hand-over from one piece to the next.
  static constexpr std::size_t ahead = 2;
  /// Whole units a piece holds: long enough that a piece's own start and
  /// end cost little (64 MiB of float at the default unit: spread_bench
  /// measured one member's pieces no slower than one run, RESULTS.md),
  /// short enough that the last pieces balance the members.
  static constexpr std::size_t piece_units = 8;

  // What each call does, blocks on and throws is said once, on the public
  // face (chunkpipe::Spread, spread.hpp), which holds one of these.
  template <class... S>
  explicit SpreadEngine(const Options& options, const S&... stages)
      : options_(validated(options)),  // first: the rest reads it
        pools_(options_.pinned_memory, ::chunkpipe::detail::spread_copy_team(options_)),
        queue_([this](SpreadQueue::Job& job) { return start(job); }, this) {
    static_assert(sizeof...(S) == Front::stage_count, "chunkpipe: a spread pipeline takes one argument per stage");
    for (int d : options.devices) {
      Options o = options;
      o.devices.clear();
      o.device = d;
      members_.push_back(std::make_unique<Member>(o, stages...));
      spread_member<Member>::share_copy_team(*members_.back(), pools_.shared_team());
    }
    per_record_ = RunAccess::per_record(*members_.front());
    lanes_.emplace(members_.size(), this);
    handout_.emplace(*lanes_, ahead, this, member_front<Member>::carries);
    if constexpr (folds_) {
      const auto& last = std::get<sizeof...(S) - 1>(std::forward_as_tuple(stages...));
      make_folding_ = [last] { return fold_traits<typename Front::last_stage>::make(last); };
    }
  }

  std::size_t members() const noexcept { return members_.size(); }
  Member& member(std::size_t i) { return *members_.at(i); }
  const Options& options() const noexcept { return options_; }
  std::size_t piece_elems() const { return piece_units * members_.front()->geometry().chunk_elems; }
  int copy_threads() { return static_cast<int>(pools_.copy_team().threads()); }

  // Waits for every run queued to complete, then lets go of the members.
  ~SpreadEngine() {
    queue_.close();               // every queued run started
    flowing_.runs().wait_idle();  // the last flowing runs complete while the spread is whole
    handout_.reset();             // then the threads go, before anything they use
    lanes_.reset();
  }
  SpreadEngine(const SpreadEngine&) = delete;
  SpreadEngine& operator=(const SpreadEngine&) = delete;

  // run(in, out): the summary, or a Filter's or Emit's count.
  template <class In, class Out, bool F = folds_, std::enable_if_t<!F, int> = 0>
  RunResult run(In&& in, Out&& out) {
    ::chunkpipe::detail::refuse_spread_reentry(this);
    return ::chunkpipe::detail::spread_blocking_result(
        queue_, run_async(std::forward<In>(in), std::forward<Out>(out), no_after));
  }

  // A run queued behind the runs before it. `take_after()` gives what it
  // waits for first, on the run thread (each call blocks until that work
  // ended, and never throws); it is called once the run's ranges are
  // checked, so that a call refused takes nothing.
  template <class In, class Out, class TakeAfter, bool F = folds_, std::enable_if_t<!F, int> = 0>
  [[nodiscard]] SpreadTicket<RunResult> run_async(In&& in, Out&& out, const TakeAfter& take_after) {
    auto ins = as_inputs(std::forward<In>(in));
    auto outs = as_outputs(std::forward<Out>(out));
    // A counted run's outputs may have any length (run_packed_out).
    const std::size_t n = validate_run(ins, outs, counted_ ? 0 : per_record_);
    RunRanges ranges = ::chunkpipe::detail::spread_run_ranges(ins, outs);
    std::vector<std::function<void()>> after = take_after();  // once the run is known good
    constexpr bool sourced = is_source<decltype(ins)>::value;
    constexpr bool sunk = is_sink<decltype(outs)>::value;
    if constexpr (!(sourced && member_front<Member>::carries)) {
      // Ranges or a Source in, ranges or a Sink out: the run may continue
      // into the runs before it (start_flow); a Source is read once every
      // run before it read its own (Handout takes a run's pieces once the
      // older runs have none left; PieceSource stops for good on an
      // error), and a Sink is fed once the runs before it are complete
      // (start_flowing_run). Not a Source's run on a carrying spread,
      // whose Handout gives a run's pieces to one member and the next
      // run's to the others at once. A profiled run keeps to itself: its
      // report is one run's timeline.
      if (!options_.profile) {
        auto state = std::make_shared<SpreadRunState<RunResult>>(this);
        auto begin = [this, state, ins = std::move(ins), outs = std::move(outs), n](const RunRanges& r) mutable {
          // Once every piece is delivered: the Sink's last window and its
          // finish() (which abort it if they throw), then what the pieces
          // packed (pipeline_error if it did not fit:
          // PieceDelivery::written) or the summary.
          start_flow(state, std::move(ins), std::move(outs), n, r, [](auto& run) {
            run.delivery.finish_sink();
            if constexpr (counted_) {
              const std::size_t written = run.delivery.written();
              run.tally.summary().written = written;
              return written;
            } else {
              return run.tally.summary();
            }
          });
        };
        return enqueue(state,
                       std::make_unique<FlowRunJob<RunResult, decltype(begin)>>(
                           last_, flowing_.runs(), state, std::move(begin), std::move(ranges),
                           counted_ || sourced || sunk),
                       std::move(after));
      }
    }
    return enqueue<RunResult>(
        [this, ins = std::move(ins), outs = std::move(outs), n]() mutable {
          SpreadOutcome o = run_sides(std::move(ins), std::move(outs), n);
          RunResult value = ::chunkpipe::detail::spread_run_value<counted_>(o.summary);
          return std::make_pair(std::move(value), std::move(o));
        },
        std::move(after));
  }

  // run(in): a Reduce's or an Accumulate's result.
  template <class In, bool F = folds_, std::enable_if_t<F, int> = 0>
  auto run(In&& in) {
    ::chunkpipe::detail::refuse_spread_reentry(this);
    return ::chunkpipe::detail::spread_blocking_result(queue_, run_async(std::forward<In>(in), no_after));
  }

  template <class In, class TakeAfter, bool F = folds_, std::enable_if_t<F, int> = 0>
  [[nodiscard]] auto run_async(In&& in, const TakeAfter& take_after) {
    using R = typename fold_traits<typename Front::last_stage>::result;
    auto ins = as_inputs(std::forward<In>(in));
    const std::size_t n = input_length(ins);
    std::vector<std::function<void()>> after = take_after();
    if constexpr (!is_source<decltype(ins)>::value) {
      // Ranges in: the run continues the runs before it, into records of
      // its own, and folds them when its last piece finished (on that
      // thread). Only its inputs can meet another run's ranges.
      if (!options_.profile) {
        RunRanges ranges = ::chunkpipe::detail::spread_run_ranges(ins, Outputs<>{});
        auto state = std::make_shared<SpreadRunState<R>>(this);
        auto begin = [this, state, ins = std::move(ins), n](const RunRanges& r) mutable {
          const std::size_t records = (n + per_record_ - 1) / per_record_;
          auto [owner, at] = pools_.lend_records(std::max<std::size_t>(records * sizeof(R), 1));
          const std::shared_ptr<Folding<R>> folding = make_folding_();
          folding->hold(std::move(owner), reinterpret_cast<const R*>(at), records);
          Outputs<R> outs = ::chunkpipe::outputs(HostSpan<R>{reinterpret_cast<R*>(at), records, Memory::pinned});
          start_flow(state, std::move(ins), std::move(outs), n, r, [folding](auto&) { return folding->result(); });
        };
        return enqueue(state,
                       std::make_unique<FlowRunJob<R, decltype(begin)>>(last_, flowing_.runs(), state,
                                                                        std::move(begin), std::move(ranges)),
                       std::move(after));
      }
    }
    return enqueue<R>(
        [this, ins = std::move(ins), n]() mutable {
          const std::shared_ptr<Folding<R>> folding = make_folding_();
          const std::size_t records = n == unknown_length ? 0 : (n + per_record_ - 1) / per_record_;
          auto outs = folding_outputs(folding, n, records, [&](std::size_t bytes) {
            auto [owner, at] = pools_.lend_records(std::max<std::size_t>(bytes, 1));
            return std::pair<std::shared_ptr<void>, void*>(std::move(owner), at);
          });
          SpreadOutcome o = outs.ranges ? run_sides(std::move(ins), std::move(*outs.ranges), n)
                                        : run_sides(std::move(ins), std::move(*outs.sink), n);
          R value = folding->result();
          return std::make_pair(std::move(value), std::move(o));
        },
        std::move(after));
  }

  SpreadSummary last_summary() const { return last_.summary(); }

  template <class M = Member, std::enable_if_t<has_report<M>::value, int> = 0>
  Report report() const { return last_.report(options_.profile); }

  std::vector<std::string> member_names() const { return ::chunkpipe::detail::spread_member_names(options_.devices); }

 private:
  // Queues `body` (returning the run's result and SpreadOutcome) behind the runs
  // queued before, starting the run thread with the first. Throws only
  // std::bad_alloc and std::system_error, with nothing queued.
  template <class R, class Body>
  SpreadTicket<R> enqueue(Body body, std::vector<std::function<void()>> after) {
    auto state = std::make_shared<SpreadRunState<R>>(this);
    return enqueue(state, std::make_unique<KeptRunJob<R, Body>>(last_, state, std::move(body)), std::move(after));
  }
  template <class R>
  SpreadTicket<R> enqueue(std::shared_ptr<SpreadRunState<R>> state, std::unique_ptr<SpreadQueue::Job> job,
                          std::vector<std::function<void()>> after) {
    job->after = std::move(after);
    queue_.push(std::move(job), &state->place);
    return SpreadTicket<R>(std::move(state));
  }

  static const Options& validated(const Options& options) {
    ::chunkpipe::detail::validate_spread_options(options);
    return options;
  }

  // What a run ordered after nothing waits for.
  static std::vector<std::function<void()>> no_after() { return {}; }

  // Starts a queued run, on the queue's thread (SpreadQueue), in order. A
  // run that keeps to itself starts once every run before it is complete
  // (a profiled run's timeline is its own); a flowing run starts once no
  // open run's ranges meet its own where either writes and, for one with
  // piece buffers of its own (a count, a Source, a Sink), fewer than
  // FlowingRuns::slot_runs such runs are open
  // (FlowingRuns::make_way). The
  // members' threads take the pieces (Handout) and their lanes finish them
  // (MemberLanes), completing flowing runs (OpenRuns).
  bool start(SpreadQueue::Job& job) {
    flowing_.make_way(job.flows, job.slots);
    return job.run();
  }

  // Starts a flowing run (start_flowing_run, detail/spread_flow_start.hpp):
  // its two sides live as long as its Run, which its last piece or its
  // completion lets go of. On the run thread; never waits.
  // `value(run)` gives the ticket its value once the run's pieces all
  // finished (spread_flow_completion).
  template <class R, class InSide, class OutSide, class Value>
  void start_flow(const std::shared_ptr<SpreadRunState<R>>& state, InSide ins, OutSide outs, std::size_t n,
                  const RunRanges& ranges, Value value) {
    const std::size_t piece = piece_elems();
    const std::size_t limit = n == unknown_length ? unknown_length : (n + piece - 1) / piece;
    // A Source's, a Sink's and a count's pieces go through its slots,
    // delivered in order (run_sides' bound); other runs' pieces land in
    // place, whatever their number.
    constexpr bool slots = counted_ || is_source<InSide>::value || is_sink<OutSide>::value;
    const std::size_t bound = slots ? members_.size() * (ahead + 1) : limit;
    // The Run holds the sides alone: it may complete (and let go of them,
    // Run::let_go) on a member's thread before this call returns.
    auto sides = std::make_shared<std::pair<InSide, OutSide>>(std::move(ins), std::move(outs));
    InSide& in_side = sides->first;
    OutSide& out_side = sides->second;
    auto r = std::make_shared<Run<InSide, OutSide>>(*this, in_side, out_side, std::move(sides), n, limit, bound);
    ::chunkpipe::detail::start_flowing_run(r, state, ranges, slots, flowing_, *handout_, last_, queue_,
                                           std::move(value));
  }


  // One run of `n` elements (unknown_length: a Source decides) over its
  // two sides, checked when it was queued (a folding run's outputs are the
  // spread's own records, which need no check). On the run thread.
  template <class InSide, class OutSide>
  SpreadOutcome run_sides(InSide ins, OutSide outs, std::size_t n) {
    const std::size_t piece = piece_elems();
    const std::size_t limit = n == unknown_length ? unknown_length : (n + piece - 1) / piece;
    constexpr bool sourced = is_source<decltype(ins)>::value;
    constexpr bool sunk = is_sink<decltype(outs)>::value;
    // Pieces between taking and delivery: what keeps every member fed
    // while the oldest piece finishes, and no more. Pieces that land in
    // place need no bound.
    const std::size_t bound = sourced || sunk || counted_ ? members_.size() * (ahead + 1) : limit;
    auto run = std::make_shared<Run<decltype(ins), decltype(outs)>>(*this, ins, outs, nullptr, n, limit, bound);
    auto& r = *run;
    if (options_.profile) {
      // Every member's profiling clock starts again with this run, so the
      // members' zeros are close in time and the float event intervals
      // from them stay short (Report::clock_ms).
      for (auto& m : members_) RunAccess::restart_profile_clock(*m);
    }
    r.go();
    const bool profiled = has_report<Member>::value && options_.profile;
    return ::chunkpipe::detail::spread_outcome(r.tally, options_.devices, profiled);
  }

  // One spread run over its two sides (detail/spread_run.inl).
  template <class InSide, class OutSide>
  struct Run;

  using FoldingMaker = typename folding_maker<typename Front::last_stage>::type;

  Options options_;
  std::vector<std::unique_ptr<Member>> members_;
  FlowingRuns flowing_;  // the flowing runs started and not complete
  std::size_t per_record_ = 1;  // input elements per output record
  FoldingMaker make_folding_{};  // a folding pipeline's: a fresh Folding per run
  PiecePools<Buffer> pools_;     // piece buffers and record buffers, kept from run to run
  LastSpreadRun last_;           // the latest run's summary and report
  // Queued runs and the thread that starts them (closed first by
  // ~SpreadEngine, before anything its runs use goes).
  SpreadQueue queue_;
  // Each member's pieces in flight and the threads that finish them, and
  // the threads that take pieces: made last (once the members are) and
  // declared last, so they are joined first, while all the rest is whole.
  std::optional<MemberLanes> lanes_;
  std::optional<Handout> handout_;
};

}  // namespace detail
}  // namespace chunkpipe

#include <chunkpipe/detail/spread_run.inl>
