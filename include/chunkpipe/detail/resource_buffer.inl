// SPDX-License-Identifier: MIT
// Definitions for detail/resource_buffer.hpp. Included at its bottom where
// chunkpipe is header-only, or once by <chunkpipe/compiled.hpp>
// (detail/linkage.hpp); do not include directly.
#pragma once

namespace chunkpipe::detail {

CHUNKPIPE_INLINE std::string current_message() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

CHUNKPIPE_INLINE ResourceBuffer::ResourceBuffer(std::shared_ptr<MemoryResource> resource, std::size_t bytes,
                                                std::size_t alignment, const char* what)
    : bytes_(bytes), alignment_(alignment) {
  if (bytes == 0) return;
  const std::string head = std::string("chunkpipe: allocating ") + what + " (" + std::to_string(bytes) +
                           " bytes, alignment " + std::to_string(alignment) + ") from the program's memory resource";
  void* p = nullptr;
  try {
    p = resource->allocate(bytes, alignment);
  } catch (...) {
    std::throw_with_nested(pipeline_error(head + " failed: " + current_message()));
  }
  if (p == nullptr) throw pipeline_error(head + " failed: it returned null");
  if (reinterpret_cast<std::uintptr_t>(p) % alignment != 0) {
    resource->deallocate(p, bytes, alignment);
    throw pipeline_error(head + " failed: it returned an address not aligned to " + std::to_string(alignment) +
                         " bytes");
  }
  ptr_ = p;
  resource_ = std::move(resource);
}

CHUNKPIPE_INLINE ResourceBuffer& ResourceBuffer::operator=(ResourceBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    take(o);
  }
  return *this;
}

CHUNKPIPE_INLINE void ResourceBuffer::reset() noexcept {
  if (ptr_ != nullptr) {
    if (resource_) {
      resource_->deallocate(ptr_, bytes_, alignment_);
    } else if (free_ != nullptr) {
      free_(ptr_, alignment_);
    }
  }
  ptr_ = nullptr;
  bytes_ = 0;
  resource_.reset();
  free_ = nullptr;
}

CHUNKPIPE_INLINE void ResourceBuffer::take(ResourceBuffer& o) noexcept {
  resource_ = std::move(o.resource_);
  ptr_ = std::exchange(o.ptr_, nullptr);
  bytes_ = std::exchange(o.bytes_, 0);
  alignment_ = o.alignment_;
  free_ = std::exchange(o.free_, nullptr);
}

CHUNKPIPE_INLINE ResourceBuffer host_buffer(std::shared_ptr<MemoryResource> resource, std::size_t bytes,
                                            std::size_t alignment, const char* what) {
  if (resource) return ResourceBuffer(std::move(resource), bytes, alignment, what);
  if (bytes == 0) return ResourceBuffer();
  void* p = ::operator new(bytes, std::align_val_t{alignment});
  return ResourceBuffer(p, bytes, alignment,
                        [](void* q, std::size_t a) noexcept { ::operator delete(q, std::align_val_t{a}); });
}

}  // namespace chunkpipe::detail
