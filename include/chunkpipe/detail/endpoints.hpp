// SPDX-License-Identifier: MIT
// A run's ends, type-erased to bytes: its ranges, or the Source and Sink
// that produce and consume its data (cut into windows, windows.hpp, or read
// and written where they lie, for a Source or Sink that can), and what the
// run's last stage makes of them. Built once per run by every backend
// (make_endpoints). Host-only.
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/io.hpp>
#include <chunkpipe/stage.hpp>
#include <chunkpipe/detail/linkage.hpp>
#include <chunkpipe/detail/windows.hpp>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

/// Where a counted run that is a piece of a longer one (a spread run's
/// piece, detail/spread_run.inl) may pack its output instead of into its
/// own output ranges: straight into the longer run's outputs, from the
/// offset where the pieces before it ended, once that is known. Asked by
/// the piece's host-out ops (run_packed_out), on whichever thread runs
/// them; without it, a run packs into its own ranges.
struct PackedPlace {
  static constexpr std::size_t unknown = static_cast<std::size_t>(-1);
  /// Where the piece's output starts in the longer run's: `unknown` while
  /// a piece before it has not packed its last chunk. Asked once, by the
  /// first chunk that emits anything; that answer holds for the piece.
  std::function<std::size_t()> base;
  std::vector<std::byte*> data;  ///< the longer run's outputs, one per output
  std::size_t capacity = 0;      ///< elements the shortest of them holds
  std::size_t chunks = 0;        ///< the piece's chunks
  /// Called after the piece's last chunk packed, with what it emitted in
  /// all. Must not throw.
  std::function<void(std::size_t emitted)> done;
};

/// Where a run whose last stage emits a count has got to: written by its
/// host-out ops, one at a time in chunk order, read after the run.
struct Packed {
  std::size_t emitted = 0;   ///< elements emitted so far, over every chunk
  std::size_t written = 0;   ///< elements written to the outputs (a prefix of them)
  std::size_t capacity = static_cast<std::size_t>(-1);  ///< the shortest output range's elements
  bool overflowed() const noexcept { return emitted > written; }
  /// A piece's (PackedPlace), or null. `base` is what its first chunk that
  /// emitted anything was told (PackedPlace::unknown: its own ranges), and
  /// `chunks` counts its host-out ops.
  std::shared_ptr<PackedPlace> place;
  std::size_t base = PackedPlace::unknown;
  bool asked = false;
  std::size_t chunks = 0;
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
    /// output: a whole chunk a call, possibly from several threads at once.
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
  /// What a positional Source or Sink says of its own I/O (its functor's
  /// io_note(), asked when the report is made), for Report::io; empty
  /// where it has none.
  std::function<std::string()> in_note, out_note;
};

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
/// Whether a functor describes its own I/O: `std::string io_note() const`.
template <class F, class = void>
struct has_io_note : std::false_type {};
template <class F>
struct has_io_note<F, std::void_t<decltype(std::string{std::declval<const F&>().io_note()})>> : std::true_type {};

/// Report::io for a run with these ends: empty unless a Source reads or a
/// Sink writes at any offset. `threads` says how a chunk's read is shared
/// ("8 threads (the default ...)"), `ahead` how far reads run ahead ("into
/// 3 free slots (...)").
std::string describe_io(const Endpoints& e, const std::string& threads, const std::string& ahead);

/// The bytes a run of `elems` elements with endpoints `e` moves, as its
/// report counts them (Report::bytes_in, bytes_out), on either backend:
/// every input's elements in, every output's records (or what a counted
/// stage emitted) out.
struct IoBytes {
  std::size_t in = 0, out = 0;
};
IoBytes io_bytes(const Endpoints& e, std::size_t elems) noexcept;

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
      if constexpr (has_io_note<F>::value) e.in_note = [src] { return std::string(src->fn.io_note()); };
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
      if constexpr (has_io_note<F>::value) e.out_note = [snk] { return std::string(snk->fn.io_note()); };
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

}  // namespace chunkpipe::detail

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/endpoints.inl>
#endif
