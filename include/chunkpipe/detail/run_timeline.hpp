// SPDX-License-Identifier: MIT
// A profiled GPU run's timeline (Options::profile): the events and host
// clock readings its ops were timed with, and the Report wait() builds
// from them (run_state.hpp).
#pragma once

#include <chunkpipe/memory.cuh>
#include <chunkpipe/options.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/detail/endpoints.hpp>
#include <chunkpipe/detail/linkage.hpp>

#include <chrono>
#include <cstddef>
#include <deque>
#include <memory>
#include <string>

namespace chunkpipe::detail {

/// A profiled run's report label: "stage_streams, depth 3, 2 kernel lanes".
std::string run_label(const Geometry& g, int lanes);

struct RunTimeline {
  /// One timed op: device ops by their events, host ops by the host clock.
  struct Timed {
    TimedOp op;
    Event start, end;                                            // device ops
    std::chrono::steady_clock::time_point host_start, host_end;  // host ops
  };
  Event origin;  ///< recorded before the run's first op; every device queue waits for it
  std::chrono::steady_clock::time_point host_origin;
  // The pipeline's profiling clock (Report::clock_ms): its zero, an event
  // recorded before the first profiled run's origin on the same stream,
  // and when the host recorded it.
  std::shared_ptr<const Event> clock_zero;
  std::chrono::steady_clock::time_point host_clock_zero;
  std::deque<Timed> timed;  ///< grows at the back only: host tasks write in place
  Report report;            ///< built by build()

  /// What `report` says before the run is issued: how it is scheduled
  /// (`g`, `o`), over what (`ends`), on which `executor` and why
  /// (`note`), against which `link`. Throws std::bad_alloc only.
  void describe(const Geometry& g, const Options& o, const Endpoints& ends, const LinkModel& link, Executor executor,
                const std::string& note);

  /// Builds `report` for a run of `chunks` and `elems` over `ends` (or
  /// none), once every timed op is over. Blocks on the origin event only.
  /// Throws cuda_error.
  void build(std::size_t chunks, std::size_t elems, const Endpoints* ends);
};

}  // namespace chunkpipe::detail

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/run_timeline.inl>
#endif
