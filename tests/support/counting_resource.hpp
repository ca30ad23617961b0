// SPDX-License-Identifier: MIT
// A MemoryResource for tests, shared by the CPU and GPU suites: it counts
// what it hands out and what comes back (bytes and calls, each pointer with
// its size and alignment), checks the alignment asked for and given,
// poisons host memory it hands out with a non-zero pattern, and can be told
// to fail its next allocations. Its upstream is a pair of functions: aligned
// operator new here (host()), cudaMalloc or cudaMallocHost in the GPU tests.
#pragma once

#include <chunkpipe/memory_resource.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <utility>

namespace test_memory {

/// What a CountingResource throws when told to fail.
struct exhausted : std::runtime_error {
  exhausted() : std::runtime_error("test resource: exhausted on purpose") {}
};

class CountingResource final : public chunkpipe::MemoryResource {
 public:
  using Alloc = std::function<void*(std::size_t bytes, std::size_t alignment)>;
  using Free = std::function<void(void* p, std::size_t bytes, std::size_t alignment)>;
  /// Poisons memory it hands out (empty: memory the host cannot write, such
  /// as device memory, is left as it is).
  using Poison = std::function<void(void* p, std::size_t bytes)>;

  CountingResource(Alloc alloc, Free free, Poison poison = {})
      : alloc_(std::move(alloc)), free_(std::move(free)), poison_(std::move(poison)) {}

  /// Host memory from aligned operator new, poisoned with 0xA5.
  static std::shared_ptr<CountingResource> host() {
    return std::make_shared<CountingResource>(
        [](std::size_t bytes, std::size_t alignment) { return ::operator new(bytes, std::align_val_t{alignment}); },
        [](void* p, std::size_t, std::size_t alignment) { ::operator delete(p, std::align_val_t{alignment}); },
        [](void* p, std::size_t bytes) { std::memset(p, 0xA5, bytes); });
  }

  void* allocate(std::size_t bytes, std::size_t alignment) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (fail_next_ > 0) {
      --fail_next_;
      ++refused_;
      throw exhausted();
    }
    if (bytes == 0 || alignment < 256 || (alignment & (alignment - 1)) != 0) ++bad_requests_;
    void* p = alloc_(bytes, alignment);
    if (reinterpret_cast<std::uintptr_t>(p) % alignment != 0) ++bad_requests_;
    if (poison_) poison_(p, bytes);
    live_[p] = {bytes, alignment};
    ++calls_;
    total_bytes_ += bytes;
    outstanding_bytes_ += bytes;
    if (outstanding_bytes_ > peak_bytes_) peak_bytes_ = outstanding_bytes_;
    return p;
  }

  void deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = live_.find(p);
    if (it == live_.end() || it->second.first != bytes || it->second.second != alignment) {
      ++mismatches_;  // not ours, freed twice, or freed with another size or alignment
      return;
    }
    live_.erase(it);
    outstanding_bytes_ -= bytes;
    free_(p, bytes, alignment);
  }

  /// The next `n` allocations throw `exhausted`.
  void fail_next(int n) {
    std::lock_guard<std::mutex> lock(mutex_);
    fail_next_ = n;
  }

  std::size_t outstanding_bytes() const { return locked(outstanding_bytes_); }
  std::size_t outstanding_calls() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_.size();
  }
  std::size_t peak_bytes() const { return locked(peak_bytes_); }
  std::size_t total_bytes() const { return locked(total_bytes_); }
  std::size_t allocations() const { return locked(calls_); }
  std::size_t refused() const { return locked(refused_); }
  /// Allocations asked for 0 bytes or an alignment below 256 or not a power
  /// of two, or given a misaligned address.
  std::size_t bad_requests() const { return locked(bad_requests_); }
  /// Deallocations of a pointer it did not hand out, or with another size
  /// or alignment than it was handed out with.
  std::size_t mismatches() const { return locked(mismatches_); }

 private:
  std::size_t locked(const std::size_t& v) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return v;
  }

  Alloc alloc_;
  Free free_;
  Poison poison_;
  mutable std::mutex mutex_;
  std::map<void*, std::pair<std::size_t, std::size_t>> live_;  // pointer -> (bytes, alignment)
  std::size_t calls_ = 0, total_bytes_ = 0, outstanding_bytes_ = 0, peak_bytes_ = 0;
  std::size_t refused_ = 0, bad_requests_ = 0, mismatches_ = 0;
  int fail_next_ = 0;
};

}  // namespace test_memory
