// SPDX-License-Identifier: MIT
// How a GPU pipeline's host ranges cross (Options::staging), and the
// pageable ranges it pinned in place for Staging::registered: each is
// registered once (cudaHostRegister) and stays registered, for every later
// run over it, until the program releases them or the pipeline goes. Not
// thread-safe: its owner's intake lock guards it.
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/io.hpp>
#include <chunkpipe/options.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

/// Whether a host range must be staged through pinned slots.
inline bool needs_staging(const void* p, Memory memory) {
  if (memory == Memory::pinned) return false;
  if (memory == Memory::pageable) return true;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // not a pointer CUDA knows: plain host memory
    return true;
  }
  return a.type == cudaMemoryTypeUnregistered;
}

class Registrations {
 public:
  using Range = std::pair<const void*, std::size_t>;  // (address, bytes)

  Registrations() = default;
  Registrations(const Registrations&) = delete;
  Registrations& operator=(const Registrations&) = delete;

  /// Pins [p, p + bytes) unless a registered range holds it already. Blocks
  /// (pinning takes tens to hundreds of ms per GiB); throws cuda_error on
  /// failure. The device must be current.
  void add(const void* p, std::size_t bytes) {
    for (const auto& [q, b] : ranges_) {
      if (p >= q && static_cast<const std::byte*>(p) + bytes <= static_cast<const std::byte*>(q) + b) return;
    }
    CHUNKPIPE_CUDA_TRY(cudaHostRegister(const_cast<void*>(p), bytes, cudaHostRegisterDefault));
    ranges_.emplace_back(p, bytes);
  }

  /// Whether a run's host range of `bytes` at `p` (`memory`, as the user
  /// declared it) passes through pinned slots under `mode`: only pageable
  /// memory does, and not under Staging::registered, which pins it in
  /// place here (add(): blocks, throws cuda_error), nor Staging::direct.
  /// The device must be current.
  bool staged(const void* p, std::size_t bytes, Memory memory, Staging mode) {
    if (bytes == 0 || !::chunkpipe::detail::needs_staging(p, memory)) return false;
    if (mode == Staging::registered) {
      add(p, bytes);
      return false;
    }
    return mode != Staging::direct;
  }

  /// Unregisters every range, newest first; nothing in flight may use
  /// them. Throws cuda_error at the first that fails: it and the ranges
  /// registered before it stay listed, those after it are gone (so none is
  /// ever unregistered twice).
  void release() {
    while (!ranges_.empty()) {
      CHUNKPIPE_CUDA_TRY(cudaHostUnregister(const_cast<void*>(ranges_.back().first)));
      ranges_.pop_back();
    }
  }

  /// release() for a destructor: never throws, forgets what fails.
  void release_all() noexcept {
    for (const auto& [p, bytes] : ranges_) {
      if (cudaHostUnregister(const_cast<void*>(p)) != cudaSuccess) (void)cudaGetLastError();
    }
    ranges_.clear();
  }

  const std::vector<Range>& ranges() const noexcept { return ranges_; }

 private:
  std::vector<Range> ranges_;
};

}  // namespace chunkpipe::detail
