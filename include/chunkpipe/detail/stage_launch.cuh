// SPDX-License-Identifier: MIT
// How a stage op becomes GPU work: the slot arrays it reads and writes,
// typed, and its stage's launch on a stream. Shared by the executors that
// issue to streams (stream_executor.cuh) and that capture into graphs
// (graph_executor.cuh), so a stage launches the same way in both.
//
// A Filter's device side (CUB's DeviceSelect) is not included here: it
// lives in filter_kernel.cuh, which <chunkpipe/filter.cuh> and the umbrella
// include, so that a file whose pipelines never filter does not parse CUB
// (about a fifth of such a file's compile time; issue 33).
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/stage.hpp>
#include <chunkpipe/detail/map_kernel.cuh>
#include <chunkpipe/detail/reduce_kernel.cuh>
#include <chunkpipe/detail/slots.hpp>

#include <cuda/std/span>
#include <cuda/std/tuple>
#include <cuda/stream_ref>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <vector>

namespace chunkpipe::detail {

// A stage kind with a header of its own (a Scan; stage_kind,
// detail/stage_traits.hpp) brings its launch in that header, found by
// argument-dependent lookup through the StageKind tag where the pipeline
// is instantiated. The kinds below are more specialised, so this takes
// only the others.
template <class S, class Ins, class Outs>
void invoke_stage(S& stage, const Ins& ins, const Outs& outs, std::size_t chunk, std::size_t offset,
                  std::size_t count, cudaStream_t stream, const StageExtras& x) {
  static_assert(stage_kind<S>::own_header, "chunkpipe: not a stage kind (Map, ChunkFn, reduce, accumulate, "
                                           "per_chunk, filter, emit, scan)");
  launch_stage_kind(StageKind{}, stage, ins, outs, chunk, offset, count, stream, x);
}

template <class F, class... I, class... O>
void invoke_stage(Map<F>& stage, const std::tuple<::cuda::std::span<I>...>& ins,
                  const std::tuple<::cuda::std::span<O>...>& outs, std::size_t, std::size_t, std::size_t count,
                  cudaStream_t stream, const StageExtras&) {
  auto in_ptrs = std::apply([](const auto&... s) { return ::cuda::std::tuple<const I*...>(s.data()...); }, ins);
  auto out_ptrs = std::apply([](const auto&... s) { return ::cuda::std::tuple<O*...>(s.data()...); }, outs);
  ::chunkpipe::detail::launch_map(stage.fn, count, out_ptrs, in_ptrs, stream);
}

template <class F, class... I, class... O>
void add_map_nodes_of(Map<F>& stage, const std::tuple<::cuda::std::span<I>...>& ins,
                      const std::tuple<::cuda::std::span<O>...>& outs, std::size_t count, cudaGraph_t graph,
                      const std::vector<cudaGraphNode_t>& deps, std::vector<cudaGraphNode_t>& nodes) {
  auto in_ptrs = std::apply([](const auto&... s) { return ::cuda::std::tuple<const I*...>(s.data()...); }, ins);
  auto out_ptrs = std::apply([](const auto&... s) { return ::cuda::std::tuple<O*...>(s.data()...); }, outs);
  ::chunkpipe::detail::add_map_nodes(graph, deps, stage.fn, count, out_ptrs, in_ptrs, nodes);
}

template <class F, class... X, class... I, class... O>
void invoke_stage(ChunkFn<F, X...>& stage, const std::tuple<::cuda::std::span<I>...>& ins,
                  const std::tuple<::cuda::std::span<O>...>& outs, std::size_t chunk, std::size_t offset,
                  std::size_t count, cudaStream_t stream, const StageExtras&) {
  ChunkContext<types<I...>, types<O...>> ctx{ins, outs, chunk, offset, count, ::cuda::stream_ref(stream),
                                             Backend::cuda};
  stage.fn(ctx);
  // Catches a bad launch inside the functor (and any earlier fault).
  CHUNKPIPE_CUDA_TRY(cudaGetLastError());
}

template <class T, class Op, class I>
void invoke_stage(Reduce<T, Op>& stage, const std::tuple<::cuda::std::span<I>>& ins,
                  const std::tuple<::cuda::std::span<T>>& outs, std::size_t, std::size_t, std::size_t count,
                  cudaStream_t stream, const StageExtras&) {
  ::chunkpipe::detail::launch_reduce(stage.op, std::get<0>(ins).data(), count, stage.segment,
                                     std::get<0>(outs).data(), stream);
}

// A per-chunk record starts from its initial value, then the functor adds
// the chunk into it, as a ChunkFn would.
template <class F, class R, class... I>
void invoke_record_stage(F& fn, const R& init, const std::tuple<::cuda::std::span<I>...>& ins,
                         const std::tuple<::cuda::std::span<R>>& outs, std::size_t chunk, std::size_t offset,
                         std::size_t count, cudaStream_t stream) {
  ::chunkpipe::detail::launch_set_record(std::get<0>(outs).data(), init, stream);
  ChunkContext<types<I...>, types<R>> ctx{ins, outs, chunk, offset, count, ::cuda::stream_ref(stream), Backend::cuda};
  fn(ctx);
  CHUNKPIPE_CUDA_TRY(cudaGetLastError());
}

template <class F, class R, class... I>
void invoke_stage(PerChunk<F, R>& stage, const std::tuple<::cuda::std::span<I>...>& ins,
                  const std::tuple<::cuda::std::span<R>>& outs, std::size_t chunk, std::size_t offset,
                  std::size_t count, cudaStream_t stream, const StageExtras&) {
  ::chunkpipe::detail::invoke_record_stage(stage.fn, stage.init, ins, outs, chunk, offset, count, stream);
}

template <class F, class R, class Merge, class... I>
void invoke_stage(Accumulate<F, R, Merge>& stage, const std::tuple<::cuda::std::span<I>...>& ins,
                  const std::tuple<::cuda::std::span<R>>& outs, std::size_t chunk, std::size_t offset,
                  std::size_t count, cudaStream_t stream, const StageExtras&) {
  ::chunkpipe::detail::invoke_record_stage(stage.fn, stage.identity, ins, outs, chunk, offset, count, stream);
}

// How a Filter stage finds its device side. The two calls that need it
// (filter_device_launch below, filter_device_scratch in issuer.cuh)
// are unqualified on purpose, with a FilterFound first: argument-dependent
// lookup, done where the pipeline is instantiated, finds the overloads of
// filter_kernel.cuh, which take FilterFound itself and so beat these
// fallbacks, which take its base and say which header is missing.
struct FilterMissing {};
struct FilterFound : FilterMissing {};

template <class Pred, class T>
std::size_t filter_device_scratch(FilterMissing, const Pred&, const T*, std::size_t) {
  static_assert(sizeof(Pred) == 0,
                "chunkpipe: a pipeline with a Filter stage runs CUB's DeviceSelect on the GPU: #include "
                "<chunkpipe/filter.cuh> (or the umbrella <chunkpipe/pipeline.cuh>, which includes it)");
  return 0;
}

// Declared only: every run of a Filter pipeline sizes its scratch first
// (out_shape, issuer.cuh), so a file without filter.cuh stops at the
// static_assert above, with one error, before this could be needed.
template <class Pred, class T>
void filter_device_launch(FilterMissing, const Pred&, const T*, std::size_t, T*, std::size_t*, void*, std::size_t,
                          cudaStream_t);

template <class Pred, class I>
void invoke_stage(Filter<Pred>& stage, const std::tuple<::cuda::std::span<I>>& ins,
                  const std::tuple<::cuda::std::span<I>>& outs, std::size_t, std::size_t, std::size_t count,
                  cudaStream_t stream, const StageExtras& x) {
  // Unqualified: found by argument-dependent lookup (FilterFound, above).
  filter_device_launch(FilterFound{}, stage.pred, std::get<0>(ins).data(), count, std::get<0>(outs).data(),
                       x.produced, x.scratch, x.scratch_bytes, stream);
}

template <class F, class... X, class... I, class... O>
void invoke_stage(Emit<F, X...>& stage, const std::tuple<::cuda::std::span<I>...>& ins,
                  const std::tuple<::cuda::std::span<O>...>& outs, std::size_t chunk, std::size_t offset,
                  std::size_t count, cudaStream_t stream, const StageExtras& x) {
  // The count starts at 0, as on the host backend: a kernel may count up.
  CHUNKPIPE_CUDA_TRY(cudaMemsetAsync(x.produced, 0, sizeof(std::size_t), stream));
  ChunkContext<types<I...>, types<O...>> ctx{ins, outs, chunk, offset, count, ::cuda::stream_ref(stream),
                                             Backend::cuda, x.produced};
  stage.fn(ctx);
  CHUNKPIPE_CUDA_TRY(cudaGetLastError());
}

/// Adds stage op `op` to `graph` after `deps`, appending to `nodes` what
/// later ops must follow. A Map stage becomes kernel nodes; any other stage
/// (ChunkFn, Reduce, a per-chunk record) runs once, through `capture(launch)`, which must call launch(stream) on a
/// capturing stream and add what was captured (graph_executor.cuh). Throws
/// what CUDA, the stage or `capture` throws.
template <class In, class... Stages, class Capture>
void add_stage_nodes(std::tuple<Stages...>& stages, const SlotMemory& mem, const Step& step, const Op& op,
                     std::size_t run_chunk, std::size_t offset, std::size_t count, cudaGraph_t graph,
                     const std::vector<cudaGraphNode_t>& deps, std::vector<cudaGraphNode_t>& nodes,
                     Capture&& capture) {
  ::chunkpipe::detail::with_stage_arrays<In>(stages, mem, step, op, count, [&](auto& stage, const auto& ins,
                                                                           const auto& outs, const StageExtras& x) {
    if constexpr (is_elementwise<std::decay_t<decltype(stage)>>::value) {
      ::chunkpipe::detail::add_map_nodes_of(stage, ins, outs, count, graph, deps, nodes);
    } else {
      capture([&](cudaStream_t s) { ::chunkpipe::detail::invoke_stage(stage, ins, outs, run_chunk, offset, count, s, x); });
    }
  });
}

/// Launches stage op `op` (of step `step`) over `count` elements of its
/// slot on `stream`. `run_chunk` and `offset` are what a ChunkFn's context
/// reports. Throws what the launch or the stage throws.
template <class In, class... Stages>
void launch_stage(std::tuple<Stages...>& stages, const SlotMemory& mem, const Step& step, const Op& op,
                  cudaStream_t stream, std::size_t run_chunk, std::size_t offset, std::size_t count) {
  ::chunkpipe::detail::with_stage_arrays<In>(stages, mem, step, op, count, [&](auto& stage, const auto& ins,
                                                                           const auto& outs, const StageExtras& x) {
    ::chunkpipe::detail::invoke_stage(stage, ins, outs, run_chunk, offset, count, stream, x);
  });
}

}  // namespace chunkpipe::detail
