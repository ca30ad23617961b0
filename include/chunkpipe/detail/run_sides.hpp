// SPDX-License-Identifier: MIT
// Part of io.hpp, which includes it after the types it uses (HostSpan,
// Inputs, Outputs, Source, Sink): the engine's view of a run's two sides
// (as_inputs, as_outputs, side_types, is_source, is_sink) and the range
// checks every run makes before anything is queued (input_length,
// check_outputs, validate_run; their messages are built in detail/io.inl).
// Not API; do not include directly.
#pragma once

#include <chunkpipe/errors.hpp>
#include <chunkpipe/detail/linkage.hpp>

#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

namespace chunkpipe {

namespace detail {

using ::chunkpipe::unknown_length;

template <class T>
struct is_source : std::false_type {};
template <class T, class F>
struct is_source<Source<T, F>> : std::true_type {};
template <class T>
struct is_sink : std::false_type {};
template <class U, class F>
struct is_sink<Sink<U, F>> : std::true_type {};

/// run(x, z) and run(inputs(x), outputs(z)) mean the same.
template <class R>
auto as_inputs(R&& r) {
  if constexpr (is_inputs<std::decay_t<R>>::value || is_source<std::decay_t<R>>::value) {
    return std::decay_t<R>(std::forward<R>(r));
  } else {
    return ::chunkpipe::inputs(std::forward<R>(r));
  }
}
template <class R>
auto as_outputs(R&& r) {
  if constexpr (is_outputs<std::decay_t<R>>::value || is_sink<std::decay_t<R>>::value) {
    return std::decay_t<R>(std::forward<R>(r));
  } else {
    return ::chunkpipe::outputs(std::forward<R>(r));
  }
}

/// Element types of a run's input or output side.
template <class X>
struct side_types;
template <class... T>
struct side_types<Inputs<T...>> {
  using type = types<T...>;
};
template <class T, class F>
struct side_types<Source<T, F>> {
  using type = types<T>;
};
template <class... U>
struct side_types<Outputs<U...>> {
  using type = types<U...>;
};
template <class U, class F>
struct side_types<Sink<U, F>> {
  using type = types<U>;
};

/// Input `index` of a run whose input 0 has `n` elements: throws
/// config_error where it has another length, or is `null` with a size.
void check_input(std::size_t index, bool null, std::size_t size, std::size_t n);
/// Output `index` of a run of `n` input elements (see check_outputs):
/// throws config_error where it is `null` with a size, or shorter than
/// what the run writes into it.
void check_output(std::size_t index, bool null, std::size_t size, std::size_t n, std::size_t per_record);

/// Checks the input ranges and returns their common length. Throws
/// config_error naming the first problem: inputs of different lengths, a
/// null pointer with a non-zero length.
template <class... T>
std::size_t input_length(const Inputs<T...>& in) {
  static_assert(sizeof...(T) > 0, "chunkpipe: a run needs at least one input range");
  const std::size_t n = std::get<0>(in.spans).size;
  std::size_t index = 0;
  // Each range through one non-template check, which builds the message:
  // a run's code does not grow with its ranges' types.
  std::apply([&](const auto&... s) { (::chunkpipe::detail::check_input(index++, s.data == nullptr, s.size, n), ...); },
             in.spans);
  return n;
}

template <class T, class F>
std::size_t input_length(const Source<T, F>&) {
  return unknown_length;
}

/// Checks output ranges against the run's length (unknown_length: only
/// that none is null with a size). With `per_record` > 1 the last stage
/// emits one record per that many input elements, and outputs must hold
/// the records; with 0 it emits a count only the device knows, and
/// outputs may have any length. Throws config_error naming the first problem: a null
/// pointer with a non-zero length, an output shorter than the inputs (or
/// than the records).
template <class... U>
void check_outputs(const Outputs<U...>& out, std::size_t n, std::size_t per_record = 1) {
  std::size_t index = 0;
  std::apply(
      [&](const auto&... s) {
        (::chunkpipe::detail::check_output(index++, s.data == nullptr, s.size, n, per_record), ...);
      },
      out.spans);
}

template <class U, class F>
void check_outputs(const Sink<U, F>&, std::size_t, std::size_t = 1) {}

/// Checks a run's two sides and returns its length, or unknown_length when
/// a Source decides it. Throws config_error as input_length and
/// check_outputs do.
template <class In, class Out>
std::size_t validate_run(const In& in, const Out& out, std::size_t per_record = 1) {
  const std::size_t n = ::chunkpipe::detail::input_length(in);
  ::chunkpipe::detail::check_outputs(out, n, per_record);
  return n;
}

}  // namespace detail
}  // namespace chunkpipe
