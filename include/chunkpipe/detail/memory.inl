// SPDX-License-Identifier: MIT
// Definitions for memory.cuh. Included at its bottom where chunkpipe is
// header-only, or once by <chunkpipe/compiled.hpp> (detail/linkage.hpp); do
// not include directly.
#pragma once

namespace chunkpipe {

namespace detail {

CHUNKPIPE_INLINE std::string memory_kind(const cudaPointerAttributes& a) {
  switch (a.type) {
    case cudaMemoryTypeDevice: return "device memory of device " + std::to_string(a.device);
    case cudaMemoryTypeHost: return "pinned host memory";
    case cudaMemoryTypeManaged: return "managed memory";
    default: return "pageable host memory";
  }
}

CHUNKPIPE_INLINE void check_resource_memory(ResourceBuffer& b, bool device, const char* what) {
  if (b.data() == nullptr) return;
  cudaPointerAttributes a{};
  const cudaError_t e = cudaPointerGetAttributes(&a, b.data());
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    a.type = cudaMemoryTypeUnregistered;
  }
  int current = 0;
  CHUNKPIPE_CUDA_TRY(cudaGetDevice(&current));
  const bool ok = a.type == cudaMemoryTypeManaged ||
                  (device ? a.type == cudaMemoryTypeDevice && a.device == current : a.type == cudaMemoryTypeHost);
  if (ok) return;
  const std::string kind = memory_kind(a);
  b.reset();
  throw config_error(std::string("chunkpipe: the memory resource for ") + what + " gave " + kind + "; it must give " +
                     (device ? "device memory of device " + std::to_string(current) + " (or managed memory)"
                             : std::string("page-locked host memory (cudaMallocHost, cudaHostAlloc, "
                                           "cudaHostRegister) or managed memory")));
}

}  // namespace detail

CHUNKPIPE_INLINE DeviceBuffer::DeviceBuffer(std::size_t bytes, std::shared_ptr<MemoryResource> resource,
                                            const char* what) {
  if (resource) {
    buffer_ = detail::ResourceBuffer(std::move(resource), bytes, buffer_alignment, what);
    detail::check_resource_memory(buffer_, true, what);
    return;
  }
  if (bytes == 0) return;
  void* p = nullptr;
  CHUNKPIPE_CUDA_TRY(cudaMalloc(&p, bytes));
  buffer_ = detail::ResourceBuffer(p, bytes, buffer_alignment, &detail::free_device);
}

CHUNKPIPE_INLINE PinnedBuffer::PinnedBuffer(std::size_t bytes, std::shared_ptr<MemoryResource> resource,
                                            const char* what) {
  if (resource) {
    buffer_ = detail::ResourceBuffer(std::move(resource), bytes, buffer_alignment, what);
    detail::check_resource_memory(buffer_, false, what);
    return;
  }
  if (bytes == 0) return;
  void* p = nullptr;
  CHUNKPIPE_CUDA_TRY(cudaMallocHost(&p, bytes));
  buffer_ = detail::ResourceBuffer(p, bytes, buffer_alignment, &detail::free_pinned);
}

}  // namespace chunkpipe
