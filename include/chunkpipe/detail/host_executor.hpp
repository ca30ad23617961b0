// SPDX-License-Identifier: MIT
// The host executor: runs a schedule's ops on the CPU, for the host backend.
// Host-only C++, no CUDA.
//
// Copies are memcpy, Map functors (marked CHUNKPIPE_HOST_DEVICE) run on the
// host element by element, ChunkFn functors get host spans and no stream.
// Slot buffers are poisoned when allocated, so an op that reads a buffer
// nothing wrote produces garbage rather than a lucky zero. They come from
// the program's MemoryResources where it gave them (Options::device_memory
// for the arena that stands for device memory, Options::pinned_memory for
// the pinned one), else from operator new.
//
// Issued ops join a graph of what may run (queue order and waits, across
// every run in flight); they run in an order chosen by a seeded random walk
// over it: any op whose queue predecessor and waits are done may go next,
// now and then while ops are still being issued. A plan missing an edge
// therefore gives wrong output for some seed, which is how CI tests data
// movement, ragged tails, staging and back-to-back runs end to end.
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/stage.hpp>
#include <chunkpipe/detail/completion.hpp>
#include <chunkpipe/detail/driver.hpp>
#include <chunkpipe/detail/reduce.hpp>
#include <chunkpipe/detail/resource_buffer.hpp>
#include <chunkpipe/detail/host_ops.hpp>
#include <chunkpipe/detail/slots.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

/// What a positional Source's chunk is cut into on the host backend: parts
/// as a team of three threads would cut them, run in turn, so that the CPU
/// suite covers the cutting.
inline constexpr std::size_t positional_parts = 3;

/// One run on the host backend: what its ops read and write, how it ends.
struct HostRun {
  std::shared_ptr<const Endpoints> ends;
  RunCompletion completion;
  std::size_t first_chunk = 0;  ///< the run's chunk 0 in the schedule
  RunLabel label;               ///< what its stages' contexts number chunk 0 (driver.hpp)
  // Changed under the engine's lock, read without it by HostTicket::ready().
  std::atomic<std::size_t> pending{0};  ///< ops issued and not yet run
  std::atomic<bool> issued{false};      ///< every op has been issued
  bool source_ended = false;    ///< its Source returned a short chunk
  std::size_t elems = 0;        ///< elements moved (learned from a Source)
  std::size_t chunks = 0;       ///< chunks that held elements

  // Profiling (Options::profile), on the host's steady clock. `profile`,
  // `report`'s header and the clocks are set before the run's first op
  // runs; `timed` grows as its ops run (under the engine's lock), in the
  // order they ran; build_report() turns it into `report` once none is left.
  bool profile = false;
  std::chrono::steady_clock::time_point origin;      ///< the run's start: its ops are timed from here
  std::chrono::steady_clock::time_point clock_zero;  ///< its pipeline's profiling clock (Report::clock_ms)
  std::vector<TimedOp> timed;
  Report report;

  bool failed() const noexcept { return completion.failed(); }
  bool ready() const noexcept { return issued && pending == 0; }

  /// Fills `report` from the ops timed, once, after every op of the run
  /// has run (HostTicket::wait(), before the run concludes). Does nothing
  /// for a run that is not profiled, failed, or still has ops to run (the
  /// report is then never shown). Safe from several threads.
  void build_report() {
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
      report.bytes_in = report.bytes_out = 0;
      // As the GPU counts them (RunState::build_report): every input's
      // elements in, every output's records (or what a counted stage
      // emitted) out.
      if (ends) {
        for (const auto& e : ends->in) report.bytes_in += elems * e.elem_size;
        const std::size_t records =
            ends->packed ? ends->packed->emitted : (elems + ends->per_record - 1) / ends->per_record;
        for (const auto& e : ends->out) report.bytes_out += records * e.elem_size;
        report.io = ::chunkpipe::detail::describe_io(
            *ends, std::to_string(positional_parts) + " parts, in turn on the thread that waits",
            "into " + std::to_string(report.depth) + " free slots");
      }
    });
  }

 private:
  std::once_flag report_once_;
};

/// A HostRun as the driver and the executor pass it: the executor's graph
/// keeps each run alive until its last op has run.
struct HostRunRef {
  std::shared_ptr<HostRun> run;
  bool failed() const noexcept { return run->failed(); }
};

template <class... Stages>
class HostExecutor {
  /// Calls stage op.stage for a run whose inputs are `In`.
  using StageFn = void (*)(std::tuple<Stages...>&, const Op&, const Step&, const SlotMemory&, std::size_t run_chunk,
                           std::size_t offset, std::size_t count);

 public:
  /// Slot memory comes from `device_memory` and `pinned_memory` where they
  /// are set (Options), else from operator new.
  HostExecutor(std::tuple<Stages...>& stages, std::uint64_t seed, std::shared_ptr<MemoryResource> device_memory = {},
               std::shared_ptr<MemoryResource> pinned_memory = {})
      : stages_(&stages), device_memory_(std::move(device_memory)), pinned_memory_(std::move(pinned_memory)),
        rng_(seed), seed_(seed) {}

  void set_seed(std::uint64_t seed) {
    seed_ = seed;
    rng_.seed(seed);
  }
  std::uint64_t seed() const noexcept { return seed_; }

  /// Starts over with a schedule's tables and a slot layout; nothing may be
  /// in flight. The old slots are given back first; the new are poisoned.
  /// Throws what allocating them throws (ResourceBuffer, std::bad_alloc):
  /// then the executor holds no slots, and needs another reset().
  void reset(const std::vector<Step>& steps, std::size_t queues, const SlotLayout& layout) {
    mem_ = SlotMemory{};
    device_.reset();
    pinned_.reset();
    device_ = host_buffer(device_memory_, layout.device_bytes(), slot_alignment, "the device slots");
    // On a page, as cudaHostAlloc's are: a file_source reading with
    // O_DIRECT needs its parts' addresses on 4 KiB.
    pinned_ = host_buffer(pinned_memory_, layout.pinned_bytes(), 4096, "the pinned slots");
    if (device_.data() != nullptr) std::memset(device_.data(), 0xFF, device_.size());
    if (pinned_.data() != nullptr) std::memset(pinned_.data(), 0xFF, pinned_.size());
    steps_ = steps;
    layout_ = layout;
    mem_ = SlotMemory{&layout_, device_.data(), pinned_.data()};
    ops_.clear();
    tail_.assign(queues, none);
    ready_.clear();
  }

  const SlotLayout& layout() const noexcept { return layout_; }

  void begin_run(HostRunRef& ref, std::size_t first_chunk) {
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

  /// The next profiled run starts the profiling clock again
  /// (Report::clock_ms); runs already begun keep theirs.
  void restart_clock() noexcept { clock_started_ = false; }

  template <class In>
  void issue(const Op& op, const OpWork& w, HostRunRef& ref) {
    HostRun& run = *ref.run;
    if (op.id != ops_.size()) throw std::logic_error("chunkpipe: host executor: ops out of order");
    Entry e;
    e.op = op;
    e.work = w;
    e.run = ref.run;
    e.stage = &HostExecutor::template call_stage<In>;
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

  void wait_host(std::size_t id) {
    while (!ops_.at(id).done) {
      if (!step()) throw pipeline_error("chunkpipe: host backend: the schedule's dependencies form a cycle");
    }
  }

  void end_run(HostRunRef& ref, const PlanRun&) { ref.run->issued = true; }

  /// Runs ops until `run` has none left. Throws pipeline_error for a cycle.
  void finish(const HostRun& run) {
    while (run.pending != 0) {
      if (!step()) throw pipeline_error("chunkpipe: host backend: the schedule's dependencies form a cycle");
    }
  }
  /// Runs every op issued.
  void drain() {
    while (step()) {
    }
  }

  /// Every op issued since the last reset(), in issue order.
  std::vector<Op> issued_ops() const {
    std::vector<Op> out;
    out.reserve(ops_.size());
    for (const Entry& e : ops_) out.push_back(e.op);
    return out;
  }

 private:
  static constexpr std::size_t none = static_cast<std::size_t>(-1);

  struct Entry {
    Op op;
    OpWork work;
    std::shared_ptr<HostRun> run;
    StageFn stage = nullptr;
    std::vector<std::size_t> next;
    std::size_t pending = 0;
    bool done = false;
  };

  void after(std::size_t before, std::size_t id) {
    if (before >= ops_.size()) throw std::logic_error("chunkpipe: host executor: a wait for an op not yet issued");
    if (ops_[before].done) return;
    ops_[before].next.push_back(id);
    ++ops_[id].pending;
  }

  // Runs one ready op; false if none is ready.
  bool step() {
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

  void execute(Entry& e) {
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
            ::chunkpipe::detail::run_host_op(op, step, mem_, *run.ends, run_chunk, w.offset, w.count, scratch_, memcpy_all, from_device,
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
          e.stage(*stages_, op, step, mem_, run.label.chunk + run_chunk, run.label.offset + w.offset, w.count);
          break;
        case OpKind::host_in:
        case OpKind::host_out:
          ::chunkpipe::detail::run_host_op(op, step, mem_, *run.ends, run_chunk, w.offset, w.count, scratch_, memcpy_all, from_device,
                                             in_parts);
          break;
        case OpKind::h2d:
        case OpKind::d2h:
          ::chunkpipe::detail::copies_of(op, step, mem_, *run.ends, w.offset, w.count, scratch_);
          memcpy_all(scratch_);
          break;
      }
      timed(w.count);
    } catch (...) {
      if (w.produced) run.source_ended = true;
      run.completion.fail(std::current_exception());
    }
  }

  template <class In>
  static void call_stage(std::tuple<Stages...>& stages, const Op& op, const Step& step, const SlotMemory& mem,
                         std::size_t run_chunk, std::size_t offset, std::size_t count) {
    ::chunkpipe::detail::with_stage_arrays<In>(stages, mem, step, op, count, [&](auto& stage, const auto& ins,
                                                                             const auto& outs, const StageExtras& x) {
      using S = std::decay_t<decltype(stage)>;
      if constexpr (stage_kind<S>::own_header) {
        // Unqualified: argument-dependent lookup finds the kind's own
        // header (stage.hpp, stage_kind).
        run_stage_kind(StageKind{}, stage, ins, outs, run_chunk, offset, count, x);
      } else if constexpr (records_of<S>::value == Records::counted) {
        HostExecutor::invoke_counted(stage, ins, outs, run_chunk, offset, count, x.produced);
      } else {
        HostExecutor::invoke(stage, ins, outs, run_chunk, offset, count);
      }
    });
  }

  template <class F, class... I, class... O>
  static void invoke(Map<F>& stage, const std::tuple<::cuda::std::span<I>...>& ins,
                     const std::tuple<::cuda::std::span<O>...>& outs, std::size_t, std::size_t, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) {
      auto r = std::apply([&](const auto&... s) { return stage.fn(s[i]...); }, ins);
      if constexpr (sizeof...(O) == 1) {
        std::get<0>(outs)[i] = r;
      } else {
        HostExecutor::assign_all(outs, r, i, std::index_sequence_for<O...>{});
      }
    }
  }

  template <class Outs, class R, std::size_t... K>
  static void assign_all(const Outs& outs, const R& r, std::size_t i, std::index_sequence<K...>) {
    ((std::get<K>(outs)[i] = ::cuda::std::get<K>(r)), ...);
  }

  template <class F, class... X, class... I, class... O>
  static void invoke(ChunkFn<F, X...>& stage, const std::tuple<::cuda::std::span<I>...>& ins,
                     const std::tuple<::cuda::std::span<O>...>& outs, std::size_t chunk, std::size_t offset,
                     std::size_t count) {
    ChunkContext<types<I...>, types<O...>> ctx{ins, outs, chunk, offset, count, {}, Backend::host};
    stage.fn(ctx);
  }

  template <class T, class Op, class I>
  static void invoke(Reduce<T, Op>& stage, const std::tuple<::cuda::std::span<I>>& ins,
                     const std::tuple<::cuda::std::span<T>>& outs, std::size_t, std::size_t, std::size_t count) {
    ::chunkpipe::detail::fold_segments<T>(stage.op, std::get<0>(ins).data(), count, stage.segment,
                                          std::get<0>(outs).data());
  }

  template <class F, class R, class... I>
  static void invoke_record(F& fn, const R& init, const std::tuple<::cuda::std::span<I>...>& ins,
                            const std::tuple<::cuda::std::span<R>>& outs, std::size_t chunk, std::size_t offset,
                            std::size_t count) {
    std::get<0>(outs)[0] = init;
    ChunkContext<types<I...>, types<R>> ctx{ins, outs, chunk, offset, count, {}, Backend::host};
    fn(ctx);
  }
  template <class F, class R, class... I>
  static void invoke(PerChunk<F, R>& stage, const std::tuple<::cuda::std::span<I>...>& ins,
                     const std::tuple<::cuda::std::span<R>>& outs, std::size_t chunk, std::size_t offset,
                     std::size_t count) {
    HostExecutor::invoke_record(stage.fn, stage.init, ins, outs, chunk, offset, count);
  }
  template <class F, class R, class Merge, class... I>
  static void invoke(Accumulate<F, R, Merge>& stage, const std::tuple<::cuda::std::span<I>...>& ins,
                     const std::tuple<::cuda::std::span<R>>& outs, std::size_t chunk, std::size_t offset,
                     std::size_t count) {
    HostExecutor::invoke_record(stage.fn, stage.identity, ins, outs, chunk, offset, count);
  }

  template <class Pred, class I>
  static void invoke_counted(Filter<Pred>& stage, const std::tuple<::cuda::std::span<I>>& ins,
                             const std::tuple<::cuda::std::span<I>>& outs, std::size_t, std::size_t, std::size_t count,
                             std::size_t* produced) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < count; ++i) {
      if (stage.pred(std::get<0>(ins)[i])) std::get<0>(outs)[kept++] = std::get<0>(ins)[i];
    }
    *produced = kept;
  }
  template <class F, class... X, class... I, class... O>
  static void invoke_counted(Emit<F, X...>& stage, const std::tuple<::cuda::std::span<I>...>& ins,
                             const std::tuple<::cuda::std::span<O>...>& outs, std::size_t chunk, std::size_t offset,
                             std::size_t count, std::size_t* produced) {
    *produced = 0;
    ChunkContext<types<I...>, types<O...>> ctx{ins, outs, chunk, offset, count, {}, Backend::host, produced};
    stage.fn(ctx);
  }

  std::tuple<Stages...>* stages_;
  std::vector<Step> steps_;
  SlotLayout layout_;
  std::shared_ptr<MemoryResource> device_memory_, pinned_memory_;  // null: operator new
  ResourceBuffer device_, pinned_;
  SlotMemory mem_;
  std::vector<Entry> ops_;        // [op id]
  std::vector<std::size_t> tail_; // [queue]: its last op
  std::vector<std::size_t> ready_;
  std::vector<Copy> scratch_;
  std::mt19937_64 rng_;
  std::uint64_t seed_;
  // The profiling clock's zero (Report::clock_ms), kept across reset().
  std::chrono::steady_clock::time_point clock_zero_;
  bool clock_started_ = false;
};

}  // namespace chunkpipe::detail
