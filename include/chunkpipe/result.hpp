// SPDX-License-Identifier: MIT
/// \file
/// Results of pipelines that fold a run into one value (a Reduce or an
/// Accumulate as the last stage, stage.hpp), or whose last stage emits a
/// count (Filter, Emit): the ticket run_async returns. Host-only C++.
///
/// \code
/// auto pipe = chunkpipe::make_pipeline({}, chunkpipe::reduce(0.0f, Plus{}));
/// float sum = pipe.run(x);                    // blocks
/// auto ticket = pipe.run_async(y);            // does not
/// float later = ticket.get();
/// \endcode
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/io.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/stage.hpp>
#include <chunkpipe/detail/folding.hpp>  // what a ResultTicket's run folds or counts into

#include <memory>
#include <utility>

namespace chunkpipe {

/// The ticket of a run that folds into one result. Copyable; every copy
/// refers to the same run. `Ticket` is the pipeline's own ticket type
/// (RunTicket on the GPU, HostTicket on the host backend).
template <class R, class Ticket>
class ResultTicket {
 public:
  ResultTicket() = default;
  /// \cond CHUNKPIPE_INTERNAL
  // For chunkpipe's pipelines.
  ResultTicket(Ticket ticket, std::shared_ptr<detail::ResultOf<R>> folding)
      : ticket_(std::move(ticket)), folding_(std::move(folding)) {}
  /// \endcond

  /// Blocks until the run is complete and returns its result: a folding
  /// run's, folding its records on the first call (microseconds per
  /// thousand records), or the elements a Filter or Emit run wrote. Throws
  /// the run's error as Ticket::wait() does, and pipeline_error on a ticket
  /// that refers to no run.
  R get() {
    if (!folding_) throw pipeline_error("chunkpipe: ResultTicket::get() on a ticket of no run");
    ticket_.wait();
    return folding_->result();
  }
  /// Blocks until the run is complete; throws its error.
  void wait() { ticket_.wait(); }
  /// True once the run has finished (or failed). Never blocks.
  bool ready() const { return ticket_.ready(); }
  /// The run's timeline, with Options::profile on, after wait() returned:
  /// Ticket::report(), whose reference lives as long as this ticket (or a
  /// copy of it). Never blocks; throws as Ticket::report() does.
  const Report& report() const { return ticket_.report(); }
  /// The run's own ticket (after(...) takes this one as it is, too).
  const Ticket& ticket() const noexcept { return ticket_; }

 private:
  Ticket ticket_;
  std::shared_ptr<detail::ResultOf<R>> folding_;
};

}  // namespace chunkpipe
