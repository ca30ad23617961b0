// SPDX-License-Identifier: MIT
// The kernels chunkpipe writes for record stages: a Reduce's segment folds
// (in the order detail/reduce.hpp fixes) and the reset of a per-chunk
// record before its functor runs.
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/detail/map_kernel.cuh>
#include <chunkpipe/detail/reduce.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>

namespace chunkpipe::detail {

#ifdef __NVCC__
#pragma nv_diagnostic push
#pragma nv_diag_suppress 1407
#endif
/// One block of reduce_threads per segment: block k folds elements
/// [k * segment, min(n, (k + 1) * segment)) of `in` into out[k].
template <class T, class Op, class I>
CHUNKPIPE_KERNEL void reduce_segments_kernel(Op op, const I* in, std::size_t n, std::size_t segment, T* out) {
  // Raw storage: T need not be trivially default-constructible on the device.
  __shared__ alignas(T) unsigned char raw[reduce_threads * sizeof(T)];
  T* lane = reinterpret_cast<T*>(raw);
  const std::size_t base = blockIdx.x * segment;
  const std::size_t len = n - base < segment ? n - base : segment;
  const unsigned t = threadIdx.x;
  const std::size_t active = len < reduce_threads ? len : reduce_threads;
  if (t < active) {
    const I* seg = in + base;
    T acc = static_cast<T>(seg[t]);
    for (std::size_t k = t + reduce_threads; k < len; k += reduce_threads) acc = op(acc, static_cast<T>(seg[k]));
    lane[t] = acc;
  }
  __syncthreads();
  for (unsigned s = reduce_threads / 2; s > 0; s /= 2) {
    if (t < s && t + s < active) lane[t] = op(lane[t], lane[t + s]);
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = lane[0];
}

/// Sets *record = value: a per-chunk record's start, on the chunk's stream.
template <class R>
CHUNKPIPE_KERNEL void set_record_kernel(R* record, R value) {
  *record = value;
}
#ifdef __NVCC__
#pragma nv_diagnostic pop
#endif

/// Folds `count` elements of `in` into ceil(count / segment) partials at
/// `out`, on `stream`. Throws cuda_error if the launch fails.
template <class T, class Op, class I>
void launch_reduce(const Op& op, const I* in, std::size_t count, std::size_t segment, T* out, cudaStream_t stream) {
  if (count == 0) return;
  const std::size_t blocks = (count + segment - 1) / segment;
  // A grid holds 2^31 - 1 blocks: more segments than that in one chunk
  // would need a segment under one element per 2^31 of the chunk.
  reduce_segments_kernel<T><<<static_cast<unsigned>(blocks), reduce_threads, 0, stream>>>(op, in, count, segment, out);
  CHUNKPIPE_CUDA_TRY(cudaGetLastError());
}

/// Sets a per-chunk record to its start value on `stream`.
template <class R>
void launch_set_record(R* record, const R& value, cudaStream_t stream) {
  set_record_kernel<<<1, 1, 0, stream>>>(record, value);
  CHUNKPIPE_CUDA_TRY(cudaGetLastError());
}

}  // namespace chunkpipe::detail
