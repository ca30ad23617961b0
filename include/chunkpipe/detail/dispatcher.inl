// SPDX-License-Identifier: MIT
// Definitions for detail/dispatcher.hpp. Included at its bottom where chunkpipe is
// header-only, or once by <chunkpipe/compiled.hpp> (detail/linkage.hpp); do
// not include directly.
#pragma once

namespace chunkpipe::detail {

CHUNKPIPE_INLINE Executor Dispatcher::choose(std::size_t n, std::size_t chunks, bool staged, bool labelled,
                                             std::string& note) {
  if (n == 0 || options_.executor == Executor::streams) return Executor::streams;
  std::lock_guard<std::mutex> lock(mutex_);
  if (labelled) {
    if (options_.executor == Executor::graphs) {
      note = "a spread run's piece: its stages see the spread run's chunk numbers and offsets, which differ from "
             "piece to piece, where a graph replays the launches of the piece it was built for";
      ++stats_.on_streams;
      stats_.last_note = note;
    }
    return Executor::streams;
  }
  if (shape_runs_.size() > 64) shape_runs_.clear();  // bounded; forgetting only delays a graph
  int& seen = shape_runs_[n];
  Executor e =
      ::chunkpipe::detail::choose_executor(options_, geometry_, all_elementwise_, chunks, staged, seen, &note);
  ++seen;
  if (e == Executor::graphs && !refused_.empty()) {
    note = refused_;  // a stage that cannot be captured: every shape would fail the same way
    e = Executor::streams;
  }
  if (e == Executor::streams && options_.executor == Executor::graphs) {
    ++stats_.on_streams;
    stats_.last_note = note;
  }
  return e;
}

CHUNKPIPE_INLINE std::string Dispatcher::refusal() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return refused_;
}

CHUNKPIPE_INLINE bool Dispatcher::build_failed(const std::string& why, bool every_shape) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (every_shape) refused_ = why;
  ++stats_.on_streams;
  stats_.last_note = why;
  return options_.executor != Executor::graphs;
}

CHUNKPIPE_INLINE GraphStats Dispatcher::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace chunkpipe::detail
