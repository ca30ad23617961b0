// SPDX-License-Identifier: MIT
// A Filter stage on the GPU: cub::DeviceSelect::If over the chunk into the
// slot's output, the count written to the slot's count array on the device.
// Nothing waits for the count here; a host-out op reads it after the copy
// out brought it over (slots.hpp, run_packed_out).
//
// Only <chunkpipe/filter.cuh> (and the umbrella pipeline.cuh) include this
// file: the runtime reaches it through filter_device_scratch and
// filter_device_launch, found by argument-dependent lookup where a Filter
// pipeline is instantiated (stage_launch.cuh says how).
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/errors.hpp>
#include <chunkpipe/detail/stage_launch.cuh>  // FilterFound

#include <cub/device/device_select.cuh>
#include <cuda_runtime_api.h>

#include <climits>
#include <cstddef>
#include <string>

namespace chunkpipe::detail {

/// Keeps pred(x) as CUB wants it: a const call operator on the device.
template <class Pred>
struct KeepIf {
  Pred pred;
  template <class T>
  __device__ bool operator()(const T& x) const {
    return static_cast<bool>(pred(x));
  }
};

/// Scratch a Filter of element type T needs per slot for chunks of
/// `chunk_elems`. Throws config_error for a chunk CUB cannot count in an
/// int, cuda_error if CUB fails.
template <class Pred, class T>
std::size_t filter_scratch_bytes(const Pred& pred, std::size_t chunk_elems) {
  if (chunk_elems > static_cast<std::size_t>(INT_MAX)) {
    throw config_error("chunkpipe: a Filter's chunks may hold at most " + std::to_string(INT_MAX) +
                       " elements (got " + std::to_string(chunk_elems) + ")");
  }
  std::size_t bytes = 0;
  CHUNKPIPE_CUDA_TRY(cub::DeviceSelect::If(nullptr, bytes, static_cast<const T*>(nullptr), static_cast<T*>(nullptr),
                                           static_cast<std::size_t*>(nullptr), static_cast<int>(chunk_elems),
                                           KeepIf<Pred>{pred}));
  return bytes;
}

/// Keeps the elements of in[0, count) that `pred` keeps, in order, at
/// `out`, and their number at *produced (device memory), on `stream`.
/// Throws cuda_error if the launch fails.
template <class Pred, class T>
void launch_filter(const Pred& pred, const T* in, std::size_t count, T* out, std::size_t* produced, void* scratch,
                   std::size_t scratch_bytes, cudaStream_t stream) {
  std::size_t bytes = scratch_bytes;
  CHUNKPIPE_CUDA_TRY(cub::DeviceSelect::If(scratch, bytes, in, out, produced, static_cast<int>(count),
                                           KeepIf<Pred>{pred}, stream));
}

// The runtime's two entries (stage_launch.cuh, FilterFound): they take
// FilterFound, and so win over the fallbacks there.
template <class Pred, class T>
std::size_t filter_device_scratch(FilterFound, const Pred& pred, const T*, std::size_t chunk_elems) {
  return ::chunkpipe::detail::filter_scratch_bytes<Pred, T>(pred, chunk_elems);
}

template <class Pred, class T>
void filter_device_launch(FilterFound, const Pred& pred, const T* in, std::size_t count, T* out,
                          std::size_t* produced, void* scratch, std::size_t scratch_bytes, cudaStream_t stream) {
  ::chunkpipe::detail::launch_filter(pred, in, count, out, produced, scratch, scratch_bytes, stream);
}

}  // namespace chunkpipe::detail
