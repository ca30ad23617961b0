// SPDX-License-Identifier: MIT
// Definitions for detail/host_lanes.hpp. Included at its bottom where chunkpipe is
// header-only, or once by <chunkpipe/compiled.hpp> (detail/linkage.hpp); do
// not include directly.
#pragma once

namespace chunkpipe::detail {

CHUNKPIPE_INLINE void HostTask::run() noexcept {
  RunState& st = *state;
  try {
    CHUNKPIPE_CUDA_TRY(cudaSetDevice(device));
    // Ring events are recorded again only after this task is waited
    // for, so these still name the ops it depends on.
    for (int i = 0; i < n_events; ++i) CHUNKPIPE_CUDA_TRY(cudaEventSynchronize(events[i]));
    if (gated) {
      for (const Event& g : st.setup.gates) CHUNKPIPE_CUDA_TRY(cudaEventSynchronize(g.get()));
      for (const auto& before : st.setup.after_runs) {
        for (const Event& t : before->device_tails()) CHUNKPIPE_CUDA_TRY(cudaEventSynchronize(t.get()));
      }
    }
    for (int i = 0; i < n_queues; ++i) queues[i]->wait_done(positions[i]);
    std::size_t got = 0;
    if (count != 0 && !st.failed() && !(produced && st.source_ended)) {
      NvtxRange range(*name, run_chunk);
      if (timed) timed->host_start = std::chrono::steady_clock::now();
      got = ::chunkpipe::detail::run_host_op(
          op, *step, mem, *st.setup.ends, run_chunk, offset, count, *scratch,
          [&](const std::vector<Copy>& c) {
            team->copy(c);
            if (timed) {
              for (const Copy& x : c) timed->op.bytes += x.bytes;
            }
          },
          // What a counted stage emitted, on the lane's own stream: the
          // copy engines move it, and this worker waits for it alone.
          [&](void* dst, const void* src, std::size_t bytes) {
            CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, dma));
            CHUNKPIPE_CUDA_TRY(cudaStreamSynchronize(dma));
            if (timed) timed->op.bytes += bytes;
          },
          // A positional Source's or Sink's parts, read or written by
          // the lane's team at once.
          [&](const auto& part) { team->each(part); });
      if (timed) timed->host_end = std::chrono::steady_clock::now();
    }
    if (produced) {
      *produced = got;
      if (got < count) st.source_ended = true;
    }
  } catch (...) {
    if (produced) {
      *produced = 0;
      st.source_ended = true;
    }
    st.fail(std::current_exception());
  }
  st.progress.host_task_finished();
  state.reset();
}

CHUNKPIPE_INLINE HostLanes::Lane& HostLanes::lane(std::size_t i) {
  Lane& lane = lanes_[i];
  if (!lane.queue) {
    // The queue last: a lane with a queue has all it needs, even if making
    // the rest threw.
    std::shared_ptr<CopyTeam> team = shared_ ? shared_->get() : std::make_shared<CopyTeam>(threads_);
    Stream dma = Stream::create();
    lane.team = std::move(team);
    lane.dma = std::move(dma);
    lane.queue = std::make_unique<HostQueue<HostTask>>();
  }
  return lane;
}

CHUNKPIPE_INLINE void HostLanes::drain() noexcept {
  for (Lane& l : lanes_) {
    if (l.queue) l.queue->drain();
  }
}

}  // namespace chunkpipe::detail
