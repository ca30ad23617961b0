// SPDX-License-Identifier: MIT
/// \file
/// RAII owners for the CUDA resources a pipeline holds: streams, events,
/// device and pinned buffers (from cudaMalloc/cudaMallocHost or from the
/// program's MemoryResource), a guard that makes a device current, and
/// CudaPoolResource, a MemoryResource over a cudaMallocAsync pool.
/// Move-only; destructors never throw (a failure to free is ignored, as
/// nothing useful can be done about it there).
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/errors.hpp>
#include <chunkpipe/memory_resource.hpp>
#include <chunkpipe/detail/linkage.hpp>
#include <chunkpipe/detail/resource_buffer.hpp>

#include <cuda/stream_ref>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

namespace chunkpipe {

namespace detail {
struct StreamDeleter {
  void operator()(CUstream_st* s) const noexcept { (void)cudaStreamDestroy(s); }
};
struct EventDeleter {
  void operator()(CUevent_st* e) const noexcept { (void)cudaEventDestroy(e); }
};

// Where CUDA says `p` lives: "device memory of device 0", "pinned host
// memory", and so on, for the errors below.
std::string memory_kind(const cudaPointerAttributes& a);

// Checks that memory a resource gave is what the buffer holds: device
// memory of the current device (or managed) when `device`, else
// page-locked host memory (or managed). Gives it back and throws
// config_error naming `what` if not; cuda_error if CUDA fails.
void check_resource_memory(ResourceBuffer& b, bool device, const char* what);

inline void free_device(void* p, std::size_t) noexcept {
  if (cudaFree(p) != cudaSuccess) (void)cudaGetLastError();
}
inline void free_pinned(void* p, std::size_t) noexcept {
  if (cudaFreeHost(p) != cudaSuccess) (void)cudaGetLastError();
}
}  // namespace detail

/// The alignment DeviceBuffer and PinnedBuffer ask a MemoryResource for:
/// what cudaMalloc gives, and what every slot array is aligned to.
inline constexpr std::size_t buffer_alignment = 256;

/// A non-blocking stream: it never synchronises with the legacy default
/// stream. Throws cuda_error if creation fails.
class Stream {
 public:
  Stream() = default;
  /// A new non-blocking stream (cudaStreamCreateWithFlags). Blocks briefly
  /// (a CUDA call); throws cuda_error if creation fails.
  static Stream create() {
    cudaStream_t s = nullptr;
    CHUNKPIPE_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    Stream out;
    out.handle_.reset(s);
    return out;
  }
  /// The stream, still owned by this object; null where it holds none
  /// (default-constructed or moved from).
  cudaStream_t get() const noexcept { return handle_.get(); }
  /// True when it holds a stream.
  explicit operator bool() const noexcept { return handle_ != nullptr; }

 private:
  std::unique_ptr<CUstream_st, detail::StreamDeleter> handle_;
};

/// A CUDA event. Timing is off unless asked for: events that only order
/// work are cheaper without it. Throws cuda_error if creation fails.
class Event {
 public:
  Event() = default;
  /// A new event, with timing only if `timing` (cudaEventCreateWithFlags).
  /// Blocks briefly (a CUDA call); throws cuda_error if creation fails.
  static Event create(bool timing = false) {
    cudaEvent_t e = nullptr;
    CHUNKPIPE_CUDA_TRY(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
    Event out;
    out.handle_.reset(e);
    return out;
  }
  /// The event, still owned by this object; null where it holds none
  /// (default-constructed or moved from).
  cudaEvent_t get() const noexcept { return handle_.get(); }
  /// True when it holds an event.
  explicit operator bool() const noexcept { return handle_ != nullptr; }

 private:
  std::unique_ptr<CUevent_st, detail::EventDeleter> handle_;
};

/// Device memory of the current device, from cudaMalloc or from a
/// MemoryResource, given back the same way when it goes.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  /// `bytes` from cudaMalloc (none for 0). Throws cuda_error if allocation
  /// fails.
  explicit DeviceBuffer(std::size_t bytes) : DeviceBuffer(bytes, nullptr) {}
  /// `bytes` aligned to buffer_alignment from `resource`, or from cudaMalloc
  /// where it is null; `what` names them in errors. Blocks as long as the
  /// resource does. Throws cuda_error if cudaMalloc fails; pipeline_error
  /// naming `what` if the resource throws (its exception nested), returns
  /// null or a misaligned address; config_error if what it returns is not
  /// device memory of the current device or managed memory (given back
  /// first).
  DeviceBuffer(std::size_t bytes, std::shared_ptr<MemoryResource> resource, const char* what = "device memory");
  /// The memory (device memory: not for the host to dereference); null
  /// where it holds none.
  std::byte* data() const noexcept { return buffer_.data(); }
  /// Its size in bytes; 0 where it holds none.
  std::size_t size() const noexcept { return buffer_.size(); }

 private:
  detail::ResourceBuffer buffer_;
};

/// Page-locked host memory, from cudaMallocHost or from a MemoryResource:
/// copies from it run at full link speed and truly asynchronously. Pinning
/// is slow (tens to hundreds of ms per GiB), so pipelines allocate it once
/// and reuse it.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  /// `bytes` from cudaMallocHost (none for 0). Throws cuda_error if
  /// allocation fails.
  explicit PinnedBuffer(std::size_t bytes) : PinnedBuffer(bytes, nullptr) {}
  /// `bytes` aligned to buffer_alignment from `resource`, or from
  /// cudaMallocHost where it is null; `what` names them in errors. Blocks
  /// as long as the resource does. Throws as DeviceBuffer's constructor
  /// does, config_error if what the resource returns is not page-locked
  /// host memory or managed memory.
  PinnedBuffer(std::size_t bytes, std::shared_ptr<MemoryResource> resource, const char* what = "pinned memory");
  /// The memory, readable and writable by the host; null where it holds
  /// none.
  std::byte* data() const noexcept { return buffer_.data(); }
  /// Its size in bytes; 0 where it holds none.
  std::size_t size() const noexcept { return buffer_.size(); }

 private:
  detail::ResourceBuffer buffer_;
};

/// `n` elements of T in pinned memory: a typed PinnedBuffer that runs take
/// as a range (data(), size()), copied directly with no staging. The
/// elements are not initialised. Throws cuda_error if allocation fails.
template <class T>
class PinnedArray {
  static_assert(std::is_trivially_copyable_v<T>, "chunkpipe::PinnedArray holds trivially copyable elements");

 public:
  PinnedArray() = default;
  /// `n` uninitialised elements from cudaMallocHost (none for 0). Blocks
  /// while the memory is pinned; throws cuda_error if allocation fails.
  explicit PinnedArray(std::size_t n) : buffer_(n * sizeof(T)), size_(n) {}
  /// The first element; null where it holds none.
  T* data() const noexcept { return reinterpret_cast<T*>(buffer_.data()); }
  /// How many elements it holds.
  std::size_t size() const noexcept { return size_; }
  /// Element `i`, not bounds-checked.
  T& operator[](std::size_t i) const noexcept { return data()[i]; }
  /// The first element, for range-for and algorithms.
  T* begin() const noexcept { return data(); }
  /// One past the last element.
  T* end() const noexcept { return data() + size_; }

 private:
  PinnedBuffer buffer_;
  std::size_t size_ = 0;
};

/// Makes `device` current for its lifetime and restores the previous one.
/// Throws cuda_error if the device cannot be selected.
class DeviceGuard {
 public:
  /// Makes `device` current (cudaSetDevice) unless it already is. Blocks
  /// briefly (CUDA calls); throws cuda_error if the current device cannot
  /// be read or `device` cannot be made current.
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

/// Device memory from a CUDA stream-ordered memory pool (cudaMemPool_t), as
/// a MemoryResource for Options::device_memory: the device's default pool
/// (what cudaMallocAsync uses), or one the program made with
/// cudaMemPoolCreate, whose release threshold, limits and access stay the
/// program's. It works on a non-blocking stream of its own: allocate()
/// calls cudaMallocFromPoolAsync there and then synchronises that stream,
/// so the memory is usable from every stream when it returns (it blocks,
/// which costs nothing that matters: a pipeline allocates its slots once);
/// deallocate() calls cudaFreeAsync there and returns at once (a pipeline
/// gives memory back only after its own work on it has finished). Safe to
/// share between pipelines and threads. Memory comes aligned to 256 bytes,
/// as CUDA's allocations are; an allocation not aligned as asked fails in
/// the pipeline with pipeline_error.
class CudaPoolResource final : public MemoryResource {
 public:
  /// The default memory pool of `device` (-1: the current device). Blocks
  /// briefly (creates a stream). Throws cuda_error if CUDA fails, e.g. on a
  /// device without memory pools.
  explicit CudaPoolResource(int device = -1) : device_(resolve(device)) {
    DeviceGuard guard(device_);
    CHUNKPIPE_CUDA_TRY(cudaDeviceGetDefaultMemPool(&pool_, device_));
    stream_ = Stream::create();
  }

  /// `pool`, a pool of `device` (-1: the current device) that the program
  /// made and destroys only after this resource and everything allocated
  /// from it are gone. Blocks briefly (creates a stream). Throws
  /// config_error for a null pool, cuda_error if CUDA fails.
  explicit CudaPoolResource(cudaMemPool_t pool, int device = -1) : pool_(pool), device_(resolve(device)) {
    if (pool == nullptr) throw config_error("chunkpipe: CudaPoolResource: the memory pool is null");
    DeviceGuard guard(device_);
    stream_ = Stream::create();
  }

  CudaPoolResource(const CudaPoolResource&) = delete;
  CudaPoolResource& operator=(const CudaPoolResource&) = delete;

  /// `bytes` from the pool, usable from any stream on return. Blocks until
  /// the allocation is complete on the resource's stream. Throws cuda_error
  /// if CUDA fails (cudaErrorMemoryAllocation when the pool cannot grow).
  void* allocate(std::size_t bytes, std::size_t /*alignment*/) override {
    DeviceGuard guard(device_);
    void* p = nullptr;
    CHUNKPIPE_CUDA_TRY(cudaMallocFromPoolAsync(&p, bytes, pool_, stream_.get()));
    const cudaError_t synced = cudaStreamSynchronize(stream_.get());
    if (synced != cudaSuccess) {
      (void)cudaFreeAsync(p, stream_.get());
      ::chunkpipe::detail::throw_cuda_error(synced, "cudaStreamSynchronize(stream)", __FILE__, __LINE__);
    }
    return p;
  }

  /// Gives `p` back to the pool in order on the resource's stream. Never
  /// blocks; never throws.
  void deallocate(void* p, std::size_t /*bytes*/, std::size_t /*alignment*/) noexcept override {
    int previous = -1;
    const bool switched =
        cudaGetDevice(&previous) == cudaSuccess && previous != device_ && cudaSetDevice(device_) == cudaSuccess;
    if (cudaFreeAsync(p, stream_.get()) != cudaSuccess) (void)cudaGetLastError();
    if (switched) (void)cudaSetDevice(previous);
  }

  /// The pool it allocates from. Never blocks; throws nothing.
  cudaMemPool_t pool() const noexcept { return pool_; }
  /// The device of that pool. Never blocks; throws nothing.
  int device() const noexcept { return device_; }
  /// The stream it allocates and frees on (synchronise it to have every
  /// free complete). Never blocks; throws nothing.
  ::cuda::stream_ref stream() const noexcept { return ::cuda::stream_ref(stream_.get()); }

 private:
  static int resolve(int device) {
    if (device >= 0) return device;
    int d = 0;
    CHUNKPIPE_CUDA_TRY(cudaGetDevice(&d));
    return d;
  }

  cudaMemPool_t pool_ = nullptr;
  int device_ = 0;
  Stream stream_;
};

}  // namespace chunkpipe

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/memory.inl>
#endif
