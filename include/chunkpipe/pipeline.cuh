// SPDX-License-Identifier: MIT
// chunkpipe: stream host data through the GPU in chunks, so that copies in,
// kernels and copies out of different chunks overlap.
//
//   #include <chunkpipe/pipeline.cuh>
//
//   struct Fma {
//     float a, b;
//     __device__ float operator()(float x) const { return fmaf(x, a, b); }
//   };
//   chunkpipe::ChunkedPipeline<chunkpipe::Map<Fma>> pipe({.chunk_elems = 4 << 20, .depth = 3},
//                                                        chunkpipe::Map<Fma>{{0.999f, 0.0625f}});
//   pipe.run(in, out);   // host ranges, pinned or pageable
//
// This umbrella header brings in everything: the plan (plan.hpp), the hazard
// check (hazards.hpp), stages (stage.hpp), ranges (io.hpp), options
// (options.hpp), reports (report.hpp), the CUDA resources (memory.cuh) and
// the executor (detail/executor.cuh). The host backend (host_backend.hpp)
// needs no CUDA and is included separately.
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/errors.hpp>
#include <chunkpipe/hazards.hpp>
#include <chunkpipe/io.hpp>
#include <chunkpipe/measure.cuh>
#include <chunkpipe/memory.cuh>
#include <chunkpipe/options.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/run_ticket.cuh>
#include <chunkpipe/simulate.hpp>
#include <chunkpipe/stage.hpp>
#include <chunkpipe/version.hpp>
#include <chunkpipe/detail/executor.cuh>

#include <memory>
#include <utility>

namespace chunkpipe {

/// A pipeline of stages that owns its slots (device buffers, and pinned
/// host buffers when it stages pageable memory), its streams and its host
/// worker threads, all allocated once and reused by every run.
///
/// Each chunk goes host -> device, through the stages in order, and back,
/// following the plan of Options::policy. A ChunkedPipeline is move-only; a
/// moved-from pipeline may only be destroyed or assigned to. One run at a
/// time: a run started while another is in flight is ordered after it.
template <class... Stages>
class ChunkedPipeline {
 public:
  /// Builds the pipeline with default-constructed stages. Allocates nothing
  /// on the device yet (the first run does, once). Throws config_error for
  /// bad options or a device that does not exist, cuda_error if CUDA fails.
  explicit ChunkedPipeline(Options options = {})
      : runner_(std::make_unique<detail::CudaRunner<Stages...>>(options, Stages{}...)) {}

  /// Builds the pipeline with the given stage objects (functors with state).
  ChunkedPipeline(Options options, Stages... stages)
      : runner_(std::make_unique<detail::CudaRunner<Stages...>>(options, std::move(stages)...)) {}

  ChunkedPipeline(ChunkedPipeline&&) noexcept = default;
  ChunkedPipeline& operator=(ChunkedPipeline&&) noexcept = default;

  /// Waits for work in flight (ignoring its errors) and frees everything.
  /// Never throws.
  ~ChunkedPipeline() = default;

  /// Runs `in` through the stages into `out` and returns when every output
  /// element is written. `in`/`out` are ranges or inputs(...)/outputs(...);
  /// `in` may also be a Source and `out` a Sink (io.hpp), and then the
  /// length need not be known up front. Pageable ranges are staged as
  /// Options::staging says. Throws config_error for bad ranges before
  /// anything is queued; on a CUDA failure cuda_error, on a failing stage,
  /// source or sink what it threw, and always only after every stream and
  /// host task of the run has stopped.
  template <class In, class Out>
  void run(In&& in, Out&& out) {
    runner_->start(std::forward<In>(in), std::forward<Out>(out), false).wait();
  }

  /// Starts the same run and returns once it is queued; the ticket's wait()
  /// blocks until it is complete and throws its errors. With only pinned (or
  /// device) memory this returns after enqueueing every op; when pageable
  /// memory is staged, a chunkpipe thread drives the run. The ranges must
  /// stay alive and untouched until the run is waited for. Throws
  /// config_error for bad ranges before anything is queued. Starting a run
  /// waits for the host side (staging) of the previous one, never for its
  /// device work.
  template <class In, class Out>
  [[nodiscard]] RunTicket run_async(In&& in, Out&& out) {
    return runner_->start(std::forward<In>(in), std::forward<Out>(out), true);
  }

  /// Waits for the most recent run; throws its error.
  void wait() { runner_->wait_last(); }

  /// The options it was built with.
  const Options& options() const noexcept { return runner_->front().options(); }
  /// The policy, slot count and scheduling unit runs use (see Options::grain_elems).
  const Geometry& geometry() const noexcept { return runner_->front().geometry(); }
  /// The plan a run of `elems` elements follows; pageable inputs or outputs
  /// add host staging ops. Never blocks, needs no device.
  Plan plan_for(std::size_t elems, bool stage_in = false, bool stage_out = false) const {
    return runner_->front().plan_for(elems, stage_in, stage_out);
  }
  /// The device it runs on.
  int device() const noexcept { return runner_->device(); }

  /// False once a CUDA error has broken the device context (a kernel that
  /// faulted): every later run then throws pipeline_error.
  bool healthy() const noexcept { return runner_->healthy(); }

  /// Unregisters the ranges Staging::registered pinned in place (they stay
  /// registered across runs, so repeated runs over a buffer pay once).
  /// Waits for work in flight first. Call it before freeing such a range
  /// while the pipeline lives. Throws cuda_error if CUDA fails.
  void release_registrations() { runner_->release_registrations(); }

  /// The link the reports' floor is computed against (see measure.cuh).
  void set_link(const LinkModel& link) { runner_->set_link(link); }

  /// The most recent run's timeline, when Options::profile is on and the
  /// run has been waited for. Throws pipeline_error otherwise.
  const Report& report() const { return runner_->report(); }

 private:
  std::unique_ptr<detail::CudaRunner<Stages...>> runner_;
};

/// Builds a ChunkedPipeline, deducing the stage types:
///   auto pipe = chunkpipe::make_pipeline(opts, chunkpipe::map(Fma{a, b}));
template <class... Stages>
ChunkedPipeline<Stages...> make_pipeline(Options options, Stages... stages) {
  return ChunkedPipeline<Stages...>(options, std::move(stages)...);
}

}  // namespace chunkpipe
