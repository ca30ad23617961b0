// SPDX-License-Identifier: MIT
// Definitions for detail/copy_team.hpp. Included at its bottom where
// chunkpipe is header-only, or once by <chunkpipe/compiled.hpp>
// (detail/linkage.hpp); do not include directly.
#pragma once

namespace chunkpipe::detail {

CHUNKPIPE_INLINE CopyTeam::CopyTeam(int threads) {
  try {
    for (int i = 1; i < threads; ++i) helpers_.emplace_back([this] { help(); });
  } catch (...) {
    stop();
    throw;
  }
}

CHUNKPIPE_INLINE void CopyTeam::copy(const std::vector<Copy>& copies) {
  std::size_t total = 0;
  for (const Copy& c : copies) total += c.bytes;
  // Small copies are not worth waking anyone for.
  if (helpers_.empty() || total < (std::size_t{1} << 20)) {
    share(copies, total, 0, 1);
    return;
  }
  each([&](std::size_t part, std::size_t parts) { share(copies, total, part, parts); });
}

CHUNKPIPE_INLINE void CopyTeam::each(const std::function<void(std::size_t part, std::size_t parts)>& fn) {
  if (helpers_.empty()) {
    fn(0, 1);
    return;
  }
  Job job(fn, threads());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    open_.push_back(&job);
  }
  go_.notify_all();
  for (;;) {
    std::size_t part = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (job.next == job.parts) break;
      part = claim(job);
    }
    perform(job, part);
  }
  std::unique_lock<std::mutex> lock(mutex_);
  finished_.wait(lock, [&] { return job.done == job.parts; });
  for (const std::exception_ptr& e : job.errors) {
    if (e) std::rethrow_exception(e);
  }
}

CHUNKPIPE_INLINE void CopyTeam::share(const std::vector<Copy>& copies, std::size_t total, std::size_t part,
                                      std::size_t parts) {
  auto edge = [&](std::size_t p) { return p == parts ? total : (total / parts * p) & ~std::size_t{63}; };
  std::size_t begin = edge(part), end = edge(part + 1), base = 0;
  for (const Copy& c : copies) {
    const std::size_t lo = std::max(begin, base), hi = std::min(end, base + c.bytes);
    if (lo < hi) {
      std::memcpy(static_cast<std::byte*>(c.dst) + (lo - base), static_cast<const std::byte*>(c.src) + (lo - base),
                  hi - lo);
    }
    base += c.bytes;
    if (base >= end) break;
  }
}

CHUNKPIPE_INLINE void CopyTeam::perform(Job& job, std::size_t part) {
  std::exception_ptr error;
  try {
    (*job.fn)(part, job.parts);
  } catch (...) {
    error = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job.errors[part] = std::move(error);
    ++job.done;
  }
  finished_.notify_all();  // callers wait on one condition variable
}

CHUNKPIPE_INLINE void CopyTeam::stop() noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  go_.notify_all();
  for (std::thread& t : helpers_) t.join();
}

CHUNKPIPE_INLINE void CopyTeam::help() {
  for (;;) {
    Job* job = nullptr;
    std::size_t part = 0;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      go_.wait(lock, [&] { return stop_ || !open_.empty(); });
      if (stop_) return;
      job = open_.front();
      part = claim(*job);
    }
    perform(*job, part);
  }
}

CHUNKPIPE_INLINE std::shared_ptr<CopyTeam> SharedCopyTeam::get() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (team_) return team_;
  }
  // Sized outside the lock: sizing may measure for a while
  // (spread_copy_team), and callers that race here each ask (a measured
  // size is measured once; the others wait for it there).
  const int threads = std::max(size_(), 1);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!team_) team_ = std::make_shared<CopyTeam>(threads);
  return team_;
}

}  // namespace chunkpipe::detail
