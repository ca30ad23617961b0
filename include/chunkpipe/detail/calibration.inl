// SPDX-License-Identifier: MIT
// Definitions for detail/calibration.cuh. Included at its bottom where chunkpipe is
// header-only, or once by <chunkpipe/compiled.hpp> (detail/linkage.hpp); do
// not include directly.
#pragma once

namespace chunkpipe::detail {

CHUNKPIPE_INLINE Calibration::Calibration(const Options& user, int stages, int most, std::size_t unit)
    : user_(user), stages_(stages), most_(most), unit_(unit), state_(stages, unit) {
  probes_.resize(state_.slots());
  for (Probe& p : probes_) {
    p.start = Event::create(true);
    p.end = Event::create(true);
  }
}

CHUNKPIPE_INLINE Calibration::Probe* Calibration::probe_for(const Op& op, std::size_t count) noexcept {
  const std::size_t slot = state_.slot_for(op, count);
  if (slot == CalibrationState::none) return nullptr;
  Probe& p = probes_[slot];
  p.kind = op.kind;
  p.stage = op.stage;
  p.count = count;
  p.bytes = 0;
  return &p;
}

CHUNKPIPE_INLINE std::optional<Decision> Calibration::settle(bool final) {
  if (!state_.due(final)) return std::nullopt;
  for (std::size_t i = 0; i < probes_.size(); ++i) {
    if (!state_.used(i)) continue;
    // Not cudaGetLastError() after either: a pending error may be the
    // caller's own, and NotReady is never recorded as one.
    const cudaError_t q = cudaEventQuery(probes_[i].end.get());
    if (q == cudaErrorNotReady) return std::nullopt;  // not yet: a later run asks again
    if (q != cudaSuccess) {
      state_.broken();  // the run that failed reports why; the lanes stay
      return std::nullopt;
    }
  }
  try {
    return state_.conclude(decide_from_probes());
  } catch (const cuda_error&) {
    state_.fail();
  } catch (const config_error&) {
    state_.fail();  // nothing measurable was timed (every op below the events' resolution)
  } catch (...) {
    state_.fail();  // out of memory: never asked again, so no later run fails on it
  }
  return std::nullopt;
}

CHUNKPIPE_INLINE Decision Calibration::decide_from_probes() {
  std::vector<TimedOp> timed;
  for (std::size_t i = 0; i < probes_.size(); ++i) {
    if (!state_.used(i)) continue;
    const Probe& p = probes_[i];
    float ms = 0.0f;
    CHUNKPIPE_CUDA_TRY(cudaEventElapsedTime(&ms, p.start.get(), p.end.get()));
    TimedOp op;
    op.kind = p.kind;
    op.stage = p.stage;
    op.end_ms = static_cast<double>(ms);
    op.bytes = p.bytes;
    op.elems = p.count;
    timed.push_back(op);
  }
  const std::size_t n = state_.run_elems() != 0 ? state_.run_elems() : 64 * unit_;
  return decide_calibrated(user_, stages_, timed, n, most_);
}

}  // namespace chunkpipe::detail
