// SPDX-License-Identifier: MIT
// Definitions for detail/stream_ops.hpp. Included at its bottom where chunkpipe is
// header-only, or once by <chunkpipe/compiled.hpp> (detail/linkage.hpp); do
// not include directly.
#pragma once

namespace chunkpipe::detail {

CHUNKPIPE_INLINE StreamOps::StreamOps(void* stages, int device, int host_threads, std::shared_ptr<Health> health,
                                      std::shared_ptr<EventPool> pool)
    : stages_(stages), health_(std::move(health)), pool_(std::move(pool)), lanes_(device, host_threads) {}

CHUNKPIPE_INLINE StreamOps::~StreamOps() { drain(); }

CHUNKPIPE_INLINE void StreamOps::wait_host(std::size_t id) {
  const OpRecord& r = records_.of(id);
  host_queue(r.queue).wait_done(r.host_pos);
}

CHUNKPIPE_INLINE void StreamOps::configure(const PlanBuilder& b, const SlotMemory& mem) {
  mem_ = mem;
  sched_.queues = b.queues();
  sched_.steps = b.steps();
  sched_.device_queues = 0;
  for (const Queue& q : sched_.queues) sched_.device_queues += q.kind == QueueKind::device ? 1 : 0;
  while (streams_.size() < sched_.device_queues) streams_.push_back(Stream::create());
  lanes_.resize(sched_.queues.size() - sched_.device_queues);
  records_.configure(sched_.steps.size(), static_cast<std::size_t>(b.depth()), b.reach());
  sched_.names.clear();
  for (const Step& s : sched_.steps) sched_.names.emplace_back(step_name(s).c_str());
  log_.ops.clear();
}

CHUNKPIPE_INLINE void StreamOps::begin_run(Run& run, std::size_t first_chunk) {
  run.first_chunk = first_chunk;
  RunState& st = *run.state;
  // Runs this one follows must have their completion events recorded
  // (a run of another pipeline may still be issued by its thread).
  for (const auto& before : st.setup.after_runs) before->wait_issued();
  run.gated = !st.setup.gates.empty() || !st.setup.after_runs.empty();
  if (run.gated) run.started.assign(sched_.queues.size(), 0);
  if (st.setup.profile) {
    // One origin for every stream's timings. Every stream waits for it, so
    // a profiled run does not overlap the work queued before it.
    clock_.start(st, streams_[0].get());
    for (std::size_t q = 1; q < sched_.device_queues; ++q) {
      CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(streams_[q].get(), st.timeline.origin.get(), 0));
    }
  }
}

CHUNKPIPE_INLINE void StreamOps::end_run(Run& run, const PlanRun& done) {
  // The run is complete once its tail ops are: record that on each tail
  // op's stream now, before any later run's op is issued there. Host
  // tails are counted by the run itself.
  RunState& st = *run.state;
  for (std::size_t id : done.tail) {
    const OpRecord& r = records_.of(id);
    if (is_host_queue(r.queue)) continue;
    Event e = pool_->get();
    CHUNKPIPE_CUDA_TRY(cudaEventRecord(e.get(), streams_[static_cast<std::size_t>(r.queue)].get()));
    st.issue.tails.push_back(std::move(e));
  }
}

CHUNKPIPE_INLINE void StreamOps::drain() noexcept {
  lanes_.drain();
  for (Stream& s : streams_) {
    const cudaError_t e = cudaStreamSynchronize(s.get());
    if (e != cudaSuccess) {
      if (is_sticky(e)) health_->mark(std::string("chunkpipe: ") + cudaGetErrorName(e) + " while draining");
      (void)cudaGetLastError();
    }
  }
}

CHUNKPIPE_INLINE void StreamOps::issue_op(const Op& op, const OpWork& w, Run& run, StageFn stage) {
  OpRecord& rec = records_.start(op, op.signal || is_host_queue(op.queue));
  Op* logged = nullptr;
  if (log_.on) {
    log_.ops.push_back(op);
    logged = &log_.ops.back();
    logged->waits.clear();
    logged->signal = false;
  }
  if (is_host_queue(op.queue)) {
    issue_host(op, w, run, rec, logged);
    records_.settle(rec, op.slot);
    return;
  }
  records_.settle(rec, op.slot);
  RunState& st = *run.state;
  const auto q = static_cast<std::size_t>(op.queue);
  cudaStream_t stream = streams_[q].get();
  if (run.gated && !run.started[q]) {
    // The run's first op on this stream: after what the run was told to follow.
    for (const Event& g : st.setup.gates) CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(stream, g.get(), 0));
    for (const auto& before : st.setup.after_runs) {
      for (const Event& t : before->device_tails()) CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(stream, t.get(), 0));
    }
    run.started[q] = 1;
  }
  for (std::size_t id : op.waits) {
    const OpRecord& dep = records_.of(id);
    if (is_host_queue(dep.queue)) {
      host_queue(dep.queue).wait_done(dep.host_pos);
      if (logged) logged->waits.push_back(id);
    } else if (dep.queue != op.queue) {
      CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(stream, records_.event(dep), 0));
      if (logged) logged->waits.push_back(OpRecords::owner(dep));
    }
  }
  NvtxRange range(sched_.names[static_cast<std::size_t>(op.step)], op.chunk - run.first_chunk);
  Calibration::Probe* probe = twins_.probe_for(op, w.count);
  const cudaStream_t queue_stream = stream;
  if (probe) stream = twins_.to_twin(q, queue_stream);  // the op, its events and its timing: on the twin
  RunTimeline::Timed* timed = st.setup.profile && w.count != 0 ? start_timing(st, op, run, w.count) : nullptr;
  if (timed) {
    timed->start = Event::create(true);
    CHUNKPIPE_CUDA_TRY(cudaEventRecord(timed->start.get(), stream));
  }
  if (probe) CHUNKPIPE_CUDA_TRY(cudaEventRecord(probe->start.get(), stream));
  if (w.count != 0) {
    // What the op does can fail without breaking the schedule: the run
    // fails, and the op still signals, so later ops and runs stay ordered.
    try {
      if (op.kind == OpKind::stage) {
        // The stage's context counts from the run's label (a spread
        // piece's); NVTX, timings and copies keep the run's own numbers.
        stage(stages_, op, sched_.steps[static_cast<std::size_t>(op.step)], mem_, stream,
              st.setup.label.chunk + (op.chunk - run.first_chunk), st.setup.label.offset + w.offset, w.count);
      } else {
        ::chunkpipe::detail::copies_of(op, sched_.steps[static_cast<std::size_t>(op.step)], mem_, *st.setup.ends,
                                       w.offset, w.count, copies_);
        for (const Copy& c : copies_) {
          CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDefault, stream));
          if (timed) timed->op.bytes += c.bytes;
          if (probe) probe->bytes += c.bytes;
        }
      }
    } catch (const cuda_error& e) {
      // A broken context: the pipeline is unusable, but which run broke
      // it is for the first wait() to say (RunState::wait).
      if (is_sticky(e.code())) health_->mark(e.what());
      st.fail(std::current_exception());
    } catch (...) {
      st.fail(std::current_exception());
    }
  }
  // The end stamps go before the signal: an op that waits on the signal
  // then never starts before this op's recorded end, however slowly the
  // stream runs (racecheck's serialisation showed the other order).
  if (timed) {
    timed->end = Event::create(true);
    CHUNKPIPE_CUDA_TRY(cudaEventRecord(timed->end.get(), stream));
  }
  if (probe) CHUNKPIPE_CUDA_TRY(cudaEventRecord(probe->end.get(), stream));
  if (op.signal) {
    CHUNKPIPE_CUDA_TRY(cudaEventRecord(records_.event(op.step, op.chunk), stream));
    if (logged) logged->signal = true;
  }
  if (probe) twins_.from_twin(q, queue_stream);
}

CHUNKPIPE_INLINE void StreamOps::issue_host(const Op& op, const OpWork& w, Run& run, OpRecord& rec, Op* logged) {
  RunState& st = *run.state;
  HostTask t;
  t.state = run.state;
  t.op.id = op.id;
  t.op.chunk = op.chunk;
  t.op.step = op.step;
  t.op.kind = op.kind;
  t.op.stage = op.stage;
  t.op.slot = op.slot;
  t.op.queue = op.queue;
  t.step = &sched_.steps[static_cast<std::size_t>(op.step)];
  t.mem = mem_;
  t.run_chunk = op.chunk - run.first_chunk;
  t.offset = w.offset;
  t.count = w.count;
  t.produced = w.produced;
  t.name = &sched_.names[static_cast<std::size_t>(op.step)];
  t.device = lanes_.device();
  const auto q = static_cast<std::size_t>(op.queue);
  if (run.gated && !run.started[q]) {
    t.gated = true;
    run.started[q] = 1;
  }
  for (std::size_t id : op.waits) {
    const OpRecord& dep = records_.of(id);
    if (is_host_queue(dep.queue)) {
      if (dep.queue == op.queue) continue;  // queue order
      if (t.n_queues == HostTask::max_deps) throw std::logic_error("chunkpipe: internal error: too many host waits");
      t.queues[t.n_queues] = &host_queue(dep.queue);
      t.positions[t.n_queues++] = dep.host_pos;
      if (logged) logged->waits.push_back(id);
    } else {
      if (t.n_events == HostTask::max_deps) throw std::logic_error("chunkpipe: internal error: too many event waits");
      t.events[t.n_events++] = records_.event(dep);
      if (logged) logged->waits.push_back(OpRecords::owner(dep));
    }
  }
  HostLanes::Lane& lane = lane_of(op.queue);
  t.team = lane.team.get();
  t.scratch = &lane.scratch;
  t.dma = lane.dma.get();
  if (st.setup.profile && (w.count != 0 || w.produced)) t.timed = start_timing(st, op, run, w.count);
  st.progress.host_task_started();
  try {
    rec.host_pos = lane.queue->push(std::move(t));
  } catch (...) {
    st.progress.host_task_finished();  // never queued: nothing will finish it
    throw;
  }
  if (logged) logged->signal = true;
}

CHUNKPIPE_INLINE RunTimeline::Timed* StreamOps::start_timing(RunState& st, const Op& op, const Run& run,
                                                          std::size_t count) {
  st.timeline.timed.emplace_back();
  RunTimeline::Timed* t = &st.timeline.timed.back();
  t->op = TimedOp{op.id, op.chunk - run.first_chunk, op.kind, op.stage, op.slot, op.queue, 0.0, 0.0, 0, count};
  return t;
}

CHUNKPIPE_INLINE std::string StreamOps::step_name(const Step& s) {
  switch (s.kind) {
    case OpKind::host_in: return "host-in";
    case OpKind::host_out: return "host-out";
    case OpKind::h2d: return s.staged ? "h2d (from pinned slot)" : "h2d";
    case OpKind::d2h: return s.staged ? "d2h (to pinned slot)" : "d2h";
    case OpKind::stage: return "stage " + std::to_string(s.stage);
  }
  return "?";
}

}  // namespace chunkpipe::detail
