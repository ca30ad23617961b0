// SPDX-License-Identifier: MIT
// The stream executor's clocks (stream_ops.hpp): calibration's timed ops,
// which run on twin streams, and profiling's clock.
//
// The calibration's timed ops (calibration.cuh) run on a twin of their
// queue's stream, in order with it (an event each way), and their timing
// events are recorded there: on the H200 a stream on which a timing event
// was once recorded runs later work 1.5 to 3% slower, for runs after it
// too (benchmarks/probes/timing_streams.cu), and the schedule's streams
// carry every run. Profiled runs time every op on the schedule's streams.
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/memory.cuh>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/run_ticket.cuh>
#include <chunkpipe/detail/calibration.cuh>
#include <chunkpipe/detail/linkage.hpp>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

namespace chunkpipe::detail {

/// Calibration's timed ops, each on a twin of its device queue's stream.
class CalibrationTwins {
 public:
  /// Times the device ops `c` picks; nullptr: none. The caller keeps it
  /// alive while runs are issued.
  void set(Calibration* c) noexcept { calibration_ = c; }

  /// The probe that times `op` of `count` elements, or nullptr.
  Calibration::Probe* probe_for(const Op& op, std::size_t count) noexcept {
    return calibration_ ? calibration_->probe_for(op, count) : nullptr;
  }

  /// The twin of device queue `q`'s stream `queue_stream`, made to follow
  /// everything issued there so far (created the first time). Throws
  /// cuda_error.
  cudaStream_t to_twin(std::size_t q, cudaStream_t queue_stream);
  /// `queue_stream` follows what queue `q`'s twin was given.
  void from_twin(std::size_t q, cudaStream_t queue_stream);

 private:
  // Each handover records its event again; a wait takes the latest record.
  struct Twin {
    Stream stream;
    Event there, back;
  };
  Calibration* calibration_ = nullptr;
  std::vector<Twin> twins_;  // [device queue], made on first use
};

/// Profiling's clock (Report::clock_ms): zero at the first profiled run.
class ProfileClock {
 public:
  /// The next profiled run records a new zero (runs in flight keep theirs).
  void restart() noexcept { zero_.reset(); }

  /// Gives `st` its origin on `stream` and the clock's zero (recorded there
  /// first where there is none). Throws cuda_error.
  void start(RunState& st, cudaStream_t stream);

 private:
  std::shared_ptr<const Event> zero_;
  std::chrono::steady_clock::time_point host_zero_;
};

}  // namespace chunkpipe::detail

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/op_timing.inl>
#endif
