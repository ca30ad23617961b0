// SPDX-License-Identifier: MIT
// The CUDA stream executor's part that does not depend on the stages: turns
// schedule ops into cudaMemcpyAsync, kernel
// launches, cudaEventRecord and cudaStreamWaitEvent on streams it owns, and
// host staging work on its host worker threads. The driver (driver.hpp)
// hands it ops in issue order, run after run.
//
// It never touches the legacy default stream and never synchronises inside
// the chunk loop. The only places the issuing thread blocks are the ones a
// schedule makes unavoidable: a device op that waits for a host op (an H2D
// that needs its pinned slot filled, a D2H that needs its pinned slot
// emptied) waits for that host task, while the GPU keeps working on what
// was issued. Host tasks wait for device ops with cudaEventSynchronize on
// the ops' ring events (op_records.hpp), so a staged run's host work starts while
// earlier runs' GPU work is still in flight.
//
// Its parts: the ops it issued and their events (op_records.hpp), the host
// lanes (host_lanes.hpp), calibration's twin streams and profiling's clock
// (op_timing.hpp).
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/errors.hpp>
#include <chunkpipe/memory.cuh>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/run_ticket.cuh>
#include <chunkpipe/detail/calibration.cuh>
#include <chunkpipe/detail/copy_team.hpp>
#include <chunkpipe/detail/driver.hpp>
#include <chunkpipe/detail/host_lanes.hpp>
#include <chunkpipe/detail/linkage.hpp>
#include <chunkpipe/detail/nvtx.hpp>
#include <chunkpipe/detail/op_records.hpp>
#include <chunkpipe/detail/op_timing.hpp>
#include <chunkpipe/detail/slots.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

/// The stream executor over stage ops it launches through a StageFn: all of
/// it but the stages' launches, which StreamExecutor<Stages...>
/// (stream_executor.cuh) binds. Not a template, so that a program compiles
/// it once (the compiled part: detail/linkage.hpp) rather than for every
/// pipeline's stages.
class StreamOps {
 public:
  /// A run as the driver hands it over.
  struct Run {
    std::shared_ptr<RunState> state;
    std::size_t first_chunk = 0;
    std::size_t index = 0;           ///< runs issued before it: its NVTX number
    std::vector<char> started;       ///< [queue]: has issued its first op (when gated)
    bool gated = false;              ///< starts after other work (after(...))
    bool failed() const noexcept { return state->failed(); }
  };

  /// Launches stage op `op` of `stages` (what the owner handed over) on
  /// `stream`, over its slots in `mem`: `count` elements, at `offset` of
  /// the run, in its chunk `chunk` (what the stage's context says).
  using StageFn = void (*)(void* stages, const Op& op, const Step& step, const SlotMemory& mem, cudaStream_t stream,
                           std::size_t chunk, std::size_t offset, std::size_t count);

  /// `stages` goes to every StageFn as it is.
  StreamOps(void* stages, int device, int host_threads, std::shared_ptr<Health> health,
            std::shared_ptr<EventPool> pool);

  StreamOps(const StreamOps&) = delete;
  StreamOps& operator=(const StreamOps&) = delete;
  /// Waits for everything in flight. Never throws.
  ~StreamOps();

  /// Takes a schedule's tables (queues, steps, reach) and slot memory;
  /// nothing may be in flight. Creates the streams, events and names it
  /// lacks; host workers start when a run first stages. Throws cuda_error.
  void configure(const PlanBuilder& b, const SlotMemory& mem);

  /// Times the device ops the automatic policy's calibration picks (its
  /// first chunks, and a check's now and then: calibration.cuh); nullptr:
  /// none. The caller keeps it alive while runs are issued.
  void set_calibration(Calibration* c) noexcept { twins_.set(c); }

  /// Moves slot memory (a pinned arena allocated for the first staged run).
  void set_memory(const SlotMemory& mem) noexcept { mem_ = mem; }

  /// Keep a copy of every op as issued: the waits the executor really made
  /// (events and host waits) and whether it recorded an event.
  void set_logging(bool on) noexcept { log_.on = on; }
  const std::vector<Op>& log() const noexcept { return log_.ops; }

  cudaStream_t stream(std::size_t q) const noexcept { return streams_[q].get(); }
  /// The device queues' streams, [queue] (device_queues() of them).
  const Stream* device_streams() const noexcept { return streams_.data(); }

  /// The next profiled run records a new zero (runs in flight keep theirs).
  void restart_clock() noexcept { clock_.restart(); }

  /// Host lanes made from now on copy with `team` (a spread's, shared by
  /// its members) instead of a team of their own: call before the first
  /// run that stages.
  void share_copy_team(std::shared_ptr<SharedCopyTeam> team) noexcept { lanes_.share(std::move(team)); }
  std::size_t device_queues() const noexcept { return sched_.device_queues; }

  void begin_run(Run& run, std::size_t first_chunk);

  /// Blocks until host op `id` (issued earlier) has run.
  void wait_host(std::size_t id);

  void end_run(Run& run, const PlanRun& done);

  /// Waits for every host task and stream, ignoring errors (they were or
  /// will be reported by the run that caused them). Never throws.
  void drain() noexcept;

 protected:
  /// Issues `op` of `run`; a stage op launches through `stage`.
  void issue_op(const Op& op, const OpWork& w, Run& run, StageFn stage);

 private:
  // The schedule's tables, as configure() took them.
  struct Schedule {
    std::vector<Queue> queues;
    std::vector<Step> steps;
    std::vector<NvtxName> names;  // [step]
    std::size_t device_queues = 0;
  };
  // Every op as issued, when asked for (set_logging).
  struct OpLog {
    bool on = false;
    std::vector<Op> ops;
  };

  void issue_host(const Op& op, const OpWork& w, Run& run, OpRecord& rec, Op* logged);

  static std::string step_name(const Step& s);
  static RunTimeline::Timed* start_timing(RunState& st, const Op& op, const Run& run, std::size_t count);

  bool is_host_queue(int queue) const noexcept { return static_cast<std::size_t>(queue) >= sched_.device_queues; }
  HostLanes::Lane& lane_of(int queue) { return lanes_.lane(static_cast<std::size_t>(queue) - sched_.device_queues); }
  HostQueue<HostTask>& host_queue(int queue) { return *lane_of(queue).queue; }

  void* stages_;  // the owner's, for its StageFn
  std::shared_ptr<Health> health_;
  std::shared_ptr<EventPool> pool_;
  SlotMemory mem_;
  Schedule sched_;
  std::vector<Stream> streams_;  // [device queue]
  OpRecords records_;
  HostLanes lanes_;
  CalibrationTwins twins_;
  ProfileClock clock_;
  OpLog log_;
  std::vector<Copy> copies_;  // the copies of the op being issued
};

}  // namespace chunkpipe::detail

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/stream_ops.inl>
#endif
