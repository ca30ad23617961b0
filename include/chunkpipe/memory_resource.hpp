// SPDX-License-Identifier: MIT
/// \file
/// Memory from the program: the allocator interface a pipeline takes its
/// slot memory from (Options::device_memory, Options::pinned_memory), and
/// adapters that turn any object with CCCL's synchronous memory-resource
/// members (a cuda::mr resource, an RMM resource, one of your own) into it.
/// Host-only C++, no CUDA runtime calls. The cudaMallocAsync-pool resource,
/// which needs CUDA, is CudaPoolResource in memory.cuh.
#pragma once

#include <cstddef>
#include <memory>
#include <type_traits>
#include <utility>

#if defined(LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE)
#include <cuda/memory_resource>
#endif

namespace chunkpipe {

/// Where a pipeline's slot memory comes from, when the program wants to
/// say (Options::device_memory, Options::pinned_memory). A pipeline
/// allocates its slots once (on its first run, and again only when a run's
/// element types lay the slots out anew) and gives every byte back, with
/// the same size and alignment, once its own work on that memory has
/// finished: by its destruction at the latest. A Reduce's or Accumulate's
/// records may outlive the pipeline with the result ticket that holds them,
/// and go back when it lets go.
///
/// There is no stream in this interface: the pipeline allocates when none
/// of its own work is in flight on that memory and frees after it has
/// drained it, so allocate() must return memory usable from any stream
/// (as CCCL's synchronous resource concept promises), and a stream-ordered
/// resource works on a stream of its own (CudaPoolResource, memory.cuh).
///
/// Implement the two members below, or wrap an existing resource with
/// borrow_resource() or share_resource(). Calls may come from any of the
/// pipeline's threads (the caller's, its issue thread), one at a time per
/// pipeline, but from several pipelines sharing one resource at once: a
/// shared resource must be thread-safe.
class MemoryResource {
 public:
  virtual ~MemoryResource() = default;

  /// At least `bytes` bytes (never 0), aligned to `alignment` (a power of
  /// two; pipelines ask for 256 or more), usable from any stream when it
  /// returns. May block. Throws to say it cannot (std::bad_alloc, say): the
  /// pipeline then throws pipeline_error naming what it was allocating,
  /// with this exception nested (std::rethrow_if_nested gives it back).
  /// Returning null counts as such a failure.
  virtual void* allocate(std::size_t bytes, std::size_t alignment) = 0;

  /// Gives back `p`, which allocate(bytes, alignment) returned, with the
  /// same `bytes` and `alignment`. No work of the pipeline's uses it any
  /// more. Never throws.
  virtual void deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept = 0;
};

namespace detail {

// The synchronous members an object offers: CCCL 3.0's cuda::mr concept
// and RMM up to 25.06 name them allocate/deallocate(p, bytes, alignment);
// later CCCL and RMM allocate_sync/deallocate_sync. The _sync names win
// where both exist (there the plain names are stream-ordered).
template <class R, class = void>
struct has_allocate_sync : std::false_type {};
template <class R>
struct has_allocate_sync<R, std::void_t<decltype(static_cast<void*>(std::declval<R&>().allocate_sync(
                                std::size_t{}, std::size_t{}))),
                                        decltype(std::declval<R&>().deallocate_sync(
                                            std::declval<void*>(), std::size_t{}, std::size_t{}))>> : std::true_type {
};
template <class R, class = void>
struct has_allocate : std::false_type {};
template <class R>
struct has_allocate<R, std::void_t<decltype(static_cast<void*>(std::declval<R&>().allocate(std::size_t{},
                                                                                            std::size_t{}))),
                                   decltype(std::declval<R&>().deallocate(std::declval<void*>(), std::size_t{},
                                                                          std::size_t{}))>> : std::true_type {};

}  // namespace detail

/// Whether `R` can back a MemoryResource through ResourceAdapter: it has
/// `void* allocate(std::size_t bytes, std::size_t alignment)` and
/// `void deallocate(void* p, std::size_t bytes, std::size_t alignment)`
/// (CCCL 3.0's cuda::mr::resource concept, RMM's resources up to 25.06), or
/// the same as allocate_sync/deallocate_sync (later CCCL and RMM).
/// \hideinitializer
template <class R>
inline constexpr bool is_memory_resource_like_v =
    detail::has_allocate_sync<R>::value || detail::has_allocate<R>::value;

/// A MemoryResource that forwards to any object with CCCL's synchronous
/// resource members (is_memory_resource_like_v): a cuda::mr resource, a
/// cuda::mr::resource_ref, an RMM memory resource, a class of your own. It
/// needs neither the experimental cuda::mr concepts nor RMM; build one with
/// borrow_resource() (you keep the object alive) or share_resource() (it
/// shares ownership). allocate() blocks as long as the object does and
/// throws what it throws; deallocate() never throws (an exception from the
/// object's deallocate is swallowed, as a destructor must).
///
/// RMM plugs in this way, device and pinned alike (RMM's resources satisfy
/// cuda::mr's concepts):
///
///     rmm::mr::cuda_async_memory_resource pool;           // or pool_memory_resource, ...
///     rmm::mr::pinned_host_memory_resource pinned;
///     chunkpipe::Options o;
///     o.device_memory = chunkpipe::borrow_resource(pool);  // pool, pinned: outlive the pipeline
///     o.pinned_memory = chunkpipe::borrow_resource(pinned);
///
/// A resource_ref (rmm::device_async_resource_ref, say) is an object with
/// the same members: borrow_resource(ref) takes it where
/// LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE is defined, and
/// share_resource(std::make_shared<decltype(ref)>(ref)) anywhere. RMM 25.08
/// and later are called through allocate_sync, which waits for the
/// allocation. Earlier RMM is called through allocate(bytes, alignment),
/// which orders a stream-ordered resource's allocation on the default
/// stream without waiting for it, while a pipeline's streams do not wait
/// for that stream: there, wrap a stream-ordered resource in a
/// MemoryResource of your own that calls allocate_async on a stream of its
/// own and synchronises it, as CudaPoolResource (memory.cuh) does.
///
/// Device memory must be of the pipeline's device (or managed), pinned
/// memory page-locked (cudaMallocHost, cudaHostAlloc, cudaHostRegister);
/// the GPU pipeline checks each allocation and throws config_error
/// otherwise.
template <class Resource>
class ResourceAdapter final : public MemoryResource {
  static_assert(is_memory_resource_like_v<Resource>,
                "chunkpipe: a memory resource needs void* allocate(std::size_t bytes, std::size_t alignment) and "
                "void deallocate(void* p, std::size_t bytes, std::size_t alignment) (or allocate_sync and "
                "deallocate_sync), as CCCL's cuda::mr resources and RMM's have");

 public:
  /// Forwards to the object `r` points to, which `r` keeps alive (an
  /// aliasing pointer that owns nothing makes this a borrowed reference).
  /// Never blocks; throws nothing.
  explicit ResourceAdapter(std::shared_ptr<Resource> r) noexcept : r_(std::move(r)) {}

  /// The object's allocate_sync, else allocate. Blocks as long as it does;
  /// throws what it throws.
  void* allocate(std::size_t bytes, std::size_t alignment) override {
    if constexpr (detail::has_allocate_sync<Resource>::value) {
      return static_cast<void*>(r_->allocate_sync(bytes, alignment));
    } else {
      return static_cast<void*>(r_->allocate(bytes, alignment));
    }
  }

  /// The object's deallocate_sync, else deallocate. Never throws.
  void deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept override {
    try {
      if constexpr (detail::has_allocate_sync<Resource>::value) {
        r_->deallocate_sync(p, bytes, alignment);
      } else {
        r_->deallocate(p, bytes, alignment);
      }
    } catch (...) {
      // Nothing useful can be done about a failed free here.
    }
  }

  /// The object it forwards to. Never blocks; throws nothing.
  Resource& resource() const noexcept { return *r_; }

 private:
  std::shared_ptr<Resource> r_;
};

/// A MemoryResource that uses `r`, which the caller keeps alive for as long
/// as any pipeline (or result ticket) built with it lives. `r` is any
/// object ResourceAdapter takes, or a MemoryResource itself (then used as
/// it is). Never blocks; throws only std::bad_alloc.
template <class Resource>
std::shared_ptr<MemoryResource> borrow_resource(Resource& r) {
  if constexpr (std::is_base_of_v<MemoryResource, Resource>) {
    return std::shared_ptr<MemoryResource>(std::shared_ptr<void>(), &r);
  } else {
    return std::make_shared<ResourceAdapter<Resource>>(std::shared_ptr<Resource>(std::shared_ptr<void>(), &r));
  }
}

/// A MemoryResource that shares ownership of `r`: the resource lives as
/// long as the last pipeline (or result ticket) that uses it. `r` is any
/// object ResourceAdapter takes, or a MemoryResource itself (then returned
/// as it is); null gives null (the pipeline's own allocation). Never
/// blocks; throws only std::bad_alloc.
template <class Resource>
std::shared_ptr<MemoryResource> share_resource(std::shared_ptr<Resource> r) {
  if (!r) return nullptr;
  if constexpr (std::is_base_of_v<MemoryResource, Resource>) {
    return r;
  } else {
    return std::make_shared<ResourceAdapter<Resource>>(std::move(r));
  }
}

#if defined(LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE)
/// A MemoryResource over a cuda::mr::resource_ref (where CCCL's experimental
/// memory resources are enabled): keeps a copy of the reference, so the
/// resource it names must outlive every pipeline built with it. Never
/// blocks; throws only std::bad_alloc.
template <class... Properties>
std::shared_ptr<MemoryResource> borrow_resource(::cuda::mr::resource_ref<Properties...> ref) {
  using Ref = ::cuda::mr::resource_ref<Properties...>;
  return std::make_shared<ResourceAdapter<Ref>>(std::make_shared<Ref>(ref));
}

/// The same for a cuda::mr::async_resource_ref: the pipeline uses its
/// synchronous members. Never blocks; throws only std::bad_alloc.
template <class... Properties>
std::shared_ptr<MemoryResource> borrow_resource(::cuda::mr::async_resource_ref<Properties...> ref) {
  using Ref = ::cuda::mr::async_resource_ref<Properties...>;
  return std::make_shared<ResourceAdapter<Ref>>(std::make_shared<Ref>(ref));
}
#endif

}  // namespace chunkpipe
