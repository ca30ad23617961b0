// SPDX-License-Identifier: MIT
// The automatic policy's calibration, the part that needs no GPU: which
// device ops are timed, when what was timed is due for a decision, and
// whether a later check's decision replaces the one in force.
// calibration.cuh puts CUDA events on the ops this picks; the tests run it
// on the CPU.
//
// Timing: the first `chunks` whole-unit chunks from the first one issued
// (a short run, or a run's ragged end, would time its calls rather than
// its work), each op once. Checks: every recheck_chunks whole chunks after
// a decision the same again (at least min_check_chunks of them). A check's
// decision replaces the one in force only when what it was made from moved
// by more than moved_margin, so figures that differ by noise never
// republish; and since a kernel that shares the GPU with one on another
// lane takes longer than it would alone, a check is compared only with
// figures timed on the same lanes. Where there are none yet (the first
// check after the lanes changed), only a different choice of lanes
// replaces the decision: sharing lengthens kernels, never shortens them,
// so figures from more lanes can only overstate the compute, and a check
// that still chooses fewer lanes is right to.
#pragma once

#include <chunkpipe/decide.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/detail/linkage.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

/// One round of timing: which ops of the first `chunks` whole-unit chunks
/// from the round's first one are timed, each once, and the run the round
/// times. CalibrationState decides when a round starts, closes or starts
/// over; this only keeps its slots.
class TimingRound {
 public:
  /// Chunks a round times (CalibrationState::chunks).
  static constexpr std::size_t chunks = 5;
  static constexpr std::size_t none = std::numeric_limits<std::size_t>::max();

  /// For a pipeline of `stages` stages scheduled in units of `unit` elements.
  TimingRound(int stages, std::size_t unit)
      : rows_(static_cast<std::size_t>(stages) + 2), unit_(unit), used_(chunks * rows_, false) {}

  std::size_t unit() const noexcept { return unit_; }
  /// Timing slots: chunk * (stages + 2) + (h2d 0, d2h 1, stage s 2 + s).
  std::size_t slots() const noexcept { return used_.size(); }
  bool used(std::size_t slot) const noexcept { return used_[slot]; }
  bool all_used() const noexcept {
    return std::all_of(used_.begin(), used_.end(), [](bool u) { return u; });
  }
  /// Whether the round's first chunk is known (an op of a whole unit came).
  bool armed() const noexcept { return armed_; }
  /// Whether ops of a chunk past the timed ones were issued: what was
  /// timed is all the round gets.
  bool closed() const noexcept { return closed_; }
  /// Whether `chunk` comes after the round's chunks while it is open.
  bool passed_by(std::size_t chunk) const noexcept { return armed_ && !closed_ && chunk >= first_ + chunks; }
  void close() noexcept { closed_ = true; }
  /// Elements and kernel lanes of the runs the round times (those of the
  /// run it began in).
  std::size_t run_elems() const noexcept { return run_elems_; }
  int lanes() const noexcept { return lanes_; }

  /// The slot to time `op` (of `count` elements) in, or none: the round's
  /// chunks' whole-unit ops, each slot once. The first such op arms the
  /// round, which then times the run of `run_elems` elements on `lanes`.
  std::size_t take(const Op& op, std::size_t count, std::size_t run_elems, int lanes) noexcept;

  // Chunks with at least one op timed.
  std::size_t timed_chunks() const noexcept;

  /// Starts over: nothing timed, the next whole chunk first. A slot's
  /// events may be recorded again while an earlier record of them is
  /// pending (the later record is the one an event then reports), so this
  /// needs no wait.
  void rearm() noexcept {
    std::fill(used_.begin(), used_.end(), false);
    armed_ = closed_ = false;
  }

 private:
  std::size_t rows_;
  std::size_t unit_;
  std::vector<bool> used_;
  bool armed_ = false;
  bool closed_ = false;
  std::size_t first_ = 0;
  std::size_t run_elems_ = 0;
  int lanes_ = 1;
};

class CalibrationState {
 public:
  /// Chunks timed: enough for a median that one slow chunk (the first
  /// kernel's module load, a copy that ran alone) does not move.
  static constexpr std::size_t chunks = TimingRound::chunks;
  /// Whole chunks issued after a decision before the next check: 128 of the
  /// default 8 MiB units is 1 GiB, so a check's 30-odd event records are
  /// lost in the work.
  static constexpr std::size_t recheck_chunks = 128;
  /// How far (relative) a stage's time per element or a copy rate must move
  /// from what the decision in force was made from for a check's decision
  /// to replace it. Five chunks' medians agree to a few percent from one
  /// check to the next on the H200.
  static constexpr double moved_margin = 0.10;
  /// Chunks a check must time to conclude: one or two chunks' medians
  /// (a round that began at a run's last chunk, closed by the next run) can
  /// move by the margin on noise alone, so such a round starts over.
  static constexpr std::size_t min_check_chunks = 3;
  /// slot_for()'s answer for an op that is not timed.
  static constexpr std::size_t none = TimingRound::none;

  /// For a pipeline of `stages` stages scheduled in units of `unit` elements.
  CalibrationState(int stages, std::size_t unit) : round_(stages, unit) {}

  /// Timing slots: chunk * (stages + 2) + (h2d 0, d2h 1, stage s 2 + s).
  std::size_t slots() const noexcept { return round_.slots(); }
  bool used(std::size_t slot) const noexcept { return round_.used(slot); }

  /// The slot to time device op `op` (of `count` elements) in, or none;
  /// each slot once per round of timing. Called for every device op in
  /// issue order. Never throws.
  std::size_t slot_for(const Op& op, std::size_t count) noexcept;

  /// The run about to be issued: its elements (0: not known) and kernel
  /// lanes. A round of timing takes those of the run it starts in: the
  /// elements for the prediction, the lanes for comparing checks. (No
  /// decision is made while a round is timing, so its runs' lanes agree.)
  void note_run(std::size_t n, int lanes) noexcept {
    if (n != 0) latest_elems_ = n;
    latest_lanes_ = lanes;
  }
  std::size_t run_elems() const noexcept { return round_.run_elems(); }

  /// The schedule was made again (new element types, or one a failure
  /// tore down): its chunk numbers start over, and whatever the round in
  /// progress recorded may be half done, so the round starts over with
  /// them. A decision in force stays, and the count to the next check.
  void restart() noexcept {
    if (state_ == State::timing) round_.rearm();
  }

  /// Whether a decision was made: the first round concluded (a check's
  /// may replace it later).
  bool decided() const noexcept { return last_.has_value(); }

  /// Whether what was timed is due for a decision once its ops are done:
  /// all `chunks` chunks were timed, or later ones issued, or (`final`:
  /// the pipeline has been waited for) any at all.
  bool due(bool final) const noexcept {
    return state_ == State::timing && round_.armed() && (round_.closed() || final || round_.all_used());
  }

  /// Takes the decision made from what was timed: returns it when it is
  /// the first, or a check's that replaces the one in force (see the top of
  /// this file: its figures moved from those timed on the same lanes, or,
  /// with none such, it chooses other lanes); nullopt when the decision in
  /// force stands. Only after all the round's timed ops ran.
  std::optional<Decision> conclude(Decision d);

  /// No decision can be made from this round, though its ops ran (they
  /// timed nothing measurable, or reading a time failed). Before any
  /// decision: none is asked for again. After one: it stays in force, and
  /// the next check comes as usual.
  void fail() noexcept;
  /// A timed op failed, so whether the others ran is not known and their
  /// events must not be recorded again: no check comes again, and a
  /// decision in force stays.
  void broken() noexcept { state_ = State::failed; }
  bool failed() const noexcept { return state_ == State::failed; }

  /// Whether `now` was made from figures more than moved_margin away from
  /// `before`'s: a stage's time per element, or either copy rate.
  static bool moved(const Decision& before, const Decision& now) noexcept;

 private:
  enum class State { timing, decided, failed };

  TimingRound round_;
  State state_ = State::timing;
  std::size_t since_ = 0;         // whole chunks issued since the last decision
  std::size_t latest_elems_ = 0;  // of the last run issued
  int latest_lanes_ = 1;          // of the last run issued
  std::optional<Decision> last_;  // the decision in force
  std::vector<std::optional<Decision>> baselines_;  // [lanes]: the figures checks on those lanes compare with
};

}  // namespace chunkpipe::detail

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/calibration_state.inl>
#endif
