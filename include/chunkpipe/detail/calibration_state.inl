// SPDX-License-Identifier: MIT
// Definitions for detail/calibration_state.hpp. Included at its bottom where
// chunkpipe is header-only, or once by <chunkpipe/compiled.hpp>
// (detail/linkage.hpp); do not include directly.
#pragma once

namespace chunkpipe::detail {

CHUNKPIPE_INLINE std::size_t TimingRound::take(const Op& op, std::size_t count, std::size_t run_elems,
                                               int lanes) noexcept {
  if (closed_) return none;
  if (!armed_) {
    if (count != unit_) return none;
    armed_ = true;
    first_ = op.chunk;
    run_elems_ = run_elems;
    lanes_ = lanes;
  }
  if (op.chunk < first_) return none;
  const std::size_t c = op.chunk - first_;
  if (count != unit_) return none;
  const std::size_t row = op.kind == OpKind::h2d ? 0 : op.kind == OpKind::d2h ? 1 : 2 + static_cast<std::size_t>(op.stage);
  if (row >= rows_) return none;
  const std::size_t slot = c * rows_ + row;
  if (used_[slot]) return none;
  used_[slot] = true;
  return slot;
}

CHUNKPIPE_INLINE std::size_t TimingRound::timed_chunks() const noexcept {
  std::size_t n = 0;
  for (std::size_t c = 0; c < chunks; ++c) {
    const auto row = used_.begin() + static_cast<std::ptrdiff_t>(c * rows_);
    if (std::any_of(row, row + static_cast<std::ptrdiff_t>(rows_), [](bool u) { return u; })) ++n;
  }
  return n;
}

CHUNKPIPE_INLINE std::size_t CalibrationState::slot_for(const Op& op, std::size_t count) noexcept {
  if (state_ == State::decided && op.kind == OpKind::h2d && count == round_.unit() && ++since_ >= recheck_chunks) {
    // A check: time again from this chunk on. Every slot's op had run
    // when the round before was concluded (settle() found each end event
    // done), so its events may be recorded again.
    round_.rearm();
    since_ = 0;
    state_ = State::timing;
  }
  if (state_ != State::timing) return none;
  if (round_.passed_by(op.chunk)) {
    // Later chunks are being issued: the ones skipped (a ragged end, a
    // short run) will never come, so what was timed is all there is;
    // unless a check timed too few, which starts over from here.
    if (last_ && round_.timed_chunks() < min_check_chunks) {
      round_.rearm();
    } else {
      round_.close();
    }
  }
  // The round takes the figures of the run it begins in.
  return round_.take(op, count, latest_elems_, latest_lanes_);
}

CHUNKPIPE_INLINE std::optional<Decision> CalibrationState::conclude(Decision d) {
  state_ = State::decided;
  since_ = 0;
  const std::size_t lanes = static_cast<std::size_t>(std::max(round_.lanes(), 1));
  if (baselines_.size() <= lanes) baselines_.resize(lanes + 1);
  std::optional<Decision>& same_lanes = baselines_[lanes];
  if (last_) {
    const bool replace = same_lanes ? moved(*same_lanes, d)
                                    : d.chosen.geometry.kernel_lanes != last_->chosen.geometry.kernel_lanes;
    if (!replace) {
      if (!same_lanes) same_lanes = d;  // what later checks on these lanes compare with
      return std::nullopt;
    }
    // The work moved: figures timed on other lanes are of the work before.
    for (std::optional<Decision>& b : baselines_) b.reset();
  }
  same_lanes = d;
  last_ = d;
  return d;
}

CHUNKPIPE_INLINE void CalibrationState::fail() noexcept {
  if (last_) {
    state_ = State::decided;
    since_ = 0;
  } else {
    state_ = State::failed;
  }
}

CHUNKPIPE_INLINE bool CalibrationState::moved(const Decision& before, const Decision& now) noexcept {
  auto far = [](double a, double b) { return std::fabs(b - a) > moved_margin * std::max(std::fabs(a), 1e-12); };
  const std::vector<double>& was = before.measured.stage_ns_per_elem;
  const std::vector<double>& is = now.measured.stage_ns_per_elem;
  if (was.size() != is.size()) return true;
  for (std::size_t i = 0; i < was.size(); ++i) {
    if (far(was[i], is[i])) return true;
  }
  return far(before.machine.link.h2d_gbps, now.machine.link.h2d_gbps) ||
         far(before.machine.link.d2h_gbps, now.machine.link.d2h_gbps);
}

}  // namespace chunkpipe::detail
