// SPDX-License-Identifier: MIT
// The kernel chunkpipe writes for Map stages.
#pragma once

#include <chunkpipe/cuda_error.cuh>

#include <cuda/std/tuple>
#include <cuda/std/utility>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

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
/// every warp's loads and stores are coalesced: the lesson's kernel shape,
/// with no grid-stride loop (launch_map splits the rare range one grid cannot
/// cover). Out and In are ::cuda::std::tuple of pointers (a __global__
/// template may have only one parameter pack).
#ifdef __NVCC__
#pragma nv_diagnostic push
#pragma nv_diag_suppress 1407
#endif
template <class F, class Out, class In>
CHUNKPIPE_KERNEL void map_kernel(F f, std::size_t n, Out out, In in) {
  constexpr auto outs = ::cuda::std::tuple_size<Out>::value;
  constexpr auto ins = ::cuda::std::tuple_size<In>::value;
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) {
    store_at(out, i, call_at(f, in, i, ::cuda::std::make_index_sequence<ins>{}),
             ::cuda::std::make_index_sequence<outs>{});
  }
}
#ifdef __NVCC__
#pragma nv_diagnostic pop
#endif

inline constexpr unsigned map_block_threads = 256;

/// Most blocks of one map launch, far below the 2^31 - 1 limit.
inline constexpr std::size_t map_max_blocks = std::size_t{1} << 30;

/// The same pointers, `k` elements on.
template <class... P>
::cuda::std::tuple<P*...> offset_by(const ::cuda::std::tuple<P*...>& t, std::size_t k) {
  return ::cuda::std::apply([k](P*... p) { return ::cuda::std::tuple<P*...>(p + k...); }, t);
}

/// Launches map_kernel on `stream` over n elements and checks the launch: one
/// launch unless n needs more than map_max_blocks blocks (2^38 elements).
/// Throws cuda_error if a launch fails.
template <class F, class... U, class... T>
void launch_map(const F& f, std::size_t n, ::cuda::std::tuple<U*...> out, ::cuda::std::tuple<const T*...> in,
                cudaStream_t stream) {
  constexpr std::size_t per_launch = map_max_blocks * map_block_threads;
  for (std::size_t first = 0; first < n; first += per_launch) {
    const std::size_t m = n - first < per_launch ? n - first : per_launch;
    const auto blocks = static_cast<unsigned>((m + map_block_threads - 1) / map_block_threads);
    map_kernel<<<blocks, map_block_threads, 0, stream>>>(f, m, offset_by(out, first), offset_by(in, first));
    CHUNKPIPE_CUDA_TRY(cudaGetLastError());
  }
}

/// The launches launch_map would make, added to `graph` as kernel nodes
/// after `deps` instead (no stream, no capture: adding a node costs the
/// same however large the graph is). Appends the nodes to `nodes`. Throws
/// cuda_error if CUDA refuses a node.
template <class F, class... U, class... T>
void add_map_nodes(cudaGraph_t graph, const std::vector<cudaGraphNode_t>& deps, const F& f, std::size_t n,
                   ::cuda::std::tuple<U*...> out, ::cuda::std::tuple<const T*...> in,
                   std::vector<cudaGraphNode_t>& nodes) {
  using Out = ::cuda::std::tuple<U*...>;
  using In = ::cuda::std::tuple<const T*...>;
  constexpr std::size_t per_launch = map_max_blocks * map_block_threads;
  for (std::size_t first = 0; first < n; first += per_launch) {
    F fn = f;
    std::size_t m = n - first < per_launch ? n - first : per_launch;
    Out o = offset_by(out, first);
    In i = offset_by(in, first);
    void* args[] = {&fn, &m, &o, &i};  // copied into the node
    cudaKernelNodeParams p{};
    p.func = reinterpret_cast<void*>(&map_kernel<F, Out, In>);
    p.gridDim = dim3(static_cast<unsigned>((m + map_block_threads - 1) / map_block_threads));
    p.blockDim = dim3(map_block_threads);
    p.sharedMemBytes = 0;
    p.kernelParams = args;
    p.extra = nullptr;
    cudaGraphNode_t node = nullptr;
    CHUNKPIPE_CUDA_TRY(cudaGraphAddKernelNode(&node, graph, deps.data(), deps.size(), &p));
    nodes.push_back(node);
  }
}

}  // namespace chunkpipe::detail
