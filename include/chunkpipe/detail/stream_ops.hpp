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
// the ops' ring events (below), so a staged run's host work starts while
// earlier runs' GPU work is still in flight.
//
// The calibration's timed ops (calibration.cuh) run on a twin of their
// queue's stream, in order with it (an event each way), and their timing
// events are recorded there: on the H200 a stream on which a timing event
// was once recorded runs later work 1.5 to 3% slower, for runs after it
// too (benchmarks/probes/timing_streams.cu), and the schedule's streams
// carry every run. Profiled runs time every op on the schedule's streams.
//
// An op's completion event lives in a ring indexed by (step, chunk %
// reach): an entry is recorded again only by the same step of the same
// slot `reach` chunks later, on the same queue, so a late waiter only ever
// waits for more (PlanBuilder::reach).
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/errors.hpp>
#include <chunkpipe/memory.cuh>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/run_ticket.cuh>
#include <chunkpipe/detail/calibration.cuh>
#include <chunkpipe/detail/copy_team.hpp>
#include <chunkpipe/detail/driver.hpp>
#include <chunkpipe/detail/host_ops.hpp>
#include <chunkpipe/detail/host_queue.hpp>
#include <chunkpipe/detail/linkage.hpp>
#include <chunkpipe/detail/nvtx.hpp>
#include <chunkpipe/detail/slots.hpp>

#include <cuda_runtime_api.h>

#include <chrono>
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
  void set_calibration(Calibration* c) noexcept { calibration_ = c; }

  /// Moves slot memory (a pinned arena allocated for the first staged run).
  void set_memory(const SlotMemory& mem) noexcept { mem_ = mem; }

  /// Keep a copy of every op as issued: the waits the executor really made
  /// (events and host waits) and whether it recorded an event.
  void set_logging(bool on) noexcept { logging_ = on; }
  const std::vector<Op>& log() const noexcept { return log_; }

  cudaStream_t stream(std::size_t q) const noexcept { return streams_[q].get(); }

  /// The next profiled run records a new zero (runs in flight keep theirs).
  void restart_clock() noexcept { clock_zero_.reset(); }

  /// Host lanes made from now on copy with `team` (a spread's, shared by
  /// its members) instead of a team of their own: call before the first
  /// run that stages.
  void share_copy_team(std::shared_ptr<SharedCopyTeam> team) noexcept { shared_team_ = std::move(team); }
  std::size_t device_queues() const noexcept { return device_queues_; }

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
  struct Record {
    std::size_t id = static_cast<std::size_t>(-1);
    int step = 0;
    std::size_t chunk = 0;
    int queue = 0;
    std::size_t host_pos = 0;
    bool signal = false;
  };

  // A host op, as its worker runs it. A value with everything it needs, so
  // that queueing one allocates nothing.
  struct HostTask {
    std::shared_ptr<RunState> state;
    Op op;  // without its waits
    const Step* step = nullptr;
    SlotMemory mem;
    std::size_t run_chunk = 0, offset = 0, count = 0;
    std::size_t* produced = nullptr;
    CopyTeam* team = nullptr;
    RunState::Timed* timed = nullptr;
    const NvtxName* name = nullptr;
    bool gated = false;
    int device = 0;
    static constexpr int max_deps = 4;
    cudaEvent_t events[max_deps] = {};
    int n_events = 0;
    HostQueue<HostTask>* queues[max_deps] = {};
    std::size_t positions[max_deps] = {};
    int n_queues = 0;

    void run() noexcept;
    std::vector<Copy>* scratch = nullptr;  // its lane's, used only by the lane's worker
    cudaStream_t dma = nullptr;            // its lane's, for copies out of the device
  };

  struct HostLane {
    Stream dma;  // first, so it outlives the worker that uses it
    std::unique_ptr<HostQueue<HostTask>> queue;
    std::shared_ptr<CopyTeam> team;  // its own, or the spread's (share_copy_team)
    std::vector<Copy> scratch;
  };

  void issue_host(const Op& op, const OpWork& w, Run& run, Record& rec, Op* logged);

  RunState::Timed* start_timing(RunState& st, const Op& op, const Run& run, std::size_t count);

  static std::string step_name(const Step& s);

  bool is_host_queue(int queue) const noexcept { return static_cast<std::size_t>(queue) >= device_queues_; }
  HostLane& lane_of(int queue);
  HostQueue<HostTask>& host_queue(int queue) { return *lane_of(queue).queue; }
  cudaEvent_t ring_event(const Record& r) const {
    return ring_[static_cast<std::size_t>(r.step)][r.chunk % reach_].get();
  }
  // The op a wait on `r`'s ring event waits for, as the issued log names
  // it: `r` itself, since an entry is recorded again only by the same step
  // of the same slot `reach` chunks later, which no waiter of `r` precedes.
  std::size_t ring_owner(const Record& r) const { return r.id; }

  // The twin of device queue q's stream, made to follow everything issued
  // on that stream so far (created the first time a timed op needs it).
  cudaStream_t to_twin(std::size_t q);
  // Queue q's stream follows what its twin was given.
  void from_twin(std::size_t q, cudaStream_t queue_stream);

  // An op's record, by id. Waits reach back a bounded number of ops, except
  // to an op that is still the latest of its step and slot (a pinned buffer
  // last used by a staged run long ago), which the second table keeps.
  const Record& record_of(std::size_t id) const;

  void* stages_;  // the owner's, for its StageFn
  int device_;
  int host_threads_;
  std::shared_ptr<SharedCopyTeam> shared_team_;  // a spread's, for every host lane; null: each its own
  std::shared_ptr<Health> health_;
  std::shared_ptr<EventPool> pool_;
  SlotMemory mem_;
  std::vector<Queue> queues_;
  std::vector<Step> steps_;
  std::size_t depth_ = 1;
  std::size_t reach_ = 1;
  std::size_t device_queues_ = 0;
  std::vector<Stream> streams_;
  std::vector<HostLane> host_;            // [queue - device_queues_]
  std::vector<std::vector<Event>> ring_;  // [step][chunk % reach_]
  std::vector<Record> records_;           // [op id % size]
  std::vector<Record> last_;              // [step * depth + slot]: its latest op
  std::vector<NvtxName> names_;           // [step]
  std::vector<Copy> copies_;
  bool logging_ = false;
  std::vector<Op> log_;
  Calibration* calibration_ = nullptr;
  // Timed ops' streams (to_twin): one per device queue, made on first use.
  // Each handover records its event again; a wait takes the latest record.
  struct Twin {
    Stream stream;
    Event there, back;
  };
  std::vector<Twin> twins_;
  // Profiling's clock (Report::clock_ms): zero at the first profiled run.
  std::shared_ptr<const Event> clock_zero_;
  std::chrono::steady_clock::time_point host_clock_zero_;
};

}  // namespace chunkpipe::detail

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/stream_ops.inl>
#endif
