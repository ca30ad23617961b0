// SPDX-License-Identifier: MIT
// The traits the engine reads off each stage type of stage.hpp: a stage's
// element types in and out (stage_io, chain), what it emits (records_of:
// elements, a record per segment or chunk, or a count), which family it
// is of (is_filter, is_elementwise, ...), and stage_kind, the seam a
// kind with a header of its own (scan.hpp) plugs into. stage.hpp includes
// this at its end; it is not API.
#pragma once

#include <chunkpipe/stage.hpp>

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

namespace chunkpipe {
namespace detail {

template <class R>
struct result_types {
  using type = types<R>;
};
template <class... U>
struct result_types<::cuda::std::tuple<U...>> {
  using type = types<U...>;
};

template <class Stage, class In>
struct stage_io;

template <class F, class... T>
struct stage_io<Map<F>, types<T...>> {
  using in = types<T...>;
  using result = std::decay_t<decltype(std::declval<F&>()(std::declval<const T&>()...))>;
  using out = typename result_types<result>::type;
  static constexpr bool in_place = false;
  static constexpr bool elementwise = true;
  static_assert(std::is_trivially_copyable_v<F>, "chunkpipe::Map: the functor must be trivially copyable");
};

template <class F, class... O, class... T>
struct stage_io<ChunkFn<F, O...>, types<T...>> {
  using in = types<T...>;
  using out = std::conditional_t<sizeof...(O) == 0, types<T...>, types<O...>>;
  static constexpr bool in_place = sizeof...(O) == 0;
  static constexpr bool elementwise = false;
};

template <class T, class Op, class... I>
struct stage_io<Reduce<T, Op>, types<I...>> {
  static_assert(sizeof...(I) == 1, "chunkpipe::Reduce folds one input; put a Map before it to combine several");
  static_assert(std::is_trivially_copyable_v<T>, "chunkpipe::Reduce: the value type must be trivially copyable");
  static_assert(std::is_trivially_copyable_v<Op>, "chunkpipe::Reduce: the operator must be trivially copyable");
  using in = types<I...>;
  using out = types<T>;
  static constexpr bool in_place = false;
  static constexpr bool elementwise = false;
};

template <class F, class R, class... I>
struct stage_io<PerChunk<F, R>, types<I...>> {
  static_assert(std::is_trivially_copyable_v<R>, "chunkpipe::PerChunk: the record type must be trivially copyable");
  using in = types<I...>;
  using out = types<R>;
  static constexpr bool in_place = false;
  static constexpr bool elementwise = false;
};

template <class F, class R, class Merge, class... I>
struct stage_io<Accumulate<F, R, Merge>, types<I...>> : stage_io<PerChunk<F, R>, types<I...>> {};

template <class Pred, class... I>
struct stage_io<Filter<Pred>, types<I...>> {
  static_assert(sizeof...(I) == 1,
                "chunkpipe::Filter keeps elements of one input; put a Map before it to combine several");
  static_assert(std::is_trivially_copyable_v<Pred>, "chunkpipe::Filter: the predicate must be trivially copyable");
  using in = types<I...>;
  using out = types<I...>;
  static constexpr bool in_place = false;
  static constexpr bool elementwise = false;
};

template <class F, class... O, class... I>
struct stage_io<Emit<F, O...>, types<I...>> {
  using in = types<I...>;
  using out = types<O...>;
  static constexpr bool in_place = false;
  static constexpr bool elementwise = false;
};

/// How a stage's outputs relate to its inputs: element for element, one
/// record per segment of the run (Reduce), one per chunk, or as many as
/// the device says (Filter, Emit: at most the chunk's elements).
enum class Records : std::uint8_t { per_element, per_segment, per_chunk, counted };

template <class Stage>
struct records_of : std::integral_constant<Records, Records::per_element> {};
template <class T, class Op>
struct records_of<Reduce<T, Op>> : std::integral_constant<Records, Records::per_segment> {};
template <class F, class R>
struct records_of<PerChunk<F, R>> : std::integral_constant<Records, Records::per_chunk> {};
template <class F, class R, class Merge>
struct records_of<Accumulate<F, R, Merge>> : std::integral_constant<Records, Records::per_chunk> {};

template <class Pred>
struct records_of<Filter<Pred>> : std::integral_constant<Records, Records::counted> {};
template <class F, class... O>
struct records_of<Emit<F, O...>> : std::integral_constant<Records, Records::counted> {};

template <class Stage>
struct is_filter : std::false_type {};
template <class Pred>
struct is_filter<Filter<Pred>> : std::true_type {};

template <class List>
struct first_type;
template <class T, class... Rest>
struct first_type<types<T, Rest...>> {
  using type = T;
};
template <class List>
using first_type_t = typename first_type<List>::type;

/// Whether a stage's records are folded into one result (Reduce,
/// Accumulate), which run(in) returns, rather than written to outputs.
template <class Stage>
struct folds : std::false_type {};
template <class T, class Op>
struct folds<Reduce<T, Op>> : std::true_type {};
template <class F, class R, class Merge>
struct folds<Accumulate<F, R, Merge>> : std::true_type {};

/// Output records of `count` elements (the stage's input for one chunk):
/// `count` itself for element-wise stages.
template <class Stage>
std::size_t stage_records(const Stage& stage, std::size_t count) noexcept {
  if constexpr (records_of<Stage>::value == Records::per_segment) {
    return (count + stage.segment - 1) / stage.segment;
  } else if constexpr (records_of<Stage>::value == Records::per_chunk) {
    return count == 0 ? 0 : 1;
  } else {
    (void)stage;
    return count;
  }
}

/// Input and output types of every stage, for inputs `In`.
template <class In, class... Stages>
struct chain;

template <class In>
struct chain<In> {
  using out = In;
  using ios = std::tuple<>;
};

template <class In, class S, class... Rest>
struct chain<In, S, Rest...> {
  using io = stage_io<S, In>;
  using out = typename chain<typename io::out, Rest...>::out;
  using ios = decltype(std::tuple_cat(std::declval<std::tuple<io>>(),
                                      std::declval<typename chain<typename io::out, Rest...>::ios>()));
};

/// A stage kind that lives in a header of its own (scan.hpp) specialises
/// this: `own_header = true`, and with `carries = true` and a `carry`
/// type, its ops pass a value of that type from each chunk of a run to the
/// next (PlanShape::carries; StageExtras::carry holds it and one more per
/// segment of a unit). The engine then calls, unqualified with a StageKind
/// first so that argument-dependent lookup finds the kind's header where
/// the pipeline is instantiated, run_stage_kind (the host backend's run of
/// one chunk) and, in CUDA code, launch_stage_kind (its launch on a stream).
/// `name` is what the engine's messages call the kind (a carrying kind's
/// specialisation gives it: the segment checks name it).
template <class Stage>
struct stage_kind {
  static constexpr bool own_header = false;
  static constexpr bool carries = false;
  using carry = unsigned char;
  static constexpr const char* name = "stage";
};

/// The tag that the hooks of stage_kind are found through.
struct StageKind {};

template <class Stage>
struct is_elementwise : std::false_type {};
template <class F>
struct is_elementwise<Map<F>> : std::true_type {};

}  // namespace detail
}  // namespace chunkpipe
