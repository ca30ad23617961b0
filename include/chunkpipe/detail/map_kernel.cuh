// The kernel chunkpipe writes for Map stages.
#pragma once

#include <chunkpipe/cuda_error.cuh>

#include <cuda/std/tuple>
#include <cuda/std/utility>
#include <cuda_runtime_api.h>

#include <cstddef>

/// Kernels get hidden visibility so two shared libraries that instantiate
/// the same template kernel do not resolve to one another's copy (CCCL does
/// the same for CUB and Thrust kernels). nvcc warns (1407) when such a
/// template is instantiated with a functor of internal linkage, where the
/// attribute is moot; that warning is silenced around the kernel.
#define CHUNKPIPE_KERNEL __global__ __attribute__((visibility("hidden")))

namespace chunkpipe::detail {

template <class F, class... T, ::cuda::std::size_t... I>
__device__ __forceinline__ auto call_at(F& f, const ::cuda::std::tuple<const T*...>& in, std::size_t i,
                                        ::cuda::std::index_sequence<I...>) {
  return f(::cuda::std::get<I>(in)[i]...);
}

template <class... U, class R, ::cuda::std::size_t... K>
__device__ __forceinline__ void store_at(const ::cuda::std::tuple<U*...>& out, std::size_t i, const R& r,
                                         ::cuda::std::index_sequence<K...>) {
  if constexpr (sizeof...(U) == 1) {
    ::cuda::std::get<0>(out)[i] = r;
  } else {
    ((::cuda::std::get<K>(out)[i] = ::cuda::std::get<K>(r)), ...);
  }
}

/// One thread per element, consecutive threads on consecutive elements so
/// every warp's loads and stores are coalesced; the grid-stride loop only
/// matters for chunks larger than one grid. Out and In are ::cuda::std::tuple
/// of pointers (a __global__ template may have only one parameter pack).
#ifdef __NVCC__
#pragma nv_diagnostic push
#pragma nv_diag_suppress 1407
#endif
template <class F, class Out, class In>
CHUNKPIPE_KERNEL void map_kernel(F f, std::size_t n, Out out, In in) {
  constexpr auto outs = ::cuda::std::tuple_size<Out>::value;
  constexpr auto ins = ::cuda::std::tuple_size<In>::value;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    store_at(out, i, call_at(f, in, i, ::cuda::std::make_index_sequence<ins>{}),
             ::cuda::std::make_index_sequence<outs>{});
  }
}
#ifdef __NVCC__
#pragma nv_diagnostic pop
#endif

inline constexpr unsigned map_block_threads = 256;

/// Launches map_kernel on `stream` over n elements and checks the launch.
/// Throws cuda_error if the launch fails.
template <class F, class... U, class... T>
void launch_map(const F& f, std::size_t n, ::cuda::std::tuple<U*...> out, ::cuda::std::tuple<const T*...> in,
                cudaStream_t stream) {
  if (n == 0) return;
  // Enough blocks for one element per thread, capped far below the 2^31 - 1
  // limit; beyond that the grid-stride loop takes over.
  const std::size_t wanted = (n + map_block_threads - 1) / map_block_threads;
  const unsigned blocks = static_cast<unsigned>(wanted < (std::size_t{1} << 30) ? wanted : (std::size_t{1} << 30));
  map_kernel<<<blocks, map_block_threads, 0, stream>>>(f, n, out, in);
  CHUNKPIPE_CUDA_TRY(cudaGetLastError());
}

}  // namespace chunkpipe::detail
