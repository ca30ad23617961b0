// SPDX-License-Identifier: MIT
// GPU tests of ChunkedPipeline: every policy and depth against serial (bit
// for bit) and against a host reference, with fresh random inputs and
// poisoned outputs, ragged tails, several inputs and outputs, several
// stages, a Thrust chunk stage, pageable memory, async runs and errors.
#include <chunkpipe/pipeline.cuh>
#include <chunkpipe/thrust.cuh>

#include "catch.hpp"

#include <thrust/execution_policy.h>
#include <thrust/sort.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

using namespace chunkpipe;

namespace {

// Chain (below) with its length read from device memory, so that one
// pipeline's work can change between runs (the calibration's checks).
struct DialledChain {
  const int* iters = nullptr;  // device memory
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const {
#ifdef __CUDA_ARCH__
    const int n = *iters;
#else
    const int n = 0;
#endif
    for (int k = 0; k < n; ++k) x = fmaf(x, 0.999f, 0.0625f);
    return x;
  }
};

// The lesson's kernel: a chain of FMAs, so results depend on every step.
struct Chain {
  int iters = 64;
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const {
    for (int k = 0; k < iters; ++k) x = fmaf(x, 0.999f, 0.0625f);
    return x;
  }
};

struct Saxpy {
  float a;
  CHUNKPIPE_HOST_DEVICE float operator()(float x, float y) const { return fmaf(a, x, y); }
};

struct Scale {
  float s;
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return x * s; }
};

struct Quantise {
  CHUNKPIPE_HOST_DEVICE std::int8_t operator()(float x) const {
    const float c = fminf(fmaxf(x, -128.f), 127.f);
    return static_cast<std::int8_t>(rintf(c));
  }
};

struct SplitSign {  // two outputs of two types
  CHUNKPIPE_HOST_DEVICE ::cuda::std::tuple<float, int> operator()(float x, float y) const {
    return {x - y, x > y ? 1 : -1};
  }
};

struct SortChunk {  // Thrust on the chunk's stream, in place, stream-ordered scratch
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    auto s = ctx.template in<0>();
    thrust::sort(thrust_policy(ctx.stream), s.begin(), s.end());
  }
};

struct Throws {
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    if (ctx.chunk == 3) throw std::runtime_error("stage failed on chunk 3");
  }
};

float host_quantise(float x) { return static_cast<float>(std::lrint(std::fmin(std::fmax(x, -128.f), 127.f))); }

std::vector<float> random_floats(std::size_t n, unsigned seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

template <class V>
void poison(V& v) {
  std::memset(v.data(), 0xFF, v.size() * sizeof(v.data()[0]));  // NaN as float
}

const Policy all_policies[] = {Policy::serial, Policy::slot_streams, Policy::stage_streams, Policy::automatic};

}  // namespace

TEST_CASE("every policy and depth matches serial bit for bit and the host reference", "[gpu]") {
  const std::size_t n = (std::size_t{1} << 20) + 12345;  // ragged last chunk
  const auto x = random_floats(n, 1);
  PinnedArray<float> in(n), out(n);
  std::memcpy(in.data(), x.data(), n * sizeof(float));
  const Chain f{};

  ChunkedPipeline<Map<Chain>> serial({.chunk_elems = 1 << 16, .policy = Policy::serial});
  poison(out);
  serial.run(in, out);
  std::vector<float> want(out.data(), out.data() + n);
  for (std::size_t i = 0; i < n; i += 997) REQUIRE(std::fabs(want[i] - f(x[i])) <= 1e-5f * std::fabs(f(x[i])) + 1e-6f);

  for (Policy policy : all_policies) {
    for (int depth = 1; depth <= 4; ++depth) {
      for (std::size_t chunk : {std::size_t{1} << 14, std::size_t{100003}}) {
        ChunkedPipeline<Map<Chain>> pipe({.chunk_elems = chunk, .depth = depth, .policy = policy, .grain_elems = 1 << 12});
        poison(out);
        pipe.run(in, out);
        INFO(to_string(policy) << " depth " << depth << " chunk " << chunk);
        REQUIRE(std::memcmp(out.data(), want.data(), n * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("kernel lanes: stages of consecutive chunks on several streams match serial bit for bit", "[gpu][lanes]") {
  const std::size_t n = (std::size_t{1} << 20) + 777;
  const auto x = random_floats(n, 3);
  PinnedArray<float> in(n), out(n);
  std::memcpy(in.data(), x.data(), n * sizeof(float));
  ChunkedPipeline<Map<Chain>, Map<Chain>> serial({.chunk_elems = 1 << 16, .policy = Policy::serial});
  poison(out);
  serial.run(in, out);
  const std::vector<float> want(out.data(), out.data() + n);
  for (int lanes : {2, 3}) {
    for (int depth : {2, 4, 24}) {  // 24: a ring deep enough to batch slot-reuse waits without lanes
      ChunkedPipeline<Map<Chain>, Map<Chain>> pipe(
          {.chunk_elems = 1 << 14, .depth = depth, .policy = Policy::stage_streams, .record_issued = true,
           .kernel_lanes = lanes});
      REQUIRE(pipe.geometry().kernel_lanes == std::min(lanes, depth));  // never more lanes than slots
      for (int run = 0; run < 2; ++run) {
        poison(out);
        pipe.run(in, out);
        INFO("lanes " << lanes << " depth " << depth << " run " << run);
        REQUIRE(std::memcmp(out.data(), want.data(), n * sizeof(float)) == 0);
      }
      std::vector<float> page(x), page_out(n, -1.f);  // staged both ways
      pipe.run(page, page_out);
      REQUIRE(std::memcmp(page_out.data(), want.data(), n * sizeof(float)) == 0);
      CHECK(check_hazards(pipe.issued_plan()).ok());
    }
  }
}

TEST_CASE("a run smaller than one chunk, an empty run, and reuse across sizes", "[gpu]") {
  ChunkedPipeline<Map<Scale>> pipe({.chunk_elems = 1 << 20}, Map<Scale>{{3.f}});
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{3} << 20, std::size_t{1000}}) {
    const auto x = random_floats(n, static_cast<unsigned>(n));
    std::vector<float> y(n, std::numeric_limits<float>::quiet_NaN());
    pipe.run(x, y);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(y[i] == x[i] * 3.f);
  }
  std::vector<float> none, untouched(4, std::numeric_limits<float>::quiet_NaN());
  pipe.run(none, untouched);
  for (float v : untouched) REQUIRE(std::isnan(v));
}

TEST_CASE("several inputs and outputs, pinned and pageable mixed", "[gpu]") {
  const std::size_t n = 3'000'001;
  const auto x = random_floats(n, 2), y = random_floats(n, 3);
  for (Policy policy : all_policies) {
    PinnedArray<float> py(n);
    std::memcpy(py.data(), y.data(), n * sizeof(float));
    std::vector<float> z(n, std::numeric_limits<float>::quiet_NaN());
    ChunkedPipeline<Map<Saxpy>> saxpy({.chunk_elems = 1 << 18, .depth = 3, .policy = policy}, Map<Saxpy>{{2.5f}});
    saxpy.run(inputs(x, py), outputs(z));  // x pageable (staged), y pinned (direct)
    for (std::size_t i = 0; i < n; ++i) REQUIRE(z[i] == std::fma(2.5f, x[i], y[i]));

    std::vector<float> diff(n, std::numeric_limits<float>::quiet_NaN());
    PinnedArray<int> sign(n);
    poison(sign);
    ChunkedPipeline<Map<SplitSign>> split({.chunk_elems = 1 << 18, .policy = policy});
    split.run(inputs(x, y), outputs(diff, sign));
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE(diff[i] == x[i] - y[i]);
      REQUIRE(sign[i] == (x[i] > y[i] ? 1 : -1));
    }
  }
}

TEST_CASE("stages in a row with a type change, and a Thrust chunk stage", "[gpu]") {
  const std::size_t n = 2'000'000, chunk = 1 << 18;
  const auto x = random_floats(n, 4, -200.f, 200.f);
  for (Policy policy : all_policies) {
    for (int depth : {1, 2, 3}) {
      auto pipe = make_pipeline(Options{.chunk_elems = chunk, .depth = depth, .policy = policy},
                                map(Scale{0.75f}), map(Quantise{}), chunk_fn(SortChunk{}));
      std::vector<std::int8_t> q(n, 0x5A);
      pipe.run(x, q);
      INFO(to_string(policy) << " depth " << depth);
      for (std::size_t begin = 0; begin < n; begin += chunk) {
        const std::size_t count = std::min(chunk, n - begin);
        std::vector<std::int8_t> want(count);
        for (std::size_t i = 0; i < count; ++i) {
          want[i] = static_cast<std::int8_t>(host_quantise(x[begin + i] * 0.75f));
        }
        std::sort(want.begin(), want.end());
        REQUIRE(std::memcmp(q.data() + begin, want.data(), count) == 0);
      }
    }
  }
}

TEST_CASE("run_async returns a ticket; runs queue behind each other", "[gpu]") {
  const std::size_t n = 1 << 21;
  const auto x = random_floats(n, 5);
  PinnedArray<float> in(n), a(n), b(n);
  std::memcpy(in.data(), x.data(), n * sizeof(float));
  poison(a);
  poison(b);
  ChunkedPipeline<Map<Scale>> pipe({.chunk_elems = 1 << 16, .depth = 3, .grain_elems = 1 << 16}, Map<Scale>{{-2.f}});
  RunTicket first = pipe.run_async(in, a);
  RunTicket second = pipe.run_async(in, b);  // same slots: ordered after the first
  second.wait();
  first.wait();
  REQUIRE(first.ready());
  for (std::size_t i = 0; i < n; ++i) {
    REQUIRE(a[i] == -2.f * x[i]);
    REQUIRE(b[i] == -2.f * x[i]);
  }

  // Pageable data is driven by a chunkpipe thread; the ticket still waits.
  std::vector<float> out(n, std::numeric_limits<float>::quiet_NaN());
  RunTicket third = pipe.run_async(x, out);
  third.wait();
  for (std::size_t i = 0; i < n; ++i) REQUIRE(out[i] == -2.f * x[i]);
}

TEST_CASE("enqueue_wait orders a stream after a run without blocking", "[gpu]") {
  const std::size_t n = std::size_t{1} << 21;
  const auto x = random_floats(n, 21);
  PinnedArray<float> in(n), out(n);
  std::memcpy(in.data(), x.data(), n * sizeof(float));
  poison(out);
  const Chain chain{256};
  ChunkedPipeline<Map<Chain>> pipe({.chunk_elems = 1 << 16, .depth = 3, .grain_elems = 1 << 16}, Map<Chain>{chain});
  Stream user = Stream::create();
  DeviceBuffer seen(n * sizeof(float));
  RunTicket t = pipe.run_async(in, out);
  t.enqueue_wait(user.get());
  // Queued at once, behind nothing but the wait: without it this copy would
  // read the poisoned chunks the run has not written yet.
  CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(seen.data(), out.data(), n * sizeof(float), cudaMemcpyHostToDevice, user.get()));
  CHUNKPIPE_CUDA_TRY(cudaStreamSynchronize(user.get()));
  t.wait();
  std::vector<float> got(n);
  CHUNKPIPE_CUDA_TRY(cudaMemcpy(got.data(), seen.data(), n * sizeof(float), cudaMemcpyDeviceToHost));
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += got[i] == chain(x[i]) ? 0 : 1;
  REQUIRE(wrong == 0);

  // A staged run ends on host threads: a stream cannot wait for it.
  std::vector<float> pageable(n);
  RunTicket staged = pipe.run_async(x, pageable);
  REQUIRE_THROWS_AS(staged.enqueue_wait(user.get()), pipeline_error);
  staged.wait();
  REQUIRE(pageable[n - 1] == chain(x[n - 1]));
}

TEST_CASE("profiling records every op without changing the result", "[gpu]") {
  const std::size_t n = 1 << 20;
  const auto x = random_floats(n, 6);
  std::vector<float> y(n, std::numeric_limits<float>::quiet_NaN());
  ChunkedPipeline<Map<Chain>> pipe({.chunk_elems = 1 << 16, .depth = 3, .policy = Policy::stage_streams, .profile = true});
  pipe.run(x, y);
  for (std::size_t i = 0; i < n; i += 101) REQUIRE(y[i] == Chain{}(x[i]));
  const Report& r = pipe.report();
  REQUIRE(r.chunks == 16);
  REQUIRE(r.ops.size() == 16 * 5);  // host-in, h2d, stage, d2h, host-out
  for (const TimedOp& op : r.ops) {
    REQUIRE(op.end_ms >= op.start_ms);
    REQUIRE(op.start_ms >= -0.5);
  }
  REQUIRE(r.bytes_in == n * sizeof(float));
}

TEST_CASE("bad input throws config_error before anything runs", "[gpu][errors]") {
  ChunkedPipeline<Map<Scale>> pipe({.chunk_elems = 1 << 10});
  std::vector<float> a(10), b(5);
  REQUIRE_THROWS_AS(pipe.run(a, b), config_error);
  REQUIRE_THROWS_AS(ChunkedPipeline<Map<Scale>>({.device = 4096}), config_error);

  // Slots that cannot fit in device memory: say how much, and do nothing.
  ChunkedPipeline<Map<Scale>> huge({.chunk_elems = std::size_t{1} << 40, .depth = 2});
  std::vector<float> x(16, 1.f), y(16, std::numeric_limits<float>::quiet_NaN());
  try {
    huge.run(x, y);
    FAIL("expected config_error");
  } catch (const config_error& e) {
    REQUIRE(std::string(e.what()).find("are free on device") != std::string::npos);
  }
  for (float v : y) REQUIRE(std::isnan(v));
  REQUIRE(huge.healthy());
}

TEST_CASE("a throwing stage stops the run, drains it, and leaves the pipeline usable", "[gpu][errors]") {
  const std::size_t n = 1 << 20;
  const auto x = random_floats(n, 7);
  std::vector<float> y(n);
  for (Policy policy : all_policies) {
    ChunkedPipeline<Map<Scale>, ChunkFn<Throws>> pipe({.chunk_elems = 1 << 16, .depth = 3, .policy = policy},
                                                      Map<Scale>{{2.f}}, ChunkFn<Throws>{});
    try {
      pipe.run(x, y);
      FAIL("expected the stage's error");
    } catch (const std::runtime_error& e) {
      REQUIRE(std::string(e.what()) == "stage failed on chunk 3");
    }
    REQUIRE(pipe.healthy());
    std::vector<float> small(3 * (1 << 16), std::numeric_limits<float>::quiet_NaN());  // chunks 0..2 only
    const auto sx = random_floats(small.size(), 8);
    pipe.run(sx, small);
    for (std::size_t i = 0; i < small.size(); ++i) REQUIRE(small[i] == 2.f * sx[i]);
  }
}

namespace {

float value_at(std::size_t i) { return static_cast<float>(i % 4093) / 4093.0f - 0.5f; }

struct PatternSource {  // `total` elements of value_at(i), then ends
  std::size_t total;
  std::size_t operator()(std::size_t chunk, ::cuda::std::span<float> slot) const {
    const std::size_t begin = chunk * slot.size();
    const std::size_t n = begin < total ? std::min(slot.size(), total - begin) : 0;
    for (std::size_t i = 0; i < n; ++i) slot[i] = value_at(begin + i);
    return n;
  }
};

struct Gather {  // sink into a vector, counting finish/abort
  std::vector<float>* out;
  int* finished;
  int* aborted;
  void operator()(std::size_t, std::size_t offset, ::cuda::std::span<const float> data) const {
    std::memcpy(out->data() + offset, data.data(), data.size() * sizeof(float));
  }
  void finish() const { ++*finished; }
  void abort() const { ++*aborted; }
};

}  // namespace

TEST_CASE("every staging mode moves pageable memory correctly", "[gpu][staging]") {
  const std::size_t n = (std::size_t{3} << 20) + 17;
  const auto x = random_floats(n, 11);
  for (Staging mode : {Staging::automatic, Staging::threads, Staging::registered, Staging::direct}) {
    for (int threads : {1, 4}) {
      ChunkedPipeline<Map<Chain>> pipe(
          {.chunk_elems = 1 << 18, .grain_elems = 1 << 18, .staging = mode, .host_threads = threads});
      std::vector<float> y(n, std::numeric_limits<float>::quiet_NaN());
      pipe.run(x, y);
      pipe.run(x, y);  // registered: the second run reuses the registration
      INFO("staging " << static_cast<int>(mode) << " threads " << threads);
      for (std::size_t i = 0; i < n; i += 7) REQUIRE(y[i] == Chain{}(x[i]));
      REQUIRE(y[n - 1] == Chain{}(x[n - 1]));
      pipe.release_registrations();
    }
  }
}

TEST_CASE("a source of unknown length into a sink and into a range", "[gpu][source]") {
  for (std::size_t total : {std::size_t{5'000'000}, std::size_t{4} << 20, std::size_t{0}}) {
    for (Policy policy : all_policies) {
      ChunkedPipeline<Map<Scale>> pipe({.chunk_elems = 1 << 20, .depth = 3, .policy = policy, .profile = true},
                                       Map<Scale>{{4.f}});
      std::vector<float> got(total + 8, std::numeric_limits<float>::quiet_NaN());
      int finished = 0, aborted = 0;
      pipe.run(source<float>(PatternSource{total}), sink<float>(Gather{&got, &finished, &aborted}));
      INFO(to_string(policy) << " total " << total);
      REQUIRE(finished == 1);
      REQUIRE(aborted == 0);
      for (std::size_t i = 0; i < total; ++i) REQUIRE(got[i] == 4.f * value_at(i));
      for (std::size_t i = total; i < got.size(); ++i) REQUIRE(std::isnan(got[i]));
      REQUIRE(pipe.report().elems == total);

      std::vector<float> range(total, std::numeric_limits<float>::quiet_NaN());
      RunTicket t = pipe.run_async(source<float>(PatternSource{total}), range);
      t.wait();
      for (std::size_t i = 0; i < total; ++i) REQUIRE(range[i] == 4.f * value_at(i));
    }
  }
  // An empty range into a sink: nothing moves, and the sink still finishes.
  ChunkedPipeline<Map<Scale>> pipe({.chunk_elems = 1 << 20});
  std::vector<float> none, got;
  int finished = 0, aborted = 0;
  pipe.run(none, sink<float>(Gather{&got, &finished, &aborted}));
  REQUIRE(finished == 1);
  REQUIRE(aborted == 0);
}

TEST_CASE("a failing source or sink drains the run and leaves the pipeline usable", "[gpu][errors]") {
  ChunkedPipeline<Map<Scale>> pipe({.chunk_elems = 1 << 18, .depth = 3, .grain_elems = 1 << 18}, Map<Scale>{{2.f}});
  std::vector<float> got(1 << 22);
  int finished = 0, aborted = 0;
  auto failing = source<float>([](std::size_t chunk, ::cuda::std::span<float> slot) -> std::size_t {
    if (chunk == 5) throw std::runtime_error("source failed at chunk 5");
    for (std::size_t i = 0; i < slot.size(); ++i) slot[i] = value_at(i);
    return slot.size();
  });
  try {
    pipe.run(failing, sink<float>(Gather{&got, &finished, &aborted}));
    FAIL("expected the source's error");
  } catch (const std::runtime_error& e) {
    REQUIRE(std::string(e.what()) == "source failed at chunk 5");
  }
  REQUIRE(finished == 0);
  REQUIRE(aborted == 1);

  struct Throws {
    void operator()(std::size_t chunk, std::size_t, ::cuda::std::span<const float>) const {
      if (chunk == 2) throw std::runtime_error("sink failed");
    }
  };
  const auto x = random_floats(1 << 21, 12);
  REQUIRE_THROWS_AS(pipe.run(x, sink<float>(Throws{})), std::runtime_error);

  std::vector<float> y(x.size(), std::numeric_limits<float>::quiet_NaN());
  pipe.run(x, y);
  for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(y[i] == 2.f * x[i]);
  REQUIRE(pipe.healthy());
}

TEST_CASE("the link and a stage can be measured", "[gpu][measure]") {
  const LinkModel link = measure_link(-1, std::size_t{64} << 20, std::size_t{16} << 20, 2);
  INFO("h2d " << link.h2d_gbps << " d2h " << link.d2h_gbps << " both " << link.both_gbps << " GB/s, latency "
              << link.latency_us << " us");
  REQUIRE(link.h2d_gbps > 1.0);
  REQUIRE(link.d2h_gbps > 1.0);
  REQUIRE(link.both_gbps >= std::max(link.h2d_gbps, link.d2h_gbps) * 0.9);
  REQUIRE(link.latency_us > 0.0);
  REQUIRE(link.copy_engines >= 1);
  // Only sanity here: speed is for the benchmarks (and under the sanitizer
  // kernel times mean nothing).
  const double ns = measure_map_ns_per_elem<float>(Chain{4096}, std::size_t{1} << 22);
  REQUIRE(ns > 0.0);
  REQUIRE(std::isfinite(ns));
}

namespace {

// What the calibration tests run: 8 units of 8 MiB and a ragged chunk in
// pinned memory, and what the serial schedule makes of them with `iters`
// chained FMAs an element (checked against the functor at samples).
// 4096 is about 0.15 ns of kernel per element on the H200 against 0.08 of
// link (8 bytes each way at 100 GB/s), and a sanitizer slows kernels far
// more than copies, so it is compute-bound wherever the suite runs.
struct HeavyRun {
  static constexpr std::size_t n = (std::size_t{16} << 20) + 4321;
  const Chain heavy;
  std::vector<float> x;
  PinnedArray<float> in{n}, out{n};
  std::vector<float> want;

  explicit HeavyRun(unsigned seed, int iters = 4096) : heavy{iters}, x(random_floats(n, seed)) {
    std::memcpy(in.data(), x.data(), n * sizeof(float));
    ChunkedPipeline<Map<Chain>> serial({.policy = Policy::serial}, Map<Chain>{heavy});
    poison(out);
    serial.run(in, out);
    want.assign(out.data(), out.data() + n);
    for (std::size_t i = 0; i < n; i += 100003) REQUIRE(std::fabs(want[i] - heavy(x[i])) <= 1e-4f);
  }
};

}  // namespace

TEST_CASE("the automatic policy calibrates on the first chunks and gives compute-bound work kernel lanes",
          "[gpu][lanes][calibrate]") {
  HeavyRun h(11);
  const std::size_t n = HeavyRun::n;
  const auto& x = h.x;
  auto& in = h.in;
  auto& out = h.out;
  const Chain heavy = h.heavy;
  const std::vector<float>& want = h.want;

  Options o;
  o.record_issued = true;
  ChunkedPipeline<Map<Chain>> pipe(o, Map<Chain>{heavy});
  REQUIRE(pipe.calibrates());
  REQUIRE(!pipe.decision());  // nothing timed yet
  REQUIRE(pipe.geometry().kernel_lanes == 1);
  for (int run = 0; run < 3; ++run) {
    poison(out);
    pipe.run(in, out);
    INFO("run " << run);
    REQUIRE(std::memcmp(out.data(), want.data(), n * sizeof(float)) == 0);
    if (run == 0) {
      // The first run timed five chunks and has been waited for.
      const std::optional<Decision> d = pipe.decision();
      REQUIRE(d);
      INFO(d->why);
      CHECK(d->why.find("compute-bound") != std::string::npos);
      REQUIRE(d->chosen.geometry.kernel_lanes == 2);
      REQUIRE(d->chosen.options.kernel_lanes == 2);
      REQUIRE(d->ranked.size() == 2);  // one lane and two
      REQUIRE(pipe.plan_for(n).queues.size() == 4);  // h2d, two lanes, d2h: what later runs follow
    }
  }
  const Plan issued = pipe.issued_plan();
  const HazardReport hazards = check_hazards(issued);
  INFO(hazards);
  REQUIRE(hazards.ok());
  REQUIRE(issued.runs.size() == 3);
  REQUIRE(issued.runs[0].kernel_lanes == 1);
  for (std::size_t r = 1; r < 3; ++r) {
    const PlanRun& pr = issued.runs[r];
    REQUIRE(pr.kernel_lanes == 2);
    std::set<int> stage_queues;
    for (const Op& op : issued.ops) {
      if (op.id >= pr.first_op && op.id < pr.first_op + pr.ops && op.kind == OpKind::stage) stage_queues.insert(op.queue);
    }
    REQUIRE(stage_queues.size() == 2);
  }

  // tune(): the same decision as Options to paste; explicit options refuse it.
  ChunkedPipeline<Map<Chain>> fresh(Options{}, Map<Chain>{heavy});
  poison(out);
  const Options tuned = tune(fresh, in, out);
  REQUIRE(std::memcmp(out.data(), want.data(), n * sizeof(float)) == 0);
  REQUIRE(tuned.kernel_lanes == 2);
  CHECK(to_string(tuned).find(".kernel_lanes = 2") != std::string::npos);
  ChunkedPipeline<Map<Chain>> fixed(tuned, Map<Chain>{heavy});
  REQUIRE(!fixed.calibrates());
  REQUIRE(fixed.geometry().kernel_lanes == 2);
  REQUIRE_THROWS_AS(tune(fixed, in, out), config_error);
  REQUIRE(!fixed.decision());

  // Link-bound work (one lane, outside a sanitizer): what tune() returns
  // names its lanes and never calibrates again, whichever it chose.
  const Chain light{0};
  ChunkedPipeline<Map<Chain>> copy_bound(Options{}, Map<Chain>{light});
  poison(out);
  const Options kept = tune(copy_bound, in, out);
  for (std::size_t i = 0; i < n; i += 100003) REQUIRE(out.data()[i] == light(x[i]));
  const std::optional<Decision> d = copy_bound.decision();
  REQUIRE(d);
  INFO(d->why);
  REQUIRE(kept.kernel_lanes == d->chosen.geometry.kernel_lanes);
  REQUIRE(kept.kernel_lanes >= 1);
  REQUIRE(!ChunkedPipeline<Map<Chain>>(kept, Map<Chain>{light}).calibrates());
}

TEST_CASE("a calibrated pipeline times again and follows work that changes, bit-exact throughout",
          "[gpu][lanes][calibrate]") {
  // 16384 FMAs: under memcheck, which slows every memory access, the work
  // with none still differs from it by far more than the 10% margin.
  HeavyRun h(12, 16384);
  const std::size_t n = HeavyRun::n;
  const auto& x = h.x;
  auto& in = h.in;
  auto& out = h.out;
  const std::vector<float>& want_heavy = h.want;

  DeviceBuffer iters(sizeof(int));
  auto dial = [&](int v) {
    REQUIRE(cudaMemcpy(iters.data(), &v, sizeof v, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);  // the pipeline's streams do not wait for the default one
  };
  const DialledChain f{reinterpret_cast<const int*>(iters.data())};
  Options o;
  o.record_issued = true;
  ChunkedPipeline<Map<DialledChain>> pipe(o, Map<DialledChain>{f});
  REQUIRE(pipe.calibrates());

  // Compute-bound first: 2 lanes. The same work for 20 runs (160 units):
  // the check after 128 units, timed on 2 lanes where kernels share the
  // GPU and take longer, finds the same choice, so the decision stands.
  dial(16384);
  std::optional<Decision> first;
  for (int run = 0; run < 20; ++run) {
    poison(out);
    pipe.run(in, out);
    REQUIRE(std::memcmp(out.data(), want_heavy.data(), n * sizeof(float)) == 0);
    const std::optional<Decision> d = pipe.decision();
    REQUIRE(d);
    if (!first) first = d;
    INFO("run " << run << ": " << d->why);
    REQUIRE(d->measured.stage_ns_per_elem == first->measured.stage_ns_per_elem);
  }
  INFO("first: " << first->why);
  REQUIRE(first->measured.stage_ns_per_elem.size() == 1);
  const double heavy_ns = first->measured.stage_ns_per_elem[0];
  CHECK(first->chosen.geometry.kernel_lanes == 2);
  const std::size_t before = pipe.issued_plan().runs.size();
  CHECK(pipe.issued_plan().runs.back().kernel_lanes == 2);

  // Then no work at all: the next check (128 units on) decides from what
  // it measures now.
  dial(0);
  std::optional<Decision> now;
  int runs = 0;
  for (; runs < 40; ++runs) {
    poison(out);
    pipe.run(in, out);
    REQUIRE(std::memcmp(out.data(), x.data(), n * sizeof(float)) == 0);  // identity, bit for bit
    now = pipe.decision();
    REQUIRE(now);
    if (now->measured.stage_ns_per_elem[0] != heavy_ns) break;
  }
  INFO("after " << runs << " light runs: " << now->why);
  REQUIRE(runs < 40);
  CHECK(runs >= 8);  // not before the check is due
  if (now->why.find("link-bound") != std::string::npos) {
    // Outside a sanitizer (which slows kernels far more than copies): one
    // lane for the runs from here on.
    CHECK(now->measured.stage_ns_per_elem[0] < 0.9 * heavy_ns);
    CHECK(now->chosen.geometry.kernel_lanes == 1);
    poison(out);
    pipe.run(in, out);
    REQUIRE(std::memcmp(out.data(), x.data(), n * sizeof(float)) == 0);
    CHECK(pipe.issued_plan().runs.back().kernel_lanes == 1);
  }
  const Plan issued = pipe.issued_plan();
  REQUIRE(issued.runs.size() > before);
  const HazardReport hazards = check_hazards(issued);
  INFO(hazards);
  REQUIRE(hazards.ok());
}
