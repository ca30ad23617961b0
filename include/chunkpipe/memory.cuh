// SPDX-License-Identifier: MIT
// RAII owners for the CUDA resources a pipeline holds: streams, events,
// device and pinned buffers, and a guard that makes a device current.
// Move-only; destructors never throw (a failure to free is ignored, as
// nothing useful can be done about it there).
#pragma once

#include <chunkpipe/cuda_error.cuh>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <type_traits>

namespace chunkpipe {

namespace detail {
struct StreamDeleter {
  void operator()(CUstream_st* s) const noexcept { (void)cudaStreamDestroy(s); }
};
struct EventDeleter {
  void operator()(CUevent_st* e) const noexcept { (void)cudaEventDestroy(e); }
};
struct DeviceDeleter {
  void operator()(void* p) const noexcept { (void)cudaFree(p); }
};
struct PinnedDeleter {
  void operator()(void* p) const noexcept { (void)cudaFreeHost(p); }
};
}  // namespace detail

/// A non-blocking stream: it never synchronises with the legacy default
/// stream. Throws cuda_error if creation fails.
class Stream {
 public:
  Stream() = default;
  static Stream create() {
    cudaStream_t s = nullptr;
    CHUNKPIPE_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    Stream out;
    out.handle_.reset(s);
    return out;
  }
  cudaStream_t get() const noexcept { return handle_.get(); }
  explicit operator bool() const noexcept { return handle_ != nullptr; }

 private:
  std::unique_ptr<CUstream_st, detail::StreamDeleter> handle_;
};

/// A CUDA event. Timing is off unless asked for: events that only order
/// work are cheaper without it. Throws cuda_error if creation fails.
class Event {
 public:
  Event() = default;
  static Event create(bool timing = false) {
    cudaEvent_t e = nullptr;
    CHUNKPIPE_CUDA_TRY(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
    Event out;
    out.handle_.reset(e);
    return out;
  }
  cudaEvent_t get() const noexcept { return handle_.get(); }
  explicit operator bool() const noexcept { return handle_ != nullptr; }

 private:
  std::unique_ptr<CUevent_st, detail::EventDeleter> handle_;
};

/// Device memory from cudaMalloc. Throws cuda_error if allocation fails.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    void* p = nullptr;
    CHUNKPIPE_CUDA_TRY(cudaMalloc(&p, bytes));
    ptr_.reset(p);
  }
  std::byte* data() const noexcept { return static_cast<std::byte*>(ptr_.get()); }
  std::size_t size() const noexcept { return bytes_; }

 private:
  std::unique_ptr<void, detail::DeviceDeleter> ptr_;
  std::size_t bytes_ = 0;
};

/// Page-locked host memory from cudaMallocHost: copies from it run at full
/// link speed and truly asynchronously. Pinning is slow (tens to hundreds
/// of ms per GiB), so pipelines allocate it once and reuse it. Throws
/// cuda_error if allocation fails.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    void* p = nullptr;
    CHUNKPIPE_CUDA_TRY(cudaMallocHost(&p, bytes));
    ptr_.reset(p);
  }
  std::byte* data() const noexcept { return static_cast<std::byte*>(ptr_.get()); }
  std::size_t size() const noexcept { return bytes_; }

 private:
  std::unique_ptr<void, detail::PinnedDeleter> ptr_;
  std::size_t bytes_ = 0;
};

/// `n` elements of T in pinned memory: a typed PinnedBuffer that runs take
/// as a range (data(), size()), copied directly with no staging. The
/// elements are not initialised. Throws cuda_error if allocation fails.
template <class T>
class PinnedArray {
  static_assert(std::is_trivially_copyable_v<T>, "chunkpipe::PinnedArray holds trivially copyable elements");

 public:
  PinnedArray() = default;
  explicit PinnedArray(std::size_t n) : buffer_(n * sizeof(T)), size_(n) {}
  T* data() const noexcept { return reinterpret_cast<T*>(buffer_.data()); }
  std::size_t size() const noexcept { return size_; }
  T& operator[](std::size_t i) const noexcept { return data()[i]; }
  T* begin() const noexcept { return data(); }
  T* end() const noexcept { return data() + size_; }

 private:
  PinnedBuffer buffer_;
  std::size_t size_ = 0;
};

/// Makes `device` current for its lifetime and restores the previous one.
/// Throws cuda_error if the device cannot be selected.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    CHUNKPIPE_CUDA_TRY(cudaGetDevice(&previous_));
    if (device != previous_) {
      CHUNKPIPE_CUDA_TRY(cudaSetDevice(device));
      restore_ = true;
    }
  }
  ~DeviceGuard() {
    if (restore_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool restore_ = false;
};

}  // namespace chunkpipe
