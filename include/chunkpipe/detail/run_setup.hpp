// SPDX-License-Identifier: MIT
// Run setup shared by every backend: what a run's ranges become before any
// op is issued (endpoints, the run's spec for the schedule, the slot flow)
// and the checks made on them: ranges of one run that overlap, and ranges
// that overlap those of a run still in flight. Host-only.
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/detail/linkage.hpp>
#include <chunkpipe/detail/slots.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

/// The Flow of inputs `In` through `Stages...`, built once per type list:
/// a run looks it up without allocating.
template <class In, class... Stages>
const Flow& flow_of() {
  static const Flow flow = ::chunkpipe::detail::make_flow(In{}, types<Stages...>{});
  return flow;
}

/// Throws pipeline_error if a run that emitted a count wrote less than it
/// emitted (an output range was too short), saying how much was kept.
void check_packed(const Packed& p);

/// Completes a run's endpoints with what the pipeline's last stage makes
/// of them: `per_record` (Endpoints::per_record), for a stage that emits a
/// count its Packed counter (null otherwise), whose run fails once it is
/// complete if an output was too short, and `keep`, storage the outputs
/// point into.
void complete_endpoints(Endpoints& e, std::size_t per_record, std::shared_ptr<Packed> packed,
                        std::shared_ptr<void> keep);

/// What the schedule needs to know of a run of `n` elements (unknown_length
/// when a Source decides) cut into chunks of `chunk_elems`.
RunSpec spec_for(const Endpoints& e, std::size_t n, std::size_t chunk_elems);

/// Whether run `next` (of `next_n` elements) may be issued as a
/// continuation of run `prev` (of `prev_n`; Options::coalesce): every range
/// of both holds exactly its run's elements, every input and output of
/// `next` starts where the same one of `prev` ends, with the same element
/// size, and neither run stages, reads a Source, feeds a Sink, or makes
/// records or counts. Such a pair is one run over the joined ranges to an element-wise
/// pipeline, which cannot see where one ended. Never throws.
bool continues(const Endpoints& prev, std::size_t prev_n, const Endpoints& next, std::size_t next_n) noexcept;

/// Extends `into` over the ranges of `next`, which continues it (continues()).
inline void append_run(Endpoints& into, const Endpoints& next) noexcept {
  for (std::size_t i = 0; i < into.in.size(); ++i) into.in[i].size += next.in[i].size;
  for (std::size_t o = 0; o < into.out.size(); ++o) into.out[o].size += next.out[o].size;
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
  explicit RunRanges(const Endpoints& e);
  const std::vector<RangeRef>& ranges() const noexcept { return ranges_; }
  bool writes() const noexcept;

 private:
  std::vector<RangeRef> ranges_;
};

/// "output 0 (4096 bytes at 0x7f12...)", for error messages.
std::string describe_range(const RangeRef& r);

/// Throws config_error if two ranges of one run overlap in a way whose
/// result would depend on the schedule: an output over any part of another
/// output, or over an input it is not exactly (same start, same element
/// size: a run may write in place, chunk by chunk).
void check_run_ranges(const RunRanges& run);

/// What a run's intake makes of its two sides, on either backend.
struct RunEnds {
  std::shared_ptr<const Endpoints> ends;  ///< bytes-level, windowed, completed
  RunRanges ranges;                       ///< its host ranges, checked against each other
};

/// The one intake of a run's two sides, shared by both backends (a
/// spread's pieces come through it too): the Source and Sink windows of
/// `front` (none for a spread's piece, whose ends the spread cut itself),
/// the endpoints (`staged(span)` says which pageable ranges cross through
/// pinned slots), what the stages' output shape adds (a count, records),
/// then the run's own ranges checked against each other. `n`: the run's
/// length from validate_run(). Throws config_error for ranges that
/// overlap within the run, and what `staged` throws (on the GPU backend it
/// asks CUDA about a range and may register it: cuda_error). Nothing else
/// here touches a device.
template <class Front, class InSide, class OutSide, class Staged>
RunEnds take_run_ends(const Front& front, InSide ins, OutSide outs, std::size_t n, Staged&& staged, bool piece,
                      std::shared_ptr<Packed> packed, std::shared_ptr<void> keep) {
  const Window window = piece ? Window{} : front.window_for(n);
  Endpoints made =
      ::chunkpipe::detail::make_endpoints(std::move(ins), std::move(outs), std::forward<Staged>(staged), window);
  if (Front::counted && !packed) packed = std::make_shared<Packed>();
  ::chunkpipe::detail::complete_endpoints(made, front.per_record(), std::move(packed), std::move(keep));
  auto ends = std::make_shared<const Endpoints>(std::move(made));
  RunRanges ranges(*ends);
  ::chunkpipe::detail::check_run_ranges(ranges);
  return RunEnds{std::move(ends), std::move(ranges)};
}

/// The ranges of the runs a pipeline has queued that may not have finished,
/// so that a new run cannot silently race one of them: a run overlapping
/// the ranges of a run in flight where either writes is refused. `State`
/// has `bool ready()` (never blocks). Runs are forgotten once ready, oldest
/// first. Ranges are kept sorted by address, so a check costs a lookup, not
/// a pass over every run in flight (a stream of small runs keeps hundreds
/// in flight).
template <class State>
class InFlightRanges {
 public:
  /// Throws config_error if `run` conflicts with a run in flight other than
  /// those in `ordered_after` (runs the new one is ordered after).
  void check(const RunRanges& run, const std::vector<const State*>& ordered_after) {
    prune();
    for (const RangeRef& mine : run.ranges()) {
      // Every kept range that starts before `mine` ends and no earlier than
      // the longest kept range before it.
      const auto lo = reinterpret_cast<std::uintptr_t>(mine.lo);
      const std::uintptr_t from = lo > longest_ ? lo - longest_ : 0;
      for (auto it = by_start_.lower_bound(from); it != by_start_.end() && it->first < reinterpret_cast<std::uintptr_t>(mine.hi); ++it) {
        const Kept& k = it->second;
        if (!(mine.output || k.range.output) || !mine.overlaps(k.range)) continue;
        bool exempt = false;
        for (const State* s : ordered_after) exempt = exempt || s == k.state;
        if (exempt) continue;
        throw config_error("chunkpipe: " + describe_range(mine) + " of this run overlaps " +
                           describe_range(k.range) + " of a run still in flight, and one of them writes it; "
                           "wait() for that run first, or start this one with after(its ticket)");
      }
    }
  }

  /// Remembers a run just queued.
  void add(std::shared_ptr<State> state, const RunRanges& ranges) {
    if (ranges.ranges().empty()) return;
    Entry e{std::move(state), {}};
    for (const RangeRef& r : ranges.ranges()) {
      longest_ = std::max<std::uintptr_t>(longest_, static_cast<std::uintptr_t>(r.hi - r.lo));
      e.kept.push_back(by_start_.emplace(reinterpret_cast<std::uintptr_t>(r.lo), Kept{r, e.state.get()}));
    }
    entries_.push_back(std::move(e));
  }

  void clear() noexcept {
    entries_.clear();
    by_start_.clear();
    longest_ = 0;
  }
  std::size_t size() const noexcept { return entries_.size(); }

 private:
  struct Kept {
    RangeRef range;
    const State* state;
  };
  using Index = std::multimap<std::uintptr_t, Kept>;
  struct Entry {
    std::shared_ptr<State> state;
    std::vector<typename Index::iterator> kept;
  };
  void forget(Entry& e) {
    for (auto it : e.kept) by_start_.erase(it);
    e.kept.clear();
  }
  void prune() {
    // Runs finish roughly in order: drop finished ones from the front, and
    // look at one more each time, so a front held up (by work it was told
    // to follow, say) does not keep the rest in forever.
    while (!entries_.empty() && entries_.front().state->ready()) {
      forget(entries_.front());
      entries_.pop_front();
    }
    if (entries_.size() > 1) {
      Entry& e = entries_[1 + (cursor_++ % (entries_.size() - 1))];
      if (!e.kept.empty() && e.state->ready()) forget(e);
    }
    if (entries_.empty()) longest_ = 0;
  }
  std::deque<Entry> entries_;
  Index by_start_;
  std::uintptr_t longest_ = 0;
  std::size_t cursor_ = 0;
};

}  // namespace chunkpipe::detail

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/run_setup.inl>
#endif
