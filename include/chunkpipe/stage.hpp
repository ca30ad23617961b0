// SPDX-License-Identifier: MIT
/// \file
/// Stages: how user work enters a pipeline. Host-only C++ (CCCL's span,
/// tuple and stream_ref, which need only the CUDA runtime's declarations), so
/// the host backend and the planner can use the same types as the GPU
/// executor.
///
/// \code
/// struct Fma {
///   float a, b;
///   CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return fmaf(x, a, b); }
/// };
/// chunkpipe::Map<Fma>              element-wise; the library writes the kernel
/// chunkpipe::ChunkFn<Sort>         a whole chunk at a time, in place
/// chunkpipe::ChunkFn<Pack, int8_t> a whole chunk, into a new int8_t buffer
/// chunkpipe::reduce(0.f, Plus{})   the whole run folded into one value
/// chunkpipe::accumulate(Hist{}, fill, merge)  a State per chunk, merged in order
/// chunkpipe::per_chunk(Hist{}, fill)          a State per chunk, all returned
/// chunkpipe::filter(IsError{})     the elements a predicate keeps, packed
/// chunkpipe::emit<Rec>(parse)      a chunk in, up to as many elements out
/// \endcode
///
/// Reduce, Accumulate and PerChunk emit records, not elements: one per
/// segment of the run (Reduce) or one per chunk (the others). Filter and
/// Emit emit a count the GPU decides. Such a stage must be the last; only
/// what it emits crosses back over the link.
///
/// Element types flow from the run's inputs through the stages: a Map's
/// outputs are what its functor returns (a ::cuda::std::tuple for several),
/// a ChunkFn's are the types it names, or its inputs' when it names none.
#pragma once

#include <cuda/std/span>
#include <cuda/std/tuple>
#include <cuda/stream_ref>

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

/// Marks a functor's call operator callable on the GPU and on the host. Map
/// functors need at least __device__; with this macro the same functor also
/// runs on the host backend, which CI uses to test pipelines without a GPU.
#if defined(__CUDACC__) || defined(__CUDA__)
#define CHUNKPIPE_HOST_DEVICE __host__ __device__
#else
#define CHUNKPIPE_HOST_DEVICE
#endif

/// \cond CHUNKPIPE_INTERNAL
// CHUNKPIPE_WHEN(cond), last in a template's parameter list: the overload
// exists only where `cond` (a constant of the class) holds. The dummy type
// parameter makes `cond` depend on the call, as enable_if needs, and `cond`
// stays in the signature, so overloads under different conditions are
// different templates. Doxygen reads it as nothing (docs/Doxyfile.in): the
// reference shows the signature a user calls, and its doc block says when
// it exists.
#if defined(CHUNKPIPE_DOXYGEN)
#define CHUNKPIPE_WHEN(...)
#else
#define CHUNKPIPE_WHEN(...) \
  , class chunkpipe_when_ = void, std::enable_if_t<(__VA_ARGS__) && std::is_void<chunkpipe_when_>::value, int> = 0
#endif

// CHUNKPIPE_UNSPECIFIED(type): `type`, a detail:: type in a public
// declaration (an alias's target, a return type's argument), which the
// reference shows as `unspecified`: a reader cannot look it up, and the
// doc block says what it does.
#if defined(CHUNKPIPE_DOXYGEN)
#define CHUNKPIPE_UNSPECIFIED(...) unspecified
#else
#define CHUNKPIPE_UNSPECIFIED(...) __VA_ARGS__
#endif
/// \endcond

namespace chunkpipe {

/// A list of element types.
template <class... T>
struct types {
  static constexpr std::size_t size = sizeof...(T);  ///< how many types
};

/// Element-wise stage. `F` is copied to the device and called once per
/// element with one element of each input (in order); it returns the output
/// element, or a ::cuda::std::tuple of several. The library writes the
/// kernel (coalesced, every launch checked). F must be trivially copyable.
template <class F>
struct Map {
  F fn{};  ///< called once per element on the device (or on the host backend)
};

/// Chunk-level stage. `F` is called on the host, once per chunk, with a
/// ChunkContext: the chunk's device spans, its index, offset, count and the
/// stream to launch on. It may launch anything on ctx.stream (its own kernel,
/// thrust::cuda::par_nosync.on(ctx.stream), CUB) and must not synchronise or
/// use any other stream. `Out...` names its output element types; with none,
/// it works in place on its input buffers.
template <class F, class... Out>
struct ChunkFn {
  F fn{};  ///< called on the host once per chunk with its ChunkContext
};

/// Elements a Reduce folds into one partial unless told otherwise.
inline constexpr std::size_t default_reduce_segment = 16384;

/// Reduction stage: folds every element of a run, converted to T, into one
/// T with `op`, an associative functor callable on the device and the host
/// (CHUNKPIPE_HOST_DEVICE T operator()(T, T) const). It must be the last
/// stage and take one input. The library writes the kernel.
///
/// The order of combination is fixed by the element sequence alone:
/// elements [k*segment, (k+1)*segment) of the run fold into partial k on
/// the device, by 256 lanes each folding every 256th element in order,
/// the lanes then combined in a fixed binary tree (detail/reduce.hpp); the
/// host combines the partials in a fixed pairwise tree over their index
/// and then init with it, left to right (detail/folding.hpp), when
/// the result is asked for. Every policy, depth, grain and executor
/// therefore gives the same bits for the same input, as long as chunks are
/// whole segments: the chunk size must be a multiple of `segment` (a
/// config_error says so otherwise). The host backend gives them too where
/// op rounds alike on both sides (a plain sum, min, max; nvcc may fuse a
/// multiply-add in op where the host does not). Only the partials (one T
/// per segment) cross back. T must be trivially copyable, and small: the
/// kernel keeps 256 of them in shared memory.
///
/// Accuracy of a float sum: each element takes part in at most
/// segment/256 - 1 lane additions, 8 tree levels and 2 log2(partials) + 1
/// on the host, so to first order |result - exact| <= (segment/256 + 8 +
/// 2 log2(partials)) * 2^-24 * (|init| + sum |x|): 104 x 2^-24 of the
/// absolute sum for 4 GiB of float at the default segment.
template <class T, class Op>
struct Reduce {
  T init{};  ///< folded in last, on the host, left of the partials; what an empty run returns
  Op op{};   ///< the associative combining functor: op(T, T) -> T
  std::size_t segment = default_reduce_segment;  ///< elements per device partial
};

/// Per-chunk record stage: for each chunk, `fn` is called on the host as a
/// ChunkFn is, with a context whose one output is a span of one R (device
/// memory on the CUDA backend) that holds `init` when fn is called; fn adds
/// the chunk into it, launching on ctx.stream (the CUDA backend) or
/// computing on the host (ctx.backend == Backend::host). The run's output
/// is one R per chunk, in chunk order. Must be the last stage. R must be
/// trivially copyable and fit a kernel parameter (4 KiB before CUDA 12.1,
/// 32 KiB after), which sets it to init on the device.
template <class F, class R>
struct PerChunk {
  R init{};  ///< what each chunk's record holds when fn is called
  F fn{};    ///< called on the host once per chunk, as a ChunkFn, to add the chunk into its record
};

/// Accumulating stage: a PerChunk whose records are merged, on the host,
/// in chunk order: the result starts as `identity` and
/// `merge(result, record)` (host-callable, result by reference) folds each
/// chunk's record into it. Each chunk's record also starts as `identity`.
/// The result is independent of the schedule for a given chunk size; it is
/// independent of the chunk size too when merging is exact (integer counts,
/// min and max), not for floating-point sums (use Reduce).
template <class F, class R, class Merge>
struct Accumulate {
  R identity{};    ///< what the result and each chunk's record start as
  F fn{};          ///< adds a chunk into its record, as PerChunk's fn does
  Merge merge{};   ///< merge(result, record), on the host, in chunk order
};

/// Filtering stage: keeps the elements of its one input for which
/// `pred(x)` (a __device__ or CHUNKPIPE_HOST_DEVICE predicate) is true, in
/// order (cub::DeviceSelect on the GPU). Must be the last stage. Its count
/// stays on the device until a chunkpipe host thread reads it and copies
/// out exactly what was kept, packed: run(in, out) returns how many
/// elements it wrote. Pred must be trivially copyable.
template <class Pred>
struct Filter {
  Pred pred{};  ///< keeps x where pred(x) is true
};

/// Emitting stage: a ChunkFn that writes up to ctx.count elements to each
/// of its outputs (of types Out...) and stores how many at ctx.produced
/// (device memory on the CUDA backend: its own kernel writes it, or counts
/// up from the 0 it holds when fn is called), on ctx.stream. Must be the
/// last stage; outputs are packed as for a Filter. Storing more than
/// ctx.count fails the run with pipeline_error.
template <class F, class... Out>
struct Emit {
  F fn{};  ///< called on the host once per chunk; writes the outputs and stores the count at ctx.produced
};

/// Map<F> from a functor: chunkpipe::map(Fma{2.f, 1.f}).
template <class F>
Map<F> map(F fn) {
  return Map<F>{std::move(fn)};
}

/// ChunkFn<F, Out...> from a functor: chunkpipe::chunk_fn<int8_t>(pack).
template <class... Out, class F>
ChunkFn<F, Out...> chunk_fn(F fn) {
  return ChunkFn<F, Out...>{std::move(fn)};
}

/// Reduce<T, Op> from an initial value and an operator:
/// chunkpipe::reduce(0.0f, Plus{}), or with a segment size of its own.
template <class T, class Op>
Reduce<T, Op> reduce(T init, Op op, std::size_t segment = default_reduce_segment) {
  return Reduce<T, Op>{std::move(init), std::move(op), segment};
}

/// PerChunk<F, R> from the record each chunk starts with and the functor.
template <class R, class F>
PerChunk<F, R> per_chunk(R init, F fn) {
  return PerChunk<F, R>{std::move(init), std::move(fn)};
}

/// Accumulate<F, R, Merge> from the identity, the per-chunk functor and
/// the merge.
template <class R, class F, class Merge>
Accumulate<F, R, Merge> accumulate(R identity, F fn, Merge merge) {
  return Accumulate<F, R, Merge>{std::move(identity), std::move(fn), std::move(merge)};
}

/// Filter<Pred> from a predicate: chunkpipe::filter(IsError{}).
template <class Pred>
Filter<Pred> filter(Pred pred) {
  return Filter<Pred>{std::move(pred)};
}

/// Emit<F, Out...> from a functor: chunkpipe::emit<Record>(parse).
template <class... Out, class F>
Emit<F, Out...> emit(F fn) {
  static_assert(sizeof...(Out) >= 1, "chunkpipe::emit<Out...>: name the element types it writes");
  return Emit<F, Out...>{std::move(fn)};
}

/// Where a ChunkFn runs.
enum class Backend { cuda, host };

template <class In, class Out>
struct ChunkContext;

/// What a ChunkFn gets for one chunk. On the CUDA backend the spans are
/// device memory and `stream` is the stream to launch on (`ctx.stream.get()`
/// is the cudaStream_t: `kernel<<<grid, block, 0, ctx.stream.get()>>>`); on
/// the host backend they are host memory and `stream` refers to no stream
/// of chunkpipe's (`ctx.stream.get()` is null).
template <class... I, class... O>
struct ChunkContext<types<I...>, types<O...>> {
  std::tuple<::cuda::std::span<I>...> inputs;   ///< count elements each
  std::tuple<::cuda::std::span<O>...> outputs;  ///< count elements each; aliases inputs when in place
  std::size_t chunk = 0;   ///< index of the chunk in the run (a spread pipeline's: the whole run's)
  std::size_t offset = 0;  ///< index of its first element in the run (likewise)
  std::size_t count = 0;   ///< its elements (the last chunk may be short)
  ::cuda::stream_ref stream{};  ///< where to launch (CUDA backend)
  Backend backend = Backend::cuda;  ///< the backend running the chunk; Backend::host: the spans are host memory
  /// An Emit stage stores here how many elements it wrote to each output
  /// (device memory on the CUDA backend); null for every other stage.
  std::size_t* produced = nullptr;

  /// Input span I (default: the first).
  template <std::size_t K = 0>
  auto in() const {
    return std::get<K>(inputs);
  }
  /// Output span K (default: the first).
  template <std::size_t K = 0>
  auto out() const {
    return std::get<K>(outputs);
  }
};

}  // namespace chunkpipe

// The traits the engine reads off each stage type (what it takes and
// gives, its records, its kind): machinery, not API.
#include <chunkpipe/detail/stage_traits.hpp>
