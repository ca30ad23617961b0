// SPDX-License-Identifier: MIT
// Run setup shared by every backend: what a run's ranges become before any
// op is issued (endpoints, the run's spec for the schedule, the slot flow)
// and the checks made on them: ranges of one run that overlap, and ranges
// that overlap those of a run still in flight. Host-only.
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/detail/slots.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace chunkpipe::detail {

/// The Flow of inputs `In` through `Stages...`, built once per type list:
/// a run looks it up without allocating.
template <class In, class... Stages>
const Flow& flow_of() {
  static const Flow flow = ::chunkpipe::detail::make_flow(In{}, types<Stages...>{});
  return flow;
}

/// What the schedule needs to know of a run of `n` elements (unknown_length
/// when a Source decides) cut into chunks of `chunk_elems`.
inline RunSpec spec_for(const Endpoints& e, std::size_t n, std::size_t chunk_elems) {
  RunSpec s;
  s.chunks = n == unknown_length ? unknown_chunks : (n + chunk_elems - 1) / chunk_elems;
  for (const auto& in : e.in) s.stage_in = s.stage_in || in.staged;
  for (const auto& out : e.out) s.stage_out = s.stage_out || out.staged;
  s.elems = n == unknown_length ? 0 : n;
  return s;
}

/// One host range a run reads or writes, as bytes.
struct RangeRef {
  const std::byte* lo = nullptr;
  const std::byte* hi = nullptr;  ///< one past the end
  std::size_t elem_size = 0;
  bool output = false;            ///< written by the run
  int index = 0;                  ///< input or output index

  bool overlaps(const RangeRef& o) const noexcept { return lo < o.hi && o.lo < hi; }
  bool same_as(const RangeRef& o) const noexcept { return lo == o.lo && elem_size == o.elem_size; }
};

/// The host ranges of a run (Sources and Sinks have none), at most a few.
class RunRanges {
 public:
  explicit RunRanges(const Endpoints& e) {
    for (std::size_t i = 0; i < e.in.size(); ++i) {
      const auto& in = e.in[i];
      if (in.data != nullptr && in.size != 0) {
        ranges_.push_back({in.data, in.data + in.size * in.elem_size, in.elem_size, false, static_cast<int>(i)});
      }
    }
    for (std::size_t o = 0; o < e.out.size(); ++o) {
      const auto& out = e.out[o];
      if (out.data != nullptr && out.size != 0) {
        ranges_.push_back({out.data, out.data + out.size * out.elem_size, out.elem_size, true, static_cast<int>(o)});
      }
    }
  }
  const std::vector<RangeRef>& ranges() const noexcept { return ranges_; }
  bool writes() const noexcept {
    for (const RangeRef& r : ranges_) {
      if (r.output) return true;
    }
    return false;
  }

 private:
  std::vector<RangeRef> ranges_;
};

/// "output 0 (4096 bytes at 0x7f12...)", for error messages.
inline std::string describe_range(const RangeRef& r) {
  char at[40];
  std::snprintf(at, sizeof at, "%p", static_cast<const void*>(r.lo));
  return std::string(r.output ? "output " : "input ") + std::to_string(r.index) + " (" +
         std::to_string(static_cast<std::size_t>(r.hi - r.lo)) + " bytes at " + at + ")";
}

/// Throws config_error if two ranges of one run overlap in a way whose
/// result would depend on the schedule: an output over any part of another
/// output, or over an input it is not exactly (same start, same element
/// size: a run may write in place, chunk by chunk).
inline void check_run_ranges(const RunRanges& run) {
  const auto& r = run.ranges();
  for (std::size_t a = 0; a < r.size(); ++a) {
    for (std::size_t b = a + 1; b < r.size(); ++b) {
      if (!r[a].output && !r[b].output) continue;  // reading twice is fine
      if (!r[a].overlaps(r[b])) continue;
      const bool in_place = r[a].output != r[b].output && r[a].same_as(r[b]);
      if (in_place) continue;
      throw config_error("chunkpipe: " + describe_range(r[a]) + " and " + describe_range(r[b]) +
                         " overlap; a run may only write in place over exactly the range it reads "
                         "(same start, same element size), and outputs may not overlap");
    }
  }
}

/// The ranges of the runs a pipeline has queued that may not have finished,
/// so that a new run cannot silently race one of them: a run overlapping
/// the ranges of a run in flight where either writes is refused. `State`
/// has `bool ready()` (never blocks). Runs are forgotten once ready, oldest
/// first, checking one per call so a long queue costs no more than a query.
template <class State>
class InFlightRanges {
 public:
  /// Throws config_error if `run` conflicts with a run in flight other than
  /// those in `ordered_after` (runs the new one is ordered after).
  void check(const RunRanges& run, const std::vector<const State*>& ordered_after) {
    prune();
    if (run.ranges().empty()) return;
    for (const Entry& e : entries_) {
      bool exempt = false;
      for (const State* s : ordered_after) exempt = exempt || s == e.state.get();
      if (exempt) continue;
      for (const RangeRef& mine : run.ranges()) {
        for (const RangeRef& theirs : e.ranges.ranges()) {
          if ((mine.output || theirs.output) && mine.overlaps(theirs)) {
            throw config_error("chunkpipe: " + describe_range(mine) + " of this run overlaps " +
                               describe_range(theirs) + " of a run still in flight, and one of them writes it; "
                               "wait() for that run first, or start this one with after(its ticket)");
          }
        }
      }
    }
  }

  /// Remembers a run just queued.
  void add(std::shared_ptr<State> state, RunRanges ranges) {
    if (ranges.ranges().empty()) return;
    entries_.push_back({std::move(state), std::move(ranges)});
  }

  void clear() noexcept { entries_.clear(); }
  std::size_t size() const noexcept { return entries_.size(); }

 private:
  struct Entry {
    std::shared_ptr<State> state;
    RunRanges ranges;
  };
  void prune() {
    // Runs finish roughly in order: drop finished ones from the front, and
    // look at one more each time so a stuck front cannot hide the rest.
    while (!entries_.empty() && entries_.front().state->ready()) entries_.pop_front();
    if (entries_.size() > 1) {
      Entry& e = entries_[1 + (cursor_++ % (entries_.size() - 1))];
      if (e.state->ready()) e.ranges = RunRanges(Endpoints{});
    }
  }
  std::deque<Entry> entries_;
  std::size_t cursor_ = 0;
};

}  // namespace chunkpipe::detail
