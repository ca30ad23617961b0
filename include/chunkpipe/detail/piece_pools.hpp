// SPDX-License-Identifier: MIT
// A spread's buffers kept from one run to the next (detail/spread.hpp):
// piece buffers for a Source's input and for outputs that go through the
// spread (a Sink's, a count's), a folding run's records, and the spread's
// one copy team (its members stage with it too; a counted run's deliverer
// copies pieces into place with it). Made or grown when first needed, so
// a spread whose runs need none holds none. Host-only.
#pragma once

#include <chunkpipe/memory_resource.hpp>
#include <chunkpipe/detail/copy_team.hpp>

#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace chunkpipe {
namespace detail {

/// Buffers of Buffer<unsigned char> (a piece buffer: from an element
/// count and the pinned MemoryResource, with data()), in three pools, and
/// the spread's SharedCopyTeam. Thread-safe; one lock, held only while a
/// buffer is looked up or made (the team has its own).
template <template <class> class Buffer>
class PiecePools {
 public:
  /// `pinned`: Options::pinned_memory (may be null); `team`: the spread's
  /// copy team, not null.
  PiecePools(std::shared_ptr<MemoryResource> pinned, std::shared_ptr<SharedCopyTeam> team)
      : pinned_(std::move(pinned)), team_(std::move(team)) {}

  /// Slot `i` of the input pieces, at least `bytes` long, made or grown
  /// now (its old contents are then gone). Throws what Buffer throws.
  unsigned char* input(std::size_t i, std::size_t bytes) { return slot(in_, i, bytes); }
  /// Slot `i` of the output pieces, as input().
  unsigned char* output(std::size_t i, std::size_t bytes) { return slot(out_, i, bytes); }
  /// A folding run's records, as input(): one buffer.
  unsigned char* records(std::size_t bytes) { return slot(records_, 0, bytes); }

  /// The spread's copy team, which a counted run's deliverer shares its
  /// copies with; started by the first that needs it (a member staging, or
  /// the deliverer).
  CopyTeam& copy_team() { return *team_->get(); }
  /// The spread's copy team, for its members (spread_member::share_copy_team).
  const std::shared_ptr<SharedCopyTeam>& shared_team() const noexcept { return team_; }

 private:
  using Slot = std::pair<std::size_t, std::unique_ptr<Buffer<unsigned char>>>;  // bytes, buffer
  unsigned char* slot(std::vector<Slot>& pool, std::size_t i, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pool.size() <= i) pool.resize(i + 1);
    Slot& s = pool[i];
    if (s.first < bytes) {
      s.second.reset();  // the old one first: pinned memory is scarce
      s.second = std::make_unique<Buffer<unsigned char>>(bytes, pinned_);
      s.first = bytes;
    }
    return s.second->data();
  }

  std::shared_ptr<MemoryResource> pinned_;
  std::shared_ptr<SharedCopyTeam> team_;
  std::mutex mutex_;
  std::vector<Slot> in_, out_, records_;
};

}  // namespace detail
}  // namespace chunkpipe
