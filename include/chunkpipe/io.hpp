// SPDX-License-Identifier: MIT
/// \file
/// Host ranges a run reads and writes, and the checks every run makes on them
/// before it queues anything. Host-only C++, no CUDA.
///
/// \code
/// pipe.run(x, z);                                   // one input, one output
/// pipe.run(chunkpipe::inputs(x, y), chunkpipe::outputs(z));
/// pipe.run(chunkpipe::pageable(v), out);            // say how a range is held
/// \endcode
///
/// A range is anything with data() and size() (std::vector, std::array, a
/// span) or a HostSpan. Where the memory lives decides how it crosses: pinned
/// (or device) memory is copied directly; pageable memory is staged through
/// the pipeline's pinned slots, never handed to a plain cudaMemcpyAsync,
/// which would silently run synchronously at a fraction of the speed.
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/stage.hpp>
#include <chunkpipe/detail/linkage.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace chunkpipe {

/// How a host range is held. `automatic` asks the CUDA runtime (pinned,
/// registered and device memory are copied directly, anything else is
/// staged); the host backend treats `automatic` as pageable.
enum class Memory : std::uint8_t { automatic, pinned, pageable };

/// A pointer, an element count and how the memory is held. Does not own.
template <class T>
struct HostSpan {
  T* data = nullptr;                  ///< the first element
  std::size_t size = 0;               ///< how many elements
  Memory memory = Memory::automatic;  ///< how the memory is held
};

namespace detail {

template <class R>
using range_element_t = std::remove_pointer_t<decltype(std::declval<R&>().data())>;

template <class T>
struct is_host_span : std::false_type {};
template <class T>
struct is_host_span<HostSpan<T>> : std::true_type {};

}  // namespace detail

/// Views any contiguous range (data() and size()) as a HostSpan.
template <class R>
auto host_span(R&& range, Memory memory = Memory::automatic) {
  using D = std::decay_t<R>;
  if constexpr (detail::is_host_span<D>::value) {
    D s = range;
    if (memory != Memory::automatic) s.memory = memory;
    return s;
  } else {
    using T = detail::range_element_t<std::remove_reference_t<R>>;
    return HostSpan<T>{range.data(), static_cast<std::size_t>(range.size()), memory};
  }
}

/// A pointer and a count as a HostSpan.
template <class T>
HostSpan<T> host_span(T* data, std::size_t size, Memory memory = Memory::automatic) {
  return HostSpan<T>{data, size, memory};
}

/// Marks a range as pinned (page-locked, e.g. from cudaMallocHost): copied
/// directly, no staging. Wrong if it is not: the copy then runs synchronously.
template <class R>
auto pinned(R&& range) {
  return ::chunkpipe::host_span(std::forward<R>(range), Memory::pinned);
}

/// Marks a range as pageable: always staged through pinned slots.
template <class R>
auto pageable(R&& range) {
  return ::chunkpipe::host_span(std::forward<R>(range), Memory::pageable);
}

/// The input ranges of a run, all of the same length.
template <class... T>
struct Inputs {
  std::tuple<HostSpan<const T>...> spans;  ///< one per input, in the order the first stage takes them
};

/// The output ranges of a run, each at least as long as the inputs (after
/// a PerChunk stage, as the run has chunks; after a Filter or an Emit, any
/// length: the run fails if what was emitted did not fit).
template <class... U>
struct Outputs {
  std::tuple<HostSpan<U>...> spans;  ///< one per output, in the order the last stage makes them
};

namespace detail {

template <class T>
HostSpan<const T> as_const(HostSpan<T> s) {
  return HostSpan<const T>{s.data, s.size, s.memory};
}

template <class T>
struct is_inputs : std::false_type {};
template <class... T>
struct is_inputs<Inputs<T...>> : std::true_type {};
template <class T>
struct is_outputs : std::false_type {};
template <class... T>
struct is_outputs<Outputs<T...>> : std::true_type {};

template <class T>
struct span_value;
template <class T>
struct span_value<HostSpan<T>> {
  using type = std::remove_const_t<T>;
};

}  // namespace detail

/// Groups input ranges: inputs(x, y) for a stage taking two elements.
template <class... R>
auto inputs(R&&... ranges) {
  return Inputs<typename detail::span_value<decltype(::chunkpipe::host_span(std::forward<R>(ranges)))>::type...>{
      {detail::as_const(::chunkpipe::host_span(std::forward<R>(ranges)))...}};
}

/// Groups output ranges: outputs(z), or outputs(a, b) for a stage returning
/// a ::cuda::std::tuple of two.
template <class... R>
auto outputs(R&&... ranges) {
  static_assert((!std::is_const_v<std::remove_pointer_t<decltype(::chunkpipe::host_span(ranges).data)>> && ...),
                "chunkpipe: an output range must be writable");
  return Outputs<typename detail::span_value<decltype(::chunkpipe::host_span(std::forward<R>(ranges)))>::type...>{
      {::chunkpipe::host_span(std::forward<R>(ranges))...}};
}

/// The element count of a run whose length is not known up front: its
/// input is a Source, which ends it.
inline constexpr std::size_t unknown_length = static_cast<std::size_t>(-1);

/// Input produced on demand: `fn(chunk, slot)` fills the span `slot`,
/// always Options::chunk_elems long (the window, whatever unit the
/// schedule moves underneath), for window `chunk` of the input (elements
/// [chunk * chunk_elems, ...)) and returns how many elements it wrote.
/// Returning fewer than slot.size() ends the input after this window; the
/// total need not be known up front. Called on a chunkpipe host thread, in
/// order, while the GPU works on earlier chunks; never again after it
/// ended the input or threw. What it throws ends the run and reaches the
/// caller. `slot` is the pinned slot itself where a window fits in the
/// schedule's unit, else a buffer of the pipeline's that is copied on.
/// The pipeline moves or copies the Source into the run (it may be
/// move-only) and lets go of it when the run has been waited for.
///   auto src = chunkpipe::source<float>([&](std::size_t k, ::cuda::std::span<float> slot) { ... });
///
/// A Source that can read at any offset (a file) says so with a member
/// `std::size_t read_at(std::size_t offset, ::cuda::std::span<T> dst)`
/// (and, optionally, `bool positional() const`, false to be read in order
/// after all): the pipeline then calls read_at instead, for elements
/// [offset, offset + dst.size()) of the input, from up to
/// Options::host_threads threads at once on parts of each chunk, straight into
/// the pinned slot. Returning fewer than dst.size() says the input ends at
/// offset + that count; read_at must be safe to call concurrently.
/// file_source() is such a Source.
template <class T, class F>
struct Source {
  F fn;  ///< the producer: fn(chunk, slot), or an object with read_at (above)
};

/// Source<T, F> from a producer, T named: chunkpipe::source<float>(fn).
/// Only copies or moves `fn`, and throws only what that throws.
template <class T, class F>
Source<T, std::decay_t<F>> source(F&& fn) {
  return {std::forward<F>(fn)};
}

/// Output consumed as it arrives: `fn(chunk, offset, data)` gets window
/// `chunk` of the output: Options::chunk_elems records (elements, or the
/// records of a Reduce or PerChunk stage that one window makes; for a
/// Filter or Emit, chunk_elems of the packed elements it kept), the last
/// one shorter, whatever unit the schedule moves underneath, with `offset`,
/// the index of its first record in the run's output. `data` is a span of
/// const U, in a pinned slot or a buffer of the pipeline's, valid only
/// during the call. Called on a chunkpipe host thread, in order. A last
/// window that is not whole is handed over with the data that completes
/// the run, or, where the run's output length was not known (a Source's
/// run, a Filter's), possibly only when the run completes (in wait(),
/// before finish()). If F has `finish()`, it is called
/// once after the last chunk of a run that succeeded (an empty run too),
/// before run() returns or, for run_async, inside the ticket's wait(): a
/// ticket never waited for never finishes its sink (a spread pipeline's
/// queued run calls it on the spread's thread as the run ends, before its
/// ticket is ready). If F has `abort()`, it
/// is called once after a run that failed, finish() throwing included.
/// What finish() throws reaches the caller; what abort() throws is dropped
/// in favour of the run's own error. The pipeline moves or copies the Sink
/// into the run and lets go of it when the run has been waited for.
///
/// A Sink that can write at any offset (a file) says so with a member
/// `void write_at(std::size_t offset, ::cuda::std::span<const U> data)`
/// (and, optionally, `bool positional() const`): the pipeline then calls
/// write_at instead, with records [offset, offset + data.size()) of the
/// output, a whole chunk a call, straight from the pinned slot, possibly
/// out of order and from more than one thread (write_at must be safe to
/// call concurrently); finish() and abort() are called as above, after
/// every write_at has returned. file_sink() is such a Sink.
template <class U, class F>
struct Sink {
  F fn;  ///< the consumer: fn(chunk, offset, data), or an object with write_at (above)
};

/// Sink<U, F> from a consumer, U named: chunkpipe::sink<float>(fn). Only
/// copies or moves `fn`, and throws only what that throws.
template <class U, class F>
Sink<U, std::decay_t<F>> sink(F&& fn) {
  return {std::forward<F>(fn)};
}

}  // namespace chunkpipe

// The engine's view of a run's two sides (as_inputs, as_outputs, their
// element types) and the range checks every run makes: machinery, not API.
#include <chunkpipe/detail/run_sides.hpp>

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/io.inl>
#endif
