// SPDX-License-Identifier: MIT
// A pipeline's run intake, the one both backends use: a run's two sides
// taken as ends and ranges (take_run_ends, run_setup.hpp), checked against
// the runs still in flight, and, once the run is queued, remembered until
// it is ready. CudaRunner (cuda_runner.cuh) and HostEngine
// (host_engine.hpp) each hold one under their submit lock; what differs
// between them (which ranges are staged, what a device must check first)
// comes in as `staged` and `after`.
#pragma once

#include <chunkpipe/detail/run_setup.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

/// A run of a pipeline with no device: its ranges are checked as any run's
/// are (validate_run() before this, then overlaps within the run; none can
/// overlap a run in flight, as none ever ran), and then it is refused with
/// no_device_error(`why`). Touches no CUDA.
template <class InSide, class OutSide>
[[noreturn]] void refuse_run(const InSide& ins, const OutSide& outs, const std::string& why) {
  if constexpr (!is_source<InSide>::value && !is_sink<OutSide>::value) {
    auto direct = [](const auto&) { return false; };
    ::chunkpipe::detail::check_run_ranges(RunRanges(::chunkpipe::detail::make_endpoints(ins, outs, direct)));
  }
  throw no_device_error(why);
}

/// `Run`: the backend's run state (RunState, HostRun), with `ready()`.
/// Not thread-safe: its owner's lock guards it.
template <class Run>
class RunIntake {
 public:
  /// A run's ends and ranges (take_run_ends: `staged(span)` says which
  /// pageable ranges cross through pinned slots; `piece`, a spread's piece,
  /// has ends the spread cut itself), checked against the runs in flight
  /// but those in `after` (runs the new one is ordered after). Throws
  /// config_error for ranges that overlap within the run, or that overlap
  /// a run in flight where either writes; and what `staged` throws.
  template <class Front, class InSide, class OutSide, class Staged>
  RunEnds take(const Front& front, InSide ins, OutSide outs, std::size_t n, Staged&& staged, bool piece,
               std::shared_ptr<Packed> packed, std::shared_ptr<void> keep, const std::vector<const Run*>& after) {
    RunEnds taken =
        ::chunkpipe::detail::take_run_ends(front, std::move(ins), std::move(outs), n, std::forward<Staged>(staged),
                                           piece, std::move(packed), std::move(keep));
    in_flight_.check(taken.ranges, after);
    return taken;
  }

  /// A run just queued: its ranges are kept until it is ready, and it is
  /// the most recent run.
  void queued(const std::shared_ptr<Run>& run, const RunRanges& ranges) {
    ++started_;
    in_flight_.add(run, ranges);
    last_ = run;
  }
  /// A run of nothing: the most recent run, though nothing of it flies.
  void empty(const std::shared_ptr<Run>& run) { last_ = run; }

  /// Runs queued so far: the next one's number (NVTX).
  std::size_t started() const noexcept { return started_; }
  /// The most recent run, or null.
  const std::shared_ptr<Run>& last() const noexcept { return last_; }

 private:
  InFlightRanges<Run> in_flight_;
  std::shared_ptr<Run> last_;
  std::size_t started_ = 0;
};

}  // namespace chunkpipe::detail
