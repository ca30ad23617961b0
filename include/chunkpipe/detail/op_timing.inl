// SPDX-License-Identifier: MIT
// Definitions for detail/op_timing.hpp. Included at its bottom where chunkpipe is
// header-only, or once by <chunkpipe/compiled.hpp> (detail/linkage.hpp); do
// not include directly.
#pragma once

namespace chunkpipe::detail {

CHUNKPIPE_INLINE cudaStream_t CalibrationTwins::to_twin(std::size_t q, cudaStream_t queue_stream) {
  while (twins_.size() <= q) twins_.emplace_back();
  Twin& t = twins_[q];
  if (!t.stream) {
    t.stream = Stream::create();
    t.there = Event::create();
    t.back = Event::create();
  }
  CHUNKPIPE_CUDA_TRY(cudaEventRecord(t.there.get(), queue_stream));
  CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(t.stream.get(), t.there.get(), 0));
  return t.stream.get();
}

CHUNKPIPE_INLINE void CalibrationTwins::from_twin(std::size_t q, cudaStream_t queue_stream) {
  Twin& t = twins_[q];
  CHUNKPIPE_CUDA_TRY(cudaEventRecord(t.back.get(), t.stream.get()));
  CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(queue_stream, t.back.get(), 0));
}

CHUNKPIPE_INLINE void ProfileClock::start(RunState& st, cudaStream_t stream) {
  if (!zero_) {
    // The schedule's profiling clock starts here (Report::clock_ms).
    auto zero = std::make_shared<Event>(Event::create(true));
    CHUNKPIPE_CUDA_TRY(cudaEventRecord(zero->get(), stream));
    host_zero_ = std::chrono::steady_clock::now();
    zero_ = std::move(zero);
  }
  RunTimeline& t = st.timeline;
  t.clock_zero = zero_;
  t.host_clock_zero = host_zero_;
  t.origin = Event::create(true);
  CHUNKPIPE_CUDA_TRY(cudaEventRecord(t.origin.get(), stream));
  t.host_origin = std::chrono::steady_clock::now();
}

}  // namespace chunkpipe::detail
