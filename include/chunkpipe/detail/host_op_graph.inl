// SPDX-License-Identifier: MIT
// Definitions for detail/host_op_graph.hpp. Included at its bottom where
// chunkpipe is header-only, or once by <chunkpipe/compiled.hpp>
// (detail/linkage.hpp); do not include directly.
#pragma once

namespace chunkpipe::detail {

CHUNKPIPE_INLINE void HostRun::build_report() {
  std::call_once(report_once_, [&] {
    if (!profile || failed() || pending != 0) return;
    // Issue order, as the GPU's report lists its ops; they ran in the
    // seeded order, which their times show.
    report.ops = timed;
    std::sort(report.ops.begin(), report.ops.end(),
              [](const TimedOp& a, const TimedOp& b) { return a.id < b.id; });
    report.clock_ms = std::chrono::duration<double, std::milli>(origin - clock_zero).count();
    report.clock_zero_ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(clock_zero.time_since_epoch()).count();
    report.chunks = chunks;
    report.elems = elems;
    const IoBytes bytes = ends ? io_bytes(*ends, elems) : IoBytes{};
    report.bytes_in = bytes.in;
    report.bytes_out = bytes.out;
    if (ends) {
      report.io = ::chunkpipe::detail::describe_io(
          *ends, std::to_string(positional_parts) + " parts, in turn on the thread that waits",
          "into " + std::to_string(report.depth) + " free slots");
    }
  });
}

CHUNKPIPE_INLINE void HostSlots::lay_out(const SlotLayout& layout) {
  mem_ = SlotMemory{};
  device_.reset();
  pinned_.reset();
  device_ = host_buffer(device_memory_, layout.device_bytes(), slot_alignment, "the device slots");
  // On a page, as cudaHostAlloc's are: a file_source reading with
  // O_DIRECT needs its parts' addresses on 4 KiB.
  pinned_ = host_buffer(pinned_memory_, layout.pinned_bytes(), 4096, "the pinned slots");
  if (device_.data() != nullptr) std::memset(device_.data(), 0xFF, device_.size());
  if (pinned_.data() != nullptr) std::memset(pinned_.data(), 0xFF, pinned_.size());
  layout_ = layout;
  mem_ = SlotMemory{&layout_, device_.data(), pinned_.data()};
}

CHUNKPIPE_INLINE void HostOpGraph::reset(const std::vector<Step>& steps, std::size_t queues,
                                         const SlotLayout& layout) {
  slots_.lay_out(layout);
  steps_ = steps;
  ops_.clear();
  tail_.assign(queues, none);
  ready_.clear();
}

CHUNKPIPE_INLINE void HostOpGraph::begin_run(HostRunRef& ref, std::size_t first_chunk) {
  HostRun& run = *ref.run;
  run.first_chunk = first_chunk;
  if (run.profile) {
    // As the stream executor does: the first profiled run starts the
    // profiling clock, and each run's ops are timed from its own start.
    const auto now = std::chrono::steady_clock::now();
    if (!clock_started_) {
      clock_zero_ = now;
      clock_started_ = true;
    }
    run.clock_zero = clock_zero_;
    run.origin = now;
  }
}

CHUNKPIPE_INLINE void HostOpGraph::issue_op(const Op& op, const OpWork& w, HostRunRef& ref, StageFn stage) {
  HostRun& run = *ref.run;
  if (op.id != ops_.size()) throw std::logic_error("chunkpipe: host executor: ops out of order");
  Entry e;
  e.op = op;
  e.work = w;
  e.run = ref.run;
  e.stage = stage;
  ops_.push_back(std::move(e));
  ++run.pending;
  const std::size_t id = op.id;
  std::size_t& t = tail_[static_cast<std::size_t>(op.queue)];
  if (t != none) after(t, id);
  t = id;
  for (std::size_t dep : op.waits) after(dep, id);
  if (ops_[id].pending == 0) ready_.push_back(id);
  // Run something now and then while ops are still being issued, as a
  // GPU would, so shuffled orders include those.
  if (seed_ != 0 && !ready_.empty() && rng_() % 3 == 0) step();
}

CHUNKPIPE_INLINE void HostOpGraph::wait_host(std::size_t id) {
  while (!ops_.at(id).done) {
    if (!step()) throw pipeline_error("chunkpipe: host backend: the schedule's dependencies form a cycle");
  }
}

CHUNKPIPE_INLINE void HostOpGraph::finish(const HostRun& run) {
  while (run.pending != 0) {
    if (!step()) throw pipeline_error("chunkpipe: host backend: the schedule's dependencies form a cycle");
  }
}

CHUNKPIPE_INLINE void HostOpGraph::drain() {
  while (step()) {
  }
}

CHUNKPIPE_INLINE std::vector<Op> HostOpGraph::issued_ops() const {
  std::vector<Op> out;
  out.reserve(ops_.size());
  for (const Entry& e : ops_) out.push_back(e.op);
  return out;
}

CHUNKPIPE_INLINE void HostOpGraph::after(std::size_t before, std::size_t id) {
  if (before >= ops_.size()) throw std::logic_error("chunkpipe: host executor: a wait for an op not yet issued");
  if (ops_[before].done) return;
  ops_[before].next.push_back(id);
  ++ops_[id].pending;
}

CHUNKPIPE_INLINE bool HostOpGraph::step() {
  if (ready_.empty()) return false;
  std::size_t pick = 0;
  if (seed_ != 0) {
    pick = static_cast<std::size_t>(rng_() % ready_.size());
  } else {
    for (std::size_t i = 1; i < ready_.size(); ++i) {
      if (ready_[i] < ready_[pick]) pick = i;
    }
  }
  const std::size_t id = ready_[pick];
  ready_[pick] = ready_.back();
  ready_.pop_back();
  execute(ops_[id]);
  Entry& e = ops_[id];
  e.done = true;
  --e.run->pending;
  for (std::size_t s : e.next) {
    if (--ops_[s].pending == 0) ready_.push_back(s);
  }
  e.next.clear();
  e.run.reset();  // the run may end before the executor does
  return true;
}

CHUNKPIPE_INLINE void HostOpGraph::execute(Entry& e) {
  HostRun& run = *e.run;
  const Op& op = e.op;
  const Step& step = steps_[static_cast<std::size_t>(op.step)];
  const std::size_t run_chunk = op.chunk - run.first_chunk;
  const OpWork& w = e.work;
  // Bytes the op copied, for its TimedOp (as the GPU counts them).
  std::size_t moved = 0;
  auto memcpy_all = [&moved](const std::vector<Copy>& copies) {
    for (const Copy& c : copies) {
      std::memcpy(c.dst, c.src, c.bytes);
      moved += c.bytes;
    }
  };
  // The host backend's "device" memory is host memory.
  auto from_device = [&moved](void* dst, const void* src, std::size_t bytes) {
    std::memcpy(dst, src, bytes);
    moved += bytes;
  };
  // A positional Source's or Sink's parts run in turn, cut as a team of
  // three would cut them, so that the host backend covers the cutting.
  auto in_parts = [](const auto& part) {
    for (std::size_t k = 0; k < positional_parts; ++k) part(k, positional_parts);
  };
  // Only ops that did their work are timed, as on the GPU: one that
  // threw fails the run, and a failed run has no report.
  std::chrono::steady_clock::time_point started;
  auto timed = [&](std::size_t elems) {
    if (!run.profile) return;
    const auto ended = std::chrono::steady_clock::now();
    TimedOp t{op.id, run_chunk, op.kind, op.stage, op.slot, op.queue, 0.0, 0.0, moved, elems};
    t.start_ms = std::chrono::duration<double, std::milli>(started - run.origin).count();
    t.end_ms = std::chrono::duration<double, std::milli>(ended - run.origin).count();
    run.timed.push_back(t);
  };
  try {
    if (w.produced) {
      // A Source's chunk: it decides the size, until it has ended.
      *w.produced = 0;
      if (run.failed() || run.source_ended) return;
      if (run.profile) started = std::chrono::steady_clock::now();
      const std::size_t got =
          ::chunkpipe::detail::run_host_op(op, step, slots_.memory(), *run.ends, run_chunk, w.offset, w.count, scratch_, memcpy_all, from_device,
                                           in_parts);
      *w.produced = got;
      run.elems += got;
      if (got > 0) ++run.chunks;
      if (got < w.count) run.source_ended = true;
      timed(got);
      return;
    }
    if (w.count == 0 || run.failed()) return;
    if (run.profile) started = std::chrono::steady_clock::now();
    switch (op.kind) {
      case OpKind::stage:
        // The stage's context counts from the run's label; copies, a
        // Source and a Sink keep the run's own numbers (they index its ranges).
        e.stage(stages_, op, step, slots_.memory(), run.label.chunk + run_chunk, run.label.offset + w.offset, w.count);
        break;
      case OpKind::host_in:
      case OpKind::host_out:
        ::chunkpipe::detail::run_host_op(op, step, slots_.memory(), *run.ends, run_chunk, w.offset, w.count, scratch_, memcpy_all, from_device,
                                           in_parts);
        break;
      case OpKind::h2d:
      case OpKind::d2h:
        ::chunkpipe::detail::copies_of(op, step, slots_.memory(), *run.ends, w.offset, w.count, scratch_);
        memcpy_all(scratch_);
        break;
    }
    timed(w.count);
  } catch (...) {
    if (w.produced) run.source_ended = true;
    run.completion.fail(std::current_exception());
  }
}

}  // namespace chunkpipe::detail
