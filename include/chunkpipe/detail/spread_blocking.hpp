// SPDX-License-Identifier: MIT
// A spread's blocking run() (detail/spread.hpp): the check that refuses a
// blocking run from inside a run of the same spread, and the wait that
// takes a queued run's result on the caller's thread. Host-only; tested
// on the CPU through the spread's tests (under ThreadSanitizer too).
//
// Why separate: both are about the caller's thread, not the spread's
// threads, and the second one's order of waits is what keeps the last
// reference to a run's error on the caller's side; they are kept together,
// apart from the queueing, so that reason stays next to the code it is for.
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/spread_ticket.hpp>  // SpreadTicket, spread_of_this_thread
#include <chunkpipe/detail/spread_queue.hpp>

namespace chunkpipe {
namespace detail {

/// Throws pipeline_error when the calling thread works for a run of
/// `spread` (its Source, Sink or finish(), or what a run it ordered
/// after(...) calls): a blocking run there would wait for a run that waits
/// for this call. Call before anything is queued; never blocks.
inline void refuse_spread_reentry(const void* spread) {
  if (spread_of_this_thread == spread) {
    throw pipeline_error(
        "chunkpipe: run() called from inside a run of the same spread (its Source, Sink or "
        "finish(), or what a run it ordered after(...) calls): it would wait for a run that "
        "waits for this call");
  }
}

/// A blocking run's result: blocks until the run is retired in `queue`
/// (the run thread let go of its job, or a flowing run's completion let
/// go of the run and its state), then takes the result from `ticket`, or
/// rethrows the run's error. So the last reference to what the run threw
/// is dropped on the caller's thread, after the caller has used it: the
/// exception's own reference count is kept inside the C++ runtime, where
/// ThreadSanitizer does not see it, and a run thread freeing it would look
/// like a race.
template <class R>
R spread_blocking_result(SpreadQueue& queue, SpreadTicket<R> ticket) {
  queue.wait_retired(ticket.state()->place);
  return ticket.get();
}

}  // namespace detail
}  // namespace chunkpipe
