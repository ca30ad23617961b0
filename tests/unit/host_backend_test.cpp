// SPDX-License-Identifier: MIT
// The host backend moves data end to end exactly as the plans say: offsets,
// ragged tails, several inputs and outputs, several stages, type changes,
// staging, and execution orders shuffled within what the plan allows.
#include <chunkpipe/host_backend.hpp>
#include <chunkpipe/spread.hpp>

#include "catch.hpp"
#include "counting_resource.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace chunkpipe;

namespace {

struct Fma {
  float a, b;
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return std::fma(x, a, b); }
};

struct Saxpy {
  float a;
  CHUNKPIPE_HOST_DEVICE float operator()(float x, float y) const { return a * x + y; }
};

struct Quantise {  // float -> int8_t, saturating
  CHUNKPIPE_HOST_DEVICE std::int8_t operator()(float x) const {
    const float c = x < -128.f ? -128.f : (x > 127.f ? 127.f : x);
    return static_cast<std::int8_t>(c);
  }
};

struct SumDiff {  // two outputs of different types
  CHUNKPIPE_HOST_DEVICE ::cuda::std::tuple<double, int> operator()(float x, float y) const {
    return {static_cast<double>(x) + y, static_cast<int>(x - y)};
  }
};

struct ReverseChunk {  // in place, needs the whole chunk
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    auto s = ctx.template in<0>();
    REQUIRE(ctx.backend == Backend::host);
    REQUIRE(ctx.stream.get() == nullptr);
    REQUIRE(s.size() == ctx.count);
    for (std::size_t i = 0; i < s.size() / 2; ++i) std::swap(s[i], s[s.size() - 1 - i]);
  }
};

struct TagWithOffset {  // ChunkFn with an output type: writes offset + i
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    auto in = ctx.template in<0>();
    auto out = ctx.template out<0>();
    for (std::size_t i = 0; i < ctx.count; ++i) out[i] = static_cast<std::int64_t>(ctx.offset + i) + (in[i] > 0 ? 1 : 0) * (std::int64_t{1} << 40);
  }
};

std::vector<float> random_floats(std::size_t n, unsigned seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

template <class T>
std::vector<T> poisoned(std::size_t n) {
  if constexpr (std::is_floating_point_v<T>) return std::vector<T>(n, std::numeric_limits<T>::quiet_NaN());
  else return std::vector<T>(n, static_cast<T>(0x5A5A5A5A5A5A5A5Aull));
}

const Policy all_policies[] = {Policy::serial, Policy::slot_streams, Policy::stage_streams, Policy::automatic};

// One run of x into y, as pageable ranges (staged) or as pinned ones.
template <class Pipe>
void run_staged_or_pinned(Pipe& pipe, const std::vector<float>& x, std::vector<float>& y, bool stage) {
  if (stage) {
    pipe.run(x, y);
  } else {
    pipe.run(pinned(x), pinned(y));
  }
}

}  // namespace

TEST_CASE("one Map, every policy and depth, ragged tails and shuffled orders", "[host]") {
  const Fma f{0.999f, 0.0625f};
  for (std::size_t n : {std::size_t{1}, std::size_t{63}, std::size_t{64}, std::size_t{1000}}) {
    const std::vector<float> x = random_floats(n, static_cast<unsigned>(n));
    for (Policy policy : all_policies) {
      for (int depth = 1; depth <= 4; ++depth) {
        for (std::uint64_t seed : {0u, 1u, 7u}) {
          for (bool stage : {false, true}) {
            HostPipeline<Map<Fma>> pipe({.chunk_elems = 64, .depth = depth, .policy = policy}, Map<Fma>{f});
            pipe.set_seed(seed);
            std::vector<float> y = poisoned<float>(n);
            run_staged_or_pinned(pipe, x, y, stage);
            INFO(to_string(policy) << " depth " << depth << " n " << n << " seed " << seed << " staged " << stage);
            for (std::size_t i = 0; i < n; ++i) REQUIRE(y[i] == f(x[i]));
            REQUIRE(check_hazards(pipe.issued_plan()).ok());
          }
        }
      }
    }
  }
}

TEST_CASE("a run shorter than one chunk, and an empty run", "[host]") {
  HostPipeline<Map<Fma>> pipe({.chunk_elems = 1 << 20}, Map<Fma>{{2.f, 1.f}});
  const std::vector<float> x = random_floats(5, 3);
  std::vector<float> y = poisoned<float>(5);
  pipe.run(x, y);
  for (std::size_t i = 0; i < 5; ++i) REQUIRE(y[i] == Fma{2.f, 1.f}(x[i]));
  REQUIRE(pipe.last_run().chunks == 1);

  std::vector<float> empty;
  std::vector<float> untouched = poisoned<float>(3);
  pipe.run(empty, untouched);  // nothing to do, nothing written
  REQUIRE(pipe.last_run().chunks == 0);
  for (float v : untouched) REQUIRE(std::isnan(v));
}

TEST_CASE("several inputs: saxpy with x and y in, z out", "[host]") {
  const std::size_t n = 777;
  const auto x = random_floats(n, 1), y = random_floats(n, 2);
  for (Policy policy : all_policies) {
    HostPipeline<Map<Saxpy>> pipe({.chunk_elems = 100, .depth = 2, .policy = policy}, Map<Saxpy>{{3.5f}});
    std::vector<float> z = poisoned<float>(n);
    pipe.run(inputs(x, pinned(y)), outputs(z));  // one staged, one direct
    for (std::size_t i = 0; i < n; ++i) REQUIRE(z[i] == 3.5f * x[i] + y[i]);
  }
}

TEST_CASE("several outputs of different types from one Map", "[host]") {
  const std::size_t n = 300;
  const auto x = random_floats(n, 4, -50.f, 50.f), y = random_floats(n, 5, -50.f, 50.f);
  HostPipeline<Map<SumDiff>> pipe({.chunk_elems = 64, .depth = 3}, Map<SumDiff>{});
  std::vector<double> sum = poisoned<double>(n);
  std::vector<int> diff = poisoned<int>(n);
  pipe.run(inputs(x, y), outputs(sum, pinned(diff)));
  for (std::size_t i = 0; i < n; ++i) {
    REQUIRE(sum[i] == static_cast<double>(x[i]) + y[i]);
    REQUIRE(diff[i] == static_cast<int>(x[i] - y[i]));
  }
}

TEST_CASE("stages in a row change types, and chunk-level stages see whole chunks", "[host]") {
  const std::size_t n = 1000, chunk = 128;
  const auto x = random_floats(n, 6, -100.f, 100.f);
  for (Policy policy : all_policies) {
    for (int depth : {1, 2, 3}) {
      auto pipe = make_host_pipeline(Options{.chunk_elems = chunk, .depth = depth, .policy = policy},
                                     map(Fma{1.5f, -3.f}), map(Quantise{}), chunk_fn(ReverseChunk{}));
      // A window-level stage keeps the pipeline at the window: no grains.
      REQUIRE(pipe.geometry().chunk_elems == chunk);
      pipe.set_seed(static_cast<std::uint64_t>(depth) * 11);
      std::vector<std::int8_t> q = poisoned<std::int8_t>(n);
      pipe.run(x, q);
      INFO(to_string(policy) << " depth " << depth);
      for (std::size_t c = 0; c * chunk < n; ++c) {
        const std::size_t begin = c * chunk, count = std::min(chunk, n - begin);
        for (std::size_t i = 0; i < count; ++i) {
          const std::size_t src = begin + count - 1 - i;
          REQUIRE(q[begin + i] == Quantise{}(Fma{1.5f, -3.f}(x[src])));
        }
      }
    }
  }
}

TEST_CASE("a chunk-level stage gets its chunk's index, offset and count", "[host]") {
  const std::size_t n = 250;
  const auto x = random_floats(n, 8);
  HostPipeline<ChunkFn<TagWithOffset, std::int64_t>> pipe({.chunk_elems = 40, .depth = 2});
  std::vector<std::int64_t> out = poisoned<std::int64_t>(n);
  pipe.run(x, out);
  for (std::size_t i = 0; i < n; ++i) {
    REQUIRE(out[i] == static_cast<std::int64_t>(i) + (x[i] > 0 ? 1 : 0) * (std::int64_t{1} << 40));
  }
}

TEST_CASE("the automatic policy cycles an element-wise window in grains", "[host]") {
  HostPipeline<Map<Fma>> pipe({.chunk_elems = 1000, .depth = 3, .grain_elems = 100}, Map<Fma>{{3.f, 1.f}});
  REQUIRE(pipe.geometry().policy == Policy::stage_streams);
  REQUIRE(pipe.geometry().chunk_elems == 100);
  REQUIRE(pipe.geometry().depth == 30);  // the same memory: 3 windows of 1000
  const auto x = random_floats(2345, 9);
  std::vector<float> y = poisoned<float>(x.size());
  pipe.run(x, y);
  for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(y[i] == Fma{3.f, 1.f}(x[i]));

  // A huge window gets coarser grains rather than too many slots; an
  // explicit grain that would need too many is refused.
  HostPipeline<Map<Fma>> huge({.chunk_elems = std::size_t{1} << 40, .depth = 3});
  REQUIRE(huge.geometry().depth <= static_cast<int>(detail::max_slots));
  REQUIRE(huge.geometry().chunk_elems * static_cast<std::size_t>(huge.geometry().depth) >= (std::size_t{3} << 40));
  REQUIRE_THROWS_AS(HostPipeline<Map<Fma>>({.chunk_elems = std::size_t{1} << 40, .grain_elems = 1 << 10}), config_error);

  // Explicit policies keep the window unless a grain is asked for.
  HostPipeline<Map<Fma>> lesson({.chunk_elems = 1000, .depth = 2, .policy = Policy::slot_streams}, Map<Fma>{});
  REQUIRE(lesson.geometry().chunk_elems == 1000);
  REQUIRE(lesson.geometry().depth == 2);
}

TEST_CASE("on the GPU the automatic policy schedules a small Map-only window in larger units", "[host][config]") {
  using detail::resolve_geometry;
  using detail::Target;
  const std::size_t w = 1 << 14;  // 64 KiB of float
  const std::size_t budget = default_depth * default_chunk_elems;
  const Geometry g = resolve_geometry({.chunk_elems = w}, true, Target::device);
  CHECK(g.policy == Policy::stage_streams);
  CHECK(g.depth == default_depth);
  CHECK(g.chunk_elems == default_grain_elems);  // the default window's memory
  CHECK(g.chunk_elems * static_cast<std::size_t>(g.depth) <= budget);

  // A budget bounds the units; one too small for more than the window keeps it.
  CHECK(resolve_geometry({.chunk_elems = w, .memory_elems = 3 * 100000}, true, Target::device).chunk_elems == 100000);
  CHECK(resolve_geometry({.chunk_elems = w, .memory_elems = 3 * w - 1}, true, Target::device).chunk_elems == w);
  // More slots share the same budget.
  const Geometry deep = resolve_geometry({.chunk_elems = w, .depth = 8}, true, Target::device);
  CHECK(deep.depth == 8);
  CHECK(deep.chunk_elems == budget / 8);

  // Everything else keeps the window: a stage that sees chunks, an explicit
  // policy or grain, the host backend, and windows that are not small.
  CHECK(resolve_geometry({.chunk_elems = w}, false, Target::device).chunk_elems == w);
  CHECK(resolve_geometry({.chunk_elems = w, .policy = Policy::stage_streams}, true, Target::device).chunk_elems == w);
  CHECK(resolve_geometry({.chunk_elems = w, .grain_elems = w}, true, Target::device).chunk_elems == w);
  CHECK(resolve_geometry({.chunk_elems = w}, true, Target::host).chunk_elems == w);
  CHECK(resolve_geometry({.chunk_elems = default_grain_elems}, true, Target::device).chunk_elems ==
        default_grain_elems);
  // Windows up to the grain are coarsened too: each copy's fixed cost still
  // shows at 4 MiB (0.952 of the floor against 0.971 in 8 MiB units).
  CHECK(resolve_geometry({.chunk_elems = default_grain_elems / 2}, true, Target::device).chunk_elems ==
        default_grain_elems);
  HostPipeline<Map<Fma>> host({.chunk_elems = w}, Map<Fma>{});
  CHECK(host.geometry().chunk_elems == w);
}

TEST_CASE("a plan missing its events gives wrong output on some execution order", "[host][hazards]") {
  // The lesson's pitfall executed: three streams over two slots, no events.
  // The hazard check rejects it statically; here the damage shows in data.
  const std::size_t n = 64 * 6;
  const auto x = random_floats(n, 10);
  HostPipeline<Map<Fma>> pipe({.chunk_elems = 64, .depth = 2, .policy = Policy::slot_streams}, Map<Fma>{{2.f, 0.5f}});
  Plan plan = make_plan(Policy::slot_streams, 2, pipe.shape(false, false), 6);
  plan.queues.push_back({QueueKind::device, "stream 2"});
  for (Op& op : plan.ops) {
    op.queue = static_cast<int>(op.chunk % 3);
    op.waits.clear();
  }
  REQUIRE_FALSE(check_hazards(plan).ok());
  bool wrong = false;
  for (std::uint64_t seed = 1; seed <= 50 && !wrong; ++seed) {
    pipe.set_seed(seed);
    std::vector<float> y = poisoned<float>(n);
    pipe.run_plan(plan, pinned(x), pinned(y));
    for (std::size_t i = 0; i < n; ++i) {
      if (!(y[i] == Fma{2.f, 0.5f}(x[i]))) wrong = true;
    }
  }
  REQUIRE(wrong);

  // The correct plan is right on every one of those orders.
  const Plan good = pipe.plan_for(n);
  for (std::uint64_t seed = 1; seed <= 50; ++seed) {
    pipe.set_seed(seed);
    std::vector<float> y = poisoned<float>(n);
    pipe.run_plan(good, pinned(x), pinned(y));
    for (std::size_t i = 0; i < n; ++i) REQUIRE(y[i] == Fma{2.f, 0.5f}(x[i]));
  }
}

TEST_CASE("kernel lanes give the reference in shuffled orders, staged or not", "[host][lanes]") {
  const Fma f{0.999f, 0.0625f}, g{1.001f, -0.03125f};
  const std::size_t n = 1000;
  const std::vector<float> x = random_floats(n, 5);
  for (int lanes : {2, 3}) {
    for (int depth : {2, 3, 5}) {
      for (std::uint64_t seed : {0u, 3u, 11u}) {
        for (bool stage : {false, true}) {
          HostPipeline<Map<Fma>, Map<Fma>> pipe(
              {.chunk_elems = 64, .depth = depth, .policy = Policy::stage_streams, .kernel_lanes = lanes}, Map<Fma>{f},
              Map<Fma>{g});
          REQUIRE(pipe.geometry().kernel_lanes == std::min(lanes, depth));
          pipe.set_seed(seed);
          std::vector<float> y = poisoned<float>(n);
          run_staged_or_pinned(pipe, x, y, stage);
          INFO("lanes " << lanes << " depth " << depth << " seed " << seed << " staged " << stage);
          for (std::size_t i = 0; i < n; ++i) REQUIRE(y[i] == g(f(x[i])));
          REQUIRE(check_hazards(pipe.issued_plan()).ok());
        }
      }
    }
  }
}

TEST_CASE("which pipelines calibrate on the GPU, and the plans a decision gives", "[host][config][calibrate]") {
  // PipelineFront is what both backends resolve their options with; the
  // CUDA runner calibrates exactly the pipelines whose front calibrates().
  using detail::PipelineFront;
  using detail::Target;
  using MapFront = PipelineFront<Map<Fma>>;
  CHECK(MapFront(Target::device, Options{}, Map<Fma>{}).calibrates());
  CHECK(MapFront(Target::device, Options{}, Map<Fma>{}).lane_capacity() == 2);
  CHECK(MapFront(Target::device, Options{}, Map<Fma>{}).lifetime_shape().lanes_vary);
  CHECK(MapFront(Target::device, {.chunk_elems = 1 << 14}, Map<Fma>{}).calibrates());  // a small window too
  // Not: the host backend, explicit lanes or policy, one slot, graphs, a ChunkFn.
  CHECK_FALSE(MapFront(Target::host, Options{}, Map<Fma>{}).calibrates());
  CHECK_FALSE(MapFront(Target::device, {.kernel_lanes = 1}, Map<Fma>{}).calibrates());
  CHECK_FALSE(MapFront(Target::device, {.policy = Policy::stage_streams}, Map<Fma>{}).calibrates());
  CHECK_FALSE(MapFront(Target::device, {.depth = 1}, Map<Fma>{}).calibrates());
  CHECK_FALSE(MapFront(Target::device, {.executor = Executor::graphs}, Map<Fma>{}).calibrates());
  const MapFront fixed(Target::device, {.kernel_lanes = 1}, Map<Fma>{});
  CHECK(fixed.lane_capacity() == 1);
  CHECK_FALSE(fixed.lifetime_shape().lanes_vary);
  using FnFront = PipelineFront<ChunkFn<TagWithOffset, std::int64_t>>;
  const FnFront fn(Target::device, {.chunk_elems = 1 << 20}, ChunkFn<TagWithOffset, std::int64_t>{});
  CHECK_FALSE(fn.calibrates());
  CHECK(fn.geometry().chunk_elems == std::size_t{1} << 20);  // a ChunkFn keeps its window, under the grain too

  // A decided lane count shows in the plans of runs on streams; a run the
  // executor gives a graph keeps the geometry's.
  const MapFront front(Target::device, Options{}, Map<Fma>{});
  const std::size_t n = 40 * default_grain_elems;
  auto stage_queues = [](const Plan& p) {
    std::set<int> q;
    for (const Op& op : p.ops) {
      if (op.kind == OpKind::stage) q.insert(op.queue);
    }
    return q.size();
  };
  CHECK(stage_queues(front.plan_for(n)) == 1);
  CHECK(stage_queues(front.plan_for(n, false, false, 2)) == 2);
  const MapFront graphs(Target::device, {.executor = Executor::graphs}, Map<Fma>{});
  const Plan g = graphs.plan_for(n, false, false, 2);
  CHECK(g.executor == Executor::graphs);
  CHECK(stage_queues(g) == 1);
}

TEST_CASE("the automatic executor gives graphs only to the runs they measured faster for", "[host][config][graphs]") {
  // What ChunkedPipeline::plan_for says a run of that shape gets once it
  // repeats: the choice its runs get (detail/option_rules.hpp, choose_executor).
  using detail::PipelineFront;
  using detail::Target;
  using MapFront = PipelineFront<Map<Fma>>;
  auto executor = [](Options o, std::size_t unit, std::size_t chunks = graph_min_chunks) {
    o.chunk_elems = unit;
    o.grain_elems = unit;  // keep the window as the unit
    return MapFront(Target::device, o, Map<Fma>{}).plan_for(chunks * unit).executor;
  };
  // stage_streams, the automatic policy's: only units whose copies the graph
  // makes kernels (256 KiB of float); its graphs of copy nodes were slower.
  CHECK(executor({}, std::size_t{1} << 12) == Executor::graphs);
  CHECK(executor({}, stage_graph_max_elems) == Executor::graphs);
  CHECK(executor({}, 2 * stage_graph_max_elems) == Executor::streams);
  CHECK(executor({.policy = Policy::stage_streams}, std::size_t{1} << 18) == Executor::streams);  // 1 MiB
  // slot_streams and serial: up to the small window.
  CHECK(executor({.policy = Policy::slot_streams}, std::size_t{1} << 18) == Executor::graphs);
  CHECK(executor({.policy = Policy::serial}, std::size_t{1} << 18) == Executor::graphs);
  CHECK(executor({.policy = Policy::slot_streams}, small_window_elems) == Executor::streams);
  // Never: too few chunks, or streams asked for; always when asked for.
  CHECK(executor({}, std::size_t{1} << 12, graph_min_chunks - 1) == Executor::streams);
  CHECK(executor({.executor = Executor::streams}, std::size_t{1} << 12) == Executor::streams);
  CHECK(executor({.executor = Executor::graphs}, std::size_t{1} << 18) == Executor::graphs);
  // The host backend has no executor but its own.
  CHECK(MapFront(Target::host, {.chunk_elems = 1 << 12}, Map<Fma>{}).plan_for(graph_min_chunks << 12).executor ==
        Executor::streams);
}

TEST_CASE("runs of one schedule on different kernel lanes run bit for bit on the host backend",
          "[host][lanes][calibrate][hazards]") {
  // What a calibrating pipeline issues (calibration.cuh): a first run on
  // one lane, later ones on what the decision gives, which a later check
  // may change again. Every run is issued before any op runs, so the
  // seeded orders mix runs; each run writes its own output.
  const Fma f{0.999f, 0.0625f};
  for (int depth : {2, 3, 4, 6}) {
    const std::size_t unit = 1000;
    HostPipeline<Map<Fma>> pipe({.chunk_elems = unit, .depth = depth, .policy = Policy::stage_streams,
                                 .kernel_lanes = 2},
                                Map<Fma>{f});
    PlanShape shape = pipe.shape(false, false);
    REQUIRE(shape.kernel_lanes == 2);
    shape.lanes_vary = true;
    const int lanes[] = {1, 2, 2, 1, 2, 1, 1, 2};
    std::vector<RunSpec> specs;
    std::vector<std::vector<float>> xs, ys;
    for (std::size_t r = 0; r < std::size(lanes); ++r) {
      const std::size_t n = unit * (1 + (r * 7) % (2 * static_cast<std::size_t>(depth) + 1)) + 37 * r;
      RunSpec spec;
      spec.chunks = (n + unit - 1) / unit;
      spec.elems = n;
      spec.kernel_lanes = lanes[r];
      specs.push_back(spec);
      std::vector<float> x(n);
      for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>((i * 2654435761u + r) % 8191) / 8191.0f - 0.5f;
      xs.push_back(std::move(x));
      ys.emplace_back(n);
    }
    const Plan plan = make_plan(Policy::stage_streams, depth, shape, specs);
    INFO("depth " << depth);
    REQUIRE(check_hazards(plan).ok());
    for (std::size_t r = 0; r < plan.runs.size(); ++r) REQUIRE(plan.runs[r].kernel_lanes == lanes[r]);
    for (std::uint64_t seed : {1u, 2u, 3u, 7u}) {
      pipe.set_seed(seed);
      std::vector<HostSpan<float>> ins;
      std::vector<HostSpan<float>> outs;
      for (std::size_t r = 0; r < xs.size(); ++r) {
        std::fill(ys[r].begin(), ys[r].end(), std::numeric_limits<float>::quiet_NaN());
        ins.push_back(pinned(xs[r]));
        outs.push_back(pinned(ys[r]));
      }
      pipe.run_plan_runs(plan, ins, outs);
      for (std::size_t r = 0; r < xs.size(); ++r) {
        INFO("seed " << seed << " run " << r);
        for (std::size_t i = 0; i < xs[r].size(); ++i) REQUIRE(ys[r][i] == f(xs[r][i]));
      }
    }
    // One pair per run, or nothing runs.
    std::vector<HostSpan<float>> one{pinned(xs[0])};
    std::vector<HostSpan<float>> one_out{pinned(ys[0])};
    REQUIRE_THROWS_AS(pipe.run_plan_runs(plan, one, one_out), config_error);
  }
}

// -- Memory from the program (Options::device_memory, pinned_memory) --------

namespace {

struct SquareU64 {
  CHUNKPIPE_HOST_DEVICE std::uint64_t operator()(std::uint32_t x) const { return std::uint64_t{x} * x; }
};
struct AddU64 {
  CHUNKPIPE_HOST_DEVICE std::uint64_t operator()(std::uint64_t a, std::uint64_t b) const { return a + b; }
};

// 11 + 0^2 + ... + (n-1)^2, exactly.
std::uint64_t sum_of_squares(std::size_t n) {
  std::uint64_t s = 11;
  for (std::size_t i = 0; i < n; ++i) s += std::uint64_t{i} * i;
  return s;
}

// Every byte and every call given back, each with the size and alignment it
// was handed out with, and every request aligned as a slot must be.
void require_all_returned(const test_memory::CountingResource& r) {
  REQUIRE(r.outstanding_bytes() == 0);
  REQUIRE(r.outstanding_calls() == 0);
  REQUIRE(r.mismatches() == 0);
  REQUIRE(r.bad_requests() == 0);
}

}  // namespace

TEST_CASE("slots, records and piece buffers come from the program's memory resources", "[host][memory]") {
  auto device = test_memory::CountingResource::host();
  auto pinned_memory = test_memory::CountingResource::host();
  Options o;
  o.chunk_elems = 256;
  o.depth = 3;
  o.device_memory = device;
  o.pinned_memory = pinned_memory;
  const Fma f{0.999f, 0.0625f};
  const std::size_t n = 1000;  // a ragged tail
  const std::vector<float> x = random_floats(n, 5);
  {
    HostPipeline<Map<Fma>> pipe(o, Map<Fma>{f});
    REQUIRE(device->allocations() == 0);  // the first run allocates
    for (std::uint64_t seed : {0u, 7u}) {
      pipe.set_seed(seed);
      for (bool stage : {false, true}) {
        std::vector<float> y = poisoned<float>(n);
        run_staged_or_pinned(pipe, x, y, stage);
        INFO("seed " << seed << " staged " << stage);
        for (std::size_t i = 0; i < n; ++i) REQUIRE(y[i] == f(x[i]));
      }
    }
    // The slots of one layout, allocated once, held while the pipeline
    // lives: at least an input and an output buffer of each slot on the
    // "device", and the staging buffers in pinned memory.
    const Geometry& g = pipe.geometry();
    const std::size_t unit_bytes = g.chunk_elems * sizeof(float) * static_cast<std::size_t>(g.depth);
    REQUIRE(device->allocations() == 1);
    REQUIRE(pinned_memory->allocations() == 1);
    REQUIRE(device->outstanding_bytes() >= unit_bytes);
    REQUIRE(pinned_memory->outstanding_bytes() >= unit_bytes);
  }
  require_all_returned(*device);
  require_all_returned(*pinned_memory);

  // A Reduce: its records come from the pinned resource, and go back with
  // the run's result.
  const std::size_t m = 100003;
  std::vector<std::uint32_t> u(m);
  for (std::size_t i = 0; i < m; ++i) u[i] = static_cast<std::uint32_t>(i);
  const std::size_t before = pinned_memory->allocations();
  {
    auto sum = make_host_pipeline(o, map(SquareU64{}), reduce(std::uint64_t{11}, AddU64{}, 128));
    REQUIRE(sum.run(u) == sum_of_squares(m));                                  // staged
    REQUIRE(sum.run(host_span(u.data(), m, Memory::pinned)) == sum_of_squares(m));  // direct
    REQUIRE(pinned_memory->allocations() >= before + 3);  // pinned slots and two runs' records
  }
  require_all_returned(*device);
  require_all_returned(*pinned_memory);

  // A spread over two virtual devices: each member's slots, and the
  // spread's own record buffers, from the same resources.
  Options s = o;
  s.chunk_elems = 1024;
  s.devices = {0, 1};
  {
    HostSpreadPipeline<Map<SquareU64>, Reduce<std::uint64_t, AddU64>> spread(
        s, map(SquareU64{}), reduce(std::uint64_t{11}, AddU64{}, 128));
    REQUIRE(spread.run(u) == sum_of_squares(m));
  }
  require_all_returned(*device);
  require_all_returned(*pinned_memory);
  REQUIRE(device->refused() == 0);
}

TEST_CASE("a memory resource that fails: the run says what it was allocating, and the pipeline runs afterwards",
          "[host][memory]") {
  auto device = test_memory::CountingResource::host();
  auto pinned_memory = test_memory::CountingResource::host();
  Options o;
  o.chunk_elems = 256;
  o.depth = 2;
  o.device_memory = device;
  o.pinned_memory = pinned_memory;
  const Fma f{2.f, 1.f};
  const std::vector<float> x = random_floats(700, 9);

  // The error names what was being allocated and carries the resource's.
  auto expect_failure = [](auto&& run, const std::string& what) {
    bool thrown = false;
    try {
      run();
    } catch (const pipeline_error& e) {
      thrown = true;
      const std::string msg = e.what();
      INFO(msg);
      CHECK(msg.find(what) != std::string::npos);
      CHECK(msg.find("memory resource") != std::string::npos);
      CHECK(msg.find("exhausted on purpose") != std::string::npos);
      CHECK_THROWS_AS(std::rethrow_if_nested(e), test_memory::exhausted);
    }
    REQUIRE(thrown);
  };
  {
    HostPipeline<Map<Fma>> pipe(o, Map<Fma>{f});
    std::vector<float> y = poisoned<float>(x.size());
    device->fail_next(1);
    expect_failure([&] { pipe.run(x, y); }, "the device slots");
    pinned_memory->fail_next(1);
    expect_failure([&] { pipe.run(x, y); }, "the pinned slots");
    REQUIRE(pinned_memory->outstanding_calls() == 0);
    // The next run asks again, and runs.
    pipe.run(x, y);
    for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(y[i] == f(x[i]));
    std::vector<float> z = poisoned<float>(x.size());
    pipe.run(pinned(x), pinned(z));
    for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(z[i] == f(x[i]));
  }
  {
    std::vector<std::uint32_t> u(5000);
    for (std::size_t i = 0; i < u.size(); ++i) u[i] = static_cast<std::uint32_t>(i);
    auto sum = make_host_pipeline(o, map(SquareU64{}), reduce(std::uint64_t{11}, AddU64{}, 128));
    pinned_memory->fail_next(1);
    expect_failure([&] { (void)sum.run(u); }, "the records of a folding run");
    REQUIRE(sum.run(u) == sum_of_squares(u.size()));
  }
  REQUIRE(device->refused() == 1);
  REQUIRE(pinned_memory->refused() == 2);
  require_all_returned(*device);
  require_all_returned(*pinned_memory);
}

TEST_CASE("a HostPipeline assigned over runs its queued runs first, as its destructor does", "[host][lifetime]") {
  // On the host backend ops run only when someone waits; a pipeline that
  // goes (destroyed or assigned over) runs what is still queued, so a run
  // queued and never waited for still reaches its output and its Sink.
  const std::size_t n = 10000;
  std::vector<float> x(n), y(n, std::numeric_limits<float>::quiet_NaN());
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 101) - 50.f;
  std::vector<float> seen(n, std::numeric_limits<float>::quiet_NaN());
  std::size_t delivered = 0;
  auto record = [&](std::size_t, std::size_t offset, ::cuda::std::span<const float> d) {
    for (std::size_t i = 0; i < d.size(); ++i) seen[offset + i] = d[i];
    delivered += d.size();
  };
  const Fma f{2.f, 0.5f};
  auto pipe = make_host_pipeline({.chunk_elems = 1000, .depth = 2}, map(f));
  HostTicket to_range = pipe.run_async(x, y);
  HostTicket to_sink = pipe.run_async(x, sink<float>(record));
  REQUIRE_FALSE(to_range.ready());
  pipe = make_host_pipeline({.chunk_elems = 1000, .depth = 2}, map(f));  // the old one goes
  CHECK(to_range.ready());
  CHECK(to_sink.ready());
  CHECK(delivered == n);
  for (std::size_t i = 0; i < n; ++i) {
    REQUIRE(y[i] == f(x[i]));
    REQUIRE(seen[i] == f(x[i]));
  }
  to_range.wait();
  to_sink.wait();
  // The new pipeline works.
  std::vector<float> z(n);
  pipe.run(x, z);
  CHECK(z == y);
}
