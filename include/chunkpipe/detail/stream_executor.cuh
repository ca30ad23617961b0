// SPDX-License-Identifier: MIT
// The CUDA stream executor for a pipeline of `Stages` (the concept in
// driver.hpp): StreamOps (stream_ops.hpp), which issues every op on its
// streams and host lanes, with each stage op launching its stage's kernel
// here. The only part that depends on the stages, so that the rest is
// compiled once (detail/linkage.hpp), not for every pipeline's stages.
#pragma once

#include <chunkpipe/detail/stage_launch.cuh>
#include <chunkpipe/detail/stream_ops.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <tuple>
#include <utility>

namespace chunkpipe::detail {

template <class... Stages>
class StreamExecutor : public StreamOps {
 public:
  StreamExecutor(std::tuple<Stages...>& stages, int device, int host_threads, std::shared_ptr<Health> health,
                 std::shared_ptr<EventPool> pool)
      : StreamOps(&stages, device, host_threads, std::move(health), std::move(pool)) {}

  /// Issues `op` of `run`, whose inputs are `In`. Throws cuda_error (an op
  /// whose own work fails fails its run instead).
  template <class In>
  void issue(const Op& op, const OpWork& w, Run& run) {
    issue_op(op, w, run, &StreamExecutor::template launch<In>);
  }

 private:
  // A StageFn (StreamOps) for runs whose inputs are `In`.
  template <class In>
  static void launch(void* stages, const Op& op, const Step& step, const SlotMemory& mem, cudaStream_t stream,
                     std::size_t chunk, std::size_t offset, std::size_t count) {
    ::chunkpipe::detail::launch_stage<In>(*static_cast<std::tuple<Stages...>*>(stages), mem, step, op, stream, chunk,
                                          offset, count);
  }
};

}  // namespace chunkpipe::detail
