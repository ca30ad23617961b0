// SPDX-License-Identifier: MIT
// The slot arena of a GPU pipeline: the memory every run's chunks pass
// through and where it comes from. It owns the slot layout, the device
// arena, the pinned arena (for runs that stage) and the pool of pinned
// record buffers that folding runs (Reduce, Accumulate) write their
// records to, and takes them from the program's MemoryResources
// (Options::device_memory, Options::pinned_memory) or from cudaMalloc and
// cudaMallocHost. CudaRunner holds one and calls it under its issue lock;
// only records() is called without it (the pool has its own lock).
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/errors.hpp>
#include <chunkpipe/memory.cuh>
#include <chunkpipe/memory_resource.hpp>
#include <chunkpipe/options.hpp>
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
  std::pair<std::shared_ptr<void>, void*> get(std::size_t bytes) {
    if (bytes == 0) return {nullptr, nullptr};
    std::size_t size = 4096;
    while (size < bytes) size *= 2;
    PinnedBuffer b;
    {
      std::lock_guard<std::mutex> lock(shared_->mutex);
      auto& free = shared_->free;
      for (auto it = free.begin(); it != free.end(); ++it) {
        if (it->size() == size) {
          b = std::move(*it);
          free.erase(it);
          break;
        }
      }
    }
    if (b.size() == 0) b = PinnedBuffer(size, pinned_, "the records of a folding run (Reduce, Accumulate)");
    void* at = b.data();
    auto held = std::make_shared<PinnedBuffer>(std::move(b));
    std::shared_ptr<void> owner(at, [shared = shared_, held](void*) mutable {
      std::lock_guard<std::mutex> lock(shared->mutex);
      if (shared->free.size() < kept) shared->free.push_back(std::move(*held));
    });
    return {std::move(owner), at};
  }

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

  /// Lays the slots out anew. The device arena grows if it holds fewer
  /// bytes than `layout` needs (the old one is given back first: its memory
  /// may be needed for the new); nothing may use the old slots any more.
  /// Blocks while allocating. Throws config_error when the slots do not fit
  /// in free device memory (cudaMalloc only: a resource says for itself),
  /// and what DeviceBuffer throws; then the layout is unchanged but the old
  /// device arena may be gone, so the caller prepares again.
  void lay_out(SlotLayout layout) {
    const std::size_t dev = layout.device_bytes();
    if (device_arena_.size() < dev) {
      if (!device_memory_) check_fits(layout);
      device_arena_ = DeviceBuffer();  // the old slots' memory may be needed for the new
      device_arena_ = DeviceBuffer(dev, device_memory_, "the device slots");
    }
    layout_ = std::move(layout);
  }

  /// Whether the pinned arena holds the layout's pinned slots.
  bool has_pinned() const noexcept { return pinned_arena_.size() >= layout_.pinned_bytes(); }

  /// Allocates the pinned slots of the layout if they are missing (only
  /// pipelines that stage need them; no op uses them before the first
  /// staged run). Blocks while pinning. Throws what PinnedBuffer throws, and
  /// then the old pinned arena is kept.
  void ensure_pinned() {
    if (has_pinned()) return;
    pinned_arena_ = PinnedBuffer(layout_.pinned_bytes(), pinned_memory_, "the pinned slots");
  }

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
  void check_fits(const SlotLayout& layout) const {
    const std::size_t dev = layout.device_bytes();
    std::size_t free = 0, total = 0;
    CHUNKPIPE_CUDA_TRY(cudaMemGetInfo(&free, &total));
    free += device_arena_.size();
    if (dev > free) {
      throw config_error("chunkpipe: the slots need " + mib(dev) + " of device memory (" +
                         std::to_string(layout.depth) + " slots of " + mib(layout.device_slot_bytes) + ") but only " +
                         mib(free) + " are free on device " + std::to_string(device_) +
                         "; use a smaller chunk_elems or depth");
    }
  }

  static std::string mib(std::size_t bytes) {
    char s[32];
    std::snprintf(s, sizeof s, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
    return s;
  }

  int device_;  // for messages
  std::shared_ptr<MemoryResource> device_memory_, pinned_memory_;
  SlotLayout layout_;
  DeviceBuffer device_arena_;
  PinnedBuffer pinned_arena_;
  RecordPool records_;
};

}  // namespace chunkpipe::detail
