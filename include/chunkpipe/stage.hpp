// SPDX-License-Identifier: MIT
// Stages: how user work enters a pipeline. Host-only C++ (CCCL's span,
// tuple and stream_ref, which need only the CUDA runtime's declarations), so
// the host backend and the planner can use the same types as the GPU
// executor.
//
//   struct Fma {
//     float a, b;
//     CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return fmaf(x, a, b); }
//   };
//   chunkpipe::Map<Fma>              element-wise; the library writes the kernel
//   chunkpipe::ChunkFn<Sort>         a whole chunk at a time, in place
//   chunkpipe::ChunkFn<Pack, int8_t> a whole chunk, into a new int8_t buffer
//
// Element types flow from the run's inputs through the stages: a Map's
// outputs are what its functor returns (a ::cuda::std::tuple for several),
// a ChunkFn's are the types it names, or its inputs' when it names none.
#pragma once

#include <cuda/std/span>
#include <cuda/std/tuple>
#include <cuda/stream_ref>

#include <cstddef>
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

namespace chunkpipe {

/// A list of element types.
template <class... T>
struct types {
  static constexpr std::size_t size = sizeof...(T);
};

/// Element-wise stage. `F` is copied to the device and called once per
/// element with one element of each input (in order); it returns the output
/// element, or a ::cuda::std::tuple of several. The library writes the
/// kernel (coalesced, every launch checked). F must be trivially copyable.
template <class F>
struct Map {
  F fn{};
};

/// Chunk-level stage. `F` is called on the host, once per chunk, with a
/// ChunkContext: the chunk's device spans, its index, offset, count and the
/// stream to launch on. It may launch anything on ctx.stream (its own kernel,
/// thrust::cuda::par_nosync.on(ctx.stream), CUB) and must not synchronise or
/// use any other stream. `Out...` names its output element types; with none,
/// it works in place on its input buffers.
template <class F, class... Out>
struct ChunkFn {
  F fn{};
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
  std::size_t chunk = 0;   ///< index of the chunk in the run
  std::size_t offset = 0;  ///< index of its first element in the run
  std::size_t count = 0;   ///< its elements (the last chunk may be short)
  ::cuda::stream_ref stream{};  ///< where to launch (CUDA backend)
  Backend backend = Backend::cuda;

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

namespace detail {

template <class R>
struct result_types {
  using type = types<R>;
};
template <class... U>
struct result_types<::cuda::std::tuple<U...>> {
  using type = types<U...>;
};

template <class Stage, class In>
struct stage_io;

template <class F, class... T>
struct stage_io<Map<F>, types<T...>> {
  using in = types<T...>;
  using result = std::decay_t<decltype(std::declval<F&>()(std::declval<const T&>()...))>;
  using out = typename result_types<result>::type;
  static constexpr bool in_place = false;
  static constexpr bool elementwise = true;
  static_assert(std::is_trivially_copyable_v<F>, "chunkpipe::Map: the functor must be trivially copyable");
};

template <class F, class... O, class... T>
struct stage_io<ChunkFn<F, O...>, types<T...>> {
  using in = types<T...>;
  using out = std::conditional_t<sizeof...(O) == 0, types<T...>, types<O...>>;
  static constexpr bool in_place = sizeof...(O) == 0;
  static constexpr bool elementwise = false;
};

/// Input and output types of every stage, for inputs `In`.
template <class In, class... Stages>
struct chain;

template <class In>
struct chain<In> {
  using out = In;
  using ios = std::tuple<>;
};

template <class In, class S, class... Rest>
struct chain<In, S, Rest...> {
  using io = stage_io<S, In>;
  using out = typename chain<typename io::out, Rest...>::out;
  using ios = decltype(std::tuple_cat(std::declval<std::tuple<io>>(),
                                      std::declval<typename chain<typename io::out, Rest...>::ios>()));
};

template <class Stage>
struct is_elementwise : std::false_type {};
template <class F>
struct is_elementwise<Map<F>> : std::true_type {};

}  // namespace detail
}  // namespace chunkpipe
