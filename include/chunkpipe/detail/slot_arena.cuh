// SPDX-License-Identifier: MIT
// The slot arena of a GPU pipeline: the memory every run's chunks pass
// through and where it comes from. It owns the slot layout, the device
// arena, the pinned arena (for runs that stage) and the pool of pinned
// record buffers that folding runs (Reduce, Accumulate) write their
// records to, and takes them from the program's MemoryResources
// (Options::device_memory, Options::pinned_memory) or from cudaMalloc and
// cudaMallocHost. Issuer holds one and calls it under its issue lock;
// only records() is called without it (the pool has its own lock).
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/errors.hpp>
#include <chunkpipe/memory.cuh>
#include <chunkpipe/memory_resource.hpp>
#include <chunkpipe/options.hpp>
#include <chunkpipe/detail/linkage.hpp>
#include <chunkpipe/detail/slots.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

/// Pinned buffers for the records of folding runs (a Reduce's partials,
/// an Accumulate's per-chunk states), reused: pinning costs far more than
/// a run of small records, and a stream of runs needs one each. A buffer
/// returns when both its run and its result have let go of it, so it may
/// outlive the pipeline (and keeps its MemoryResource alive until then).
/// Sizes are powers of two, so a stream of similar runs reuses the same few.
class RecordPool {
 public:
  /// Buffers from `pinned` (null: cudaMallocHost).
  explicit RecordPool(std::shared_ptr<MemoryResource> pinned = nullptr) : pinned_(std::move(pinned)) {}

  /// Owner and address of at least `bytes` of pinned memory (none for 0).
  /// Thread-safe. Throws cuda_error if pinning fails, and what PinnedBuffer
  /// throws for a resource's memory.
  std::pair<std::shared_ptr<void>, void*> get(std::size_t bytes);

 private:
  static constexpr std::size_t kept = 64;  // free buffers kept for reuse
  struct Shared {
    std::mutex mutex;
    std::vector<PinnedBuffer> free;
  };
  std::shared_ptr<MemoryResource> pinned_;
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
};

/// The slots of one GPU pipeline: layout, device arena, pinned arena and
/// record pool (see the top of this file). Not thread-safe but for
/// records(): its owner calls the rest under one lock, with none of its own
/// work in flight on the slots being replaced.
class SlotArena {
 public:
  /// Slots on `device` (for messages; the caller makes it current), from
  /// `o.device_memory` and `o.pinned_memory` where set. Allocates nothing.
  SlotArena(int device, const Options& o)
      : device_(device), device_memory_(o.device_memory), pinned_memory_(o.pinned_memory),
        records_(o.pinned_memory) {}
  SlotArena(const SlotArena&) = delete;
  SlotArena& operator=(const SlotArena&) = delete;

  /// The device the slots are on.
  int device() const noexcept { return device_; }

  /// Lays the slots out anew. The device arena grows if it holds fewer
  /// bytes than `layout` needs (the old one is given back first: its memory
  /// may be needed for the new); nothing may use the old slots any more.
  /// Blocks while allocating. Throws config_error when the slots do not fit
  /// in free device memory (cudaMalloc only: a resource says for itself),
  /// and what DeviceBuffer throws; then the layout is unchanged but the old
  /// device arena may be gone, so the caller prepares again.
  void lay_out(SlotLayout layout);

  /// Whether the pinned arena holds the layout's pinned slots.
  bool has_pinned() const noexcept { return pinned_arena_.size() >= layout_.pinned_bytes(); }

  /// Allocates the pinned slots of the layout if they are missing (only
  /// pipelines that stage need them; no op uses them before the first
  /// staged run). Blocks while pinning. Throws what PinnedBuffer throws, and
  /// then the old pinned arena is kept.
  void ensure_pinned();

  /// The slots' addresses for the executors; valid until the next lay_out()
  /// or ensure_pinned().
  SlotMemory memory() const noexcept { return SlotMemory{&layout_, device_arena_.data(), pinned_arena_.data()}; }
  const SlotLayout& layout() const noexcept { return layout_; }

  /// Pinned records for a folding run: RecordPool::get. Thread-safe.
  std::pair<std::shared_ptr<void>, void*> records(std::size_t bytes) { return records_.get(bytes); }

  /// The program's device memory resource (null: cudaMalloc), which a graph
  /// executor's range tables come from too.
  const std::shared_ptr<MemoryResource>& device_memory() const noexcept { return device_memory_; }

 private:
  // A clear error instead of cudaMalloc's out-of-memory, before anything
  // is given back.
  void check_fits(const SlotLayout& layout) const;

  static std::string mib(std::size_t bytes);

  int device_;  // for messages, and the owner's DeviceGuards
  std::shared_ptr<MemoryResource> device_memory_, pinned_memory_;
  SlotLayout layout_;
  DeviceBuffer device_arena_;
  PinnedBuffer pinned_arena_;
  RecordPool records_;
};

}  // namespace chunkpipe::detail

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/slot_arena.inl>
#endif
