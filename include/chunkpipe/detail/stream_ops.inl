// SPDX-License-Identifier: MIT
// Definitions for detail/stream_ops.hpp. Included at its bottom where chunkpipe is
// header-only, or once by <chunkpipe/compiled.hpp> (detail/linkage.hpp); do
// not include directly.
#pragma once

namespace chunkpipe::detail {

CHUNKPIPE_INLINE StreamOps::StreamOps(void* stages, int device, int host_threads, std::shared_ptr<Health> health,
                                      std::shared_ptr<EventPool> pool)
    : stages_(stages), device_(device), host_threads_(host_threads), health_(std::move(health)),
      pool_(std::move(pool)) {}

CHUNKPIPE_INLINE StreamOps::~StreamOps() { drain(); }

CHUNKPIPE_INLINE void StreamOps::wait_host(std::size_t id) {
  const Record& r = record_of(id);
  host_queue(r.queue).wait_done(r.host_pos);
}

CHUNKPIPE_INLINE void StreamOps::configure(const PlanBuilder& b, const SlotMemory& mem) {
  mem_ = mem;
  queues_ = b.queues();
  steps_ = b.steps();
  depth_ = static_cast<std::size_t>(b.depth());
  reach_ = b.reach();
  device_queues_ = 0;
  for (const Queue& q : queues_) device_queues_ += q.kind == QueueKind::device ? 1 : 0;
  while (streams_.size() < device_queues_) streams_.push_back(Stream::create());
  host_.resize(queues_.size() - device_queues_);
  ring_.resize(steps_.size());
  for (auto& events : ring_) {
    while (events.size() < reach_) events.push_back(Event::create());
  }
  records_.assign(steps_.size() * reach_, Record{});
  last_.assign(steps_.size() * depth_, Record{});
  names_.clear();
  for (const Step& s : steps_) names_.emplace_back(step_name(s).c_str());
  log_.clear();
}

CHUNKPIPE_INLINE void StreamOps::begin_run(Run& run, std::size_t first_chunk) {
  run.first_chunk = first_chunk;
  RunState& st = *run.state;
  // Runs this one follows must have their completion events recorded
  // (a run of another pipeline may still be issued by its thread).
  for (const auto& before : st.after_runs) before->wait_issued();
  run.gated = !st.gates.empty() || !st.after_runs.empty();
  if (run.gated) run.started.assign(queues_.size(), 0);
  if (st.profile) {
    // One origin for every stream's timings. Every stream waits for it, so
    // a profiled run does not overlap the work queued before it.
    if (!clock_zero_) {
      // The schedule's profiling clock starts here (Report::clock_ms).
      auto zero = std::make_shared<Event>(Event::create(true));
      CHUNKPIPE_CUDA_TRY(cudaEventRecord(zero->get(), streams_[0].get()));
      host_clock_zero_ = std::chrono::steady_clock::now();
      clock_zero_ = std::move(zero);
    }
    st.clock_zero = clock_zero_;
    st.host_clock_zero = host_clock_zero_;
    st.origin = Event::create(true);
    CHUNKPIPE_CUDA_TRY(cudaEventRecord(st.origin.get(), streams_[0].get()));
    st.host_origin = std::chrono::steady_clock::now();
    for (std::size_t q = 1; q < device_queues_; ++q) {
      CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(streams_[q].get(), st.origin.get(), 0));
    }
  }
}

CHUNKPIPE_INLINE void StreamOps::end_run(Run& run, const PlanRun& done) {
  // The run is complete once its tail ops are: record that on each tail
  // op's stream now, before any later run's op is issued there. Host
  // tails are counted by the run itself.
  RunState& st = *run.state;
  for (std::size_t id : done.tail) {
    const Record& r = record_of(id);
    if (is_host_queue(r.queue)) continue;
    Event e = pool_->get();
    CHUNKPIPE_CUDA_TRY(cudaEventRecord(e.get(), streams_[static_cast<std::size_t>(r.queue)].get()));
    st.tails.push_back(std::move(e));
  }
}

CHUNKPIPE_INLINE void StreamOps::drain() noexcept {
  for (auto& h : host_) {
    if (h.queue) h.queue->drain();
  }
  for (Stream& s : streams_) {
    const cudaError_t e = cudaStreamSynchronize(s.get());
    if (e != cudaSuccess) {
      if (is_sticky(e)) health_->mark(std::string("chunkpipe: ") + cudaGetErrorName(e) + " while draining");
      (void)cudaGetLastError();
    }
  }
}

CHUNKPIPE_INLINE void StreamOps::issue_op(const Op& op, const OpWork& w, Run& run, StageFn stage) {
  Record& rec = records_[op.id % records_.size()];
  rec = Record{op.id, op.step, op.chunk, op.queue, 0, op.signal || is_host_queue(op.queue)};
  Op* logged = nullptr;
  if (logging_) {
    log_.push_back(op);
    logged = &log_.back();
    logged->waits.clear();
    logged->signal = false;
  }
  if (is_host_queue(op.queue)) {
    issue_host(op, w, run, rec, logged);
    last_[op.step * depth_ + static_cast<std::size_t>(op.slot)] = rec;
    return;
  }
  last_[op.step * depth_ + static_cast<std::size_t>(op.slot)] = rec;
  RunState& st = *run.state;
  const auto q = static_cast<std::size_t>(op.queue);
  cudaStream_t stream = streams_[q].get();
  if (run.gated && !run.started[q]) {
    // The run's first op on this stream: after what the run was told to follow.
    for (const Event& g : st.gates) CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(stream, g.get(), 0));
    for (const auto& before : st.after_runs) {
      for (const Event& t : before->device_tails()) CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(stream, t.get(), 0));
    }
    run.started[q] = 1;
  }
  for (std::size_t id : op.waits) {
    const Record& dep = record_of(id);
    if (is_host_queue(dep.queue)) {
      host_queue(dep.queue).wait_done(dep.host_pos);
      if (logged) logged->waits.push_back(id);
    } else if (dep.queue != op.queue) {
      CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(stream, ring_event(dep), 0));
      if (logged) logged->waits.push_back(ring_owner(dep));
    }
  }
  NvtxRange range(names_[static_cast<std::size_t>(op.step)], op.chunk - run.first_chunk);
  Calibration::Probe* probe = calibration_ ? calibration_->probe_for(op, w.count) : nullptr;
  const cudaStream_t queue_stream = stream;
  if (probe) stream = to_twin(q);  // the op, its events and its timing: on the twin
  RunState::Timed* timed = st.profile && w.count != 0 ? start_timing(st, op, run, w.count) : nullptr;
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
        stage(stages_, op, steps_[static_cast<std::size_t>(op.step)], mem_, stream,
              st.label.chunk + (op.chunk - run.first_chunk), st.label.offset + w.offset, w.count);
      } else {
        ::chunkpipe::detail::copies_of(op, steps_[static_cast<std::size_t>(op.step)], mem_, *st.ends, w.offset,
                                       w.count, copies_);
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
    const auto slot = op.chunk % reach_;
    CHUNKPIPE_CUDA_TRY(cudaEventRecord(ring_[static_cast<std::size_t>(op.step)][slot].get(), stream));
    if (logged) logged->signal = true;
  }
  if (probe) from_twin(q, queue_stream);
}

CHUNKPIPE_INLINE void StreamOps::HostTask::run() noexcept {
  RunState& st = *state;
  try {
    CHUNKPIPE_CUDA_TRY(cudaSetDevice(device));
    // Ring events are recorded again only after this task is waited
    // for, so these still name the ops it depends on.
    for (int i = 0; i < n_events; ++i) CHUNKPIPE_CUDA_TRY(cudaEventSynchronize(events[i]));
    if (gated) {
      for (const Event& g : st.gates) CHUNKPIPE_CUDA_TRY(cudaEventSynchronize(g.get()));
      for (const auto& before : st.after_runs) {
        for (const Event& t : before->device_tails()) CHUNKPIPE_CUDA_TRY(cudaEventSynchronize(t.get()));
      }
    }
    for (int i = 0; i < n_queues; ++i) queues[i]->wait_done(positions[i]);
    std::size_t got = 0;
    if (count != 0 && !st.failed() && !(produced && st.source_ended)) {
      NvtxRange range(*name, run_chunk);
      if (timed) timed->host_start = std::chrono::steady_clock::now();
      got = ::chunkpipe::detail::run_host_op(
          op, *step, mem, *st.ends, run_chunk, offset, count, *scratch,
          [&](const std::vector<Copy>& c) {
            team->copy(c);
            if (timed) {
              for (const Copy& x : c) timed->op.bytes += x.bytes;
            }
          },
          // What a counted stage emitted, on the lane's own stream: the
          // copy engines move it, and this worker waits for it alone.
          [&](void* dst, const void* src, std::size_t bytes) {
            CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, dma));
            CHUNKPIPE_CUDA_TRY(cudaStreamSynchronize(dma));
            if (timed) timed->op.bytes += bytes;
          },
          // A positional Source's or Sink's parts, read or written by
          // the lane's team at once.
          [&](const auto& part) { team->each(part); });
      if (timed) timed->host_end = std::chrono::steady_clock::now();
    }
    if (produced) {
      *produced = got;
      if (got < count) st.source_ended = true;
    }
  } catch (...) {
    if (produced) {
      *produced = 0;
      st.source_ended = true;
    }
    st.fail(std::current_exception());
  }
  st.host_task_finished();
  state.reset();
}

CHUNKPIPE_INLINE void StreamOps::issue_host(const Op& op, const OpWork& w, Run& run, Record& rec, Op* logged) {
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
  t.step = &steps_[static_cast<std::size_t>(op.step)];
  t.mem = mem_;
  t.run_chunk = op.chunk - run.first_chunk;
  t.offset = w.offset;
  t.count = w.count;
  t.produced = w.produced;
  t.name = &names_[static_cast<std::size_t>(op.step)];
  t.device = device_;
  const auto q = static_cast<std::size_t>(op.queue);
  if (run.gated && !run.started[q]) {
    t.gated = true;
    run.started[q] = 1;
  }
  for (std::size_t id : op.waits) {
    const Record& dep = record_of(id);
    if (is_host_queue(dep.queue)) {
      if (dep.queue == op.queue) continue;  // queue order
      if (t.n_queues == HostTask::max_deps) throw std::logic_error("chunkpipe: internal error: too many host waits");
      t.queues[t.n_queues] = &host_queue(dep.queue);
      t.positions[t.n_queues++] = dep.host_pos;
      if (logged) logged->waits.push_back(id);
    } else {
      if (t.n_events == HostTask::max_deps) throw std::logic_error("chunkpipe: internal error: too many event waits");
      t.events[t.n_events++] = ring_event(dep);
      if (logged) logged->waits.push_back(ring_owner(dep));
    }
  }
  HostLane& lane = lane_of(op.queue);
  t.team = lane.team.get();
  t.scratch = &lane.scratch;
  t.dma = lane.dma.get();
  if (st.profile && (w.count != 0 || w.produced)) t.timed = start_timing(st, op, run, w.count);
  st.host_task_started();
  try {
    rec.host_pos = lane.queue->push(std::move(t));
  } catch (...) {
    st.host_task_finished();  // never queued: nothing will finish it
    throw;
  }
  if (logged) logged->signal = true;
}

CHUNKPIPE_INLINE RunState::Timed* StreamOps::start_timing(RunState& st, const Op& op, const Run& run,
                                                          std::size_t count) {
  st.timed.emplace_back();
  RunState::Timed* t = &st.timed.back();
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

CHUNKPIPE_INLINE StreamOps::HostLane& StreamOps::lane_of(int queue) {
  HostLane& lane = host_[static_cast<std::size_t>(queue) - device_queues_];
  if (!lane.queue) {
    // Host workers start with the first run that stages this side. The
    // queue last: a lane with a queue has all it needs, even if making
    // the rest threw.
    std::shared_ptr<CopyTeam> team = shared_team_ ? shared_team_->get() : std::make_shared<CopyTeam>(host_threads_);
    Stream dma = Stream::create();
    lane.team = std::move(team);
    lane.dma = std::move(dma);
    lane.queue = std::make_unique<HostQueue<HostTask>>();
  }
  return lane;
}

CHUNKPIPE_INLINE cudaStream_t StreamOps::to_twin(std::size_t q) {
  while (twins_.size() <= q) twins_.emplace_back();
  Twin& t = twins_[q];
  if (!t.stream) {
    t.stream = Stream::create();
    t.there = Event::create();
    t.back = Event::create();
  }
  CHUNKPIPE_CUDA_TRY(cudaEventRecord(t.there.get(), streams_[q].get()));
  CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(t.stream.get(), t.there.get(), 0));
  return t.stream.get();
}

CHUNKPIPE_INLINE void StreamOps::from_twin(std::size_t q, cudaStream_t queue_stream) {
  Twin& t = twins_[q];
  CHUNKPIPE_CUDA_TRY(cudaEventRecord(t.back.get(), t.stream.get()));
  CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(queue_stream, t.back.get(), 0));
}

CHUNKPIPE_INLINE const StreamOps::Record& StreamOps::record_of(std::size_t id) const {
  const Record& r = records_[id % records_.size()];
  if (r.id == id) return r;
  for (const Record& l : last_) {
    if (l.id == id) return l;
  }
  throw std::logic_error("chunkpipe: internal error: op #" + std::to_string(id) +
                         " is older than the executor's wait window");
}

}  // namespace chunkpipe::detail
