// SPDX-License-Identifier: MIT
// An owner of bytes from a MemoryResource (memory_resource.hpp), or from a
// built-in allocation (cudaMalloc, cudaMallocHost, aligned operator new)
// when the program gave none: what every slot arena, record buffer and
// piece buffer of a pipeline is held in. Host-only C++, no CUDA.
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/memory_resource.hpp>
#include <chunkpipe/detail/linkage.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <utility>

namespace chunkpipe::detail {

/// The message of the exception being handled ("an exception that is not a
/// std::exception" otherwise). Call only inside a catch block.
std::string current_message();

/// Bytes from a MemoryResource or a built-in allocation, given back in the
/// destructor the way they came (the resource's deallocate with the same
/// size and alignment, or the built-in free). Move-only; the destructor
/// never throws. A resource held here stays alive as long as its memory.
class ResourceBuffer {
 public:
  /// How built-in memory is given back.
  using FreeFn = void (*)(void* p, std::size_t alignment) noexcept;

  ResourceBuffer() = default;

  /// `bytes` bytes aligned to `alignment` from `resource` (none for 0).
  /// `what` names them for errors ("the device slots"). Blocks as long as
  /// the resource does. Throws pipeline_error naming `what` when the
  /// resource throws (its exception nested: std::rethrow_if_nested), returns
  /// null or returns memory not so aligned (given back first).
  ResourceBuffer(std::shared_ptr<MemoryResource> resource, std::size_t bytes, std::size_t alignment,
                 const char* what);

  /// Takes `p` (`bytes` bytes, built-in memory), which `free` gives back.
  /// Never blocks; throws nothing.
  ResourceBuffer(void* p, std::size_t bytes, std::size_t alignment, FreeFn free) noexcept
      : ptr_(p), bytes_(bytes), alignment_(alignment), free_(free) {}

  ResourceBuffer(ResourceBuffer&& o) noexcept { take(o); }
  ResourceBuffer& operator=(ResourceBuffer&& o) noexcept;
  ResourceBuffer(const ResourceBuffer&) = delete;
  ResourceBuffer& operator=(const ResourceBuffer&) = delete;
  ~ResourceBuffer() { reset(); }

  std::byte* data() const noexcept { return static_cast<std::byte*>(ptr_); }
  std::size_t size() const noexcept { return bytes_; }
  /// The resource it came from; null for built-in memory.
  const std::shared_ptr<MemoryResource>& resource() const noexcept { return resource_; }

  /// Gives the memory back now. Never throws.
  void reset() noexcept;

 private:
  void take(ResourceBuffer& o) noexcept;

  std::shared_ptr<MemoryResource> resource_;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t alignment_ = 0;
  FreeFn free_ = nullptr;
};

/// `bytes` bytes of host memory aligned to `alignment`: from `resource`, or
/// from aligned operator new where it is null (the host backend's slots,
/// records and piece buffers). Throws as ResourceBuffer's constructor does,
/// std::bad_alloc from operator new.
ResourceBuffer host_buffer(std::shared_ptr<MemoryResource> resource, std::size_t bytes, std::size_t alignment,
                           const char* what);

}  // namespace chunkpipe::detail

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/resource_buffer.inl>
#endif
