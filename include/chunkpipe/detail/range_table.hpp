// SPDX-License-Identifier: MIT
// The host side of the graph executor's copy kernels (copy_kernel.cuh):
// the table of range addresses they read, their limits and launch shape,
// and which memory a kernel can address. Host code only, so that the graph
// executor's part that does not depend on the stages (graph_build.hpp,
// graph_ops.hpp) is compiled once with the host compiler.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

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
    case cudaMemoryTypeDevice:
      return a.device == current;
    case cudaMemoryTypeHost:
      return a.devicePointer == p;
    default:
      return false;
  }
}

}  // namespace chunkpipe::detail
