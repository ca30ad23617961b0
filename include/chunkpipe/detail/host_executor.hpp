// SPDX-License-Identifier: MIT
// The host executor: runs a schedule's ops on the CPU, for the host backend.
// Host-only C++, no CUDA.
//
// HostOpGraph (detail/host_op_graph.hpp) holds the ops issued and runs them
// in a seeded random order; this file is the part that knows the stages:
// a stage op calls call_stage<In>, which runs the stage on the op's slots.
// Map functors (marked CHUNKPIPE_HOST_DEVICE) run on the host element by
// element, ChunkFn functors get host spans and no stream; a kind with a
// header of its own runs its run_stage_kind, found through stage_kind
// (detail/stage_traits.hpp) in the kind's own header.
#pragma once

#include <chunkpipe/plan.hpp>
#include <chunkpipe/stage.hpp>
#include <chunkpipe/detail/driver.hpp>
#include <chunkpipe/detail/host_op_graph.hpp>
#include <chunkpipe/detail/reduce.hpp>
#include <chunkpipe/detail/slots.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

namespace chunkpipe::detail {

/// The host backend's executor for a pipeline of `Stages` (the concept in
/// driver.hpp): HostOpGraph, with each stage op calling its stage.
template <class... Stages>
class HostExecutor : public HostOpGraph {
 public:
  /// Slot memory comes from `device_memory` and `pinned_memory` where they
  /// are set (Options), else from operator new.
  HostExecutor(std::tuple<Stages...>& stages, std::uint64_t seed, std::shared_ptr<MemoryResource> device_memory = {},
               std::shared_ptr<MemoryResource> pinned_memory = {})
      : HostOpGraph(&stages, seed, std::move(device_memory), std::move(pinned_memory)) {}

  template <class In>
  void issue(const Op& op, const OpWork& w, HostRunRef& ref) {
    issue_op(op, w, ref, &HostExecutor::template call_stage<In>);
  }

 private:
  // A StageFn (HostOpGraph) for runs whose inputs are `In`.
  template <class In>
  static void call_stage(void* stages, const Op& op, const Step& step, const SlotMemory& mem, std::size_t run_chunk,
                         std::size_t offset, std::size_t count) {
    auto& all = *static_cast<std::tuple<Stages...>*>(stages);
    ::chunkpipe::detail::with_stage_arrays<In>(all, mem, step, op, count, [&](auto& stage, const auto& ins,
                                                                             const auto& outs, const StageExtras& x) {
      using S = std::decay_t<decltype(stage)>;
      if constexpr (stage_kind<S>::own_header) {
        // Unqualified: argument-dependent lookup finds the kind's own
        // header (stage_kind, detail/stage_traits.hpp).
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
};

}  // namespace chunkpipe::detail
