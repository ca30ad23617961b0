// SPDX-License-Identifier: MIT
// The stream executor's host side (stream_ops.hpp): one lane per host queue
// of a schedule, each a worker thread (HostQueue) that runs the queue's
// host ops in order, a CopyTeam that shares each staging copy, and a
// stream of its own for what a counted stage emitted. A host op travels as
// a HostTask: a value with everything its worker needs, so that queueing
// one allocates nothing.
//
// A task waits for device ops with cudaEventSynchronize on their ring
// events (op_records.hpp), so a staged run's host work starts while earlier
// runs' GPU work is still in flight.
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/memory.cuh>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/run_ticket.cuh>
#include <chunkpipe/detail/copy_team.hpp>
#include <chunkpipe/detail/host_ops.hpp>
#include <chunkpipe/detail/host_queue.hpp>
#include <chunkpipe/detail/linkage.hpp>
#include <chunkpipe/detail/nvtx.hpp>
#include <chunkpipe/detail/slots.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

/// A host op as its lane's worker runs it.
struct HostTask {
  std::shared_ptr<RunState> state;
  Op op;  ///< without its waits
  const Step* step = nullptr;
  SlotMemory mem;
  std::size_t run_chunk = 0, offset = 0, count = 0;
  std::size_t* produced = nullptr;  ///< a Source's count, where the op reads one
  CopyTeam* team = nullptr;
  RunTimeline::Timed* timed = nullptr;
  const NvtxName* name = nullptr;
  bool gated = false;  ///< the run's first op on its queue: waits for the run's gates
  int device = 0;
  static constexpr int max_deps = 4;
  cudaEvent_t events[max_deps] = {};  ///< device ops it waits for
  int n_events = 0;
  HostQueue<HostTask>* queues[max_deps] = {};  ///< other host queues' positions it waits for
  std::size_t positions[max_deps] = {};
  int n_queues = 0;
  std::vector<Copy>* scratch = nullptr;  ///< its lane's, used only by the lane's worker
  cudaStream_t dma = nullptr;            ///< its lane's, for copies out of the device

  /// Waits for what it depends on, runs the op, and counts itself finished
  /// in its run; a failure fails the run. Never throws.
  void run() noexcept;
};

/// The host lanes of one executor, [host queue - device queues]. Lanes
/// start (thread, team, stream) when first asked for: with the first run
/// that stages on that side.
class HostLanes {
 public:
  struct Lane {
    Stream dma;  // first, so it outlives the worker that uses it
    std::unique_ptr<HostQueue<HostTask>> queue;
    std::shared_ptr<CopyTeam> team;  // its own, or the spread's (share)
    std::vector<Copy> scratch;
  };

  /// Workers of `device`, each lane's team of `threads` (unless shared).
  HostLanes(int device, int threads) : device_(device), threads_(threads) {}

  int device() const noexcept { return device_; }

  /// Lanes made from now on copy with `team` (a spread's, shared by its
  /// members) instead of a team of their own.
  void share(std::shared_ptr<SharedCopyTeam> team) noexcept { shared_ = std::move(team); }

  /// At least `n` lanes (none started).
  void resize(std::size_t n) { lanes_.resize(n); }

  /// Lane `i`, started if it was not. Throws what starting a thread or
  /// creating a stream throws (a lane is usable only once all of it is).
  Lane& lane(std::size_t i);

  /// Blocks until every started lane's queue is empty. Never throws.
  void drain() noexcept;

 private:
  int device_;
  int threads_;
  std::shared_ptr<SharedCopyTeam> shared_;  // null: each lane its own team
  std::vector<Lane> lanes_;
};

}  // namespace chunkpipe::detail

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/host_lanes.inl>
#endif
