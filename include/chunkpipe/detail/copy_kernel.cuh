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

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace chunkpipe::detail {

/// Ranges (inputs, then outputs) a graph's copy kernels can address.
inline constexpr std::size_t max_copy_kernel_ranges = 16;

/// The table the copy kernels read the run's range addresses from.
struct RangeTable {
  unsigned char* at[max_copy_kernel_ranges];
};

/// The largest copy the graph executor makes a kernel: above it copy
/// engines move the bytes faster than SM loads and stores do over the link.
inline constexpr std::size_t max_copy_kernel_bytes = std::size_t{256} << 10;

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

/// Threads a copy kernel's blocks have, and blocks for `bytes`: a 16-byte
/// word a thread, at most 8 blocks per SM of an H200 (grid-stride beyond).
inline constexpr unsigned copy_kernel_threads = 256;
inline unsigned copy_kernel_blocks(std::size_t bytes) {
  const std::size_t b = (bytes / 16 + copy_kernel_threads - 1) / copy_kernel_threads;
  return static_cast<unsigned>(b == 0 ? 1 : (b > 1056 ? 1056 : b));
}

/// Whether a kernel on the current device can use `p` as it is: the
/// current device's memory, or pinned host memory mapped at its host
/// address (all of cudaMallocHost's under unified addressing;
/// cudaHostRegister's where the device can use host pointers). Another
/// device's memory is left to copy nodes, which need no peer access, and
/// so is managed memory, whose pages a kernel would migrate (not measured).
/// Never throws; clears what CUDA says about a pointer it does not know.
inline bool device_addressable(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes a{};
  int current = -1;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess || cudaGetDevice(&current) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  switch (a.type) {
    case cudaMemoryTypeDevice: return a.device == current;
    case cudaMemoryTypeHost: return a.devicePointer == p;
    default: return false;
  }
}

}  // namespace chunkpipe::detail
