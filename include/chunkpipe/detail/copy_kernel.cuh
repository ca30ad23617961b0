// SPDX-License-Identifier: MIT
// Copies as kernels, for the graph executor's small copies: a kernel that
// moves bytes between a device slot and a run's range, reading the range's
// address from a table in device memory when it runs. A graph built of
// these is pointed at new host memory by setting the one node that writes
// the table (16 us on the H200) instead of every copy node (1.7 us each),
// and at 64 and 256 KiB it also replays 2.1x and 1.36x faster than copy
// nodes; at 1 MiB and above copy engines are faster
// (benchmarks/probes/graph_kernel_copy.cu, RESULTS.md "CUDA graphs").
#pragma once

#include <chunkpipe/detail/map_kernel.cuh>  // CHUNKPIPE_KERNEL
#include <chunkpipe/detail/range_table.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace chunkpipe::detail {

/// Writes `table` where the copy kernels read it: the graph's first node.
template <int = 0>
CHUNKPIPE_KERNEL void write_range_table(RangeTable* where, RangeTable table) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *where = table;
}

/// Copies `bytes` between `slot` and range `range` of `table` at byte
/// `offset`: from the range into the slot when `in`, else back. 16-byte
/// words where both ends allow, else 4-byte words, else bytes.
template <int = 0>
CHUNKPIPE_KERNEL void copy_with_table(const RangeTable* table, unsigned range, std::size_t offset, unsigned char* slot,
                                      std::size_t bytes, bool in) {
  unsigned char* far = table->at[range] + offset;
  const unsigned char* src = in ? far : slot;
  unsigned char* dst = in ? slot : far;
  const std::size_t first = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::uintptr_t both = reinterpret_cast<std::uintptr_t>(src) | reinterpret_cast<std::uintptr_t>(dst);
  std::size_t done = 0;
  if ((both & 15) == 0) {
    const std::size_t words = bytes / 16;
    for (std::size_t i = first; i < words; i += stride) reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
    done = words * 16;
  } else if ((both & 3) == 0) {
    const std::size_t words = bytes / 4;
    for (std::size_t i = first; i < words; i += stride) {
      reinterpret_cast<std::uint32_t*>(dst)[i] = reinterpret_cast<const std::uint32_t*>(src)[i];
    }
    done = words * 4;
  }
  for (std::size_t i = done + first; i < bytes; i += stride) dst[i] = src[i];
}

}  // namespace chunkpipe::detail
