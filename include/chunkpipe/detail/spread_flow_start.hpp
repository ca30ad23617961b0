// SPDX-License-Identifier: MIT
// How a flowing spread run (ranges or a Source in, ranges or a Sink out;
// detail/spread.hpp) is started and completed: it is opened among the runs still in flight
// (FlowingRuns, OpenRuns), handed to the members' threads (Handout), and
// completed on whichever thread finishes its last piece. Host-only; tested
// on the CPU through the spread's tests (under ThreadSanitizer too).
//
// Why separate: a flowing run outlives the call that started it, and its
// completion runs on a member's thread, not the run thread; what that
// completion may touch, and in which order it lets go of the run, is its
// own contract, which the engine's queueing need not know.
#pragma once

#include <chunkpipe/spread_ticket.hpp>  // SpreadRunState
#include <chunkpipe/detail/last_spread_run.hpp>
#include <chunkpipe/detail/run_setup.hpp>    // RunRanges
#include <chunkpipe/detail/spread_flow.hpp>  // Handout, OpenRuns
#include <chunkpipe/detail/spread_queue.hpp>
#include <chunkpipe/detail/spread_runs.hpp>  // FlowingRuns

#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

namespace chunkpipe {
namespace detail {

/// What completes flowing run `r` (a SpreadEngine::Run: its `book`,
/// `tally`, `slots` and let_go()), run once it is sealed and its every
/// piece finished, on that thread: its slots go back to the pools; its
/// value is `value(*r)` (the summary, a count, or a folding run's result,
/// folded here: it may throw, failing the run); the run lets go of its
/// Source and sides; then `last`, the latest summary, its ticket (`state`)
/// and the retired count of `queue`. The run's error is
/// moved out of its book and the closure lets go of the run, the value's
/// maker (and what it holds: a folding run's records) and the ticket's
/// state before retire() wakes a blocking caller, so the last reference to
/// what was thrown is the caller's (spread_blocking_result). The closure
/// never throws; making it throws only std::bad_alloc.
template <class Run, class R, class Value>
std::function<void()> spread_flow_completion(std::shared_ptr<Run> r, std::shared_ptr<SpreadRunState<R>> state,
                                             LastSpreadRun& last, SpreadQueue& queue, Value value) {
  return [&last, &queue, r = std::move(r), state = std::move(state),
          value = std::optional<Value>(std::move(value))]() mutable noexcept {
    r->slots.release();  // every piece finished and delivered: the next run may have them
    std::exception_ptr e = r->book.take_error();
    std::optional<R> v;
    if (e) {
      r->abandon();  // a Sink's abort(), as a run that keeps to itself
    } else {
      try {
        v.emplace((*value)(*r));
      } catch (...) {
        e = std::current_exception();
      }
    }
    r->let_go();  // its Source and sides, before its ticket is ready
    if (!e) {
      try {
        last.completed(state->place, r->tally.summary(), std::nullopt);
        state->succeed(std::move(*v), r->tally.summary(), std::nullopt);
      } catch (...) {
        e = std::current_exception();
      }
    }
    if (e) state->fail(std::move(e));
    r.reset();
    value.reset();
    state.reset();
    queue.retire();
  };
}

/// Starts flowing run `r` over `ranges` (`slots`: its pieces go through
/// piece buffers of its own, FlowingRuns::may_flow): opens it after every
/// run opened before (its `open` is set; it completes through
/// spread_flow_completion, with `value`), then the members' threads take its pieces once
/// they have none left of the runs before it (`handout`). On the run
/// thread; never waits. Throws only before the run is open (and then
/// nothing of it was issued); a failure after that fails the run through
/// its completion, in queue order.
template <class Run, class R, class Value>
void start_flowing_run(const std::shared_ptr<Run>& r, const std::shared_ptr<SpreadRunState<R>>& state,
                       const RunRanges& ranges, bool slots, FlowingRuns& flowing, Handout& handout,
                       LastSpreadRun& last, SpreadQueue& queue, Value value) {
  // Made before the run is open: nothing may throw between its opening and
  // its handout's try.
  std::function<void()> release;
  if constexpr (Run::sunk) release = [r] { r->release_deliveries(); };
  r->open = flowing.open(ranges, slots,
                         ::chunkpipe::detail::spread_flow_completion(r, state, last, queue, std::move(value)));
  if constexpr (Run::sunk) {
    // Its Sink is fed once the runs before it are complete (their Sinks
    // finished), as one pipeline feeds the Sinks of its runs in turn: its
    // pieces are taken and run meanwhile, up to its bound, and held in its
    // buffers. One piece more counts as issued until then, so that the run
    // cannot complete first.
    r->book.hold();
    flowing.runs().issued(*r->open);
    flowing.runs().when_front(*r->open, std::move(release));
  }
  try {
    handout.start(r);
  } catch (...) {  // no member will take it: it is sealed with its error
    r->book.stop(std::current_exception());
    flowing.runs().seal(*r->open);
  }
}

}  // namespace detail
}  // namespace chunkpipe
