// SPDX-License-Identifier: MIT
// The automatic policy's calibration on the GPU: CUDA event pairs around
// the device ops CalibrationState (calibration_state.hpp: which ops, when a
// decision is due, whether a check's replaces the one in force) picks, and
// once they are done the simulator decides how many kernel lanes the runs
// after them get (decide_calibrated, decide.hpp).
//
// Why this much and no more: a run over pinned memory is issued in full
// long before its first kernel ends (the host never waits for the GPU), so
// nothing measured in a run can change that run; what it can change is the
// next run's plan. The slots are laid out once, so the policy, depth and
// unit stay what the options resolve to, and only the lanes (streams that
// exist for the schedule's life, PlanShape::kernel_lanes) move. The stream
// executor times ops here (probe_for); the pipeline asks for the decision
// before it issues each run (settle), never blocking: an event that is not
// done yet only delays the decision to a later run.
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/decide.hpp>
#include <chunkpipe/memory.cuh>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/detail/calibration_state.hpp>
#include <chunkpipe/detail/linkage.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <optional>
#include <vector>

namespace chunkpipe::detail {

class Calibration {
 public:
  /// One timed device op.
  struct Probe {
    OpKind kind = OpKind::h2d;
    int stage = -1;
    std::size_t count = 0;  // elements
    std::size_t bytes = 0;  // copied (copies only)
    Event start, end;
  };

  /// For a pipeline of `stages` element-wise stages whose options are
  /// `user`, scheduled in units of `unit` elements, deciding between 1 and
  /// `most` lanes. Creates its events now, so timing allocates nothing.
  /// Throws cuda_error.
  Calibration(const Options& user, int stages, int most, std::size_t unit);

  /// The probe to time device op `op` (of `count` elements) with, or
  /// nullptr (CalibrationState::slot_for). Never throws.
  Probe* probe_for(const Op& op, std::size_t count) noexcept;

  /// The run about to be issued: its elements (0: not known) and kernel
  /// lanes (CalibrationState::note_run).
  void note_run(std::size_t n, int lanes) noexcept { state_.note_run(n, lanes); }

  /// Whether a decision was made (it stays in force until a check replaces it).
  bool decided() const noexcept { return state_.decided(); }

  /// The schedule was made again: its chunk numbers start over, and a
  /// probe of the round in progress may hold a start without its end
  /// (CalibrationState::restart). Nothing of it is in flight (the schedule
  /// is made again only after a drain).
  void restart() noexcept { state_.restart(); }

  /// A decision made now, from the timed chunks; nullopt if none is due
  /// (CalibrationState::due: still timing, or the next check not yet), the
  /// timed ops have not all run, a check found the work as it was
  /// (CalibrationState::conclude), or none can ever be made (the timed ops
  /// failed). If `final`, decides on whatever chunks were timed (the
  /// pipeline has been waited for). Never blocks, never throws (a decision
  /// that cannot be made is never made: the lanes stay).
  std::optional<Decision> settle(bool final);

 private:
  Decision decide_from_probes();

  Options user_;
  int stages_;
  int most_;
  std::size_t unit_;
  CalibrationState state_;
  std::vector<Probe> probes_;  // one per CalibrationState slot
};

}  // namespace chunkpipe::detail

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/calibration.inl>
#endif
