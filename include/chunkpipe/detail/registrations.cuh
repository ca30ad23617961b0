// SPDX-License-Identifier: MIT
// Pageable ranges a GPU pipeline pinned in place for Staging::registered:
// each is registered once (cudaHostRegister) and stays registered, for
// every later run over it, until the program releases them or the
// pipeline goes. Not thread-safe: its owner's intake lock guards it.
#pragma once

#include <chunkpipe/cuda_error.cuh>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

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
