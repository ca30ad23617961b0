// SPDX-License-Identifier: MIT
// What each operation moves, independent of who executes it. Host-only.
//
// The GPU executor and the host backend both turn a plan op into the same
// list of byte copies (this file) plus, for stage ops, a typed call of the
// stage. Only how a copy happens differs: cudaMemcpyAsync or memcpy.
#pragma once

#include <chunkpipe/io.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/stage.hpp>
#include <chunkpipe/detail/windows.hpp>

#include <algorithm>
#include <atomic>
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

  bool operator==(const Flow& o) const {
    return in_sizes == o.in_sizes && stage_out == o.stage_out && out_sizes == o.out_sizes;
  }
  bool operator!=(const Flow& o) const { return !(*this == o); }
};

/// What the last stage's buffer holds beyond its outputs.
struct OutShape {
  /// Records one unit makes (0: chunk_elems; fewer when the last stage
  /// emits records, stage.hpp).
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
/// and the extras `out` names.
inline SlotLayout make_slot_layout(const std::vector<Step>& steps, std::size_t buffers, const Flow& flow,
                                   std::size_t chunk_elems, int depth, OutShape out = {}) {
  const std::size_t out_records = out.records;
  SlotLayout l;
  l.arrays.resize(buffers);
  l.pinned.assign(buffers, false);
  l.chunk_elems = chunk_elems;
  l.depth = depth;
  const std::size_t last_stage = flow.stage_out.size() - 1;
  const std::size_t records = out_records == 0 ? chunk_elems : out_records;
  auto sized = [](const std::vector<std::size_t>& sizes, std::size_t elems) {
    std::vector<SlotLayout::Array> a(sizes.size());
    for (std::size_t i = 0; i < sizes.size(); ++i) {
      a[i].elem_size = sizes[i];
      a[i].elems = elems;
    }
    return a;
  };
  for (const Step& s : steps) {
    switch (s.kind) {
      case OpKind::host_in:
        l.arrays[static_cast<std::size_t>(s.writes[0])] = sized(flow.in_sizes, chunk_elems);
        l.pinned[static_cast<std::size_t>(s.writes[0])] = true;
        break;
      case OpKind::h2d: l.arrays[static_cast<std::size_t>(s.writes[0])] = sized(flow.in_sizes, chunk_elems); break;
      case OpKind::stage: {
        const auto stage = static_cast<std::size_t>(s.stage);
        // An in-place stage writes the buffer it reads: keep its size.
        if (!s.reads.empty() && s.reads[0] == s.writes[0]) break;
        auto& arrays = l.arrays[static_cast<std::size_t>(s.writes[0])];
        arrays = sized(flow.stage_out[stage], stage == last_stage ? records : chunk_elems);
        if (stage == last_stage && out.counted) {
          arrays.push_back({0, sizeof(std::size_t), 1});
          if (out.scratch_bytes != 0) arrays.push_back({0, 1, out.scratch_bytes});
        }
        break;
      }
      case OpKind::d2h:
        if (!s.writes.empty()) {
          auto& arrays = l.arrays[static_cast<std::size_t>(s.writes[0])];
          arrays = sized(flow.out_sizes, records);
          if (out.counted) arrays.push_back({0, sizeof(std::size_t), 1});
          l.pinned[static_cast<std::size_t>(s.writes[0])] = true;
        }
        break;
      case OpKind::host_out: break;
    }
  }
  for (std::size_t b = 0; b < buffers; ++b) {
    std::size_t& bytes = l.pinned[b] ? l.pinned_slot_bytes : l.device_slot_bytes;
    for (SlotLayout::Array& a : l.arrays[b]) {
      if (a.elem_size == 0) continue;
      a.offset = bytes;
      bytes += align_up(a.elem_size * a.elems, slot_alignment);
    }
  }
  return l;
}

/// Where a run whose last stage emits a count has got to: written by its
/// host-out ops, one at a time in chunk order, read after the run.
struct Packed {
  std::size_t emitted = 0;   ///< elements emitted so far, over every chunk
  std::size_t written = 0;   ///< elements written to the outputs (a prefix of them)
  std::size_t capacity = static_cast<std::size_t>(-1);  ///< the shortest output range's elements
  bool overflowed() const noexcept { return emitted > written; }
};

/// One run's host endpoints, type-erased to bytes.
struct Endpoints {
  struct In {
    const std::byte* data = nullptr;
    std::size_t elem_size = 0;
    std::size_t size = 0; ///< elements the range holds (0 for a Source)
    bool staged = false;  ///< passes through a pinned slot (host_in ops)
    /// A Source: fills `slot` (capacity elements) for `chunk`, returns the count.
    std::function<std::size_t(std::size_t chunk, void* slot, std::size_t capacity)> produce;
    /// A positional Source (read_at; `produce` is then its one-thread
    /// form): fills `count` elements from element `offset` of the input
    /// into `dst` and returns how many (fewer: the input ends there).
    /// Called from several threads at once, on parts of one chunk.
    std::function<std::size_t(std::size_t offset, void* dst, std::size_t count)> read_at;
  };
  struct Out {
    std::byte* data = nullptr;
    std::size_t elem_size = 0;
    bool staged = false;  ///< passes through a pinned slot (host_out ops)
    std::size_t size = 0; ///< elements the range holds (checked when a source decides the length)
    /// A Sink: consumes `count` elements of `chunk`, the first being element `offset` of the run.
    std::function<void(std::size_t chunk, std::size_t offset, const void* data, std::size_t count)> consume;
    /// A positional Sink (write_at; `consume` is then its one-thread
    /// form): writes `count` records from `data` at record `offset` of the
    /// output. Called from several threads at once, on parts of one chunk.
    std::function<void(std::size_t offset, const void* data, std::size_t count)> write_at;
  };
  std::vector<In> in;
  std::vector<Out> out;
  /// Input elements per output record: 1 when the last stage is element-
  /// wise, a Reduce's segment, the unit for a per-chunk stage. Outputs are
  /// then indexed, sized and handed to Sinks in records.
  std::size_t per_record = 1;
  /// Storage the outputs point into that the run owns (a folding run's
  /// records): kept alive until the run lets go of its endpoints.
  std::shared_ptr<void> keep;
  /// The last stage emits a count (Filter, Emit): copies out move what it
  /// emitted, packed, and `packed` counts it (host-out ops, in chunk order).
  std::shared_ptr<Packed> packed;
  std::function<void()> finish;  ///< after a run that succeeded (a Sink's finish())
  std::function<void()> abort;   ///< after a run that failed (a Sink's abort())
};

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
inline void copies_of(const Op& op, const Step& step, const SlotMemory& mem, const Endpoints& ends,
                      std::size_t offset, std::size_t count, std::vector<Copy>& out) {
  out.clear();
  if (count == 0) return;
  if (ends.packed) {
    // The count crosses first; a host-out op copies what it says
    // (run_host_op), so plain copies out carry nothing else.
    if (op.kind == OpKind::d2h) {
      const std::size_t c = ends.out.size();
      out.push_back({mem.array(step.writes[0], c, op.slot), mem.array(step.reads[0], c, op.slot), sizeof(std::size_t)});
      return;
    }
    if (op.kind == OpKind::host_out) return;
  }
  if (op.kind == OpKind::d2h || op.kind == OpKind::host_out) {
    const RecordRange r = ::chunkpipe::detail::records_of_chunk(ends, offset, count);
    offset = r.offset;
    count = r.count;
  }
  switch (op.kind) {
    case OpKind::host_in:
      for (std::size_t i = 0; i < ends.in.size(); ++i) {
        const auto& e = ends.in[i];
        if (e.staged && !e.produce) {
          out.push_back({mem.array(step.writes[0], i, op.slot), e.data + offset * e.elem_size, count * e.elem_size});
        }
      }
      break;
    case OpKind::h2d:
      for (std::size_t i = 0; i < ends.in.size(); ++i) {
        const auto& e = ends.in[i];
        const void* src = e.staged ? static_cast<const void*>(mem.array(step.reads[0], i, op.slot))
                                   : static_cast<const void*>(e.data + offset * e.elem_size);
        out.push_back({mem.array(step.writes[0], i, op.slot), src, count * e.elem_size});
      }
      break;
    case OpKind::d2h:
      for (std::size_t o = 0; o < ends.out.size(); ++o) {
        const auto& e = ends.out[o];
        void* dst = e.staged ? static_cast<void*>(mem.array(step.writes[0], o, op.slot))
                             : static_cast<void*>(e.data + offset * e.elem_size);
        out.push_back({dst, mem.array(step.reads[0], o, op.slot), count * e.elem_size});
      }
      break;
    case OpKind::host_out:
      for (std::size_t o = 0; o < ends.out.size(); ++o) {
        const auto& e = ends.out[o];
        if (e.staged && !e.consume) {
          out.push_back({e.data + offset * e.elem_size, mem.array(step.reads[0], o, op.slot), count * e.elem_size});
        }
      }
      break;
    case OpKind::stage: break;
  }
}

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
    f(stage, ::chunkpipe::detail::typed_arrays(mem, step.reads[0], op.slot, count, typename io::in{}),
      ::chunkpipe::detail::typed_arrays(mem, step.writes[0], op.slot, ::chunkpipe::detail::stage_records(stage, count),
                                        typename io::out{}),
      extras);
  });
}

template <class F, class = void>
struct has_finish : std::false_type {};
template <class F>
struct has_finish<F, std::void_t<decltype(std::declval<F&>().finish())>> : std::true_type {};
template <class F, class = void>
struct has_abort : std::false_type {};
template <class F>
struct has_abort<F, std::void_t<decltype(std::declval<F&>().abort())>> : std::true_type {};

/// Whether a Source's or Sink's functor reads or writes at any offset:
/// `std::size_t read_at(std::size_t offset, ::cuda::std::span<T>)` or
/// `void write_at(std::size_t offset, ::cuda::std::span<const U>)`, and,
/// if it has `bool positional() const`, says so at run time (a file_source
/// over a pipe cannot seek).
template <class F, class T, class = void>
struct has_read_at : std::false_type {};
template <class F, class T>
struct has_read_at<F, T, std::void_t<decltype(std::size_t{std::declval<F&>().read_at(std::size_t{}, std::declval<::cuda::std::span<T>>())})>>
    : std::true_type {};
template <class F, class U, class = void>
struct has_write_at : std::false_type {};
template <class F, class U>
struct has_write_at<F, U, std::void_t<decltype(std::declval<F&>().write_at(std::size_t{}, std::declval<::cuda::std::span<const U>>()))>>
    : std::true_type {};
template <class F, class = void>
struct has_positional : std::false_type {};
template <class F>
struct has_positional<F, std::void_t<decltype(bool{std::declval<const F&>().positional()})>> : std::true_type {};
template <class F>
bool is_positional(const F& f) {
  if constexpr (has_positional<F>::value) {
    return f.positional();
  } else {
    (void)f;
    return true;
  }
}

/// Endpoints of input ranges; `staged(span)` decides each range.
template <class... T, class Decide>
void add_inputs(Endpoints& e, const Inputs<T...>& in, Decide&& staged, const Window&,
                const std::shared_ptr<WindowEnd>&) {
  std::apply(
      [&](const auto&... s) {
        (e.in.push_back({reinterpret_cast<const std::byte*>(s.data), sizeof(*s.data), s.size, staged(s), {}, {}}), ...);
      },
      in.spans);
}

/// The endpoint of a Source, which the run keeps alive: called for the
/// schedule's units, or through SourceWindows for windows of `w.elems`.
template <class T, class F, class Decide>
void add_inputs(Endpoints& e, Source<T, F> in, Decide&&, const Window& w, const std::shared_ptr<WindowEnd>& end) {
  if constexpr (has_read_at<F, T>::value) {
    if (::chunkpipe::detail::is_positional(in.fn)) {
      // Read where each chunk lies, by as many threads as the executor
      // gives; windows mean nothing to a Source that reads at any offset.
      auto src = std::make_shared<Source<T, F>>(std::move(in));
      auto read = [src](std::size_t offset, void* dst, std::size_t count) {
        const std::size_t n = src->fn.read_at(offset, ::cuda::std::span<T>(static_cast<T*>(dst), count));
        if (n > count) {
          throw pipeline_error("chunkpipe: a source's read_at returned " + std::to_string(n) + " elements for " +
                               std::to_string(count) + " asked for at element " + std::to_string(offset));
        }
        return n;
      };
      e.in.push_back({nullptr, sizeof(T), 0, true,
                      [read, next = std::make_shared<std::size_t>(0)](std::size_t, void* slot, std::size_t capacity) {
                        const std::size_t n = read(*next, slot, capacity);
                        *next += n;
                        return n;
                      },
                      read});
      return;
    }
  }
  if (w.elems != 0) {
    struct Windowed {
      Windowed(Source<T, F> s, const Window& w, std::shared_ptr<WindowEnd> end)
          : source(std::move(s)), windows(source.fn, w.elems, std::move(end)) {}
      Source<T, F> source;
      SourceWindows<T, F> windows;  // refers to source.fn
    };
    auto h = std::make_shared<Windowed>(std::move(in), w, end);
    e.in.push_back({nullptr, sizeof(T), 0, true, [h](std::size_t, void* slot, std::size_t capacity) {
                      return h->windows.fill(static_cast<T*>(slot), capacity);
                    },
                    {}});
    return;
  }
  auto src = std::make_shared<Source<T, F>>(std::move(in));
  e.in.push_back({nullptr, sizeof(T), 0, true, [src](std::size_t chunk, void* slot, std::size_t capacity) {
                    const std::size_t n = src->fn(chunk, ::cuda::std::span<T>(static_cast<T*>(slot), capacity));
                    if (n > capacity) {
                      throw pipeline_error("chunkpipe: a source returned " + std::to_string(n) +
                                           " elements for a slot of " + std::to_string(capacity));
                    }
                    return n;
                  },
                  {}});
}

template <class... U, class Decide>
void add_outputs(Endpoints& e, const Outputs<U...>& out, Decide&& staged, const Window&,
                 const std::shared_ptr<WindowEnd>&) {
  std::apply(
      [&](const auto&... s) {
        (e.out.push_back({reinterpret_cast<std::byte*>(s.data), sizeof(*s.data), staged(s), s.size, {}, {}}), ...);
      },
      out.spans);
}

/// The endpoint of a Sink: handed the schedule's units, or through
/// SinkWindows windows of `w.delivery` records, the last of which, if the
/// run's length was not known when it was queued, may leave only when the
/// run completes (before finish()).
template <class U, class F, class Decide>
void add_outputs(Endpoints& e, Sink<U, F> out, Decide&&, const Window& w, const std::shared_ptr<WindowEnd>& end) {
  if constexpr (has_write_at<F, U>::value) {
    if (::chunkpipe::detail::is_positional(out.fn)) {
      auto snk = std::make_shared<Sink<U, F>>(std::move(out));
      auto write = [snk](std::size_t offset, const void* data, std::size_t count) {
        snk->fn.write_at(offset, ::cuda::std::span<const U>(static_cast<const U*>(data), count));
      };
      e.out.push_back({nullptr, sizeof(U), true, 0,
                       [write](std::size_t, std::size_t offset, const void* data, std::size_t count) {
                         write(offset, data, count);
                       },
                       write});
      if constexpr (has_finish<F>::value) e.finish = [snk] { snk->fn.finish(); };
      if constexpr (has_abort<F>::value) e.abort = [snk] { snk->fn.abort(); };
      return;
    }
  }
  if (w.elems != 0) {
    struct Windowed {
      Windowed(Sink<U, F> s, const Window& w, std::shared_ptr<WindowEnd> end)
          : sink(std::move(s)), windows(sink.fn, w, std::move(end)) {}
      Sink<U, F> sink;
      SinkWindows<U, F> windows;  // refers to sink.fn
    };
    auto h = std::make_shared<Windowed>(std::move(out), w, end);
    e.out.push_back({nullptr, sizeof(U), true, 0,
                     [h](std::size_t, std::size_t offset, const void* data, std::size_t count) {
                       h->windows.put(offset, static_cast<const U*>(data), count);
                     },
                     {}});
    e.finish = [h] {
      h->windows.flush();
      if constexpr (has_finish<F>::value) h->sink.fn.finish();
    };
    if constexpr (has_abort<F>::value) e.abort = [h] { h->sink.fn.abort(); };
    return;
  }
  auto snk = std::make_shared<Sink<U, F>>(std::move(out));
  e.out.push_back({nullptr, sizeof(U), true, 0,
                   [snk](std::size_t chunk, std::size_t offset, const void* data, std::size_t count) {
                     snk->fn(chunk, offset, ::cuda::std::span<const U>(static_cast<const U*>(data), count));
                   },
                   {}});
  if constexpr (has_finish<F>::value) e.finish = [snk] { snk->fn.finish(); };
  if constexpr (has_abort<F>::value) e.abort = [snk] { snk->fn.abort(); };
}

/// Endpoints for a run's two sides; `staged(span)` decides each range, and
/// `w` how a Source and a Sink are cut (the default: as the schedule's
/// units).
template <class In, class Out, class Decide>
Endpoints make_endpoints(In in, Out out, Decide&& staged, const Window& w = {}) {
  Endpoints e;
  // A Sink's last window can leave with its unit once the Source's end is known.
  std::shared_ptr<WindowEnd> end;
  if (w.elems != 0 && is_source<In>::value && is_sink<Out>::value) end = std::make_shared<WindowEnd>();
  ::chunkpipe::detail::add_inputs(e, std::move(in), staged, w, end);
  ::chunkpipe::detail::add_outputs(e, std::move(out), staged, w, end);
  return e;
}

/// Splits elements [0, count) of one positional read or write over the
/// parts `par(fn)` calls fn(part, parts) for (a team of threads, or one),
/// calling part(lo, hi) for each non-empty piece. Pieces are whole 64 KiB
/// (a page-aligned read where the chunk starts on one), and a chunk under
/// 1 MiB is one piece: waking a team costs more than it saves there.
template <class Par, class Piece>
void split_over(Par&& par, std::size_t count, std::size_t elem_size, Piece&& part) {
  if (count * elem_size < (std::size_t{1} << 20)) {
    part(std::size_t{0}, count);
    return;
  }
  const std::size_t align = std::max<std::size_t>(1, (std::size_t{1} << 16) / elem_size);
  par([&](std::size_t k, std::size_t parts) {
    const std::size_t per = ((count + parts - 1) / parts + align - 1) / align * align;
    const std::size_t lo = std::min(count, k * per), hi = std::min(count, lo + per);
    if (lo < hi) part(lo, hi);
  });
}

/// Reads one chunk of a positional Source (Endpoints::In::read_at) into
/// `dst`, `count` elements from element `offset`, in parts over `par`, and
/// returns how many it holds: up to where the first part came up short.
/// Throws what read_at throws, and pipeline_error for a Source that gave
/// elements past a point where it said the input ended.
template <class Par>
std::size_t read_positional(const Endpoints::In& in, std::size_t offset, void* dst, std::size_t count, Par&& par) {
  std::atomic<std::size_t> end{count};   // the least end of a part that came up short
  std::atomic<std::size_t> reach{0};     // the furthest element any part read
  ::chunkpipe::detail::split_over(par, count, in.elem_size, [&](std::size_t lo, std::size_t hi) {
    const std::size_t n = in.read_at(offset + lo, static_cast<std::byte*>(dst) + lo * in.elem_size, hi - lo);
    if (n < hi - lo) {
      std::size_t e = end.load();
      while (lo + n < e && !end.compare_exchange_weak(e, lo + n)) {
      }
    }
    if (n != 0) {
      std::size_t r = reach.load();
      while (lo + n > r && !reach.compare_exchange_weak(r, lo + n)) {
      }
    }
  });
  if (reach.load() > end.load()) {
    throw pipeline_error("chunkpipe: a source's read_at said the input ends at element " +
                         std::to_string(offset + end.load()) + " and then gave elements up to " +
                         std::to_string(offset + reach.load()) + " (did it change while being read?)");
  }
  return end.load();
}

/// Writes `count` records from `data` at record `offset` of a positional
/// Sink (Endpoints::Out::write_at), in parts over `par`. Throws what
/// write_at throws.
template <class Par>
void write_positional(const Endpoints::Out& out, std::size_t offset, const void* data, std::size_t count, Par&& par) {
  ::chunkpipe::detail::split_over(par, count, out.elem_size, [&](std::size_t lo, std::size_t hi) {
    out.write_at(offset + lo, static_cast<const std::byte*>(data) + lo * out.elem_size, hi - lo);
  });
}

/// A host-out op of a run whose last stage emitted a count: reads the
/// count the copy out brought to the pinned slot, then moves exactly that
/// many elements, packed after what earlier chunks emitted: from the device
/// buffer straight into a pinned output range with `from_device(dst, src,
/// bytes)` (which blocks until it is done), or through the pinned slot into
/// a pageable range (`copy`) or a Sink. An output too short for what was
/// emitted is filled to its end and no further; `packed` keeps counting,
/// so the run can say how much was needed. Throws pipeline_error for a count above the
/// chunk's elements, and what a Sink throws.
template <class CopyFn, class DeviceCopyFn, class Par>
void run_packed_out(const Op& op, const Step& step, const SlotMemory& mem, const Endpoints& ends,
                    std::size_t run_chunk, std::size_t count, std::vector<Copy>& scratch, CopyFn&& copy,
                    DeviceCopyFn&& from_device, Par&& par) {
  Packed& p = *ends.packed;
  const std::size_t outs = ends.out.size();
  std::size_t got = 0;
  std::memcpy(&got, mem.array(step.reads[0], outs, op.slot), sizeof got);
  if (got > count) {
    throw pipeline_error("chunkpipe: the last stage emitted " + std::to_string(got) + " elements from chunk " +
                         std::to_string(run_chunk) + " of " + std::to_string(count) +
                         "; a stage may emit at most as many elements as it got");
  }
  const std::size_t at = p.emitted;
  p.emitted += got;
  if (got == 0) return;
  // Ranges get what fits, up to their end: the chunk that crosses it
  // leaves a prefix, and the run fails once it has counted everything.
  const std::size_t room = p.written == at && at < p.capacity ? std::min(got, p.capacity - at) : 0;
  for (std::size_t o = 0; o < outs; ++o) {
    const auto& e = ends.out[o];
    const void* device = mem.array(step.reads[1], o, op.slot);
    if (e.consume) {
      void* bounce = mem.array(step.reads[0], o, op.slot);
      from_device(bounce, device, got * e.elem_size);
      if (e.write_at) {
        ::chunkpipe::detail::write_positional(e, at, bounce, got, par);
      } else {
        e.consume(run_chunk, at, bounce, got);
      }
    } else if (room == 0) {
      continue;
    } else if (!e.staged) {
      from_device(e.data + at * e.elem_size, device, room * e.elem_size);
    } else {
      void* bounce = mem.array(step.reads[0], o, op.slot);
      from_device(bounce, device, room * e.elem_size);
      scratch.clear();
      scratch.push_back({e.data + at * e.elem_size, bounce, room * e.elem_size});
      copy(scratch);
    }
  }
  if (room != 0) p.written = at + room;
}

/// Runs a host op of the run's chunk `run_chunk` (elements [offset, offset +
/// count) of the run): a Source fills its slot, a Sink consumes its slot,
/// staged ranges are copied with `copy(copies)`. For host_in, `count` is the
/// slot's capacity when a Source decides the length; returns the elements
/// the chunk holds (what the Source produced, else `count`). A run whose
/// last stage emits a count copies out with run_packed_out(), and
/// `from_device` (see there). A positional Source or Sink (read_at,
/// write_at) reads or writes the chunk in parts, over `par(fn)`, which
/// calls fn(part, parts) for every part, on a team of threads or in turn.
/// Throws what a source or sink throws, and pipeline_error when a source
/// produces more than an output range holds.
template <class CopyFn, class DeviceCopyFn, class Par>
std::size_t run_host_op(const Op& op, const Step& step, const SlotMemory& mem, const Endpoints& ends,
                        std::size_t run_chunk, std::size_t offset, std::size_t count, std::vector<Copy>& scratch,
                        CopyFn&& copy, DeviceCopyFn&& from_device, Par&& par) {
  if (count == 0) return 0;
  if (ends.packed && op.kind == OpKind::host_out) {
    ::chunkpipe::detail::run_packed_out(op, step, mem, ends, run_chunk, count, scratch, copy, from_device, par);
    return count;
  }
  std::size_t produced = count;
  if (op.kind == OpKind::host_in) {
    for (std::size_t i = 0; i < ends.in.size(); ++i) {
      if (!ends.in[i].produce) continue;
      void* slot = mem.array(step.writes[0], i, op.slot);
      produced = ends.in[i].read_at ? ::chunkpipe::detail::read_positional(ends.in[i], offset, slot, count, par)
                                    : ends.in[i].produce(run_chunk, slot, count);
      const RecordRange r = ::chunkpipe::detail::records_of_chunk(ends, offset, produced);
      for (std::size_t o = 0; o < ends.out.size() && !ends.packed; ++o) {
        const auto& e = ends.out[o];
        if (!e.consume && r.offset + r.count > e.size) {
          throw pipeline_error("chunkpipe: the source produced more than the " + std::to_string(e.size) +
                               (ends.per_record == 1 ? " elements" : " records") + " output " + std::to_string(o) +
                               " holds");
        }
      }
    }
  } else {
    const RecordRange r = ::chunkpipe::detail::records_of_chunk(ends, offset, count);
    for (std::size_t o = 0; o < ends.out.size(); ++o) {
      const auto& e = ends.out[o];
      if (e.write_at) {
        ::chunkpipe::detail::write_positional(e, r.offset, mem.array(step.reads[0], o, op.slot), r.count, par);
      } else if (e.consume) {
        e.consume(run_chunk, r.offset, mem.array(step.reads[0], o, op.slot), r.count);
      }
    }
  }
  ::chunkpipe::detail::copies_of(op, step, mem, ends, offset, produced, scratch);
  if (!scratch.empty()) copy(scratch);
  return produced;
}

}  // namespace chunkpipe::detail
