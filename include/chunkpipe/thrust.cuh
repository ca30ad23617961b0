// SPDX-License-Identifier: MIT
/// \file
/// Thrust inside a ChunkFn without hidden synchronisation.
///
/// thrust::cuda::par_nosync.on(stream) keeps Thrust's kernels on the chunk's
/// stream, but Thrust still takes its temporary storage from cudaMalloc and
/// gives it back with cudaFree, and cudaFree synchronises the whole device:
/// every chunk's sort would drain every stream of the pipeline. The policy
/// below allocates and frees that storage in stream order instead.
///
/// \code
/// struct SortChunk {
///   template <class Ctx> void operator()(Ctx& ctx) const {
///     auto s = ctx.template in<0>();
///     thrust::sort(chunkpipe::thrust_policy(ctx.stream), s.begin(), s.end());
///   }
/// };
/// \endcode
#pragma once

#include <chunkpipe/cuda_error.cuh>

#include <thrust/execution_policy.h>

#include <cuda/stream_ref>

#include <cuda_runtime_api.h>

#include <cstddef>

namespace chunkpipe {

/// An allocator for Thrust's temporary storage: cudaMallocAsync and
/// cudaFreeAsync on one stream, from the device's default memory pool.
/// Allocation throws cuda_error on failure; deallocation never throws.
struct StreamScratch {
  using value_type = char;        ///< Thrust asks for bytes
  cudaStream_t stream = nullptr;  ///< the stream allocations and frees are ordered on

  /// `bytes` from cudaMallocAsync on `stream`. Does not synchronise; throws
  /// cuda_error if CUDA fails.
  char* allocate(std::size_t bytes) {
    void* p = nullptr;
    CHUNKPIPE_CUDA_TRY(cudaMallocAsync(&p, bytes, stream));
    return static_cast<char*>(p);
  }
  /// Frees `p` with cudaFreeAsync on `stream`. Never blocks; never throws
  /// (a failure is ignored).
  void deallocate(char* p, std::size_t) noexcept { (void)cudaFreeAsync(p, stream); }
};

/// thrust::cuda::par_nosync on `stream`, with stream-ordered temporary
/// storage. Never synchronises. By default the memory pool hands freed
/// memory back at synchronisation points; raise its release threshold
/// (cudaMemPoolAttrReleaseThreshold) to keep scratch cheap to reuse.
inline auto thrust_policy(cudaStream_t stream) { return thrust::cuda::par_nosync(StreamScratch{stream}).on(stream); }

/// The same for a ::cuda::stream_ref, such as a ChunkContext's `stream`.
inline auto thrust_policy(::cuda::stream_ref stream) { return ::chunkpipe::thrust_policy(stream.get()); }

}  // namespace chunkpipe
