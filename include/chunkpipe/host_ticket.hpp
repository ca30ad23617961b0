// SPDX-License-Identifier: MIT
/// \file
/// The host backend's tickets: HostTicket (a HostPipeline run in flight),
/// RunSummary (what it did), HostAfter and after(...) (runs ordered after
/// others). Host-only C++, as host_backend.hpp, which includes this.
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/result.hpp>
#include <chunkpipe/detail/host_engine.hpp>  // HostEngineBase
#include <chunkpipe/detail/host_op_graph.hpp>  // HostRun

#include <cstddef>
#include <memory>
#include <mutex>
#include <ostream>
#include <type_traits>
#include <utility>
#include <vector>

namespace chunkpipe {

/// How a host-backend run went: its elements and the chunks that held them.
struct RunSummary {
  std::size_t elems = 0;   ///< elements in the run
  std::size_t chunks = 0;  ///< chunks that held them
};

/// Prints a summary as "1000 elements in 4 chunks". Never blocks; throws
/// only what the stream throws.
inline std::ostream& operator<<(std::ostream& os, const RunSummary& s) {
  return os << s.elems << (s.elems == 1 ? " element in " : " elements in ") << s.chunks
            << (s.chunks == 1 ? " chunk" : " chunks");
}

/// A run in flight on a HostPipeline (run_async). Copyable; every copy
/// refers to the same run.
class HostTicket {
 public:
  HostTicket() = default;

  /// Runs the pipeline's ops (those of other runs too, in the seeded order)
  /// until this run is complete, then finishes its Sink. Blocks. Throws the
  /// run's first error, every time it is called after a failure. Safe to
  /// call from any thread, and from several.
  void wait() {
    if (!run_) return;
    if (auto engine = engine_.lock()) {
      std::lock_guard<std::mutex> lock(engine->mutex);
      engine->finish(*run_);
      run_->build_report();  // under the lock the run's ops were timed under
    } else {
      run_->build_report();  // the pipeline ran every op when it was destroyed
    }
    run_->completion.conclude();
  }

  /// True once every op of the run has run. Never blocks (it runs no op:
  /// on the host backend ops run only inside wait() and run_async()).
  bool ready() const { return !run_ || run_->ready(); }

  /// The run's elements and chunks, once it is ready.
  RunSummary summary() const { return run_ ? RunSummary{run_->elems, run_->chunks} : RunSummary{}; }

  /// The run's timeline, with Options::profile on, after wait() returned:
  /// every op that did work (host-in, H2D, each stage, D2H, host-out; on
  /// this backend the copies are memcpy) with its chunk, queue, bytes, and
  /// start and end in ms on the host's steady clock from the run's start;
  /// Report::clock_ms places that start on the pipeline's profiling clock,
  /// as on the GPU. The ops ran one at a time on whichever thread waited,
  /// so no two overlap. The link is left unknown (the host has no PCIe
  /// link to bound it), so no floor or efficiency is shown. The reference
  /// lives as long as this ticket (or a copy of it). Never blocks. Throws
  /// pipeline_error for a run of a pipeline built without Options::profile,
  /// and for a run not waited for, or that failed.
  const Report& report() const {
    if (!run_ || !run_->profile) {
      throw pipeline_error("chunkpipe: no report: the run was not profiled; build the HostPipeline with "
                           "Options::profile = true to time each op on the host clock");
    }
    if (!run_->completion.succeeded()) {
      throw pipeline_error("chunkpipe: no report: wait() for the run first (a run that failed has none)");
    }
    return run_->report;
  }

 private:
  template <class...>
  friend class HostPipeline;
  friend struct HostAfter;
  HostTicket(std::shared_ptr<detail::HostRun> run, std::weak_ptr<detail::HostEngineBase> engine)
      : run_(std::move(run)), engine_(std::move(engine)) {}
  std::shared_ptr<detail::HostRun> run_;
  std::weak_ptr<detail::HostEngineBase> engine_;
};

/// Runs a HostPipeline run after earlier runs of the same pipeline have
/// completed (the host-backend form of chunkpipe::after(ticket)).
struct HostAfter {
  std::vector<HostTicket> tickets;  ///< runs of the same pipeline that complete first
};

namespace detail {
inline const HostTicket& host_ticket_of(const HostTicket& t) { return t; }
template <class R>
const HostTicket& host_ticket_of(const ResultTicket<R, HostTicket>& t) {
  return t.ticket();
}
template <class T>
struct is_host_ticket : std::is_same<T, HostTicket> {};
template <class R>
struct is_host_ticket<ResultTicket<R, HostTicket>> : std::true_type {};
}  // namespace detail

/// `after(t1, t2, ...)` for a HostPipeline's run_async() (and a
/// HostSpreadPipeline's): HostTickets and the ResultTickets of folding
/// and counting runs, in any mix. Never blocks.
template <class... T>
HostAfter after(const HostTicket& first, const T&... rest) {
  static_assert((detail::is_host_ticket<T>::value && ...),
                "chunkpipe: after(...) of host runs takes HostTickets and ResultTickets; a spread run takes "
                "spread tickets as an order of their own: run_async(in, out, after(host_ticket), after(spread_ticket))");
  HostAfter a{{first}};
  (a.tickets.push_back(detail::host_ticket_of(rest)), ...);
  return a;
}
/// The same, first a ResultTicket.
template <class R, class... T>
HostAfter after(const ResultTicket<R, HostTicket>& first, const T&... rest) {
  return after(first.ticket(), rest...);
}

}  // namespace chunkpipe
