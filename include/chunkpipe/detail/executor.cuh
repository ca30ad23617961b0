// SPDX-License-Identifier: MIT
// The CUDA executor: turns plan ops into cudaMemcpyAsync, kernel launches,
// cudaEventRecord and cudaStreamWaitEvent on streams the pipeline owns, and
// host staging copies on the pipeline's host worker threads.
//
// It never touches the legacy default stream and never synchronises inside
// the chunk loop. The only places the issuing thread blocks are the ones a
// plan makes unavoidable: a device op that waits for a host op (an H2D that
// needs its pinned slot filled, a D2H that needs its pinned slot emptied)
// waits for that host task, while the GPU keeps working on what was issued.
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/memory.cuh>
#include <chunkpipe/run_ticket.cuh>
#include <chunkpipe/detail/copy_team.hpp>
#include <chunkpipe/detail/front.hpp>
#include <chunkpipe/detail/host_queue.hpp>
#include <chunkpipe/detail/map_kernel.cuh>
#include <chunkpipe/detail/nvtx.hpp>
#include <chunkpipe/detail/slots.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

/// Whether a host range must be staged through pinned slots.
inline bool needs_staging(const void* p, Memory memory) {
  if (memory == Memory::pinned) return false;
  if (memory == Memory::pageable) return true;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();  // not a pointer CUDA knows: plain host memory
    return true;
  }
  return a.type == cudaMemoryTypeUnregistered;
}

template <class... Stages>
class CudaRunner {
 public:
  /// Throws config_error for bad options or a device that does not exist.
  CudaRunner(Options options, Stages... stages) : front_(options, std::move(stages)...) {
    int count = 0;
    CHUNKPIPE_CUDA_TRY(cudaGetDeviceCount(&count));
    if (options.device >= count) {
      throw config_error("chunkpipe: device " + std::to_string(options.device) + " does not exist (" +
                         std::to_string(count) + " CUDA devices)");
    }
    if (options.device >= 0) {
      device_ = options.device;
    } else {
      CHUNKPIPE_CUDA_TRY(cudaGetDevice(&device_));
    }
  }

  ~CudaRunner() {
    quiesce();
    unregister_all();
  }

  /// Waits for work in flight and unregisters every range Staging::registered
  /// pinned. Throws cuda_error if unregistering fails.
  void release_registrations() {
    DeviceGuard guard(device_);
    if (last_) last_->wait_host();
    drain();
    for (const auto& [p, bytes] : registered_) CHUNKPIPE_CUDA_TRY(cudaHostUnregister(const_cast<void*>(p)));
    registered_.clear();
  }

  /// Ranges this pipeline registered, as (address, bytes).
  const std::vector<std::pair<const void*, std::size_t>>& registrations() const noexcept { return registered_; }
  CudaRunner(const CudaRunner&) = delete;
  CudaRunner& operator=(const CudaRunner&) = delete;

  PipelineFront<Stages...>& front() noexcept { return front_; }
  const PipelineFront<Stages...>& front() const noexcept { return front_; }
  int device() const noexcept { return device_; }
  bool healthy() const noexcept { return !health_->broken; }
  std::string why_unhealthy() const { return health_->reason(); }
  void set_link(const LinkModel& link) { link_ = link; }

  /// Starts a run. With `detach`, a run that has host work is driven by a
  /// chunkpipe thread and this returns after setting it up; otherwise it
  /// returns once every op is issued. Throws config_error (before anything
  /// is queued) and pipeline_error for an unusable pipeline; errors of the
  /// run itself are kept in the ticket.
  template <class In, class Out>
  RunTicket start(In&& in, Out&& out, bool detach) {
    return start_impl(as_inputs(std::forward<In>(in)), as_outputs(std::forward<Out>(out)), detach);
  }

  /// Waits for the most recent run; throws its error.
  void wait_last() {
    if (last_) last_->wait();
  }

  /// The report of the most recent run, once it finished with profiling on.
  const Report& report() const { return RunTicket(last_).report(); }

 private:
  struct OpRecord {
    std::size_t id = static_cast<std::size_t>(-1);
    int step = 0;
    std::size_t chunk = 0;
    int queue = 0;
    std::size_t host_pos = 0;
    bool signal = true;
  };

  template <class InSide, class OutSide>
  RunTicket start_impl(InSide ins, OutSide outs, bool detach) {
    using in_types = typename side_types<InSide>::type;
    static_assert(run_types<in_types, typename side_types<OutSide>::type, Stages...>::ok);
    if (health_->broken) {
      throw pipeline_error("chunkpipe: this pipeline is unusable: an earlier CUDA error broke the device context (" +
                           health_->reason() + ")");
    }
    const std::size_t n = validate_run(ins, outs);
    DeviceGuard guard(device_);

    auto run = std::make_shared<RunState>();
    run->device = device_;
    run->health = health_;

    // How each pageable range crosses (Options::staging). Registering
    // blocks here, before anything is queued.
    const Staging mode = front_.options().staging;
    auto staged = [&](const auto& s) {
      if (s.size == 0 || !needs_staging(s.data, s.memory)) return false;
      if (mode == Staging::registered) {
        register_range(s.data, s.size * sizeof(*s.data));
        return false;
      }
      return mode != Staging::direct;
    };
    // Host tasks may outlive this call and the driver: the run owns what
    // they read.
    auto ends = std::make_shared<const Endpoints>(make_endpoints(std::move(ins), std::move(outs), staged));
    run->on_success = ends->finish;
    run->on_failure = ends->abort;
    if (n == 0) return RunTicket(run);  // nothing queued; wait() still finishes a Sink
    bool stage_in = false, stage_out = false;
    for (const auto& e : ends->in) stage_in = stage_in || e.staged;
    for (const auto& e : ends->out) stage_out = stage_out || e.staged;
    run->host_work = stage_in || stage_out;

    const Geometry& g = front_.geometry();
    PlanBuilder builder(g.policy, g.depth, front_.shape(stage_in, stage_out));
    Flow flow = make_flow(in_types{}, types<Stages...>{});
    for (const auto& e : ends->in) flow.in_staged.push_back(e.staged);
    for (const auto& e : ends->out) flow.out_staged.push_back(e.staged);
    auto layout = std::make_shared<const SlotLayout>(
        make_slot_layout(builder.steps(), builder.buffers().size(), flow, g.chunk_elems, g.depth));
    run->keep_alive = {ends, layout};

    // The previous run's host tasks use the same pinned slots and host
    // queues, and its driver may still be issuing: let it finish issuing.
    // Its device work is ordered by stream waits below, without blocking.
    if (last_) last_->wait_host();
    ensure_memory(*layout);
    ensure_queues(builder);
    if (last_ && !last_->finished) {
      for (std::size_t q = 0; q < device_queues_; ++q) {
        for (Event& tail : last_->tails) CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(streams_[q].get(), tail.get(), 0));
      }
    }

    if (front_.options().profile) {
      run->profile = true;
      Report& r = run->report;
      r.label = std::string(to_string(g.policy)) + ", depth " + std::to_string(g.depth);
      r.policy = g.policy;
      r.depth = g.depth;
      r.chunk_elems = g.chunk_elems;
      r.queues = builder.queues();
      r.link = link_;
    }
    last_ = run;

    const bool has_host_work = stage_in || stage_out;
    auto job = [this, run, ends, layout, n, builder = std::move(builder)]() mutable {
      drive<in_types>(run, builder, *ends, *layout, n);
    };
    if (detach && has_host_work) {
      run->issuing = true;
      run->driver = std::thread([job = std::move(job), run, device = device_]() mutable {
        (void)cudaSetDevice(device);
        job();
        run->issuing = false;
      });
    } else {
      job();
    }
    return RunTicket(run);
  }

  template <class In>
  void drive(const std::shared_ptr<RunState>& run, PlanBuilder& builder, const Endpoints& ends,
             const SlotLayout& layout, std::size_t n) {
    NvtxRange range("chunkpipe run");
    const SlotMemory mem{&layout, device_arena_.data(), pinned_arena_.data()};
    // Chunks in the run; a Source lowers this from "unknown" once it ends.
    std::size_t limit = n == unknown_length ? unknown_length : (n + layout.chunk_elems - 1) / layout.chunk_elems;
    try {
      if (run->profile) {
        // One origin for every stream's timings. Making the other streams
        // wait for it orders nothing inside the run: it precedes every op.
        run->origin = Event::create(true);
        CHUNKPIPE_CUDA_TRY(cudaEventRecord(run->origin.get(), streams_[0].get()));
        run->host_origin = std::chrono::steady_clock::now();
        for (std::size_t q = 1; q < device_queues_; ++q) {
          CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(streams_[q].get(), run->origin.get(), 0));
        }
      }
      std::vector<Op> ops;
      std::vector<Copy> copies;
      while (!run->aborted && builder.next_tick(limit, ops)) {
        for (const Op& op : ops) {
          if (run->aborted) break;
          if (op.chunk >= limit) continue;  // past the end a Source reported
          issue<In>(run, builder, op, ends, mem, n, limit, copies);
        }
        ops.clear();
      }
      if (!run->aborted) {
        for (std::size_t q = 0; q < device_queues_; ++q) {
          Event tail = Event::create();
          CHUNKPIPE_CUDA_TRY(cudaEventRecord(tail.get(), streams_[q].get()));
          run->tails.push_back(std::move(tail));
        }
      }
      if (run->profile) {
        Report& r = run->report;
        r.chunks = limit;
        r.elems = n == unknown_length ? learned_elems_ : n;
        for (const auto& e : ends.in) r.bytes_in += r.elems * e.elem_size;
        for (const auto& e : ends.out) r.bytes_out += r.elems * e.elem_size;
      }
    } catch (...) {
      run->fail(std::current_exception());
    }
    if (run->aborted) drain();
  }

  template <class In>
  void issue(const std::shared_ptr<RunState>& run, const PlanBuilder& builder, const Op& op, const Endpoints& ends,
             const SlotMemory& mem, std::size_t n, std::size_t& limit, std::vector<Copy>& copies) {
    const Step& step = builder.steps()[static_cast<std::size_t>(op.step)];
    OpRecord& rec = records_[op.id % records_.size()];
    rec = OpRecord{op.id, op.step, op.chunk, op.queue, 0, op.signal || is_host_queue(op.queue)};
    const std::size_t chunk = mem.layout->chunk_elems;
    const std::size_t offset = op.chunk * chunk;
    const bool open_ended = n == unknown_length;
    // Elements of this chunk. Known up front, or, when a Source decides,
    // learned from its host-in op, which every other op of the chunk
    // follows; host-in itself gets the slot's capacity.
    auto count_of = [&]() -> std::size_t {
      if (open_ended) return counts_[op.chunk % counts_.size()];
      return offset < n ? std::min(chunk, n - offset) : 0;
    };

    char label[64];
    if (op.kind == OpKind::stage) {
      std::snprintf(label, sizeof label, "chunk %zu stage %d", op.chunk, op.stage);
    } else {
      std::snprintf(label, sizeof label, "chunk %zu %s", op.chunk, std::string(to_string(op.kind)).c_str());
    }

    if (!is_host_queue(op.queue)) {
      cudaStream_t stream = streams_[static_cast<std::size_t>(op.queue)].get();
      for (std::size_t w : op.waits) {
        const OpRecord& dep = record_of(w);
        if (is_host_queue(dep.queue)) {
          host_queue(dep.queue).wait_done(dep.host_pos);
          if (run->aborted) return;
        } else if (dep.queue != op.queue) {
          CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(stream, ring_event(dep), 0));
        }
      }
      const std::size_t count = count_of();
      if (open_ended && op.kind == OpKind::h2d) {
        // Its host-in is done: the Source said how much this chunk holds.
        learned_elems_ += count;
        if (count < chunk) limit = op.chunk + (count > 0 ? 1 : 0);
        if (count == 0) return;  // the input ended exactly at the previous chunk
      }
      NvtxRange range(label);
      RunState::Timed* timed = start_timing(*run, op, count);
      if (timed) timed->start = record_timing(*run, stream);
      if (op.kind == OpKind::stage) {
        if (count != 0) launch_stage<In>(op, step, mem, stream, offset, count);
      } else {
        copies_of(op, step, mem, ends, offset, count, copies);
        for (const Copy& c : copies) {
          CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDefault, stream));
          if (timed) timed->op.bytes += c.bytes;
        }
      }
      if (op.signal) CHUNKPIPE_CUDA_TRY(cudaEventRecord(ring_event(rec), stream));
      if (timed) timed->end = record_timing(*run, stream);
      return;
    }

    // A host op: hand it to its worker with what it must wait for.
    std::vector<cudaEvent_t> device_deps;
    std::vector<std::pair<HostQueue*, std::size_t>> host_deps;
    for (std::size_t w : op.waits) {
      const OpRecord& dep = record_of(w);
      if (is_host_queue(dep.queue)) {
        host_deps.emplace_back(&host_queue(dep.queue), dep.host_pos);
      } else {
        device_deps.push_back(ring_event(dep));
      }
    }
    const bool produces = open_ended && op.kind == OpKind::host_in;
    const std::size_t count = produces ? chunk : count_of();
    RunState::Timed* timed = start_timing(*run, op, count);
    std::size_t* produced = produces ? &counts_[op.chunk % counts_.size()] : nullptr;
    CopyTeam* team = host_teams_[static_cast<std::size_t>(op.queue) - device_queues_].get();
    run->host_task_started();
    // `ends` and `mem`'s layout belong to the run, which the task holds.
    rec.host_pos = host_queue(op.queue).push([run, device_deps = std::move(device_deps),
                                              host_deps = std::move(host_deps), op, step, mem, &ends, offset, count,
                                              produced, team, timed, name = std::string(label), device = device_]() {
      try {
        CHUNKPIPE_CUDA_TRY(cudaSetDevice(device));
        // Ring events are re-recorded only after this task is waited for
        // (see the ring size in ensure_queues), so these still name the ops
        // this task depends on.
        for (cudaEvent_t e : device_deps) CHUNKPIPE_CUDA_TRY(cudaEventSynchronize(e));
        for (auto& [queue, pos] : host_deps) queue->wait_done(pos);
        std::size_t got = 0;
        if (!run->aborted && !(produced && run->source_ended)) {
          NvtxRange range(name.c_str());
          if (timed) timed->host_start = std::chrono::steady_clock::now();
          std::vector<Copy> copies;
          got = run_host_op(op, step, mem, ends, offset, count, copies, [&](const std::vector<Copy>& c) {
            team->copy(c);
            if (timed) {
              for (const Copy& x : c) timed->op.bytes += x.bytes;
            }
          });
          if (timed) timed->host_end = std::chrono::steady_clock::now();
        }
        if (produced) {
          *produced = got;
          if (got < count) run->source_ended = true;
        }
      } catch (...) {
        if (produced) {
          *produced = 0;
          run->source_ended = true;
        }
        run->fail(std::current_exception());
      }
      run->host_task_finished();
    });
  }

  RunState::Timed* start_timing(RunState& run, const Op& op, std::size_t count) {
    if (!run.profile) return nullptr;
    run.timed.push_back({});
    RunState::Timed* t = &run.timed.back();
    t->op = TimedOp{op.id, op.chunk, op.kind, op.stage, op.slot, op.queue, 0.0, 0.0, 0, count};
    return t;
  }

  template <class In>
  void launch_stage(const Op& op, const Step& step, const SlotMemory& mem, cudaStream_t stream, std::size_t offset,
                    std::size_t count) {
    using ios = typename chain<In, Stages...>::ios;
    with_index<sizeof...(Stages)>(static_cast<std::size_t>(op.stage), [&](auto I) {
      using io = std::tuple_element_t<decltype(I)::value, ios>;
      auto& stage = std::get<decltype(I)::value>(front_.stages());
      auto ins = typed_arrays(mem, step.reads[0], op.slot, count, typename io::in{});
      auto outs = typed_arrays(mem, step.writes[0], op.slot, count, typename io::out{});
      invoke_stage(stage, ins, outs, op.chunk, offset, count, stream);
    });
  }

  template <class F, class... I, class... O>
  static void invoke_stage(Map<F>& stage, const std::tuple<::cuda::std::span<I>...>& ins,
                           const std::tuple<::cuda::std::span<O>...>& outs, std::size_t, std::size_t,
                           std::size_t count, cudaStream_t stream) {
    auto in_ptrs = std::apply(
        [](const auto&... s) { return ::cuda::std::tuple<const I*...>(s.data()...); }, ins);
    auto out_ptrs = std::apply([](const auto&... s) { return ::cuda::std::tuple<O*...>(s.data()...); }, outs);
    launch_map(stage.fn, count, out_ptrs, in_ptrs, stream);
  }

  template <class F, class... X, class... I, class... O>
  static void invoke_stage(ChunkFn<F, X...>& stage, const std::tuple<::cuda::std::span<I>...>& ins,
                           const std::tuple<::cuda::std::span<O>...>& outs, std::size_t chunk, std::size_t offset,
                           std::size_t count, cudaStream_t stream) {
    ChunkContext<types<I...>, types<O...>> ctx{ins, outs, chunk, offset, count, stream, Backend::cuda};
    stage.fn(ctx);
    // Catches a bad launch inside the functor (and any earlier fault).
    CHUNKPIPE_CUDA_TRY(cudaGetLastError());
  }

  cudaEvent_t record_timing(RunState& run, cudaStream_t stream) {
    run.events.push_back(Event::create(true));
    CHUNKPIPE_CUDA_TRY(cudaEventRecord(run.events.back().get(), stream));
    return run.events.back().get();
  }

  bool is_host_queue(int queue) const noexcept { return static_cast<std::size_t>(queue) >= device_queues_; }
  HostQueue& host_queue(int queue) { return *host_queues_[static_cast<std::size_t>(queue) - device_queues_]; }
  cudaEvent_t ring_event(const OpRecord& r) const {
    return ring_[static_cast<std::size_t>(r.step)][r.chunk % ring_chunks_].get();
  }
  const OpRecord& record_of(std::size_t id) const {
    const OpRecord& r = records_[id % records_.size()];
    if (r.id != id || !r.signal) {
      throw std::logic_error("chunkpipe: internal error: op #" + std::to_string(id) +
                             (r.id != id ? " is older than the executor's wait window" : " records no event"));
    }
    return r;
  }

  /// Streams, host workers and the event ring for this plan's queues.
  void ensure_queues(const PlanBuilder& builder) {
    device_queues_ = 0;
    std::size_t host = 0;
    for (const Queue& q : builder.queues()) {
      if (q.kind == QueueKind::device) ++device_queues_;
      else ++host;
    }
    while (streams_.size() < device_queues_) streams_.push_back(Stream::create());
    const int threads = front_.options().host_threads > 0 ? front_.options().host_threads : default_host_threads;
    while (host_queues_.size() < host) {
      host_queues_.push_back(std::make_unique<HostQueue>());
      host_teams_.push_back(std::make_unique<CopyTeam>(threads));
    }
    // An op's event may be re-recorded once the op `ring_chunks_` chunks
    // later on the same step is issued. Waits reach back at most depth
    // chunks plus how far host-in runs ahead, and a multiple of depth keeps
    // each entry on one queue, so a late waiter only ever waits for more.
    const auto depth = static_cast<std::size_t>(builder.depth());
    const std::size_t reach = depth + static_cast<std::size_t>(builder.max_ahead()) + 2;
    ring_chunks_ = depth * ((reach + depth - 1) / depth);
    const std::size_t steps = builder.steps().size();
    if (ring_.size() < steps) ring_.resize(steps);
    for (auto& events : ring_) {
      while (events.size() < ring_chunks_) events.push_back(Event::create());
    }
    records_.assign(steps * ring_chunks_, OpRecord{});
    counts_.assign(ring_chunks_, 0);
    learned_elems_ = 0;
  }

  /// Pins a pageable range in place for Staging::registered, once: the
  /// registration is cached until release_registrations(). Blocks (pinning
  /// takes tens to hundreds of ms per GiB); throws cuda_error on failure.
  void register_range(const void* p, std::size_t bytes) {
    for (const auto& [q, b] : registered_) {
      if (p >= q && static_cast<const std::byte*>(p) + bytes <= static_cast<const std::byte*>(q) + b) return;
    }
    CHUNKPIPE_CUDA_TRY(cudaHostRegister(const_cast<void*>(p), bytes, cudaHostRegisterDefault));
    registered_.emplace_back(p, bytes);
  }

  void unregister_all() noexcept {
    for (const auto& [p, bytes] : registered_) {
      if (cudaHostUnregister(const_cast<void*>(p)) != cudaSuccess) (void)cudaGetLastError();
    }
    registered_.clear();
  }

  /// Slot memory, allocated once and reused while runs fit in it.
  void ensure_memory(const SlotLayout& layout) {
    const std::size_t dev = layout.device_bytes(), pin = layout.pinned_bytes();
    if (device_arena_.size() >= dev && pinned_arena_.size() >= pin) return;
    drain();  // nothing in flight may use the old arenas
    if (device_arena_.size() < dev) {
      std::size_t free = 0, total = 0;
      CHUNKPIPE_CUDA_TRY(cudaMemGetInfo(&free, &total));
      free += device_arena_.size();
      if (dev > free) {
        throw config_error("chunkpipe: the slots need " + mib(dev) + " of device memory (" +
                           std::to_string(layout.depth) + " slots of " + mib(layout.device_slot_bytes) +
                           ") but only " + mib(free) + " are free on device " + std::to_string(device_) +
                           "; use a smaller chunk_elems or depth");
      }
      device_arena_ = DeviceBuffer();
      device_arena_ = DeviceBuffer(dev);
    }
    if (pinned_arena_.size() < pin) {
      pinned_arena_ = PinnedBuffer();
      pinned_arena_ = PinnedBuffer(pin);
    }
  }

  static std::string mib(std::size_t bytes) {
    char s[32];
    std::snprintf(s, sizeof s, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
    return s;
  }

  /// Waits for every host task and stream of this pipeline, ignoring errors
  /// (they were or will be reported by the run that caused them).
  void drain() noexcept {
    for (auto& q : host_queues_) q->drain();
    for (Stream& s : streams_) {
      const cudaError_t e = cudaStreamSynchronize(s.get());
      if (e != cudaSuccess) {
        if (is_sticky(e)) health_->mark(std::string("chunkpipe: ") + cudaGetErrorName(e) + " while draining");
        (void)cudaGetLastError();
      }
    }
  }

  /// Everything stopped, for the destructor. Never throws.
  void quiesce() noexcept {
    if (last_ && last_->driver.joinable()) last_->driver.join();
    if (!streams_.empty() || !host_queues_.empty()) {
      int previous = 0;
      const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device_ &&
                            cudaSetDevice(device_) == cudaSuccess;
      drain();
      if (switched) (void)cudaSetDevice(previous);
    }
  }

  PipelineFront<Stages...> front_;
  int device_ = 0;
  std::shared_ptr<Health> health_ = std::make_shared<Health>();
  LinkModel link_;
  std::vector<Stream> streams_;
  std::vector<std::unique_ptr<HostQueue>> host_queues_;
  std::size_t device_queues_ = 0;
  std::vector<std::vector<Event>> ring_;  // [step][chunk % ring_chunks_]
  std::size_t ring_chunks_ = 1;
  std::vector<OpRecord> records_;         // [op id % size]
  std::vector<std::size_t> counts_;       // [chunk % ring_chunks_]: what a Source produced
  std::size_t learned_elems_ = 0;         // elements a Source produced so far this run
  std::vector<std::unique_ptr<CopyTeam>> host_teams_;  // one per host queue
  std::vector<std::pair<const void*, std::size_t>> registered_;  // Staging::registered ranges
  DeviceBuffer device_arena_;
  PinnedBuffer pinned_arena_;
  std::shared_ptr<RunState> last_;
};

}  // namespace chunkpipe::detail
