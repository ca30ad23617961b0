// SPDX-License-Identifier: MIT
// The book of one spread run's pieces (detail/spread.hpp): which piece is
// taken next, which are done, which is delivered next, and the bound on
// pieces taken and not yet delivered. Host-only; tested on the CPU.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <mutex>
#include <vector>

namespace chunkpipe {
namespace detail {

/// The pieces of one spread run: which is taken next, which are done,
/// which is delivered next, and the bound on taken-but-undelivered pieces.
/// Thread-safe; host-only, tested on the CPU.
class PieceBook {
 public:
  /// `limit`: pieces the run has (unknown_length: until ended); `bound`:
  /// most pieces taken and not yet delivered.
  PieceBook(std::size_t limit, std::size_t bound) : limit_(limit), bound_(std::max<std::size_t>(bound, 1)) {}

  /// What try_take() found.
  enum class Take { got, none, full };

  /// The next piece if fewer than `bound` are undelivered (got); none when
  /// there are no more or the run stopped; full otherwise. Never blocks: a
  /// member's thread that finds it full waits in wait_room() while the
  /// members' lanes finish and deliver (detail/spread_flow.hpp).
  Take try_take(std::size_t& piece) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopped() || next_ >= limit_) return Take::none;
    if (next_ - delivered_ >= bound_) return Take::full;
    piece = next_++;
    return Take::got;
  }

  /// Blocks until try_take() may find other than full.
  void wait_room() {
    std::unique_lock<std::mutex> lock(mutex_);
    room_.wait(lock, [&] { return stopped() || next_ >= limit_ || next_ - delivered_ < bound_; });
  }

  /// No piece after `piece` exists (a Source ended within it).
  void end_after(std::size_t piece) {
    std::lock_guard<std::mutex> lock(mutex_);
    limit_ = std::min(limit_, piece + 1);
    room_.notify_all();
  }

  /// Piece `piece` ran. Returns the pieces this thread must now deliver,
  /// in order: empty if another thread is delivering, or an earlier piece
  /// is not done. After delivering them (delivered() after each), the
  /// thread calls handed_back() for any that came done meanwhile.
  std::vector<std::size_t> done(std::size_t piece) {
    std::lock_guard<std::mutex> lock(mutex_);
    done_.push_back(piece);
    return claim_deliveries();
  }

  /// Holds every delivery until the holder calls handed_back() (and
  /// delivers what that returns): a run whose Sink must wait for the Sinks
  /// of the runs before it. Before any piece is taken.
  void hold() {
    std::lock_guard<std::mutex> lock(mutex_);
    delivering_ = true;  // as if the holder were delivering
  }

  /// The oldest undelivered piece was delivered: its buffers may be reused.
  void delivered() {
    std::lock_guard<std::mutex> lock(mutex_);
    ++delivered_;
    room_.notify_all();
  }

  /// The deliverer finished what it was handed; returns what it must
  /// deliver next (empty: it is done delivering).
  std::vector<std::size_t> handed_back() {
    std::lock_guard<std::mutex> lock(mutex_);
    delivering_ = false;
    return claim_deliveries();
  }

  /// Stops the run with its first error; later ones are dropped.
  void stop(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) error_ = std::move(e);
    room_.notify_all();
  }
  std::exception_ptr error() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }
  /// Moves the run's error out (it stays stopped): for the one that ends
  /// the run, so the book holds no reference to what was thrown.
  std::exception_ptr take_error() {
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_for_good_ = stopped_for_good_ || error_ != nullptr;
    std::exception_ptr e = std::move(error_);
    error_ = nullptr;
    return e;
  }

 private:
  bool stopped() const noexcept { return error_ != nullptr || stopped_for_good_; }

  // Under mutex_: if no thread delivers and the next piece is done, this
  // thread delivers it and every done piece after it.
  std::vector<std::size_t> claim_deliveries() {
    if (delivering_ || stopped()) return {};
    std::vector<std::size_t> run;
    for (std::size_t want = delivered_;; ++want) {
      auto it = std::find(done_.begin(), done_.end(), want);
      if (it == done_.end()) break;
      done_.erase(it);
      run.push_back(want);
    }
    delivering_ = !run.empty();
    return run;
  }

  mutable std::mutex mutex_;
  std::condition_variable room_;
  std::size_t limit_;
  std::size_t bound_;
  std::size_t next_ = 0;
  std::size_t delivered_ = 0;
  std::vector<std::size_t> done_;  // done, not yet handed to a deliverer
  bool delivering_ = false;        // a thread holds pieces to deliver
  std::exception_ptr error_;
  bool stopped_for_good_ = false;  // its error was taken
};

}  // namespace detail
}  // namespace chunkpipe
