// SPDX-License-Identifier: MIT
// A spread's buffers kept from one run to the next (detail/spread.hpp):
// piece buffers for a Source's input and for outputs that go through the
// spread (a Sink's, a count's), folding runs' records, and the spread's
// one copy team (its members stage with it too; a counted run's deliverer
// copies pieces into place with it). Made or grown when first needed, so
// a spread whose runs need none holds none. Host-only.
#pragma once

#include <chunkpipe/memory_resource.hpp>
#include <chunkpipe/detail/copy_team.hpp>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace chunkpipe {
namespace detail {

/// Buffers of Buffer<unsigned char> (a piece buffer: from an element
/// count and the pinned MemoryResource, with data()): input and output
/// piece slots in groups, one group lent to each run in flight that needs
/// slots (runs that flow into each other must not share them), and record
/// buffers lent to folding runs; and the spread's SharedCopyTeam.
/// Thread-safe; one lock for the slots, one for the groups' numbers and
/// one for the lent record buffers, each held only while a buffer or a
/// number is looked up or made, never two at once (the team has its own).
template <template <class> class Buffer>
class PiecePools {
 public:
  /// `pinned`: Options::pinned_memory (may be null); `team`: the spread's
  /// copy team, not null.
  PiecePools(std::shared_ptr<MemoryResource> pinned, std::shared_ptr<SharedCopyTeam> team)
      : pinned_(std::move(pinned)), team_(std::move(team)) {}

  /// A group of slots for one run, its own until the owner (first) and its
  /// copies are let go of; the lowest number free, so that runs one after
  /// another reuse group 0's buffers. Throws std::bad_alloc.
  std::pair<std::shared_ptr<void>, std::size_t> lend_group() { return groups_->lend(); }
  /// Slot `i` of group `g`'s input pieces, at least `bytes` long, made or
  /// grown now (its old contents are then gone). Throws what Buffer throws.
  unsigned char* input(std::size_t g, std::size_t i, std::size_t bytes) { return slot(in_, g, i, bytes); }
  /// Slot `i` of group `g`'s output pieces, as input().
  unsigned char* output(std::size_t g, std::size_t i, std::size_t bytes) { return slot(out_, g, i, bytes); }
  /// A buffer of at least `bytes` for one folding run's records, its own
  /// until the first value (the owner) and its copies are let go of; then
  /// it goes back to be lent again, even after the pools are gone.
  /// Several runs in flight at once each have theirs (a flowing run folds
  /// when its last piece finished). Throws what Buffer throws.
  std::pair<std::shared_ptr<void>, unsigned char*> lend_records(std::size_t bytes) {
    return records_->lend(bytes, pinned_);
  }

  /// The spread's copy team, which a counted run's deliverer shares its
  /// copies with; started by the first that needs it (a member staging, or
  /// the deliverer).
  CopyTeam& copy_team() { return *team_->get(); }
  /// The spread's copy team, for its members (spread_member::share_copy_team).
  const std::shared_ptr<SharedCopyTeam>& shared_team() const noexcept { return team_; }

 private:
  using Slot = std::pair<std::size_t, std::unique_ptr<Buffer<unsigned char>>>;  // bytes, buffer
  unsigned char* slot(std::vector<std::vector<Slot>>& groups, std::size_t g, std::size_t i, std::size_t bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (groups.size() <= g) groups.resize(g + 1);
    std::vector<Slot>& pool = groups[g];
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
  // The record buffers not lent now. Shared with the buffers lent, whose
  // owners put them back, so that one let go of last (by a run's ticket,
  // after the spread) still finds where to go.
  class RecordBuffers {
   public:
    std::pair<std::shared_ptr<void>, unsigned char*> lend(std::size_t bytes,
                                                          const std::shared_ptr<MemoryResource>& pinned) {
      std::unique_ptr<Buffer<unsigned char>> b;
      std::vector<Slot> short_ones;  // freed outside the lock
      {
        std::lock_guard<std::mutex> lock(mutex_);
        // The smallest that fits; if none does, one is made below, and the
        // free ones, all too short, go first (pinned memory is scarce).
        auto fit = free_.end();
        for (auto it = free_.begin(); it != free_.end(); ++it) {
          if (it->first >= bytes && (fit == free_.end() || it->first < fit->first)) fit = it;
        }
        if (fit != free_.end()) {
          b = std::move(fit->second);
          bytes = fit->first;
          free_.erase(fit);
        } else {
          short_ones.swap(free_);
        }
      }
      short_ones.clear();
      if (!b) b = std::make_unique<Buffer<unsigned char>>(bytes, pinned);
      unsigned char* at = b->data();
      // Back to the free list when the run's last owner lets go (the
      // deleter also runs if making the owner throws).
      Buffer<unsigned char>* raw = b.release();
      std::shared_ptr<void> owner(at, [self = self_.lock(), bytes, raw](void*) {
        self->give_back(bytes, std::unique_ptr<Buffer<unsigned char>>(raw));
      });
      return {std::move(owner), at};
    }
    static std::shared_ptr<RecordBuffers> make() {
      auto r = std::make_shared<RecordBuffers>();
      r->self_ = r;
      return r;
    }

   private:
    // Never throws: a buffer the list has no room for is freed.
    void give_back(std::size_t bytes, std::unique_ptr<Buffer<unsigned char>> b) noexcept {
      try {
        std::lock_guard<std::mutex> lock(mutex_);
        free_.emplace_back(bytes, std::move(b));
      } catch (...) {
      }
    }
    std::mutex mutex_;
    std::vector<Slot> free_;
    std::weak_ptr<RecordBuffers> self_;
  };

  // The slot groups' numbers not lent now, shared with the owners lent as
  // RecordBuffers is.
  class Groups {
   public:
    std::pair<std::shared_ptr<void>, std::size_t> lend() {
      std::size_t g = 0;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (free_.empty()) {
          g = made_++;
        } else {
          auto lowest = std::min_element(free_.begin(), free_.end());
          g = *lowest;
          free_.erase(lowest);
        }
      }
      // The number goes back when the run's last owner lets go (the
      // deleter also runs if making the owner throws).
      std::shared_ptr<void> owner(this, [self = self_.lock(), g](void*) { self->give_back(g); });
      return {std::move(owner), g};
    }
    static std::shared_ptr<Groups> make() {
      auto r = std::make_shared<Groups>();
      r->self_ = r;
      return r;
    }

   private:
    // Never throws: a number the list has no room for is not lent again
    // (a later run makes another group).
    void give_back(std::size_t g) noexcept {
      try {
        std::lock_guard<std::mutex> lock(mutex_);
        free_.push_back(g);
      } catch (...) {
      }
    }
    std::mutex mutex_;
    std::vector<std::size_t> free_;
    std::size_t made_ = 0;
    std::weak_ptr<Groups> self_;
  };

  std::mutex mutex_;
  std::vector<std::vector<Slot>> in_, out_;  // [group][slot]
  std::shared_ptr<Groups> groups_ = Groups::make();
  std::shared_ptr<RecordBuffers> records_ = RecordBuffers::make();
};

}  // namespace detail
}  // namespace chunkpipe
