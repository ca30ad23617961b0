// SPDX-License-Identifier: MIT
// What a run of a spread (detail/spread.hpp) ordered after(...) GPU work
// waits for: the work `After` names, taken when the run is queued, as a
// wait for the spread's own thread (CudaRunner::hold); and what one
// pipeline's run waits for on the device instead (AfterGates: its
// RunState's gates; device_after_runs: the runs it follows).
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/memory.cuh>
#include <chunkpipe/run_ticket.cuh>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

/// What `order` names, taken now, as a wait for another thread: the call
/// blocks until the work queued on each stream so far and each event's
/// latest record are done on the device, and each run ended; it never
/// throws (their errors stay with them). Empty where `order` names
/// nothing. Takes no pipeline's lock: it records events of its own, each
/// on its stream's device (which may be another member's); user events are
/// taken on `device`'s. Throws cuda_error where an event cannot be made or
/// recorded.
inline std::function<void()> hold_after(const After& order, int device) {
  if (order.streams.empty() && order.events.empty() && order.tickets.empty()) return {};
  for (const RunTicket& t : order.tickets) {
    if (t.state()) t.state()->issue_if_held();  // else it would wait for a run nothing issues
  }
  auto gates = std::make_shared<std::vector<Event>>();
  for (cudaStream_t s : order.streams) {
    int d = device;
    CHUNKPIPE_CUDA_TRY(cudaStreamGetDevice(s, &d));
    DeviceGuard guard(d);
    Event e = Event::create();
    CHUNKPIPE_CUDA_TRY(cudaEventRecord(e.get(), s));
    gates->push_back(std::move(e));
  }
  if (!order.events.empty()) {
    // The events' latest records, taken now: a stream of its own waits for
    // them and records one event (the stream goes at once; what it was
    // given still runs).
    DeviceGuard guard(device);
    Stream gate = Stream::create();
    for (cudaEvent_t user : order.events) CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(gate.get(), user, 0));
    Event e = Event::create();
    CHUNKPIPE_CUDA_TRY(cudaEventRecord(e.get(), gate.get()));
    gates->push_back(std::move(e));
  }
  return [gates, tickets = order.tickets]() mutable {
    for (const Event& e : *gates) {
      // Polled: cudaEventSynchronize would spin a core for as long as the
      // work takes.
      auto nap = std::chrono::microseconds(50);
      cudaError_t rc = cudaSuccess;
      while ((rc = cudaEventQuery(e.get())) == cudaErrorNotReady) {
        std::this_thread::sleep_for(nap);
        nap = std::min(nap * 2, std::chrono::microseconds(1000));
      }
      if (rc != cudaSuccess) (void)cudaGetLastError();  // the work's own error, for its owner to see
    }
    for (RunTicket& t : tickets) {
      try {
        t.wait();
      } catch (...) {  // the ticket keeps it
      }
    }
  };
}

/// The runs `order.tickets` names, which a run of one pipeline waits for
/// on the device (its in-flight range check lets it overlap them). Throws
/// pipeline_error for a run that ends on host threads, which the device
/// cannot wait for.
inline std::vector<const RunState*> device_after_runs(const After& order) {
  std::vector<const RunState*> runs;
  for (const RunTicket& t : order.tickets) {
    if (!t.state()) continue;
    if (t.state()->setup.host_work) {
      throw pipeline_error(
          "chunkpipe: after(ticket): that run ends on host threads (it stages pageable memory or uses a Source "
          "or Sink), which the device cannot wait for; wait() for it first");
    }
    runs.push_back(t.state().get());
  }
  return runs;
}

/// One pipeline's after(streams, events): what each names now, as an
/// event of the pipeline's own that its run's first ops wait for on the
/// device (RunState's setup.gates).
class AfterGates {
 public:
  /// An event each, recorded on the stream, or after the user's event's
  /// latest record (a stream of ours waits for it and records one of
  /// ours). With the device current; the caller serialises calls. Throws
  /// cuda_error.
  std::vector<Event> take(const After& order, EventPool& pool) {
    std::vector<Event> gates;
    for (cudaStream_t s : order.streams) {
      Event e = pool.get();
      CHUNKPIPE_CUDA_TRY(cudaEventRecord(e.get(), s));
      gates.push_back(std::move(e));
    }
    for (cudaEvent_t user : order.events) {
      if (!stream_) stream_ = Stream::create();
      Event e = pool.get();
      CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(stream_.get(), user, 0));
      CHUNKPIPE_CUDA_TRY(cudaEventRecord(e.get(), stream_.get()));
      gates.push_back(std::move(e));
    }
    return gates;
  }

 private:
  Stream stream_;  // takes snapshots of user events
};

}  // namespace chunkpipe::detail
