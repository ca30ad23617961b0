// SPDX-License-Identifier: MIT
// What a ResultTicket (result.hpp) reads its value from: a folding run's
// records and how they fold into its result (Folding, folding_outputs),
// and a counted run's count (WrittenCount). Both backends and the spread
// make them; result.hpp includes this. Not API.
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/io.hpp>
#include <chunkpipe/stage.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace chunkpipe {

namespace detail {

/// What a ResultTicket returns once its run is complete.
template <class R>
class ResultOf {
 public:
  virtual ~ResultOf() = default;
  /// Only after the run completed. Thread-safe.
  virtual R result() = 0;
};

/// A run's records and how they fold into its result. A run of known
/// length has its records copied into `records` (storage the folding
/// owns) and folds them when the result is first asked for; a Source's
/// run, whose length nobody knows up front, folds each chunk's records as
/// they arrive, in chunk order, on a chunkpipe host thread.
///
/// Records merge left to right (Pairwise false: an Accumulate), or in a
/// fixed pairwise tree over their index (a Reduce): a binary counter in
/// which records 2k and 2k+1 merge, then pairs of pairs, and so on; the
/// trees left at the end (one per binary digit of the record count, the
/// largest first) merge left to right after the start value. A float sum
/// of m partials then carries about log2(m) roundings rather than m.
///
/// Folding is the part that does not depend on how records merge: what
/// the runners and Sinks call; FoldingWith merges.
template <class R>
class Folding : public ResultOf<R> {
 public:
  /// Where a run of known length lands its `count` records.
  void hold(std::shared_ptr<void> storage, const R* records, std::size_t count) {
    storage_ = std::move(storage);
    records_ = records;
    count_ = count;
  }

  /// Folds `count` records (a Sink's chunk). Called in chunk order.
  virtual void add(const R* records, std::size_t count) = 0;

  /// The result, folding held records on the first call (then letting go
  /// of their storage). Only after the run completed. Thread-safe.
  R result() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!done_) {
      add(records_, count_);
      conclude();
      storage_.reset();
      records_ = nullptr;
      done_ = true;
    }
    return value_;
  }

 protected:
  explicit Folding(R start) : value_(std::move(start)) {}
  /// Merges what add() left pending into value_.
  virtual void conclude() = 0;
  R value_;

 private:
  std::mutex mutex_;
  std::shared_ptr<void> storage_;
  const R* records_ = nullptr;
  std::size_t count_ = 0;
  bool done_ = false;
};

/// A Folding whose merge(R&, const R&) is inlined into the loop over the
/// records: a Reduce of 4 GiB folds 65536 partials on the caller's thread.
template <class R, class Merge, bool Pairwise>
class FoldingWith final : public Folding<R> {
 public:
  FoldingWith(R start, Merge merge) : Folding<R>(std::move(start)), merge_(std::move(merge)) {}

  void add(const R* records, std::size_t count) override {
    for (std::size_t i = 0; i < count; ++i) {
      if constexpr (!Pairwise) {
        merge_(this->value_, records[i]);
      } else {
        stack_.push_back({records[i], 0});
        // Two trees of one height merge into one a level up, older on the left.
        while (stack_.size() >= 2 && stack_[stack_.size() - 2].level == stack_.back().level) {
          merge_(stack_[stack_.size() - 2].value, stack_.back().value);
          stack_.pop_back();
          ++stack_.back().level;
        }
      }
    }
  }

 private:
  void conclude() override {
    for (const Tree& t : stack_) merge_(this->value_, t.value);
    stack_.clear();
  }

  Merge merge_;
  struct Tree {
    R value;
    unsigned level;  // it merges 2^level records
  };
  std::vector<Tree> stack_;  // pairwise: the trees so far, oldest first
};

/// How many elements a run whose last stage emits a count (Filter, Emit)
/// wrote to its outputs. `Counter` has `written`.
template <class Counter>
class WrittenCount final : public ResultOf<std::size_t> {
 public:
  explicit WrittenCount(std::shared_ptr<Counter> c) : c_(std::move(c)) {}
  std::size_t result() override { return c_->written; }

 private:
  std::shared_ptr<Counter> c_;
};

/// The result type of a folding stage, and how it starts and merges.
template <class Stage>
struct fold_traits;
template <class T, class Op>
struct fold_traits<Reduce<T, Op>> {
  using result = T;
  static std::shared_ptr<Folding<T>> make(const Reduce<T, Op>& s) {
    auto merge = [op = s.op](T& acc, const T& p) { acc = op(acc, p); };
    return std::make_shared<FoldingWith<T, decltype(merge), true>>(s.init, merge);
  }
};
template <class F, class R, class Merge>
struct fold_traits<Accumulate<F, R, Merge>> {
  using result = R;
  static std::shared_ptr<Folding<R>> make(const Accumulate<F, R, Merge>& s) {
    return std::make_shared<FoldingWith<R, Merge, false>>(s.identity, s.merge);
  }
};

/// The output side of a folding run: `records` slots of storage from
/// `alloc(bytes)` (which returns the owner and the address) when the
/// length is known, or a Sink that folds as chunks arrive when a Source
/// decides it.
template <class R, class Alloc>
auto folding_outputs(const std::shared_ptr<Folding<R>>& folding, std::size_t n, std::size_t records, Alloc&& alloc) {
  struct Out {
    std::optional<Outputs<R>> ranges;
    std::optional<Sink<R, std::function<void(std::size_t, std::size_t, ::cuda::std::span<const R>)>>> sink;
  };
  Out out;
  if (n == unknown_length) {
    std::shared_ptr<Folding<R>> f = folding;  // the run may outlive every ticket
    out.sink.emplace(Sink<R, std::function<void(std::size_t, std::size_t, ::cuda::std::span<const R>)>>{
        [f](std::size_t, std::size_t, ::cuda::std::span<const R> data) { f->add(data.data(), data.size()); }});
  } else {
    auto [owner, at] = alloc(records * sizeof(R));
    R* data = static_cast<R*>(at);
    folding->hold(std::move(owner), data, records);
    out.ranges.emplace(::chunkpipe::outputs(HostSpan<R>{data, records, Memory::pinned}));
  }
  return out;
}

}  // namespace detail
}  // namespace chunkpipe
