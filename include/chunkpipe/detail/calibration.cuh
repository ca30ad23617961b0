// SPDX-License-Identifier: MIT
// The automatic policy's calibration: the first chunks a pipeline issues
// are timed with a few CUDA event pairs, and once they are done the
// simulator decides how many kernel lanes the runs after them get
// (decide_lanes, decide.hpp).
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

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <vector>

namespace chunkpipe::detail {

class Calibration {
 public:
  /// Chunks timed: enough for a median that one slow chunk (the first
  /// kernel's module load, a copy that ran alone) does not move.
  static constexpr std::size_t chunks = 5;

  /// One timed device op.
  struct Probe {
    OpKind kind = OpKind::h2d;
    int stage = -1;
    std::size_t count = 0;  // elements
    std::size_t bytes = 0;  // copied (copies only)
    Event start, end;
    bool used = false;
  };

  /// For a pipeline of `stages` element-wise stages whose options are
  /// `user`, deciding between 1 and `most` lanes. Creates its events now,
  /// so timing allocates nothing. Throws cuda_error.
  Calibration(const Options& user, int stages, int most, std::size_t unit)
      : user_(user), stages_(stages), most_(most), unit_(unit) {
    probes_.resize(chunks * static_cast<std::size_t>(stages + 2));
    for (Probe& p : probes_) {
      p.start = Event::create(true);
      p.end = Event::create(true);
    }
  }

  /// The probe to time device op `op` (of `count` elements) with, or
  /// nullptr: only ops of whole units (a short run, or a run's ragged end,
  /// would time its calls rather than its work), of the `chunks` chunks
  /// from the first such one on, each once. Never throws.
  Probe* probe_for(const Op& op, std::size_t count) noexcept {
    if (state_ != State::timing) return nullptr;
    if (!armed_) {
      if (count != unit_) return nullptr;
      armed_ = true;
      first_ = op.chunk;
    }
    if (op.chunk < first_) return nullptr;
    const std::size_t c = op.chunk - first_;
    if (c >= chunks) {
      // Later chunks are being issued: the ones skipped (a ragged end, a
      // short run) will never come, so what was timed is all there is.
      closed_ = true;
      return nullptr;
    }
    if (count != unit_) return nullptr;
    const int row = op.kind == OpKind::h2d ? 0 : op.kind == OpKind::d2h ? 1 : 2 + op.stage;
    Probe& p = probes_[c * static_cast<std::size_t>(stages_ + 2) + static_cast<std::size_t>(row)];
    if (p.used) return nullptr;
    p.used = true;
    p.kind = op.kind;
    p.stage = op.stage;
    p.count = count;
    p.bytes = 0;
    return &p;
  }

  /// Elements of the runs being calibrated, for the prediction (0: not known).
  void note_run_elems(std::size_t n) noexcept {
    if (!armed_ && n != 0) run_elems_ = n;
  }

  /// The decision, once made; nullopt before (or if it never can be: the
  /// probes' events failed). If `final`,
  /// decides on whatever chunks were timed (the pipeline has been waited
  /// for); otherwise only once all `chunks` chunks were, or later ones
  /// issued. Never blocks, never throws (a decision that cannot be made is
  /// never made: the lanes stay).
  const std::optional<Decision>& settle(bool final) {
    if (state_ != State::timing || !armed_ || !(closed_ || final || all_used())) return decision_;
    for (const Probe& p : probes_) {
      if (!p.used) continue;
      // Not cudaGetLastError() after either: a pending error may be the
      // caller's own, and NotReady is never recorded as one.
      const cudaError_t q = cudaEventQuery(p.end.get());
      if (q == cudaErrorNotReady) return decision_;  // not yet: a later run asks again
      if (q != cudaSuccess) {
        state_ = State::failed;  // the run that failed reports why; the lanes stay
        return decision_;
      }
    }
    try {
      decision_ = decide_from_probes();
      state_ = State::decided;
    } catch (const cuda_error&) {
      state_ = State::failed;
    } catch (const config_error&) {
      state_ = State::failed;  // nothing measurable was timed (every op below the events' resolution)
    } catch (...) {
      state_ = State::failed;  // out of memory: never asked again, so no later run fails on it
    }
    return decision_;
  }

  const std::optional<Decision>& decision() const noexcept { return decision_; }

 private:
  enum class State { timing, decided, failed };

  bool all_used() const noexcept {
    for (const Probe& p : probes_) {
      if (!p.used) return false;
    }
    return true;
  }

  Decision decide_from_probes() {
    std::vector<TimedOp> timed;
    for (const Probe& p : probes_) {
      if (!p.used) continue;
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
    return decide_calibrated(user_, stages_, timed, run_elems_ != 0 ? run_elems_ : 64 * unit_, most_);
  }

  Options user_;
  int stages_;
  int most_;
  std::size_t unit_;
  std::vector<Probe> probes_;  // [chunk * (stages + 2) + (h2d, d2h, stage...)]
  State state_ = State::timing;
  bool armed_ = false;   // the first chunk is known
  bool closed_ = false;  // ops of a chunk past the timed ones were issued
  std::size_t first_ = 0;
  std::size_t run_elems_ = 0;
  std::optional<Decision> decision_;
};

}  // namespace chunkpipe::detail
