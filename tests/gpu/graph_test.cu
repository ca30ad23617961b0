// SPDX-License-Identifier: MIT
// GPU tests of the graph executor: graph runs against a host reference and
// bit for bit against the same pipeline on streams (outputs poisoned
// first), built, replayed and re-pointed at new ranges; the CUDA graph as
// built, its edges read back from CUDA, passes the hazard check; a stage
// that cannot be captured is a clear error and the pipeline goes on on
// streams; runs a graph cannot take fall back and say why; graph runs
// order with stream runs and with the user's work.
#include <chunkpipe/pipeline.cuh>

#include "catch.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

using namespace chunkpipe;

namespace {

struct Chain {
  int iters = 16;
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const {
    for (int k = 0; k < iters; ++k) x = fmaf(x, 0.999f, 0.0625f);
    return x;
  }
};

// Two inputs, two outputs: several copy nodes per op.
struct SumDiff {
  CHUNKPIPE_HOST_DEVICE ::cuda::std::tuple<float, float> operator()(float a, float b) const { return {a + b, a - b}; }
};

__global__ void add_offset(float* x, std::size_t n, float by) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] += by;
}

// A window-level stage with two launches on ctx.stream: adds its chunk's
// index, then doubles.
struct TwoLaunches {
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    auto x = ctx.template out<0>();
    const auto blocks = static_cast<unsigned>((ctx.count + 255) / 256);
    add_offset<<<blocks, 256, 0, ctx.stream.get()>>>(x.data(), ctx.count, static_cast<float>(ctx.chunk));
    add_offset<<<blocks, 256, 0, ctx.stream.get()>>>(x.data(), ctx.count, 1.0f);
  }
};

__global__ void scale_into(float* dst, const float* src, std::size_t n, float by) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) dst[i] = src[i] * by;
}

// Scratch memory from the stream-ordered allocator, as thrust_policy uses:
// in a graph, allocation and free nodes inside the stage's child graph.
struct ScratchTwice {
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    auto x = ctx.template out<0>();
    const auto blocks = static_cast<unsigned>((ctx.count + 255) / 256);
    float* scratch = nullptr;
    CHUNKPIPE_CUDA_TRY(cudaMallocAsync(reinterpret_cast<void**>(&scratch), ctx.count * sizeof(float), ctx.stream.get()));
    scale_into<<<blocks, 256, 0, ctx.stream.get()>>>(scratch, x.data(), ctx.count, 1.0f);
    scale_into<<<blocks, 256, 0, ctx.stream.get()>>>(x.data(), scratch, ctx.count, 2.0f);
    CHUNKPIPE_CUDA_TRY(cudaFreeAsync(scratch, ctx.stream.get()));
  }
};

// Synchronises inside the stage: fine on streams, impossible in a graph.
struct Synchronises {
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    auto x = ctx.template out<0>();
    add_offset<<<static_cast<unsigned>((ctx.count + 255) / 256), 256, 0, ctx.stream.get()>>>(x.data(), ctx.count, 2.0f);
    CHUNKPIPE_CUDA_TRY(cudaStreamSynchronize(ctx.stream.get()));
  }
};

float value_at(std::size_t i, unsigned salt) {
  return static_cast<float>((i * 2654435761u + salt) % 8191) / 8191.0f - 0.5f;
}

template <class V>
void poison(V& v) {
  std::memset(v.data(), 0xFF, v.size() * sizeof(v.data()[0]));  // NaN as float
}

template <class V>
void fill(V& v, unsigned salt) {
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = value_at(i, salt);
}

template <class V>
bool all_poisoned(const V& v) {
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!std::isnan(v[i])) return false;
  }
  return true;
}

template <class A, class B>
std::size_t mismatches(const A& a, const B& b) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < a.size(); ++i) bad += std::memcmp(&a[i], &b[i], sizeof(a[i])) == 0 ? 0 : 1;
  return bad;
}

constexpr std::size_t kWindow = std::size_t{1} << 12;
// 37 windows and a ragged end: more chunks than any ring here.
constexpr std::size_t kElems = 37 * kWindow + 1234;

}  // namespace

TEST_CASE("graph runs match streams bit for bit: built, replayed, re-pointed", "[gpu][graphs]") {
  const Chain f{};
  // A 16 KiB window's copies are kernels reading the ranges from a table;
  // a 1 MiB window's are copy nodes (copy_kernel.cuh).
  for (const std::size_t window : {kWindow, std::size_t{1} << 18}) {
  const std::size_t n = window == kWindow ? kElems : 5 * window + 1234;
  PinnedArray<float> a(n), b(n), ya(n), yb(n), ref(n);
  fill(a, 1);
  fill(b, 2);
  for (Policy policy : {Policy::serial, Policy::slot_streams, Policy::stage_streams}) {
    for (int depth : {1, 2, 4}) {
      INFO(to_string(policy) << " depth " << depth << ", window " << window);
      const Options base{.chunk_elems = window, .depth = depth, .policy = policy, .grain_elems = window};
      Options on_graphs = base;
      on_graphs.executor = Executor::graphs;
      Options on_streams = base;
      on_streams.executor = Executor::streams;
      ChunkedPipeline<Map<Chain>> graphs(on_graphs, Map<Chain>{f});
      ChunkedPipeline<Map<Chain>> streams(on_streams, Map<Chain>{f});
      REQUIRE(graphs.plan_for(n).executor == Executor::graphs);

      poison(ref);
      streams.run(a, ref);
      for (std::size_t i = 0; i < n; i += 97) REQUIRE(ref[i] == f(a[i]));

      // Built: the first run of this shape.
      poison(ya);
      RunTicket t = graphs.run_async(a, ya);
      t.wait();
      REQUIRE(t.executor() == Executor::graphs);
      REQUIRE(mismatches(ya, ref) == 0);
      GraphStats s = graphs.graph_stats();
      REQUIRE(s.built == 1);
      REQUIRE(s.replayed == 0);
      REQUIRE(s.cached == 1);
      REQUIRE(s.copy_kernels == (window * sizeof(float) <= (std::size_t{256} << 10)));

      // Replayed: same shape, same ranges.
      poison(ya);
      graphs.run(a, ya);
      REQUIRE(mismatches(ya, ref) == 0);
      REQUIRE(graphs.graph_stats().replayed == 1);

      // Re-pointed: same shape, other ranges. The old output must stay
      // untouched, so the copy nodes really moved.
      poison(ya);
      poison(yb);
      graphs.run(b, yb);
      REQUIRE(all_poisoned(ya));
      s = graphs.graph_stats();
      REQUIRE(s.updated == 1);
      REQUIRE(s.built == 1);
      poison(ref);
      streams.run(b, ref);
      REQUIRE(mismatches(yb, ref) == 0);

      // Back at the first pair, after the second: re-pointed again.
      poison(ya);
      poison(yb);
      graphs.run(a, ya);
      REQUIRE(all_poisoned(yb));
      REQUIRE(graphs.graph_stats().updated == 2);
      poison(ref);
      streams.run(a, ref);
      REQUIRE(mismatches(ya, ref) == 0);

      // A new shape is a new graph; the old one stays cached.
      PinnedArray<float> shorter(n - window), out_short(n - window);
      fill(shorter, 3);
      poison(out_short);
      graphs.run(shorter, out_short);
      for (std::size_t i = 0; i < shorter.size(); ++i) REQUIRE(out_short[i] == f(shorter[i]));
      REQUIRE(graphs.graph_stats().built == 2);
      REQUIRE(graphs.graph_stats().cached == 2);
    }
  }
  }
}

TEST_CASE("small copies under graphs are kernels: unaligned and registered ranges",
          "[gpu][graphs]") {
  const Chain f{};
  const Options o{.chunk_elems = kWindow, .depth = 3, .policy = Policy::stage_streams, .grain_elems = kWindow,
                  .executor = Executor::graphs};
  ChunkedPipeline<Map<Chain>> graphs(o, Map<Chain>{f});
  // Ranges one float past a 16-byte boundary: the kernels' 4-byte path.
  PinnedArray<float> a(kElems + 1), y(kElems + 1);
  fill(a, 7);
  poison(y);
  graphs.run(host_span(static_cast<const float*>(a.data() + 1), kElems), host_span(y.data() + 1, kElems));
  REQUIRE(graphs.graph_stats().copy_kernels);
  REQUIRE(std::isnan(y[0]));
  for (std::size_t i = 1; i <= kElems; ++i) REQUIRE(y[i] == f(a[i]));

  // Memory the caller registered (and says is pinned): addressable by the
  // kernels at its host address, so the same graph is re-pointed at it.
  std::vector<float> x(kElems), z(kElems);
  for (std::size_t i = 0; i < kElems; ++i) x[i] = static_cast<float>(i % 977) * 0.25f - 3.0f;
  REQUIRE(cudaHostRegister(x.data(), kElems * sizeof(float), cudaHostRegisterDefault) == cudaSuccess);
  REQUIRE(cudaHostRegister(z.data(), kElems * sizeof(float), cudaHostRegisterDefault) == cudaSuccess);
  std::fill(z.begin(), z.end(), -1.0f);
  // Same shape (a range of kElems): the cached graph, re-pointed.
  graphs.run(host_span(static_cast<const float*>(x.data()), kElems, Memory::pinned),
             host_span(z.data(), kElems, Memory::pinned));
  const GraphStats s = graphs.graph_stats();
  CHECK(s.built == 1);
  CHECK(s.updated == 1);
  for (std::size_t i = 0; i < kElems; ++i) REQUIRE(z[i] == f(x[i]));
  REQUIRE(cudaHostUnregister(x.data()) == cudaSuccess);
  REQUIRE(cudaHostUnregister(z.data()) == cudaSuccess);
}

namespace {

// Bytes: a range one byte off alignment takes the copy kernels' byte path.
struct ByteMix {
  CHUNKPIPE_HOST_DEVICE std::uint8_t operator()(std::uint8_t b) const {
    return static_cast<std::uint8_t>(b * 7u + 3u);
  }
};

}  // namespace

TEST_CASE("small copies under graphs: the byte path, a refused re-point, evicted tables", "[gpu][graphs]") {
  // Bytes one past a 4-byte boundary: neither word path applies.
  {
    const std::size_t n = kElems;
    PinnedArray<std::uint8_t> a(n + 1), y(n + 1);
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::uint8_t>((i * 131u + 17u) % 251u);
    std::memset(y.data(), 0xA5, y.size());
    ChunkedPipeline<Map<ByteMix>> bytes({.chunk_elems = kWindow, .depth = 3, .policy = Policy::stage_streams,
                                         .grain_elems = kWindow, .executor = Executor::graphs});
    bytes.run(host_span(static_cast<const std::uint8_t*>(a.data() + 1), n), host_span(y.data() + 1, n));
    REQUIRE(bytes.graph_stats().copy_kernels);
    REQUIRE(y[0] == 0xA5);
    for (std::size_t i = 1; i <= n; ++i) REQUIRE(y[i] == ByteMix{}(a[i]));
  }

  const Chain f{};
  const Options o{.chunk_elems = kWindow, .depth = 3, .policy = Policy::slot_streams, .grain_elems = kWindow,
                  .executor = Executor::graphs};
  PinnedArray<float> a(kElems), y(kElems);
  fill(a, 16);

  // Managed memory the caller calls pinned: copies can reach it, a copy
  // kernel is not given it (it would migrate the pages). The cached graph of
  // copy kernels refuses the new ranges, and a graph of copy nodes replaces it.
  {
    ChunkedPipeline<Map<Chain>> graphs(o, Map<Chain>{f});
    poison(y);
    graphs.run(a, y);
    REQUIRE(graphs.graph_stats().copy_kernels);
    for (std::size_t i = 0; i < kElems; ++i) REQUIRE(y[i] == f(a[i]));
    float* m_in = nullptr;
    float* m_out = nullptr;
    REQUIRE(cudaMallocManaged(&m_in, kElems * sizeof(float)) == cudaSuccess);
    REQUIRE(cudaMallocManaged(&m_out, kElems * sizeof(float)) == cudaSuccess);
    for (std::size_t i = 0; i < kElems; ++i) m_in[i] = value_at(i, 17);
    std::memset(m_out, 0xFF, kElems * sizeof(float));
    poison(y);
    graphs.run(host_span(static_cast<const float*>(m_in), kElems, Memory::pinned),
               host_span(m_out, kElems, Memory::pinned));
    GraphStats s = graphs.graph_stats();
    CHECK(s.built == 2);
    CHECK(s.updated == 0);
    CHECK(s.cached == 1);
    CHECK_FALSE(s.copy_kernels);
    REQUIRE(all_poisoned(y));
    for (std::size_t i = 0; i < kElems; ++i) REQUIRE(m_out[i] == f(m_in[i]));
    // Back to the pinned pair: the graph of copy nodes re-pointed, or, where
    // CUDA will not move a copy node between those kinds of memory, a graph
    // of copy kernels again.
    std::memset(m_out, 0xFF, kElems * sizeof(float));
    graphs.run(a, y);
    s = graphs.graph_stats();
    CHECK((s.updated == 1 ? s.built == 2 : s.built == 3 && s.copy_kernels));
    for (std::size_t i = 0; i < kElems; ++i) REQUIRE(y[i] == f(a[i]));
    for (std::size_t i = 0; i < kElems; ++i) REQUIRE(std::isnan(m_out[i]));
    REQUIRE(cudaFree(m_in) == cudaSuccess);
    REQUIRE(cudaFree(m_out) == cudaSuccess);
  }

  // More shapes than the cache keeps (8), queued back to back: the oldest
  // graphs and their tables go while later launches are in flight, and a
  // shape seen again is built again. Every output right.
  {
    ChunkedPipeline<Map<Chain>> graphs(o, Map<Chain>{f});
    constexpr int shapes = 10;
    std::vector<PinnedArray<float>> outs;
    std::vector<RunTicket> tickets;
    for (int k = 0; k < shapes; ++k) {
      const std::size_t n = kElems - static_cast<std::size_t>(k) * 301;
      outs.emplace_back(n);
      poison(outs.back());
      tickets.push_back(graphs.run_async(host_span(static_cast<const float*>(a.data()), n),
                                         host_span(outs.back().data(), n)));
    }
    for (RunTicket& t : tickets) t.wait();
    for (int k = 0; k < shapes; ++k) {
      INFO("shape " << k);
      for (std::size_t i = 0; i < outs[static_cast<std::size_t>(k)].size(); ++i) {
        REQUIRE(outs[static_cast<std::size_t>(k)][i] == f(a[i]));
      }
    }
    GraphStats s = graphs.graph_stats();
    CHECK(s.built == static_cast<std::size_t>(shapes));
    CHECK(s.cached == 8);
    REQUIRE(s.copy_kernels);
    poison(outs[0]);
    graphs.run(host_span(static_cast<const float*>(a.data()), outs[0].size()), host_span(outs[0].data(), outs[0].size()));
    for (std::size_t i = 0; i < outs[0].size(); ++i) REQUIRE(outs[0][i] == f(a[i]));
    CHECK(graphs.graph_stats().built == static_cast<std::size_t>(shapes) + 1);
  }
}

TEST_CASE("several inputs and outputs and window-level stages under graphs", "[gpu][graphs]") {
  PinnedArray<float> x(kElems), y(kElems), sum(kElems), diff(kElems);
  fill(x, 4);
  fill(y, 5);
  ChunkedPipeline<Map<SumDiff>> two({.chunk_elems = kWindow, .depth = 3, .policy = Policy::stage_streams,
                                     .grain_elems = kWindow, .executor = Executor::graphs});
  poison(sum);
  poison(diff);
  two.run(inputs(x, y), outputs(sum, diff));
  for (std::size_t i = 0; i < kElems; ++i) {
    REQUIRE(sum[i] == x[i] + y[i]);
    REQUIRE(diff[i] == x[i] - y[i]);
  }
  // Its copies are kernels reading four ranges from one table (inputs,
  // then outputs): pointed at four new ones, each lands where it belongs,
  // and the old outputs stay as they were.
  REQUIRE(two.graph_stats().copy_kernels);
  PinnedArray<float> x2(kElems), y2(kElems), sum2(kElems), diff2(kElems);
  fill(x2, 14);
  fill(y2, 15);
  poison(sum);
  poison(diff);
  poison(sum2);
  poison(diff2);
  two.run(inputs(x2, y2), outputs(sum2, diff2));
  REQUIRE(two.graph_stats().built == 1);
  REQUIRE(two.graph_stats().updated == 1);
  REQUIRE(all_poisoned(sum));
  REQUIRE(all_poisoned(diff));
  for (std::size_t i = 0; i < kElems; ++i) {
    REQUIRE(sum2[i] == x2[i] + y2[i]);
    REQUIRE(diff2[i] == x2[i] - y2[i]);
  }

  // A ChunkFn's launches are captured on ctx.stream, with the chunk index
  // each had when the graph was built: the same as every run's.
  ChunkedPipeline<Map<Chain>, ChunkFn<TwoLaunches>> fn(
      {.chunk_elems = kWindow, .depth = 2, .policy = Policy::slot_streams, .executor = Executor::graphs},
      Map<Chain>{}, ChunkFn<TwoLaunches>{});
  PinnedArray<float> out(kElems);
  for (int round = 0; round < 2; ++round) {
    poison(out);
    RunTicket t = fn.run_async(x, out);
    t.wait();
    REQUIRE(t.executor() == Executor::graphs);
    for (std::size_t i = 0; i < kElems; ++i) REQUIRE(out[i] == Chain{}(x[i]) + static_cast<float>(i / kWindow) + 1.0f);
  }
  REQUIRE(fn.graph_stats().replayed == 1);

  // Stream-ordered scratch memory inside a ChunkFn: a graph too.
  ChunkedPipeline<ChunkFn<ScratchTwice>> scratch(
      {.chunk_elems = kWindow, .depth = 3, .policy = Policy::stage_streams, .executor = Executor::graphs});
  for (int round = 0; round < 2; ++round) {
    poison(out);
    RunTicket t = scratch.run_async(x, out);
    t.wait();
    REQUIRE(t.executor() == Executor::graphs);
    for (std::size_t i = 0; i < kElems; ++i) REQUIRE(out[i] == 2.0f * x[i]);
  }
  REQUIRE(scratch.graph_stats().built == 1);
  REQUIRE(scratch.graph_stats().replayed == 1);
}

TEST_CASE("the CUDA graph as built, read back from CUDA, passes the hazard check", "[gpu][graphs][hazards]") {
  PinnedArray<float> x(kElems), out(kElems);
  fill(x, 6);
  for (Policy policy : {Policy::serial, Policy::slot_streams, Policy::stage_streams}) {
    for (int depth : {1, 2, 3}) {
      INFO(to_string(policy) << " depth " << depth);
      ChunkedPipeline<Map<Chain>, ChunkFn<TwoLaunches>> pipe({.chunk_elems = kWindow, .depth = depth, .policy = policy,
                                                              .executor = Executor::graphs, .record_issued = true});
      REQUIRE(pipe.issued_graph().plan.ops.empty());
      poison(out);
      pipe.run(x, out);
      const IssuedGraph g = pipe.issued_graph();
      REQUIRE(g.plan.ops.size() == 4 * ((kElems + kWindow - 1) / kWindow));
      REQUIRE(g.graph.deps.size() == g.plan.ops.size());
      // CUDA holds exactly the edges the plan asks for, and they are safe.
      REQUIRE(g.graph.deps == graph_of(g.plan).deps);
      const HazardReport r = check_hazards(g.plan, g.graph);
      INFO(r);
      REQUIRE(r.ok());
      for (std::size_t i = 0; i < kElems; i += 101) {
        REQUIRE(out[i] == Chain{}(x[i]) + static_cast<float>(i / kWindow) + 1.0f);
      }
    }
  }
}

// Makes CUDA calls fail on purpose, which compute-sanitizer reports as
// errors: gpu-check.sh leaves [cuda-api-errors] out of the sanitizer runs.
TEST_CASE("a stage that cannot be captured is a clear error, and the pipeline goes on on streams",
          "[gpu][graphs][errors][cuda-api-errors]") {
  PinnedArray<float> x(kElems), out(kElems);
  fill(x, 7);
  ChunkedPipeline<ChunkFn<Synchronises>> pipe({.chunk_elems = kWindow, .depth = 2, .executor = Executor::graphs});
  poison(out);
  RunTicket t = pipe.run_async(x, out);
  std::string message;
  try {
    t.wait();
  } catch (const pipeline_error& e) {
    message = e.what();
  }
  INFO(message);
  REQUIRE(message.find("stage 0") != std::string::npos);
  REQUIRE(message.find("captured") != std::string::npos);
  REQUIRE(all_poisoned(out));  // nothing ran, nothing is reported complete
  REQUIRE(pipe.healthy());

  // The next run goes on streams and says why.
  RunTicket again = pipe.run_async(x, out);
  again.wait();
  REQUIRE(again.executor() == Executor::streams);
  REQUIRE(again.executor_note().find("captured") != std::string::npos);
  for (std::size_t i = 0; i < kElems; ++i) REQUIRE(out[i] == x[i] + 2.0f);
  REQUIRE(pipe.graph_stats().on_streams >= 1);
}

TEST_CASE("runs a graph cannot take run on streams and say why", "[gpu][graphs]") {
  const std::size_t n = kElems;
  std::vector<float> pageable(n), got(n);
  for (std::size_t i = 0; i < n; ++i) pageable[i] = value_at(i, 8);
  ChunkedPipeline<Map<Chain>> pipe({.chunk_elems = kWindow, .depth = 3, .executor = Executor::graphs});
  REQUIRE(pipe.plan_for(n, true, false).executor == Executor::streams);
  RunTicket staged = pipe.run_async(pageable, got);
  staged.wait();
  REQUIRE(staged.executor() == Executor::streams);
  REQUIRE(staged.executor_note().find("stages") != std::string::npos);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(got[i] == Chain{}(pageable[i]));

  // Staging::direct measures plain copies, op by op.
  ChunkedPipeline<Map<Chain>> direct({.chunk_elems = kWindow, .depth = 3, .executor = Executor::graphs,
                                      .staging = Staging::direct});
  PinnedArray<float> px(n), py(n);
  fill(px, 13);
  poison(py);
  RunTicket d = direct.run_async(px, py);
  d.wait();
  REQUIRE(d.executor() == Executor::streams);
  REQUIRE(d.executor_note().find("direct") != std::string::npos);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(py[i] == Chain{}(px[i]));
  REQUIRE(direct.graph_stats().on_streams == 1);

  ChunkedPipeline<Map<Chain>> profiled({.chunk_elems = kWindow, .depth = 3, .executor = Executor::graphs, .profile = true});
  PinnedArray<float> x(n), y(n);
  fill(x, 9);
  poison(y);
  profiled.run(x, y);
  const Report r = profiled.report();
  REQUIRE(r.executor == Executor::streams);
  REQUIRE(r.executor_note.find("profiling") != std::string::npos);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(y[i] == Chain{}(x[i]));
}

TEST_CASE("graph runs order with stream runs and with the user's GPU work", "[gpu][graphs][streaming]") {
  const Chain f{};
  const std::size_t n = kElems;
  Options o{.chunk_elems = kWindow, .depth = 3, .policy = Policy::stage_streams, .grain_elems = kWindow,
            .executor = Executor::graphs};
  ChunkedPipeline<Map<Chain>> graphs(o, Map<Chain>{f});
  PinnedArray<float> in(n), mid(n), last(n), staged_out(n);
  fill(in, 10);
  poison(mid);
  poison(last);
  // A graph run, a stream run of the same pipeline reading its output
  // (after(ticket)), then a graph run again reading that: one chain.
  RunTicket first = graphs.run_async(in, mid);
  std::vector<float> pageable(n);
  RunTicket second = graphs.run_async(mid, pageable, after(first));  // staged: on streams
  second.wait();
  REQUIRE(second.executor() == Executor::streams);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(pageable[i] == f(f(in[i])));
  RunTicket third = graphs.run_async(mid, last, after(first));
  Stream user = Stream::create();
  third.enqueue_wait(::cuda::stream_ref(user.get()));
  CHUNKPIPE_CUDA_TRY(cudaStreamSynchronize(user.get()));
  for (std::size_t i = 0; i < n; ++i) REQUIRE(last[i] == f(f(in[i])));
  third.wait();
  first.wait();
  REQUIRE(third.executor() == Executor::graphs);

  // after(stream): a kernel of ours changes the input first.
  poison(last);
  add_offset<<<static_cast<unsigned>((n + 255) / 256), 256, 0, user.get()>>>(in.data(), n, 1.0f);
  CHUNKPIPE_CUDA_TRY(cudaGetLastError());
  RunTicket gated = graphs.run_async(in, last, after(::cuda::stream_ref(user.get())));
  gated.wait();
  for (std::size_t i = 0; i < n; ++i) REQUIRE(last[i] == f(value_at(i, 10) + 1.0f));

  // Back-to-back graph runs over disjoint ranges, interleaved with stream
  // runs of another shape: all complete and right.
  ChunkedPipeline<Map<Chain>> mixed({.chunk_elems = kWindow, .depth = 2, .policy = Policy::slot_streams,
                                     .executor = Executor::graphs});
  std::vector<PinnedArray<float>> ins, outs;
  std::vector<RunTicket> tickets;
  for (int k = 0; k < 6; ++k) {
    ins.emplace_back(n);
    outs.emplace_back(n);
    fill(ins.back(), static_cast<unsigned>(20 + k));
    poison(outs.back());
  }
  std::vector<float> side_in(n / 3), side_out(n / 3);
  for (std::size_t i = 0; i < side_in.size(); ++i) side_in[i] = value_at(i, 30);
  for (int k = 0; k < 6; ++k) {
    tickets.push_back(mixed.run_async(ins[k], outs[k]));
    if (k == 2) tickets.push_back(mixed.run_async(side_in, side_out));
  }
  for (RunTicket& t : tickets) t.wait();
  for (int k = 0; k < 6; ++k) {
    for (std::size_t i = 0; i < n; ++i) REQUIRE(outs[k][i] == f(ins[k][i]));
  }
  for (std::size_t i = 0; i < side_in.size(); ++i) REQUIRE(side_out[i] == f(side_in[i]));
  const GraphStats s = mixed.graph_stats();
  REQUIRE(s.built == 1);
  REQUIRE(s.updated + s.replayed == 5);
}

TEST_CASE("the automatic executor builds a graph once a run shape repeats", "[gpu][graphs]") {
  // Map-only, a small window kept by an explicit policy, many chunks.
  const std::size_t n = graph_min_chunks * kWindow + 77;
  PinnedArray<float> x(n), y(n);
  fill(x, 11);
  ChunkedPipeline<Map<Chain>> pipe({.chunk_elems = kWindow, .depth = 3, .policy = Policy::slot_streams});
  for (int k = 0; k < graph_after_runs + 2; ++k) {
    poison(y);
    RunTicket t = pipe.run_async(x, y);
    t.wait();
    REQUIRE(t.executor() == (k < graph_after_runs ? Executor::streams : Executor::graphs));
    for (std::size_t i = 0; i < n; ++i) REQUIRE(y[i] == Chain{}(x[i]));
  }
  REQUIRE(pipe.graph_stats().built == 1);
  REQUIRE(pipe.graph_stats().replayed == 1);

  // Too few chunks, or a window-level stage: streams.
  PinnedArray<float> small(kWindow * 4), small_out(kWindow * 4);
  fill(small, 12);
  for (int k = 0; k < graph_after_runs + 1; ++k) {
    RunTicket t = pipe.run_async(small, small_out);
    t.wait();
    REQUIRE(t.executor() == Executor::streams);
  }
  ChunkedPipeline<ChunkFn<TwoLaunches>> fn({.chunk_elems = kWindow, .depth = 3, .policy = Policy::slot_streams});
  for (int k = 0; k < graph_after_runs + 1; ++k) {
    RunTicket t = fn.run_async(x, y);
    t.wait();
    REQUIRE(t.executor() == Executor::streams);
  }
}
