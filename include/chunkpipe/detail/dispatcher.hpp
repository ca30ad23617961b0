// SPDX-License-Identifier: MIT
// Which executor issues a GPU run: the one place that chooses (issue 30).
// A run is given an executor when it is started (choose()); at issue time
// a run given graphs still goes on streams if a stage has since been found
// not to capture (refusal()), or if its graph cannot be built
// (build_failed()); a plan shows what a run of its length would get
// (planned()). What happened is kept as GraphStats.
//
// Host-only: it holds the choice and its record, not the executors
// (Issuer's StreamExecutor and GraphExecutor), and it takes the rule
// itself, choose_executor and graph_refusal, from detail/option_rules.hpp.
#pragma once

#include <chunkpipe/options.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/detail/linkage.hpp>

#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>

namespace chunkpipe::detail {

class Dispatcher {
 public:
  /// For a pipeline with options `o` resolved to `g`; `all_elementwise`:
  /// Map stages only (which a graph replays exactly).
  Dispatcher(const Options& o, const Geometry& g, bool all_elementwise)
      : options_(o), geometry_(g), all_elementwise_(all_elementwise) {}
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  /// The executor a run of `chunks` units gets once its shape has repeated
  /// (the automatic executor builds graphs only for shapes that repeat):
  /// what a plan shows (PipelineFront::plan_for). `staged`: any side goes
  /// through host threads. Never throws.
  static Executor planned(const Options& o, const Geometry& g, bool all_elementwise, std::size_t chunks,
                          bool staged) noexcept {
    return ::chunkpipe::detail::choose_executor(o, g, all_elementwise, chunks, staged, graph_after_runs);
  }

  /// The executor a run of `n` elements (`chunks` units) gets when it is
  /// started, counting the runs of each length for the automatic choice.
  /// `staged`: any side goes through host threads. `labelled`: a spread
  /// piece of a pipeline whose stages see their context, which goes on
  /// streams: a graph replays the launches its ChunkFn made when it was
  /// built, for every run of its length, and each piece's numbers differ
  /// (a graph per label would be built for every piece and never
  /// replayed). A run of nothing goes on streams (nothing is issued).
  /// Where a run that asked for graphs goes on streams, `note` says why.
  /// Throws only std::bad_alloc.
  Executor choose(std::size_t n, std::size_t chunks, bool staged, bool labelled, std::string& note);

  /// At issue, for a run given graphs: why it must go on streams after
  /// all (a stage found not to capture since it was started), or empty.
  std::string refusal() const;

  /// A run's graph was issued: `path` is GraphOps::Path (built,
  /// updated or replayed), `times` what the executor measured, `cached`
  /// the graphs it holds now.
  template <class Path>
  void graph_issued(Path path, const GraphStats& times, std::size_t cached) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (path == Path::built) {
      ++stats_.built;
      stats_.build_ms = times.build_ms;
      stats_.instantiate_ms = times.instantiate_ms;
      stats_.copy_kernels = times.copy_kernels;
    } else if (path == Path::updated) {
      ++stats_.updated;
      stats_.update_ms = times.update_ms;
    } else {
      ++stats_.replayed;
    }
    stats_.launch_ms = times.launch_ms;
    stats_.cached = cached;
  }

  /// A run's graph could not be built (graph_build_error: `why`;
  /// `every_shape` when a stage cannot be captured, so that no later run
  /// gets graphs either). Returns whether the run goes on streams instead:
  /// false under Executor::graphs, where it fails.
  bool build_failed(const std::string& why, bool every_shape);

  /// New slots (other element types): a stage may capture where it did not.
  void new_flow() {
    std::lock_guard<std::mutex> lock(mutex_);
    refused_.clear();
  }

  /// What the graph executor did so far (ChunkedPipeline::graph_stats()).
  GraphStats stats() const;

 private:
  const Options& options_;  // the owner's (PipelineFront's), which outlive this
  const Geometry& geometry_;
  const bool all_elementwise_;

  mutable std::mutex mutex_;  // guards what follows
  std::unordered_map<std::size_t, int> shape_runs_;  // runs per element count
  std::string refused_;  // why no stage of this pipeline can be a graph
  GraphStats stats_;
};

}  // namespace chunkpipe::detail

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/dispatcher.inl>
#endif
