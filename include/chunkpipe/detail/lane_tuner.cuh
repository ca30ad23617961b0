// SPDX-License-Identifier: MIT
// The lane tuner: how many kernel lanes a GPU pipeline's stream runs get.
// A pipeline fixed by its options keeps the geometry's lanes; one that
// calibrates (the automatic policy) times its first chunks (Calibration,
// calibration.cuh), decides, and follows the work when a later check finds
// it moved. Its own state and one lock, so that a reader of the decision
// (ChunkedPipeline::decision(), plan_for) never waits for a run being issued.
#pragma once

#include <chunkpipe/decide.hpp>
#include <chunkpipe/options.hpp>
#include <chunkpipe/detail/calibration.cuh>
#include <chunkpipe/detail/driver.hpp>
#include <chunkpipe/detail/linkage.hpp>

#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

namespace chunkpipe::detail {

class LaneTuner {
 public:
  /// `geometry_lanes`: what runs get while nothing is decided, and always
  /// where the pipeline does not calibrate.
  explicit LaneTuner(int geometry_lanes) noexcept : run_lanes_(geometry_lanes) {}
  LaneTuner(const LaneTuner&) = delete;
  LaneTuner& operator=(const LaneTuner&) = delete;

  /// A fresh lifetime schedule begins (its chunk numbers start at 0).
  /// `calibrates`: whether this pipeline times chunks at all; the first
  /// schedule of one that does makes the Calibration (its events belong to
  /// the current device) and returns it for the executor to time into; a
  /// later schedule keeps what was decided and restarts the round in
  /// progress. Returns nullptr when there is nothing new to hand over.
  /// Called by the issuing side only (under its lock, on the device).
  Calibration* new_schedule(bool calibrates, const Options& options, int stages, int lane_capacity,
                            std::size_t chunk_elems);

  bool has_calibration() const noexcept { return cal_.has_value(); }

  /// The kernel lanes the next run of `n` elements gets: those decided once
  /// the calibrated chunks are done, the geometry's until then. Only the
  /// first decision is made here, before the run is issued, so that the
  /// run after the timed chunks already gets it; a check's is made by
  /// settle() after a run was issued, where deciding (a simulated run per
  /// lane count: under a millisecond of host time) overlaps the GPU's work
  /// instead of delaying the run's first op (benchmarks/probes/default_gap.cu
  /// found each run that followed a check 0.5 ms slower when it was made
  /// here). Issuing side only.
  int lanes_for_run(std::size_t n);

  /// Makes a decision if the calibrated chunks are done (any timed at all,
  /// if `final`), and publishes it: the first, and any later check's that
  /// found the work moved (CalibrationState::recheck_chunks, moved_margin).
  /// Never blocks beyond this tuner's own lock. Issuing side only, on the
  /// pipeline's device.
  void settle(bool final);

  /// What was decided so far (nothing if nothing was). Any thread; never
  /// waits for the issuing side.
  std::optional<Decision> decision() const;

  /// Why the decision chose what it did (Report::decision); empty while
  /// nothing is decided. Any thread.
  std::string why() const;

  /// The lanes decided, or 0 where nothing was (plan_for's "the
  /// geometry's"). Any thread.
  int decided_lanes() const;

 private:
  std::optional<Calibration> cal_;  // issuing side: from the first schedule of a pipeline that calibrates
  int run_lanes_;                   // issuing side: what stream runs get
  mutable std::mutex decided_mutex_;
  std::optional<Decision> decision_;  // guarded by decided_mutex_
};

}  // namespace chunkpipe::detail

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/lane_tuner.inl>
#endif
