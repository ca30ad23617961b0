// SPDX-License-Identifier: MIT
// What the GPU pipeline and the host backend share before any execution:
// options, the resolved geometry, the plan shape and the compile-time type
// checks of a run. Host-only.
#pragma once

#include <chunkpipe/io.hpp>
#include <chunkpipe/options.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/stage.hpp>
#include <chunkpipe/detail/dispatcher.hpp>
#include <chunkpipe/detail/slots.hpp>

#include <algorithm>
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace chunkpipe::detail {

template <class Stage>
struct is_in_place : std::false_type {};
template <class F>
struct is_in_place<ChunkFn<F>> : std::true_type {};

/// A readable failure when a run's output element types (`Given`) are not
/// those its last stage produces (`Produced`): both are chunkpipe::types
/// lists, which the compiler's note on this instantiation prints.
template <class Produced, class Given>
struct output_types_match {
  static_assert(std::is_same_v<Produced, Given>,
                "chunkpipe: run(): the output ranges' element types must be exactly those the last stage "
                "produces, one output per type, in order: a Map's are what its operator() returns (one per "
                "element of a ::cuda::std::tuple), a ChunkFn<F, O...>'s and an Emit<F, O...>'s are O... (a "
                "ChunkFn that names none: its inputs'), a Filter's its input's, a PerChunk's its record type. "
                "The compiler's notes name both lists, as output_types_match<Produced, Given>: Produced what the "
                "last stage makes, Given your outputs' types");
  static constexpr bool value = std::is_same_v<Produced, Given>;
};

/// The element types a run's outputs must have, and a readable failure when
/// they do not. `ok` instantiates the check and is always true, so that
/// `static_assert(run_types<...>::ok)` adds no second, wordless error.
template <class In, class Out, class... Stages>
struct run_types {
  using produced = typename chain<In, Stages...>::out;
  static constexpr bool ok = sizeof(output_types_match<produced, Out>) != 0;
};

/// The part of a pipeline every backend has: options, the geometry they
/// resolve to, the stage objects, and the plans they imply. Backends hold
/// one (composition, not inheritance: no detail type in a public signature).
template <class... Stages>
class PipelineFront {
  static_assert(sizeof...(Stages) >= 1, "chunkpipe: a pipeline needs at least one stage");

 public:
  static constexpr std::size_t stage_count = sizeof...(Stages);
  using last_stage = std::tuple_element_t<stage_count - 1, std::tuple<Stages...>>;
  /// How the last stage's outputs relate to the run's elements.
  static constexpr Records records = records_of<last_stage>::value;
  /// Whether run(in) returns one folded result (Reduce, Accumulate).
  static constexpr bool folds_result = folds<last_stage>::value;
  /// Whether the last stage emits a count the device decides (Filter, Emit).
  static constexpr bool counted = records == Records::counted;
  static constexpr bool all_elementwise = (is_elementwise<Stages>::value && ...);
  /// Whether no stage can see chunk boundaries, so the unit may differ from
  /// the window: Map stages, carrying stages (a Scan: its result depends on
  /// the fixed segments only), ending in a Reduce (likewise), a Filter (what
  /// it keeps, packed, does not depend on the chunks) or neither.
  static constexpr bool grain_free = ((is_elementwise<Stages>::value ||
                                       records_of<Stages>::value == Records::per_segment || is_filter<Stages>::value ||
                                       stage_kind<Stages>::carries) &&
                                      ...);

 private:
  static constexpr std::size_t record_stages = ((records_of<Stages>::value != Records::per_element ? 1 : 0) + ...);
  static_assert(record_stages == 0 || (record_stages == 1 && records != Records::per_element),
                "chunkpipe: Reduce, Accumulate and PerChunk emit records, not elements: such a stage must be the "
                "last of the pipeline, and there can be only one");

 public:
  PipelineFront(Target target, Options options, Stages... stages)
      : target_(target),
        options_(validated(options)),
        segment_(segment_of(stages...)),
        reduce_segment_(reduce_segment_of(stages...)),
        carry_segment_(carry_segment_of(stages...)),
        geometry_(::chunkpipe::detail::resolve_geometry(options_, grain_free, target, segment_)),
        stages_(std::move(stages)...) {}

  /// Input elements per output record (Endpoints::per_record): 1 for an
  /// element-wise last stage, a Reduce's segment, the unit for per-chunk
  /// records.
  std::size_t per_record() const noexcept {
    if constexpr (records == Records::per_segment) return reduce_segment_;
    if constexpr (records == Records::per_chunk) return geometry_.chunk_elems;
    return 1;
  }
  /// What check_outputs() asks of output lengths: records, or, for a
  /// stage that emits a count, nothing (0).
  std::size_t output_rule() const noexcept { return counted ? 0 : per_record(); }
  /// Output records of a run of `elems` elements.
  std::size_t records_for(std::size_t elems) const noexcept {
    const std::size_t per = per_record();
    return (elems + per - 1) / per;
  }
  /// Records one full unit makes: the capacity of the last stage's slot arrays.
  std::size_t unit_records() const noexcept { return records_for(geometry_.chunk_elems); }

  /// How a run of `elems` elements (unknown_length: a Source decides) calls
  /// its Source and Sink: in windows of Options::chunk_elems, whatever unit
  /// the schedule uses (windows.hpp). Nothing to cut where the unit is the
  /// window, except packed outputs (Filter, Emit), whose units' counts vary:
  /// their Sink always gets windows of chunk_elems packed elements. An
  /// explicit option is never overridden in what a user's callback sees.
  Window window_for(std::size_t elems) const noexcept {
    Window w;
    if (options_.chunk_elems == geometry_.chunk_elems && !counted) return w;
    w.elems = options_.chunk_elems;
    // A per-chunk stage keeps the window (it sees chunks), so records here
    // are elements or a Reduce's segments, of which a window holds whole ones.
    w.per_record = counted ? 0 : per_record();
    w.delivery = counted ? w.elems : w.elems / per_record();
    if (elems != unknown_length && !counted) w.total = records_for(elems);
    return w;
  }

  /// The options the pipeline was built with.
  const Options& options() const noexcept { return options_; }
  /// Elements every unit holds a whole number of: the larger of a Reduce's
  /// and a Scan's segments (one divides the other), 1 without either.
  std::size_t segment() const noexcept { return segment_; }
  /// The smallest segment of a carrying stage (a Scan; 1 without one): a
  /// carry buffer holds one value per such segment of a unit.
  std::size_t carry_segment() const noexcept { return carry_segment_; }
  /// The policy, slot count and scheduling unit runs actually use.
  const Geometry& geometry() const noexcept { return geometry_; }

  /// The planner's view of this pipeline, given which ends are staged.
  PlanShape shape(bool stage_in, bool stage_out) const {
    PlanShape s;
    s.stages = static_cast<int>(stage_count);
    s.in_place = {is_in_place<Stages>::value...};
    s.carries = {stage_kind<Stages>::carries...};
    s.stage_in = stage_in;
    s.stage_out = stage_out || counted;
    s.variable_out = counted;
    s.kernel_lanes = geometry_.kernel_lanes;
    return s;
  }

  /// Whether the automatic policy calibrates this pipeline on the GPU and
  /// then decides its kernel lanes (calibration.cuh): Map stages only (a
  /// ChunkFn's kernels are the user's, and may not take to lanes), the
  /// automatic policy with kernel_lanes 0, on stage_streams with at least
  /// two slots, and an executor other than graphs (a graph's lanes are
  /// built in; runs on streams are the ones timed and re-laned).
  bool calibrates() const noexcept {
    return target_ == Target::device && all_elementwise && options_.policy == Policy::automatic &&
           options_.kernel_lanes == 0 && options_.executor != Executor::graphs &&
           geometry_.policy == Policy::stage_streams && geometry_.depth >= 2;
  }
  /// Most kernel lanes a calibrating pipeline gives its runs. The H200
  /// measured three no faster than two at any window (benchmarks/RESULTS.md
  /// "Kernel lanes").
  static constexpr int calibrated_lanes = 2;
  /// Streams per stage the lifetime schedule has: what the geometry gives,
  /// or, for a pipeline that calibrates, the lanes it may decide on.
  int lane_capacity() const noexcept {
    return calibrates() ? std::min(calibrated_lanes, geometry_.depth) : geometry_.kernel_lanes;
  }

  /// The shape of the pipeline's lifetime schedule: each run stages as its
  /// ranges need, and has lane_capacity() streams per stage (a run uses
  /// RunSpec::kernel_lanes of them).
  PlanShape lifetime_shape() const {
    PlanShape s = shape(false, false);
    s.per_run_staging = true;
    s.kernel_lanes = lane_capacity();
    s.lanes_vary = calibrates();
    return s;
  }

  /// Chunks a run of `elems` elements is cut into.
  std::size_t chunks_for(std::size_t elems) const noexcept {
    return (elems + geometry_.chunk_elems - 1) / geometry_.chunk_elems;
  }

  /// The stage objects, in order.
  std::tuple<Stages...>& stages() noexcept { return stages_; }

  /// The plan a run of `elems` elements would follow on its own; on the
  /// GPU, with the executor such a run gets once its shape has repeated
  /// (the automatic executor builds graphs only for shapes that repeat).
  /// Never blocks.
  /// `lanes`: kernel lanes a calibration decided (0: the geometry's), for
  /// runs on streams (a graph keeps the geometry's).
  Plan plan_for(std::size_t elems, bool stage_in = false, bool stage_out = false, int lanes = 0) const {
    Executor executor = Executor::streams;
    if (target_ == Target::device && elems != 0) {
      executor = Dispatcher::planned(options_, geometry_, all_elementwise, chunks_for(elems),
                                     stage_in || stage_out || counted);
    }
    PlanShape s = shape(stage_in, stage_out);
    if (lanes != 0 && executor == Executor::streams) s.kernel_lanes = lanes;
    Plan p = ::chunkpipe::make_plan(geometry_.policy, geometry_.depth, s, chunks_for(elems));
    p.executor = executor;
    return p;
  }

  /// The plan a run of `elems` elements follows as one CUDA graph (the
  /// graph executor, handed it by the issuer): one pinned run, its chunks
  /// numbered from 0, in the lifetime schedule's shape with the geometry's
  /// lanes (those a calibration decides are for runs on streams, whose
  /// streams they are). Throws what make_plan throws.
  Plan graph_plan(std::size_t elems) const {
    PlanShape s = lifetime_shape();
    s.kernel_lanes = geometry_.kernel_lanes;
    s.lanes_vary = false;
    return ::chunkpipe::make_plan(geometry_.policy, geometry_.depth, s,
                                  std::vector<RunSpec>{RunSpec{chunks_for(elems), false, false, elems}});
  }

 private:
  // Also resolves a one-entry device list into `device`.
  static Options validated(Options o) {
    ::chunkpipe::detail::validate_options(o);
    if (o.devices.size() > 1) {
      throw config_error("chunkpipe: Options::devices lists " + std::to_string(o.devices.size()) +
                         " devices; one pipeline runs on one (use SpreadPipeline, or HostSpreadPipeline on the "
                         "host backend, to spread runs over several)");
    }
    if (o.devices.size() == 1) {
      if (o.device != -1 && o.device != o.devices[0]) {
        throw config_error("chunkpipe: Options::device (" + std::to_string(o.device) + ") and devices[0] (" +
                           std::to_string(o.devices[0]) + ") name different devices");
      }
      o.device = o.devices[0];
      o.devices.clear();
    }
    return o;
  }
  // A Reduce's or a Scan's segment (1 without one). Throws config_error
  // for 0, and for two stages whose segments differ.
  static std::size_t segment_of(const Stages&... stages) {
    std::size_t m = 1;
    auto one = [&](const auto& st) {
      using S = std::decay_t<decltype(st)>;
      if constexpr (records_of<S>::value == Records::per_segment || stage_kind<S>::carries) {
        const char* what = stage_kind<S>::carries ? stage_kind<S>::name : "Reduce";
        if (st.segment == 0) {
          throw config_error(std::string("chunkpipe: a ") + what + "'s segment must be at least 1 element (got 0)");
        }
        // Units hold whole segments of both: the larger, where it is a
        // multiple of the smaller.
        const std::size_t big = std::max(m, st.segment), small = std::min(m, st.segment);
        if (big % small != 0) {
          throw config_error("chunkpipe: two stages of one pipeline work in segments of " + std::to_string(m) +
                             " and " + std::to_string(st.segment) + " elements; give them segments of which one "
                             "divides the other");
        }
        m = big;
      }
    };
    (one(stages), ...);
    return m;
  }

  // A Reduce's segment (1 without one): its partials' span.
  static std::size_t reduce_segment_of(const Stages&... stages) {
    std::size_t m = 1;
    auto one = [&](const auto& st) {
      if constexpr (records_of<std::decay_t<decltype(st)>>::value == Records::per_segment) m = st.segment;
    };
    (one(stages), ...);
    return m;
  }

  // The smallest segment of a carrying stage (1 without one).
  static std::size_t carry_segment_of(const Stages&... stages) {
    std::size_t m = 0;
    auto one = [&](const auto& st) {
      if constexpr (stage_kind<std::decay_t<decltype(st)>>::carries) m = m == 0 ? st.segment : std::min(m, st.segment);
    };
    (one(stages), ...);
    return m == 0 ? 1 : m;
  }

  Target target_;
  Options options_;
  std::size_t segment_;
  std::size_t reduce_segment_;
  std::size_t carry_segment_;
  Geometry geometry_;
  std::tuple<Stages...> stages_;
};

}  // namespace chunkpipe::detail
