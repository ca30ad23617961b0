// SPDX-License-Identifier: MIT
// How the benchmarks time a pass: CUDA events on a timing stream of their
// own, the first recorded before the pass is issued, the last after the
// timing stream has been made to wait for everything the pass issued, so
// the figure is device time from the first op queued to the last op done,
// without the host's wake-up latency. The host's time inside issue() is
// kept beside it.
#pragma once

#include <chunkpipe/pipeline.cuh>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <utility>
#include <vector>

#include "support.hpp"

namespace timing {

using example::Timing;

/// Times passes with CUDA events. The GPU must be idle when a pass starts;
/// every pass leaves it idle.
class EventClock {
 public:
  EventClock()
      : stream_(chunkpipe::Stream::create()),
        start_(chunkpipe::Event::create(true)),
        stop_(chunkpipe::Event::create(true)) {}

  /// One pass: `issue()` queues it, `join(s)` makes stream `s` wait for all
  /// of it. Blocks until the pass is done; returns its milliseconds, and in
  /// `issue_us` the host's time inside issue().
  template <class Issue, class Join>
  double time(Issue&& issue, Join&& join, double* issue_us = nullptr) {
    CHUNKPIPE_CUDA_TRY(cudaEventRecord(start_.get(), stream_.get()));
    const auto t0 = std::chrono::steady_clock::now();
    issue();
    if (issue_us) *issue_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    join(stream_.get());
    CHUNKPIPE_CUDA_TRY(cudaEventRecord(stop_.get(), stream_.get()));
    CHUNKPIPE_CUDA_TRY(cudaEventSynchronize(stop_.get()));
    float ms = 0.f;
    CHUNKPIPE_CUDA_TRY(cudaEventElapsedTime(&ms, start_.get(), stop_.get()));
    return ms;
  }

  /// A warm-up pass, then `runs` timed ones: their median, min and max.
  template <class Pass>
  Timing passes(int runs, Pass&& pass) {
    pass();
    std::vector<double> t;
    for (int r = 0; r < runs; ++r) t.push_back(pass());
    return example::summarise(std::move(t));
  }

  /// One timed chunkpipe run over pinned ranges.
  template <class Pipe, class In, class Out>
  double run(Pipe& pipe, const In& in, const Out& out, double* issue_us = nullptr) {
    chunkpipe::RunTicket ticket;
    const double ms = time([&] { ticket = pipe.run_async(in, out); },
                           [&](cudaStream_t s) { ticket.enqueue_wait(s); }, issue_us);
    ticket.wait();  // done already; reports a kernel's error
    return ms;
  }

 private:
  chunkpipe::Stream stream_;
  chunkpipe::Event start_, stop_;
};

/// The median of `v` (the upper one of an even count).
inline double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Every variant once per round, in an order rotated each round, so a slow
/// drift of the machine falls on all alike. A variant has issue(), join(s),
/// finish() and the vectors ms and issue_us the rounds append to.
template <class Variant>
void time_rounds(EventClock& clock, std::vector<Variant>& vs, int rounds) {
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t i = 0; i < vs.size(); ++i) {
      Variant& v = vs[(i + static_cast<std::size_t>(r)) % vs.size()];
      double us = 0;
      v.ms.push_back(clock.time(v.issue, v.join, &us));
      v.issue_us.push_back(us);
      v.finish();
    }
  }
}

/// The median of per-round ratios a / b.
template <class Variant>
double paired_ratio(const Variant& a, const Variant& b) {
  std::vector<double> r;
  for (std::size_t i = 0; i < a.ms.size() && i < b.ms.size(); ++i) r.push_back(a.ms[i] / b.ms[i]);
  return median_of(r);
}

}  // namespace timing
