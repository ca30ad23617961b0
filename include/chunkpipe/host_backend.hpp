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

  /// Runs `in` through the stages into `out`. Ranges marked pinned are
  /// copied directly; all others are staged through pinned slots, as
  /// pageable memory is on the GPU. Blocks; throws config_error for bad
  /// ranges before doing anything, and whatever a stage throws.
  template <class In, class Out>
  void run(In&& in, Out&& out) {
    auto ins = detail::as_inputs(std::forward<In>(in));
    auto outs = detail::as_outputs(std::forward<Out>(out));
    const std::size_t n = detail::validate_run(ins, outs);
    auto staged = [](const auto& span) { return span.memory != Memory::pinned; };
    const detail::Endpoints ends = detail::make_endpoints(ins, outs, staged);
    bool stage_in = false, stage_out = false;
    for (const auto& e : ends.in) stage_in = stage_in || e.staged;
    for (const auto& e : ends.out) stage_out = stage_out || e.staged;
    execute(this->plan_for(n, stage_in, stage_out), ins, outs, ends, n);
  }

  /// Runs a given plan, which may be hand-built or broken on purpose; the
  /// plan's staging must match the ranges (pinned ranges are direct). For
  /// tests of the planner and the hazard check. Blocks.
  template <class In, class Out>
  void run_plan(const Plan& plan, In&& in, Out&& out) {
    auto ins = detail::as_inputs(std::forward<In>(in));
    auto outs = detail::as_outputs(std::forward<Out>(out));
    const std::size_t n = detail::validate_run(ins, outs);
    auto staged = [](const auto& span) { return span.memory != Memory::pinned; };
    execute(plan, ins, outs, detail::make_endpoints(ins, outs, staged), n);
  }

  /// The plan of the last run.
  const Plan& last_plan() const noexcept { return last_plan_; }

 private:
  template <class... T, class... U>
  void execute(const Plan& plan, const Inputs<T...>& ins, const Outputs<U...>& outs,
               const detail::Endpoints& ends, std::size_t n) {
    using in_types = types<T...>;
    static_assert(detail::run_types<in_types, types<U...>, Stages...>::ok);
    (void)ins;
    (void)outs;
    last_plan_ = plan;
    if (n == 0) return;

    const std::size_t chunk = this->geometry_.chunk_elems;
    detail::Flow flow = detail::make_flow(in_types{}, types<Stages...>{});
    for (const auto& e : ends.in) flow.in_staged.push_back(e.staged);
    for (const auto& e : ends.out) flow.out_staged.push_back(e.staged);
    const detail::SlotLayout layout = detail::make_slot_layout(plan.steps, plan.buffers.size(), flow, chunk, plan.depth);
    std::vector<std::byte> device = poisoned(layout.device_bytes());
    std::vector<std::byte> pinned = poisoned(layout.pinned_bytes());
    const detail::SlotMemory mem{&layout, device.data(), pinned.data()};

    // Happens-before graph: queue predecessor plus waits.
    const std::size_t count = plan.ops.size();
    std::vector<std::vector<std::size_t>> next(count);
    std::vector<std::size_t> pending(count, 0);
    std::vector<std::size_t> tail(plan.queues.size(), count);
    for (const Op& op : plan.ops) {
      std::size_t& t = tail[static_cast<std::size_t>(op.queue)];
      if (t != count) {
        next[t].push_back(op.id);
        ++pending[op.id];
      }
      t = op.id;
      for (std::size_t w : op.waits) {
        next[w].push_back(op.id);
        ++pending[op.id];
      }
    }
    std::vector<std::size_t> ready;
    for (std::size_t i = 0; i < count; ++i) {
      if (pending[i] == 0) ready.push_back(i);
    }
    std::mt19937_64 rng(seed_);
    std::vector<detail::Copy> copies;
    std::size_t done = 0;
    while (!ready.empty()) {
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

      const Op& op = plan.ops[id];
      const Step& step = plan.steps[static_cast<std::size_t>(op.step)];
      const std::size_t offset = op.chunk * chunk;
      const std::size_t elems = offset < n ? std::min(chunk, n - offset) : 0;
      if (op.kind == OpKind::stage) {
        if (elems != 0) run_stage(op, step, mem, offset, elems, in_types{});
      } else {
        detail::copies_of(op, step, mem, ends, offset, elems, copies);
        for (const detail::Copy& c : copies) std::memcpy(c.dst, c.src, c.bytes);
      }
      ++done;
      for (std::size_t s : next[id]) {
        if (--pending[s] == 0) ready.push_back(s);
      }
    }
    if (done != count) {
      throw pipeline_error("chunkpipe: host backend: the plan's dependencies form a cycle; " +
                           std::to_string(count - done) + " ops never became ready");
    }
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
