// SPDX-License-Identifier: MIT
// A spread's runs as its queue holds them (detail/spread.hpp): the two
// kinds of queued job, and which flowing runs are open with what ranges.
// Host-only; tested on the CPU through the spreads of the host backend.
//
// A run that keeps to itself (a profiled run, or a Source's on a carrying
// spread) is a KeptRunJob: its body runs it to the end on the spread's
// thread. A run of ranges or a Source in and ranges or a Sink out (a
// count's too: its piece buffers are its own; a fold of ranges in: its
// records are its own; a Sink's: fed once the runs before it are
// complete) is a FlowRunJob: it
// opens the run and returns, and the run completes when its last piece
// finishes. FlowingRuns says whether a run may start while the runs
// before it are still open: only if none of its ranges meets theirs where
// either writes, the derived wait one pipeline's runs get.
#pragma once

#include <chunkpipe/io.hpp>  // Source, Sink
#include <chunkpipe/report.hpp>
#include <chunkpipe/spread_ticket.hpp>
#include <chunkpipe/stage.hpp>  // types
#include <chunkpipe/detail/endpoints.hpp>  // make_endpoints
#include <chunkpipe/detail/last_spread_run.hpp>
#include <chunkpipe/detail/run_setup.hpp>  // RunRanges
#include <chunkpipe/detail/spread_flow.hpp>  // OpenRuns
#include <chunkpipe/detail/spread_queue.hpp>

#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>

namespace chunkpipe {
namespace detail {

/// What one spread run came to, besides its result.
struct SpreadOutcome {
  SpreadSummary summary;
  std::optional<Report> report;
};

/// A run that keeps to itself: `body()` runs it to the end (returning its
/// result and SpreadOutcome) on the queue's thread, once every run before
/// it is complete.
template <class R, class Body>
struct KeptRunJob final : SpreadQueue::Job {
  KeptRunJob(LastSpreadRun& last, std::shared_ptr<SpreadRunState<R>> st, Body b)
      : last_(last), state_(std::move(st)), body_(std::in_place, std::move(b)) {}

  bool run() noexcept override {
    last_.started(state_->place);
    std::optional<std::pair<R, SpreadOutcome>> done;
    std::exception_ptr error;
    try {
      done.emplace((*body_)());
    } catch (...) {
      error = std::current_exception();
    }
    // The run lets go of its Source and Sink (and the ranges) before its
    // ticket says it is complete, as one pipeline's does.
    try {
      body_.reset();
    } catch (...) {
      if (!error) error = std::current_exception();
    }
    if (error) {
      state_->fail(std::move(error));
      return true;
    }
    last_.completed(state_->place, done->second.summary, done->second.report);
    state_->succeed(std::move(done->first), std::move(done->second.summary), std::move(done->second.report));
    return true;
  }

 private:
  LastSpreadRun& last_;
  std::shared_ptr<SpreadRunState<R>> state_;
  std::optional<Body> body_;  // may hold a move-only Source or Sink
};

/// A run of ranges or a Source in and ranges or a Sink out, which may start while the
/// runs before it still have pieces in flight: `start(ranges)` opens it and returns
/// (its completion completes the ticket). When `start` throws, nothing of
/// the run was issued; it fails once the runs before it are complete, so
/// that tickets still become ready in order.
template <class R, class Start>
struct FlowRunJob final : SpreadQueue::Job {
  FlowRunJob(LastSpreadRun& last, OpenRuns& open, std::shared_ptr<SpreadRunState<R>> st, Start start,
             RunRanges ranges, bool slots = false)
      : last_(last), open_(open), state_(std::move(st)), start_(std::move(start)), ranges_(std::move(ranges)) {
    this->flows = &ranges_;
    this->slots = slots;
  }

  bool run() noexcept override {
    last_.started(state_->place);
    try {
      start_(ranges_);
      return false;
    } catch (...) {
      std::exception_ptr e = std::current_exception();
      open_.wait_idle();
      state_->fail(std::move(e));
      return true;
    }
  }

 private:
  LastSpreadRun& last_;
  OpenRuns& open_;
  std::shared_ptr<SpreadRunState<R>> state_;
  Start start_;  // holds the run's two sides
  RunRanges ranges_;
};

/// The flowing runs started and not complete (OpenRuns), each with its
/// ranges. may_flow() and open() on the spread's queue thread only; runs()
/// from any thread (OpenRuns is thread-safe).
class FlowingRuns {
 public:
  /// Open runs whose pieces go through piece buffers of their own (counts,
  /// Sources, Sinks), at most: the one finishing and the one after it, so that a
  /// queue of them continues from run to run with twice the buffers of one
  /// run, not a group of buffers for every run queued
  /// (PiecePools::lend_group).
  static constexpr std::size_t slot_runs = 2;

  OpenRuns& runs() noexcept { return open_; }

  /// Whether a run with ranges `flows` (null: a run that keeps to itself,
  /// never) may start while the runs opened before it are not complete:
  /// none of its ranges meets an open run's where either writes (a run
  /// that reads what another writes, or writes what another reads or
  /// writes, waits for it, as one pipeline's derived waits order them),
  /// and, for a run with `slots` of its own (SpreadQueue::Job::slots),
  /// fewer than slot_runs such runs are open.
  bool may_flow(const RunRanges* flows, bool slots) {
    while (!open_runs_.empty() && (!open_runs_.front().run || open_runs_.front().run->completed())) {
      open_runs_.pop_front();
    }
    if (flows == nullptr) return false;
    std::size_t with_slots = 0;
    for (const Entry& e : open_runs_) {
      if (!e.run || e.run->completed()) continue;
      with_slots += e.slots;
      for (const RangeRef& a : flows->ranges()) {
        for (const RangeRef& b : e.ranges.ranges()) {
          if ((a.output || b.output) && a.overlaps(b)) return false;
        }
      }
    }
    return !slots || with_slots < slot_runs;
  }

  /// Blocks until a run as for may_flow() may start: for one that keeps to
  /// itself, until every open run is complete; for one that flows, until
  /// the open runs that stop it (the oldest first) are. Never throws.
  void make_way(const RunRanges* flows, bool slots) {
    if (flows == nullptr) {
      open_.wait_idle();
      return;
    }
    while (!may_flow(flows, slots)) open_.wait_completed(*open_runs_.front().run);
  }

  /// Opens a run over `ranges` (with `slots` of its own, as for may_flow),
  /// after every run opened before it; `complete` (which must not throw)
  /// runs once it is sealed and its every piece finished (OpenRuns).
  /// Throws with nothing opened.
  std::shared_ptr<OpenRuns::Run> open(const RunRanges& ranges, bool slots, std::function<void()> complete) {
    open_runs_.push_back(Entry{nullptr, ranges, slots});
    try {
      open_runs_.back().run = open_.open(std::move(complete));
    } catch (...) {
      open_runs_.pop_back();
      throw;
    }
    return open_runs_.back().run;
  }

 private:
  struct Entry {
    std::shared_ptr<OpenRuns::Run> run;
    RunRanges ranges;
    bool slots;
  };
  OpenRuns open_;
  std::deque<Entry> open_runs_;  // the queue thread's
};

/// A spread run's ranges, refused for the whole run where they overlap, as
/// one pipeline refuses them, before any piece runs (the members see only
/// their pieces): a Source's run has its outputs alone, a Sink's its
/// inputs alone (a Source and a Sink: none).
template <class InSide, class OutSide>
RunRanges spread_run_ranges(const InSide& ins, const OutSide& outs) {
  if constexpr (is_sink<OutSide>::value) {
    // What a Sink's run reads: its input ranges (none for a Source).
    return ::chunkpipe::detail::spread_run_ranges(ins, Outputs<>{});
  } else if constexpr (is_source<InSide>::value) {
    return ::chunkpipe::detail::spread_run_ranges(Inputs<>{}, outs);
  } else {
    auto direct = [](const auto&) { return false; };
    RunRanges ranges(::chunkpipe::detail::make_endpoints(ins, outs, direct));
    ::chunkpipe::detail::check_run_ranges(ranges);
    return ranges;
  }
}

/// A side's functor type: a Source's or a Sink's (int for ranges, which
/// have none).
template <class X>
struct side_callback {
  using type = int;
};
template <class T, class F>
struct side_callback<Source<T, F>> {
  using type = F;
};
template <class U, class F>
struct side_callback<Sink<U, F>> {
  using type = F;
};

/// types<T...> as std::tuple<T...>.
template <class T>
struct types_tuple;
template <class... T>
struct types_tuple<types<T...>> {
  using type = std::tuple<T...>;
};

}  // namespace detail
}  // namespace chunkpipe
