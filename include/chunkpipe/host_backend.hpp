// SPDX-License-Identifier: MIT
// The host backend: executes the same plans as the GPU pipeline, on the CPU.
// Host-only C++, no CUDA; compiles with any C++17 compiler.
//
// Copies are memcpy, Map functors (marked CHUNKPIPE_HOST_DEVICE) run on the
// host element by element, ChunkFn functors get host spans and a null
// stream. Slot buffers are poisoned when allocated, so an op that reads a
// buffer nothing wrote produces garbage rather than a lucky zero.
//
// Ops run in an order chosen by a seeded random walk over the plan's
// happens-before graph: any op whose queue predecessor and waits are done
// may go next. A plan missing an edge therefore gives wrong output for some
// seed, which is how CI tests data movement, ragged tails and staging end to
// end, and how a broken plan shows up in results as well as in the hazard
// check.
#pragma once

#include <chunkpipe/detail/front.hpp>
#include <chunkpipe/detail/slots.hpp>
#include <chunkpipe/hazards.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

namespace chunkpipe {

/// A pipeline that runs on the CPU. Same options, stages and run() as
/// ChunkedPipeline; run() blocks and throws config_error for bad input.
template <class... Stages>
class HostPipeline : public detail::PipelineFront<Stages...> {
  using Front = detail::PipelineFront<Stages...>;

 public:
  /// Default-constructed stages. Throws config_error for bad options.
  explicit HostPipeline(Options options = {}) : Front(options, Stages{}...) {}
  /// Throws config_error for bad options.
  HostPipeline(Options options, Stages... stages) : Front(options, std::move(stages)...) {}

  /// Seed of the execution order; 0 runs ops in issue order.
  void set_seed(std::uint64_t seed) noexcept { seed_ = seed; }

  /// Runs `in` through the stages into `out`. `in` is ranges (or
  /// inputs(...)) or a Source, `out` ranges (or outputs(...)) or a Sink.
  /// Ranges marked pinned are copied directly; with Staging::threads (and
  /// automatic) all others pass through pinned slots by host_in/host_out
  /// ops, as pageable memory does on the GPU; registered and direct copy
  /// them directly. Blocks; throws config_error for bad ranges before doing
  /// anything, and whatever a stage, source or sink throws.
  template <class In, class Out>
  void run(In&& in, Out&& out) {
    auto ins = detail::as_inputs(std::forward<In>(in));
    auto outs = detail::as_outputs(std::forward<Out>(out));
    const std::size_t n = detail::validate_run(ins, outs);
    const bool stage_pageable = this->options_.staging == Staging::automatic ||
                                this->options_.staging == Staging::threads;
    auto staged = [&](const auto& span) { return span.memory != Memory::pinned && stage_pageable; };
    using in_types = typename detail::side_types<decltype(ins)>::type;
    using out_types = typename detail::side_types<decltype(outs)>::type;
    detail::Endpoints ends = detail::make_endpoints(std::move(ins), std::move(outs), staged);
    bool stage_in = false, stage_out = false;
    for (const auto& e : ends.in) stage_in = stage_in || e.staged;
    for (const auto& e : ends.out) stage_out = stage_out || e.staged;
    const Geometry& g = this->geometry_;
    PlanBuilder builder(g.policy, g.depth, this->shape(stage_in, stage_out));
    execute(builder, in_types{}, out_types{}, ends, n);
  }

  /// Runs a given plan, which may be hand-built or broken on purpose, over
  /// ranges of known length; the plan's staging must match the ranges
  /// (pinned ranges are direct). For tests of the planner and the hazard
  /// check. Blocks.
  template <class In, class Out>
  void run_plan(const Plan& plan, In&& in, Out&& out) {
    auto ins = detail::as_inputs(std::forward<In>(in));
    auto outs = detail::as_outputs(std::forward<Out>(out));
    const std::size_t n = detail::validate_run(ins, outs);
    auto staged = [](const auto& span) { return span.memory != Memory::pinned; };
    using in_types = typename detail::side_types<decltype(ins)>::type;
    using out_types = typename detail::side_types<decltype(outs)>::type;
    detail::Endpoints ends = detail::make_endpoints(std::move(ins), std::move(outs), staged);
    std::vector<Op> ops = plan.ops;
    execute_ops(plan.steps, plan.buffers.size(), plan.queues.size(), plan.depth,
                [&](std::size_t, std::vector<Op>& out_ops) {
                  if (ops.empty()) return false;
                  out_ops.insert(out_ops.end(), ops.begin(), ops.end());
                  ops.clear();
                  return true;
                },
                in_types{}, out_types{}, ends, n);
    last_plan_ = plan;
  }

  /// The plan of the last run, as far as it was issued.
  const Plan& last_plan() const noexcept { return last_plan_; }

 private:

  template <class InT, class OutT>
  void execute(PlanBuilder& builder, InT, OutT, detail::Endpoints& ends, std::size_t n) {
    last_plan_ = Plan{};
    last_plan_.policy = builder.policy();
    last_plan_.depth = builder.depth();
    last_plan_.shape = builder.shape();
    last_plan_.queues = builder.queues();
    last_plan_.steps = builder.steps();
    last_plan_.buffers = builder.buffers();
    if (n == 0) {
      conclude(ends);  // nothing to move; a Sink still finishes
      return;
    }
    execute_ops(builder.steps(), builder.buffers().size(), builder.queues().size(), builder.depth(),
                [&](std::size_t limit_now, std::vector<Op>& out_ops) { return builder.next_tick(limit_now, out_ops); },
                InT{}, OutT{}, ends, n);
  }

  // Executes ops as `emit(limit, ops)` hands them out, in a seeded random
  // order that respects queue order and waits. Emission is interleaved with
  // execution, as on the GPU, so a Source can end the run while later
  // chunks' ops are already issued: those become no-ops.
  template <class Emit, class... T, class... U>
  void execute_ops(const std::vector<Step>& steps, std::size_t buffers, std::size_t queues, int depth, Emit&& emit,
                   types<T...>, types<U...>, detail::Endpoints& ends, std::size_t n) {
    using in_types = types<T...>;
    static_assert(detail::run_types<in_types, types<U...>, Stages...>::ok);
    const std::size_t chunk = this->geometry_.chunk_elems;
    detail::Flow flow = detail::make_flow(in_types{}, types<Stages...>{});
    for (const auto& e : ends.in) flow.in_staged.push_back(e.staged);
    for (const auto& e : ends.out) flow.out_staged.push_back(e.staged);
    const detail::SlotLayout layout = detail::make_slot_layout(steps, buffers, flow, chunk, depth);
    std::vector<std::byte> device = poisoned(layout.device_bytes());
    std::vector<std::byte> pinned = poisoned(layout.pinned_bytes());
    const detail::SlotMemory mem{&layout, device.data(), pinned.data()};

    // Elements of each chunk; with a Source, learned as it produces.
    const bool open_ended = n == unknown_length;
    std::size_t known_chunks = open_ended ? unknown_length : this->chunks_for(n);
    std::vector<std::size_t> produced;  // per chunk, for open-ended runs
    bool ended = false;
    auto elems_of = [&](std::size_t c) -> std::size_t {
      if (c >= known_chunks) return 0;
      if (open_ended) return c < produced.size() ? produced[c] : 0;
      const std::size_t offset = c * chunk;
      return offset < n ? std::min(chunk, n - offset) : 0;
    };

    std::vector<Op> ops;
    std::vector<std::vector<std::size_t>> next;
    std::vector<std::size_t> pending;
    std::vector<char> finished;  // ops already executed no longer hold anything back
    std::vector<std::size_t> tail(queues, static_cast<std::size_t>(-1));
    std::vector<std::size_t> ready;
    bool exhausted = false;
    auto emit_more = [&] {
      const std::size_t before = ops.size();
      if (!emit(known_chunks, ops)) {
        exhausted = true;
        return;
      }
      next.resize(ops.size());
      pending.resize(ops.size(), 0);
      finished.resize(ops.size(), 0);
      auto after = [&](std::size_t before_op, std::size_t i) {
        if (finished[before_op]) return;
        next[before_op].push_back(i);
        ++pending[i];
      };
      for (std::size_t i = before; i < ops.size(); ++i) {
        const Op& op = ops[i];
        std::size_t& t = tail[static_cast<std::size_t>(op.queue)];
        if (t != static_cast<std::size_t>(-1)) after(t, i);
        t = i;
        for (std::size_t w : op.waits) after(w, i);
        if (pending[i] == 0) ready.push_back(i);
      }
    };

    std::mt19937_64 rng(seed_);
    std::vector<detail::Copy> scratch;
    std::size_t done = 0;
    auto memcpy_all = [](const std::vector<detail::Copy>& copies) {
      for (const detail::Copy& c : copies) std::memcpy(c.dst, c.src, c.bytes);
    };
    try {
      for (;;) {
        // Issue ahead of execution now and then, and always when nothing is ready.
        if (!exhausted && (ready.empty() || (seed_ != 0 && rng() % 3 == 0))) {
          emit_more();
          continue;
        }
        if (ready.empty()) break;
        std::size_t pick = 0;
        if (seed_ != 0) {
          pick = static_cast<std::size_t>(rng() % ready.size());
        } else {
          for (std::size_t i = 1; i < ready.size(); ++i) {
            if (ready[i] < ready[pick]) pick = i;
          }
        }
        const std::size_t id = ready[pick];
        ready[pick] = ready.back();
        ready.pop_back();

        const Op& op = ops[id];
        const Step& step = steps[static_cast<std::size_t>(op.step)];
        const std::size_t offset = op.chunk * chunk;
        if (op.kind == OpKind::host_in && open_ended) {
          // A Source decides this chunk's size; once it ends, no more calls.
          std::size_t count = 0;
          if (!ended) {
            count = detail::run_host_op(op, step, mem, ends, offset, chunk, scratch, memcpy_all);
            if (count < chunk) {
              ended = true;
              known_chunks = op.chunk + (count > 0 ? 1 : 0);
            }
          }
          if (produced.size() <= op.chunk) produced.resize(op.chunk + 1, 0);
          produced[op.chunk] = count;
        } else {
          const std::size_t elems = elems_of(op.chunk);
          if (op.kind == OpKind::stage) {
            if (elems != 0) run_stage(op, step, mem, offset, elems, in_types{});
          } else if (op.kind == OpKind::host_in || op.kind == OpKind::host_out) {
            detail::run_host_op(op, step, mem, ends, offset, elems, scratch, memcpy_all);
          } else {
            detail::copies_of(op, step, mem, ends, offset, elems, scratch);
            memcpy_all(scratch);
          }
        }
        ++done;
        finished[id] = 1;
        for (std::size_t s : next[id]) {
          if (--pending[s] == 0) ready.push_back(s);
        }
      }
      if (done != ops.size()) {
        throw pipeline_error("chunkpipe: host backend: the plan's dependencies form a cycle; " +
                             std::to_string(ops.size() - done) + " ops never became ready");
      }
    } catch (...) {
      abort_quietly(ends);
      throw;
    }
    conclude(ends);
    last_plan_.chunks = open_ended ? known_chunks : this->chunks_for(n);
    last_plan_.ops = std::move(ops);
  }

  template <class In>
  void run_stage(const Op& op, const Step& step, const detail::SlotMemory& mem, std::size_t offset,
                 std::size_t elems, In) {
    using ios = typename detail::chain<In, Stages...>::ios;
    detail::with_index<sizeof...(Stages)>(static_cast<std::size_t>(op.stage), [&](auto I) {
      using io = std::tuple_element_t<I, ios>;
      auto& stage = std::get<I>(this->stages_);
      auto ins = detail::typed_arrays(mem, step.reads[0], op.slot, elems, typename io::in{});
      auto outs = detail::typed_arrays(mem, step.writes[0], op.slot, elems, typename io::out{});
      call_stage(stage, ins, outs, op.chunk, offset, elems);
    });
  }

  template <class F, class... I, class... O>
  static void call_stage(Map<F>& stage, const std::tuple<::cuda::std::span<I>...>& ins,
                         const std::tuple<::cuda::std::span<O>...>& outs, std::size_t, std::size_t,
                         std::size_t elems) {
    for (std::size_t i = 0; i < elems; ++i) {
      auto r = std::apply([&](const auto&... s) { return stage.fn(s[i]...); }, ins);
      if constexpr (sizeof...(O) == 1) {
        std::get<0>(outs)[i] = r;
      } else {
        assign_all(outs, r, i, std::index_sequence_for<O...>{});
      }
    }
  }

  template <class Outs, class R, std::size_t... K>
  static void assign_all(const Outs& outs, const R& r, std::size_t i, std::index_sequence<K...>) {
    ((std::get<K>(outs)[i] = ::cuda::std::get<K>(r)), ...);
  }

  template <class F, class... X, class... I, class... O>
  static void call_stage(ChunkFn<F, X...>& stage, const std::tuple<::cuda::std::span<I>...>& ins,
                         const std::tuple<::cuda::std::span<O>...>& outs, std::size_t chunk, std::size_t offset,
                         std::size_t elems) {
    ChunkContext<types<I...>, types<O...>> ctx{ins, outs, chunk, offset, elems, nullptr, Backend::host};
    stage.fn(ctx);
  }

  // A Sink's finish() after a run that succeeded; abort() if finish() throws.
  static void conclude(detail::Endpoints& ends) {
    if (!ends.finish) return;
    try {
      ends.finish();
    } catch (...) {
      abort_quietly(ends);
      throw;
    }
  }
  // A Sink's abort() after a failed run; what it throws would hide the
  // run's own error, so it is dropped.
  static void abort_quietly(detail::Endpoints& ends) noexcept {
    if (!ends.abort) return;
    try {
      ends.abort();
    } catch (...) {
    }
  }

  static std::vector<std::byte> poisoned(std::size_t bytes) {
    // 0xFF bytes are NaN as float and double and -1 as integers: nothing a
    // correct run could produce by accident from the test data.
    return std::vector<std::byte>(bytes, std::byte{0xFF});
  }

  std::uint64_t seed_ = 1;
  Plan last_plan_;
};

/// Builds a HostPipeline, deducing its stage types.
template <class... Stages>
HostPipeline<Stages...> make_host_pipeline(Options options, Stages... stages) {
  return HostPipeline<Stages...>(options, std::move(stages)...);
}

}  // namespace chunkpipe
