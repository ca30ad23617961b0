// SPDX-License-Identifier: MIT
// Definitions for detail/slot_arena.cuh. Included at its bottom where chunkpipe is
// header-only, or once by <chunkpipe/compiled.hpp> (detail/linkage.hpp); do
// not include directly.
#pragma once

namespace chunkpipe::detail {

CHUNKPIPE_INLINE std::pair<std::shared_ptr<void>, void*> RecordPool::get(std::size_t bytes) {
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

CHUNKPIPE_INLINE void SlotArena::lay_out(SlotLayout layout) {
  const std::size_t dev = layout.device_bytes();
  if (device_arena_.size() < dev) {
    if (!device_memory_) check_fits(layout);
    device_arena_ = DeviceBuffer();  // the old slots' memory may be needed for the new
    device_arena_ = DeviceBuffer(dev, device_memory_, "the device slots");
  }
  layout_ = std::move(layout);
}

CHUNKPIPE_INLINE void SlotArena::ensure_pinned() {
  if (has_pinned()) return;
  pinned_arena_ = PinnedBuffer(layout_.pinned_bytes(), pinned_memory_, "the pinned slots");
}

CHUNKPIPE_INLINE void SlotArena::check_fits(const SlotLayout& layout) const {
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

CHUNKPIPE_INLINE std::string SlotArena::mib(std::size_t bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return s;
}

}  // namespace chunkpipe::detail
