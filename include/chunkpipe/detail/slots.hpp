// SPDX-License-Identifier: MIT
// What each operation moves, independent of who executes it. Host-only.
//
// The GPU executor and the host backend both turn a plan op into the same
// list of byte copies (this file) plus, for stage ops, a typed call of the
// stage. Only how a copy happens differs: cudaMemcpyAsync or memcpy. A
// run's ends are endpoints.hpp; what a host op does with them, host_ops.hpp.
#pragma once

#include <chunkpipe/io.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/stage.hpp>
#include <chunkpipe/detail/endpoints.hpp>
#include <chunkpipe/detail/linkage.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

inline constexpr std::size_t slot_alignment = 256;

inline std::size_t align_up(std::size_t n, std::size_t a) { return (n + a - 1) / a * a; }

/// Where every array of every plan buffer sits inside one slot. Buffers that
/// hold pinned staging live in the pinned arena, the rest in device memory.
/// The layout depends only on the element types, never on which ranges a
/// run stages: a pinned buffer holds every array, so runs that stage
/// different sides share one layout and one schedule.
struct SlotLayout {
  struct Array {
    std::size_t offset = 0;
    std::size_t elem_size = 0;  ///< 0: this array needs no storage (not staged)
    std::size_t elems = 0;      ///< capacity: the unit, or the records a unit makes
  };
  std::vector<std::vector<Array>> arrays;  ///< [buffer][array]
  std::vector<bool> pinned;                ///< [buffer] lives in the pinned arena
  std::size_t chunk_elems = 0;
  std::size_t device_slot_bytes = 0;
  std::size_t pinned_slot_bytes = 0;
  int depth = 0;

  std::size_t device_bytes() const { return device_slot_bytes * static_cast<std::size_t>(depth); }
  std::size_t pinned_bytes() const { return pinned_slot_bytes * static_cast<std::size_t>(depth); }
};

/// Element sizes of everything that flows through a run.
struct Flow {
  std::vector<std::size_t> in_sizes;               ///< per input
  std::vector<std::vector<std::size_t>> stage_out; ///< per stage, per output
  std::vector<std::size_t> out_sizes;              ///< per output
  /// Per stage: the size of the value it carries from chunk to chunk
  /// (stage_kind::carries; a Scan's running prefix), 0 if none.
  std::vector<std::size_t> carry_sizes;

  bool operator==(const Flow& o) const {
    return in_sizes == o.in_sizes && stage_out == o.stage_out && out_sizes == o.out_sizes &&
           carry_sizes == o.carry_sizes;
  }
  bool operator!=(const Flow& o) const { return !(*this == o); }
};

/// What the last stage's buffer holds beyond its outputs.
struct OutShape {
  /// Records one unit makes (0: chunk_elems; fewer when the last stage
  /// emits records, detail/stage_traits.hpp).
  std::size_t records = 0;
  /// The last stage emits a count (Filter, Emit): its buffer, and the
  /// pinned buffer its copy out fills, end with a std::size_t array of one
  /// element, the count (array index: the number of outputs).
  bool counted = false;
  /// Device scratch the last stage needs per slot (a Filter's CUB
  /// temporary storage), after the count: array index outputs + 1.
  std::size_t scratch_bytes = 0;
};

/// Lays out one slot: every array holds `chunk_elems` elements, except the
/// last stage's outputs (and their pinned copies), which hold out.records,
/// and the extras `out` names. A stage's carry buffer (PlanShape::carries)
/// holds its value and one more per `segment` of a unit; every slot has
/// one, and only slot 0's is used (the plan orders every access to it).
SlotLayout make_slot_layout(const std::vector<Step>& steps, std::size_t buffers, const Flow& flow,
                            std::size_t chunk_elems, int depth, OutShape out = {}, std::size_t segment = 1);

/// One byte copy an op performs.
struct Copy {
  void* dst;
  const void* src;
  std::size_t bytes;
};

/// Resolves slot arrays to addresses, given the two arenas' base pointers.
struct SlotMemory {
  const SlotLayout* layout = nullptr;
  std::byte* device = nullptr;  ///< device arena (host memory on the host backend)
  std::byte* pinned = nullptr;  ///< pinned arena

  std::byte* array(int buffer, std::size_t index, int slot) const {
    const auto b = static_cast<std::size_t>(buffer);
    std::byte* base = layout->pinned[b] ? pinned + layout->pinned_slot_bytes * static_cast<std::size_t>(slot)
                                        : device + layout->device_slot_bytes * static_cast<std::size_t>(slot);
    return base + layout->arrays[b][index].offset;
  }
};

/// Output records of a chunk's elements [offset, offset + count): chunks
/// start on whole records (the unit is a multiple of per_record).
struct RecordRange {
  std::size_t offset = 0;
  std::size_t count = 0;
};
inline RecordRange records_of_chunk(const Endpoints& ends, std::size_t offset, std::size_t count) noexcept {
  const std::size_t per = ends.per_record;
  if (per == 1) return {offset, count};
  return {offset / per, (count + per - 1) / per};
}

/// The copies `op` makes for a chunk of `count` elements starting at
/// element `offset` of the run. Stage ops make none.
void copies_of(const Op& op, const Step& step, const SlotMemory& mem, const Endpoints& ends, std::size_t offset,
               std::size_t count, std::vector<Copy>& out);

template <class... T>
std::vector<std::size_t> sizes_of(types<T...>) {
  return {sizeof(T)...};
}

/// The Flow of a pipeline `Stages...` fed inputs of types `In`.
template <class... T, class... Stages>
Flow make_flow(types<T...>, types<Stages...>) {
  using ios = typename chain<types<T...>, Stages...>::ios;
  Flow f;
  f.in_sizes = {sizeof(T)...};
  std::apply([&](auto... io) { (f.stage_out.push_back(::chunkpipe::detail::sizes_of(typename decltype(io)::out{})), ...); }, ios{});
  f.out_sizes = f.stage_out.back();
  f.carry_sizes = {(stage_kind<Stages>::carries ? sizeof(typename stage_kind<Stages>::carry) : std::size_t{0})...};
  return f;
}

template <class... X, std::size_t... I>
std::tuple<::cuda::std::span<X>...> typed_arrays_impl(const SlotMemory& mem, int buffer, int slot, std::size_t count,
                                                       std::index_sequence<I...>) {
  return {::cuda::std::span<X>(reinterpret_cast<X*>(mem.array(buffer, I, slot)), count)...};
}

/// Typed spans of a stage's input and output arrays in one slot.
template <class... X>
std::tuple<::cuda::std::span<X>...> typed_arrays(const SlotMemory& mem, int buffer, int slot, std::size_t count,
                                                  types<X...>) {
  return ::chunkpipe::detail::typed_arrays_impl<X...>(mem, buffer, slot, count, std::index_sequence_for<X...>{});
}

template <class F, std::size_t... I>
void with_index_impl(std::size_t i, F& f, std::index_sequence<I...>) {
  ((i == I ? (f(std::integral_constant<std::size_t, I>{}), 0) : 0), ...);
}

/// Calls f(std::integral_constant<std::size_t, I>{}) for the runtime index i.
template <std::size_t N, class F>
void with_index(std::size_t i, F&& f) {
  ::chunkpipe::detail::with_index_impl(i, f, std::make_index_sequence<N>{});
}

/// What a stage that emits a count (Filter, Emit) gets besides its arrays:
/// where to store the count, and its scratch. Null for other stages.
struct StageExtras {
  std::size_t* produced = nullptr;
  std::byte* scratch = nullptr;
  std::size_t scratch_bytes = 0;
  /// A carrying stage's (stage_kind::carries) value passed from chunk to
  /// chunk, followed by room for one per segment of a unit; `carry_elems`
  /// counts both.
  std::byte* carry = nullptr;
  std::size_t carry_elems = 0;
};

/// Calls f(stage, ins, outs, extras) with stage op `op`'s stage object,
/// typed spans of the `count` elements it reads and writes in its slot and
/// its StageExtras: what every executor needs before it runs a stage its
/// own way.
template <class In, class... Stages, class F>
void with_stage_arrays(std::tuple<Stages...>& stages, const SlotMemory& mem, const Step& step, const Op& op,
                       std::size_t count, F&& f) {
  using ios = typename chain<In, Stages...>::ios;
  ::chunkpipe::detail::with_index<sizeof...(Stages)>(static_cast<std::size_t>(op.stage), [&](auto I) {
    using io = std::tuple_element_t<decltype(I)::value, ios>;
    auto& stage = std::get<decltype(I)::value>(stages);
    StageExtras extras;
    if constexpr (records_of<std::decay_t<decltype(stage)>>::value == Records::counted) {
      const std::size_t c = io::out::size;
      const auto& arrays = mem.layout->arrays[static_cast<std::size_t>(step.writes[0])];
      extras.produced = reinterpret_cast<std::size_t*>(mem.array(step.writes[0], c, op.slot));
      if (arrays.size() > c + 1) {
        extras.scratch = mem.array(step.writes[0], c + 1, op.slot);
        extras.scratch_bytes = arrays[c + 1].elems;
      }
    }
    if constexpr (stage_kind<std::decay_t<decltype(stage)>>::carries) {
      // Slot 0's, whichever slot the op uses: one carry for the ring.
      extras.carry = mem.array(step.writes[1], 0, 0);
      extras.carry_elems = mem.layout->arrays[static_cast<std::size_t>(step.writes[1])][0].elems;
    }
    f(stage, ::chunkpipe::detail::typed_arrays(mem, step.reads[0], op.slot, count, typename io::in{}),
      ::chunkpipe::detail::typed_arrays(mem, step.writes[0], op.slot, ::chunkpipe::detail::stage_records(stage, count),
                                        typename io::out{}),
      extras);
  });
}

}  // namespace chunkpipe::detail

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/slots.inl>
#endif
