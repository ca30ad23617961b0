// SPDX-License-Identifier: MIT
// Definitions for detail/lane_tuner.cuh. Included at its bottom where chunkpipe is
// header-only, or once by <chunkpipe/compiled.hpp> (detail/linkage.hpp); do
// not include directly.
#pragma once

namespace chunkpipe::detail {

CHUNKPIPE_INLINE Calibration* LaneTuner::new_schedule(bool calibrates, const Options& options, int stages,
                                                      int lane_capacity, std::size_t chunk_elems) {
  if (calibrates && !cal_) {
    cal_.emplace(options, stages, lane_capacity, chunk_elems);
    return &*cal_;
  }
  if (cal_) cal_->restart();
  return nullptr;
}

CHUNKPIPE_INLINE int LaneTuner::lanes_for_run(std::size_t n) {
  if (!cal_) return run_lanes_;
  if (!cal_->decided()) settle(false);
  cal_->note_run(n == unknown_length ? 0 : n, run_lanes_);
  return run_lanes_;
}

CHUNKPIPE_INLINE void LaneTuner::settle(bool final) {
  if (!cal_) return;
  std::optional<Decision> d = cal_->settle(final);
  if (!d) return;
  run_lanes_ = d->chosen.geometry.kernel_lanes;
  std::lock_guard<std::mutex> lock(decided_mutex_);
  decision_ = std::move(*d);
}

CHUNKPIPE_INLINE std::optional<Decision> LaneTuner::decision() const {
  std::lock_guard<std::mutex> lock(decided_mutex_);
  return decision_;
}

CHUNKPIPE_INLINE std::string LaneTuner::why() const {
  std::lock_guard<std::mutex> lock(decided_mutex_);
  return decision_ ? decision_->why : std::string();
}

CHUNKPIPE_INLINE int LaneTuner::decided_lanes() const {
  std::lock_guard<std::mutex> lock(decided_mutex_);
  return decision_ ? decision_->chosen.geometry.kernel_lanes : 0;
}

}  // namespace chunkpipe::detail
