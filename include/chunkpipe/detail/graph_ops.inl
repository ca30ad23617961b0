// SPDX-License-Identifier: MIT
// Definitions for detail/graph_ops.hpp. Included at its bottom where
// chunkpipe is header-only, or once by <chunkpipe/compiled.hpp>
// (detail/linkage.hpp); do not include directly.
#pragma once

#include <algorithm>
#include <chrono>

// graph_detail::ms_since: graph_builder.inl, which graph_ops.hpp includes first.

namespace chunkpipe::detail {

CHUNKPIPE_INLINE void GraphOps::drain() noexcept {
  if (launch_ && cudaStreamSynchronize(launch_.get()) != cudaSuccess) (void)cudaGetLastError();
}

CHUNKPIPE_INLINE GraphEntry* GraphOps::find(const Key& key) {
  auto it = cache_.find(key);
  return it == cache_.end() ? nullptr : &it->second;
}

CHUNKPIPE_INLINE void GraphOps::make_room() {
  if (cache_.size() < max_cached) return;
  auto oldest = std::min_element(cache_.begin(), cache_.end(),
                                 [](const auto& a, const auto& b) { return a.second.used < b.second.used; });
  cache_.erase(oldest);
}

CHUNKPIPE_INLINE void GraphOps::order_launch(const RunState& st, const Stream* streams, std::size_t count) {
  cudaStream_t L = launch_.get();
  while (joins_.size() < count) joins_.push_back(Event::create());
  for (std::size_t q = 0; q < count; ++q) {
    CHUNKPIPE_CUDA_TRY(cudaEventRecord(joins_[q].get(), streams[q].get()));
    CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(L, joins_[q].get(), 0));
  }
  for (const Event& g : st.setup.gates) CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(L, g.get(), 0));
  for (const auto& before : st.setup.after_runs) {
    for (const Event& t : before->device_tails()) CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(L, t.get(), 0));
  }
}

CHUNKPIPE_INLINE GraphOps::Path GraphOps::issue_run(RunState& st, std::size_t n, const void* types,
                                                    const Stream* streams, std::size_t count, GraphStats& stats,
                                                    const Planner& planner, StageNodesFn nodes) {
  if (!launch_) launch_ = Stream::create();
  for (const auto& before : st.setup.after_runs) before->wait_issued();
  const Endpoints& ends = *st.setup.ends;
  Path path = Path::replayed;
  const Key key{n, types};
  GraphEntry* e = find(key);
  if (e && !e->points_at(ends)) {
    path = Path::updated;
    const auto t0 = std::chrono::steady_clock::now();
    if (!builder_.repoint(*e, ends)) {
      cache_.erase(key);  // the new ranges' memory kinds differ: build afresh
      e = nullptr;
    } else {
      stats.update_ms = graph_detail::ms_since(t0);
    }
  }
  if (!e) {
    path = Path::built;
    make_room();
    GraphEntry built = builder_.build(planner.plan(planner.owner, n), ends, launch_.get(), nodes, stats);
    e = &(cache_[key] = std::move(built));
  }
  e->remember(ends);
  e->used = ++clock_;

  // Everything queued before the run, then the run, then everything after.
  order_launch(st, streams, count);
  const auto t0 = std::chrono::steady_clock::now();
  CHUNKPIPE_CUDA_TRY(cudaGraphLaunch(e->exec.get(), launch_.get()));
  stats.launch_ms = graph_detail::ms_since(t0);
  Event tail = pool_->get();
  CHUNKPIPE_CUDA_TRY(cudaEventRecord(tail.get(), launch_.get()));
  for (std::size_t q = 0; q < count; ++q) CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(streams[q].get(), tail.get(), 0));
  st.issue.tails.push_back(std::move(tail));
  return path;
}

}  // namespace chunkpipe::detail
