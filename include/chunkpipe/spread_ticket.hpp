// SPDX-License-Identifier: MIT
/// \file
/// What a spread run gives back (SpreadPipeline, HostSpreadPipeline): the
/// ticket run_async() returns and the summary of how the run's pieces went
/// over the members. Host-only C++, no CUDA; included by the spread
/// pipelines (pipeline.cuh, host_backend.hpp).
///
/// \code
/// chunkpipe::SpreadPipeline<chunkpipe::Map<F>> spread({.devices = {0, 1}}, chunkpipe::map(f));
/// auto t = spread.run_async(x, y);             // a SpreadTicket
/// chunkpipe::SpreadSummary s = t.summary();  // blocks until the run is complete
/// \endcode
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/report.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

namespace chunkpipe {

/// How a spread run went: its elements and chunks, and the pieces each
/// member pipeline (one per Options::devices entry, in that order) ran.
struct SpreadSummary {
  std::size_t elems = 0;            ///< elements the run read
  std::size_t chunks = 0;           ///< chunks that held elements
  std::vector<std::size_t> pieces;  ///< pieces each member ran, in Options::devices order
  std::size_t written = 0;          ///< Filter, Emit: elements written (run() returns it)
  /// Filter, Emit into ranges declared Memory::pinned: pieces a member
  /// packed straight into the outputs, because every piece before them
  /// was counted by then; the others went through a piece buffer, which
  /// the spread copied over.
  std::size_t in_place = 0;
};

}  // namespace chunkpipe

// The run behind a SpreadTicket (SpreadRunState, SpreadRunEnd), which
// holds the SpreadSummary above.
#include <chunkpipe/detail/spread_run_state.hpp>

namespace chunkpipe {

/// A spread run queued by run_async() (SpreadPipeline, HostSpreadPipeline).
/// Copyable; every copy refers to the same run. `R` is what the run gives:
/// its SpreadSummary, a Filter's or Emit's count, or a Reduce's or
/// Accumulate's result. The ranges, and what a Source or Sink refers to,
/// must stay alive and untouched until the run is complete (wait()
/// returned or ready() is true).
template <class R>
class SpreadTicket {
 public:
  /// A ticket of no run: wait() returns at once, ready() is true.
  SpreadTicket() = default;
  /// \cond CHUNKPIPE_INTERNAL
  // For chunkpipe's spread pipelines.
  explicit SpreadTicket(std::shared_ptr<detail::SpreadRunState<R>> state) : state_(std::move(state)) {}
  /// \endcond

  /// Blocks until the run is complete (a Sink's finish() called); throws
  /// its first error, and the same error on every later call. Safe to call
  /// from several threads; a ticket of no run returns at once. From inside
  /// a run of the same spread (its Source, Sink or finish()) it throws
  /// pipeline_error for a run not yet ended, which would never end.
  void wait() const {
    if (state_) state_->wait();
  }
  /// Blocks until the run is complete and returns what it gives (what the
  /// blocking run() returns). Throws as wait() does, and pipeline_error on
  /// a ticket of no run.
  R get() const { return need().value(); }
  /// \cond CHUNKPIPE_INTERNAL
  // For chunkpipe's spread pipelines: the run behind the ticket.
  const std::shared_ptr<detail::SpreadRunState<R>>& state() const noexcept { return state_; }
  /// \endcond
  /// True once the run has ended, done or failed (wait() says which).
  /// Never blocks.
  bool ready() const { return !state_ || state_->ready(); }
  /// Blocks until the run is complete; how its pieces went. Throws as get().
  SpreadSummary summary() const { return need().summary(); }
  /// Blocks until the run is complete; its timeline, with Options::profile
  /// on GPU members (as the spread's report()). Throws as get(), and
  /// pipeline_error for a run that was not profiled.
  Report report() const {
    std::optional<Report> r = need().report();
    if (!r) throw pipeline_error("chunkpipe: no report: set Options::profile (GPU members) and run first");
    return *std::move(r);
  }

 private:
  const detail::SpreadRunState<R>& need() const {
    if (!state_) throw pipeline_error("chunkpipe: SpreadTicket used on a ticket of no run");
    return *state_;
  }
  std::shared_ptr<detail::SpreadRunState<R>> state_;
};

/// Spread runs a spread run starts after: `spread.run_async(x, y,
/// chunkpipe::after(ticket))`, from after(...) of SpreadTickets (of any
/// spread, this one's included). The run starts once each of them ended,
/// done or failed (their errors stay with their tickets, as for one
/// pipeline's after()); the caller never waits.
struct SpreadAfter {
  /// \cond CHUNKPIPE_INTERNAL
  // The runs it starts after.
  std::vector<std::shared_ptr<const detail::SpreadRunEnd>> runs;
  /// \endcond
};

namespace detail {
template <class T>
struct is_spread_ticket : std::false_type {};
template <class R>
struct is_spread_ticket<SpreadTicket<R>> : std::true_type {};
}  // namespace detail

/// Orders a spread run after spread runs, without blocking the caller:
///   auto a = first.run_async(x, y);
///   auto b = second.run_async(y, z, chunkpipe::after(a));   // reads what a writes
/// Takes SpreadTickets only; a spread run may take the member backend's
/// after(...) too, as another argument: run_async(y, z, after(a),
/// after(stream)). A ticket of no run adds nothing. Never blocks or throws
/// (but std::bad_alloc).
template <class R, class... More>
SpreadAfter after(const SpreadTicket<R>& first, const More&... more) {
  static_assert((detail::is_spread_ticket<More>::value && ...),
                "chunkpipe: after(spread_ticket, ...) takes SpreadTickets only; give a spread run the other "
                "work it starts after as a second order: run_async(in, out, after(spread_ticket), after(stream))");
  SpreadAfter a;
  auto add = [&a](const auto& t) {
    if (t.state()) a.runs.push_back(t.state());
  };
  add(first);
  (add(more), ...);
  return a;
}

}  // namespace chunkpipe
