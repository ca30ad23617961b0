// SPDX-License-Identifier: MIT
// GPU tests of SpreadPipeline (detail/spread.hpp) on the one GPU a machine
// may have, listed twice: two members with their own slots and streams
// write in place what one pipeline writes, bit for bit, from pinned and
// pageable ranges; a Source is read and a Sink fed in chunk order; an
// error reaches the caller, abort()s the Sink and leaves the pipeline
// usable; a Reduce returns one pipeline's bits; runs queued with run_async
// run in order; a profiled run's report lines its pieces up on one time axis.
#include <chunkpipe/pipeline.cuh>

#include "catch.hpp"
#include "ordered_sink.hpp"
#include "thrown.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

using namespace chunkpipe;
using test_support::contains;
using test_support::OrderedSink;
using test_support::SinkLog;
using test_support::thrown_by;

namespace {

struct Chain {
  int iters = 64;
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const {
    for (int k = 0; k < iters; ++k) x = fmaf(x, 0.999f, 0.0625f);
    return x;
  }
};

float value_at(std::size_t i) { return static_cast<float>((i * 2654435761u) % 8191) / 8191.0f - 0.5f; }

template <class V>
void poison(V& v) {
  std::memset(v.data(), 0xFF, v.size() * sizeof(v.data()[0]));  // NaN as float
}

int current_device() {
  int d = 0;
  REQUIRE(cudaGetDevice(&d) == cudaSuccess);
  return d;
}

Options spread_options(int device) {
  Options o;
  o.chunk_elems = std::size_t{1} << 16;
  o.policy = Policy::stage_streams;
  o.depth = 3;
  o.devices = {device, device};
  return o;
}

// out[i] = in[i] + offset + i + 1000 * chunk: what a chunk's context says
// shows in every element.
__global__ void label_elements(const float* in, double* out, std::size_t n, std::size_t offset, std::size_t chunk) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = static_cast<double>(in[i]) + static_cast<double>(offset + i) + 1000.0 * static_cast<double>(chunk);
}

// Every (chunk, offset, count) a ChunkFn's context gave it.
struct ContextLog {
  std::mutex m;
  std::vector<std::tuple<std::size_t, std::size_t, std::size_t>> seen;
  bool misuse = false;
  std::vector<std::tuple<std::size_t, std::size_t, std::size_t>> sorted() {
    std::lock_guard<std::mutex> lock(m);
    auto v = seen;
    std::sort(v.begin(), v.end());
    return v;
  }
};

// A CUDA ChunkFn launching label_elements on ctx.stream, logging its context.
struct Labeller {
  ContextLog* log;
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    {
      std::lock_guard<std::mutex> lock(log->m);
      log->seen.emplace_back(ctx.chunk, ctx.offset, ctx.count);
      if (ctx.backend != Backend::cuda) log->misuse = true;
    }
    if (ctx.count == 0) return;
    const unsigned blocks = static_cast<unsigned>((ctx.count + 255) / 256);
    label_elements<<<blocks, 256, 0, ctx.stream.get()>>>(ctx.template in<0>().data(), ctx.template out<0>().data(),
                                                          ctx.count, ctx.offset, ctx.chunk);
  }
};

// Holds a stream for about `cycles` clock ticks: work a run ordered after
// that stream must not overtake.
__global__ void spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// Keeps every element: a counting run whose output is its input.
struct All {
  CHUNKPIPE_HOST_DEVICE bool operator()(float) const { return true; }
};

__global__ void fill_values(float* out, std::size_t n) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = static_cast<float>((i * 2654435761u) % 8191) / 8191.0f - 0.5f;  // value_at(i)
}

}  // namespace

TEST_CASE("a ChunkFn spread over the same GPU twice sees the run's chunk numbers and offsets", "[gpu][spread]") {
  const int dev = current_device();
  const Chain f{16};
  for (const Executor executor : {Executor::automatic, Executor::graphs}) {
    INFO("executor " << (executor == Executor::graphs ? "graphs" : "automatic"));
    Options o = spread_options(dev);
    o.executor = executor;
    ContextLog log, plain_log;
    SpreadPipeline<Map<Chain>, ChunkFn<Labeller, double>> spread(o, Map<Chain>{f},
                                                                  ChunkFn<Labeller, double>{Labeller{&log}});
    const std::size_t piece = spread.piece_elems();
    REQUIRE(piece == SpreadPipeline<Map<Chain>>::piece_units * o.chunk_elems);  // a ChunkFn keeps the window
    const std::size_t n = 12 * piece + 12345;  // a ragged last piece, its last chunk short
    PinnedArray<float> in(n);
    PinnedArray<double> out(n), want(n);
    for (std::size_t i = 0; i < n; ++i) in.data()[i] = value_at(i);
    Options plain = o;
    plain.devices.clear();
    poison(want);
    ChunkedPipeline<Map<Chain>, ChunkFn<Labeller, double>>(plain, Map<Chain>{f},
                                                           ChunkFn<Labeller, double>{Labeller{&plain_log}})
        .run(in, want);
    const std::size_t chunk = o.chunk_elems;
    for (std::size_t i = 0; i < n; i += 4099) {
      REQUIRE(std::fabs(want.data()[i] - static_cast<double>(f(in.data()[i])) - static_cast<double>(i) -
                        1000.0 * static_cast<double>(i / chunk)) <= 1e-5);
    }
    const auto plain_seen = plain_log.sorted();
    REQUIRE(plain_seen.size() == (n + chunk - 1) / chunk);

    for (int round = 0; round < 3; ++round) {  // graphs: a repeated length would replay
      INFO("round " << round);
      {
        std::lock_guard<std::mutex> lock(log.m);
        log.seen.clear();
      }
      poison(out);
      const SpreadSummary s = spread.run(in, out);
      CHECK(s.pieces[0] + s.pieces[1] == 13);
      REQUIRE(std::memcmp(out.data(), want.data(), n * sizeof(double)) == 0);
      CHECK_FALSE(log.misuse);
      auto seen = log.sorted();
      auto expect = plain_seen;
      if (executor == Executor::graphs && round > 0) {
        // Piece 0 (label 0) may be a graph's replay, which calls no
        // ChunkFn; every other piece is labelled and goes on streams.
        auto early = [](const auto& t) { return std::get<0>(t) < SpreadPipeline<Map<Chain>>::piece_units; };
        seen.erase(std::remove_if(seen.begin(), seen.end(), early), seen.end());
        expect.erase(std::remove_if(expect.begin(), expect.end(), early), expect.end());
      }
      REQUIRE(seen == expect);
    }
    if (executor == Executor::graphs) {
      // The labelled pieces said why they ran on streams.
      std::size_t on_streams = 0;
      for (std::size_t m = 0; m < spread.members(); ++m) on_streams += spread.member(m).graph_stats().on_streams;
      CHECK(on_streams >= 3 * 12);
      CHECK(contains(spread.member(0).graph_stats().last_note + spread.member(1).graph_stats().last_note,
                     "spread run's piece"));
    }

    // Pageable ranges, staged by each member's host threads.
    std::vector<float> pin(in.data(), in.data() + n);
    std::vector<double> pout(n);
    poison(pout);
    spread.run(pin, pout);
    REQUIRE(std::memcmp(pout.data(), want.data(), n * sizeof(double)) == 0);
  }
}

TEST_CASE("a pipeline spread over the same GPU twice writes what one pipeline writes", "[gpu][spread]") {
  const int dev = current_device();
  const Chain f{64};
  using Spread = SpreadPipeline<Map<Chain>>;
  Spread spread(spread_options(dev), Map<Chain>{f});
  REQUIRE(spread.members() == 2);
  const std::size_t piece = spread.piece_elems();
  const std::size_t n = 20 * piece + 12345;
  PinnedArray<float> in(n), out(n), want(n);
  for (std::size_t i = 0; i < n; ++i) in.data()[i] = value_at(i);
  Options plain = spread_options(dev);
  plain.devices.clear();
  poison(want);
  ChunkedPipeline<Map<Chain>>(plain, Map<Chain>{f}).run(in, want);
  for (std::size_t i = 0; i < n; i += 4099) REQUIRE(std::fabs(want.data()[i] - f(in.data()[i])) <= 1e-5f);

  poison(out);
  const SpreadSummary s = spread.run(in, out);
  REQUIRE(std::memcmp(out.data(), want.data(), n * sizeof(float)) == 0);
  CHECK(s.elems == n);
  REQUIRE(s.pieces.size() == 2);
  CHECK(s.pieces[0] + s.pieces[1] == 21);
  INFO("pieces: " << s.pieces[0] << " and " << s.pieces[1]);
  CHECK(std::min(s.pieces[0], s.pieces[1]) >= 1);

  // Pageable ranges, staged by each member's own host threads.
  std::vector<float> pin(in.data(), in.data() + n), pout(n);
  poison(pout);
  spread.run(pin, pout);
  REQUIRE(std::memcmp(pout.data(), want.data(), n * sizeof(float)) == 0);
}

TEST_CASE("a spread pipeline reads a Source and feeds a Sink in chunk order on the GPU", "[gpu][spread]") {
  const int dev = current_device();
  const Chain f{16};
  SpreadPipeline<Map<Chain>> spread(spread_options(dev), Map<Chain>{f});
  const std::size_t n = 9 * spread.piece_elems() + 777;
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = value_at(i);
  std::vector<float> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = f(x[i]);  // the host and the GPU agree: same FMAs in order

  std::vector<float> got(n);
  poison(got);
  SinkLog log;
  std::size_t read = 0;
  bool misuse = false;
  auto src = source<float>([&](std::size_t chunk, ::cuda::std::span<float> slot) {
    if (chunk != read) misuse = true;
    ++read;
    const std::size_t begin = chunk * slot.size();
    const std::size_t count = begin < n ? std::min(slot.size(), n - begin) : 0;
    std::memcpy(slot.data(), x.data() + begin, count * sizeof(float));
    return count;
  });
  using Out = Sink<float, OrderedSink<float>>;
  const SpreadSummary s = spread.run(std::move(src), Out{OrderedSink<float>{&log, got.data(), n}});
  CHECK_FALSE(misuse);
  CHECK_FALSE(log.misuse);
  CHECK(log.finished == 1);
  CHECK(log.aborted == 0);
  CHECK(s.elems == n);
  CHECK(log.next_offset == n);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += std::fabs(got[i] - want[i]) <= 1e-5f ? 0 : 1;
  CHECK(wrong == 0);

  // A Source that fails: the caller gets its error, the Sink is aborted,
  // and the pipeline runs again.
  SinkLog failed_log;
  auto failing = source<float>([&](std::size_t chunk, ::cuda::std::span<float> slot) -> std::size_t {
    if (chunk == 30) throw std::runtime_error("source failed on purpose");
    std::fill(slot.begin(), slot.end(), 0.25f);
    return slot.size();
  });
  const std::string what =
      thrown_by([&] { spread.run(std::move(failing), Out{OrderedSink<float>{&failed_log, got.data(), n}}); });
  CHECK(contains(what, "source failed on purpose"));
  CHECK(failed_log.finished == 0);
  CHECK(failed_log.aborted == 1);
  PinnedArray<float> in(n), out(n);
  std::memcpy(in.data(), x.data(), n * sizeof(float));
  poison(out);
  spread.run(in, out);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(std::fabs(out.data()[i] - want[i]) <= 1e-5f);
}

namespace {
struct Plus {
  CHUNKPIPE_HOST_DEVICE float operator()(float a, float b) const { return a + b; }
};
}  // namespace

TEST_CASE("a Reduce spread over the same GPU twice returns the bits one pipeline returns", "[gpu][spread][records]") {
  const int dev = current_device();
  const Chain f{16};
  const auto sum = reduce(0.25f, Plus{}, 4096);
  SpreadPipeline<Map<Chain>, Reduce<float, Plus>> spread(spread_options(dev), Map<Chain>{f}, sum);
  const std::size_t n = 20 * spread.piece_elems() + 12345;  // a ragged piece, the last segment short
  PinnedArray<float> in(n);
  for (std::size_t i = 0; i < n; ++i) in.data()[i] = value_at(i) * 1000.0f;
  Options plain = spread_options(dev);
  plain.devices.clear();
  const float want = ChunkedPipeline<Map<Chain>, Reduce<float, Plus>>(plain, Map<Chain>{f}, sum).run(in);
  double exact = 0.25;
  for (std::size_t i = 0; i < n; ++i) exact += static_cast<double>(f(in.data()[i]));
  INFO("one pipeline " << want << ", exact " << exact);
  REQUIRE(std::fabs(want - exact) <= 1e-4 * static_cast<double>(n));

  const float got = spread.run(in);
  CHECK(std::memcmp(&got, &want, sizeof got) == 0);
  const SpreadSummary s = spread.last_summary();
  REQUIRE(s.pieces.size() == 2);
  CHECK(s.pieces[0] + s.pieces[1] == 21);
  CHECK(std::min(s.pieces[0], s.pieces[1]) >= 1);

  // Pageable, and from a Source: the same bits.
  std::vector<float> pageable(in.data(), in.data() + n);
  const float staged = spread.run(pageable);
  CHECK(std::memcmp(&staged, &want, sizeof staged) == 0);
  std::size_t next = 0;
  auto src = source<float>([&](std::size_t, ::cuda::std::span<float> slot) {
    const std::size_t k = std::min(slot.size(), n - next);
    std::memcpy(slot.data(), pageable.data() + next, k * sizeof(float));
    next += k;
    return k;
  });
  const float sourced = spread.run(std::move(src));
  CHECK(std::memcmp(&sourced, &want, sizeof sourced) == 0);
  CHECK(spread.last_summary().elems == n);
}

TEST_CASE("runs queued with run_async over the same GPU twice run in order and write what one pipeline writes",
          "[gpu][spread][async]") {
  const int dev = current_device();
  const Chain f{64};
  SpreadPipeline<Map<Chain>> spread(spread_options(dev), Map<Chain>{f});
  const std::size_t n = 9 * spread.piece_elems() + 4321;
  PinnedArray<float> a(n), b(n), c(n), want_b(n), want_c(n);
  for (std::size_t i = 0; i < n; ++i) a.data()[i] = value_at(i);
  Options plain = spread_options(dev);
  plain.devices.clear();
  ChunkedPipeline<Map<Chain>> one(plain, Map<Chain>{f});
  poison(want_b);
  poison(want_c);
  one.run(a, want_b);
  one.run(want_b, want_c);
  for (std::size_t i = 0; i < n; i += 4099) REQUIRE(std::fabs(want_c.data()[i] - f(f(a.data()[i]))) <= 1e-5f);

  // The second run reads what the first writes: queued behind it, it
  // starts once the first is complete. A third, pageable, behind both.
  poison(b);
  poison(c);
  std::vector<float> d(n);
  poison(d);
  auto t1 = spread.run_async(a, b);
  auto t2 = spread.run_async(b, c);
  auto t3 = spread.run_async(a, d);
  CHECK(t3.get().elems == n);
  CHECK(t1.ready());
  CHECK(t2.ready());
  CHECK(std::memcmp(b.data(), want_b.data(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(c.data(), want_c.data(), n * sizeof(float)) == 0);
  CHECK(std::memcmp(d.data(), want_b.data(), n * sizeof(float)) == 0);
  const SpreadSummary s = t2.get();
  REQUIRE(s.pieces.size() == 2);
  CHECK(s.pieces[0] + s.pieces[1] == 10);

  // Runs over parts of one range touch nothing of each other's: each
  // continues the one before it (its pieces go out while the earlier
  // run's are in flight), and together they write what one run writes.
  poison(c);
  std::vector<SpreadTicket<SpreadSummary>> parts;
  const std::size_t part = spread.piece_elems() + 777;
  for (std::size_t first = 0; first < n; first += part) {
    const std::size_t len = std::min(part, n - first);
    parts.push_back(spread.run_async(host_span(static_cast<const float*>(a.data()) + first, len, Memory::pinned),
                                     host_span(c.data() + first, len, Memory::pinned)));
  }
  for (std::size_t k = parts.size(); k-- > 0;) {
    CHECK(parts[k].get().elems == std::min(part, n - k * part));
    for (std::size_t j = 0; j < k; ++j) CHECK(parts[j].ready());  // complete in queue order
  }
  CHECK(std::memcmp(c.data(), want_b.data(), n * sizeof(float)) == 0);

  // A queued Reduce returns the blocking run's bits.
  const auto sum = reduce(0.25f, Plus{}, 4096);
  SpreadPipeline<Map<Chain>, Reduce<float, Plus>> total(spread_options(dev), Map<Chain>{f}, sum);
  const float want = total.run(a);
  auto r1 = total.run_async(a);
  auto r2 = total.run_async(b);
  const float got = r1.get(), got_b = r2.get();
  CHECK(std::memcmp(&got, &want, sizeof got) == 0);
  const float want_of_b = ChunkedPipeline<Map<Chain>, Reduce<float, Plus>>(plain, Map<Chain>{f}, sum).run(b);
  CHECK(std::memcmp(&got_b, &want_of_b, sizeof got_b) == 0);
}

namespace {
struct KeepAbove {
  float t;
  CHUNKPIPE_HOST_DEVICE bool operator()(float x) const { return x > t; }
};
}  // namespace

TEST_CASE("a Filter spread over the same GPU twice packs what one pipeline packs", "[gpu][spread][counted]") {
  const int dev = current_device();
  const Chain f{16};
  using Keep = Filter<KeepAbove>;
  SpreadPipeline<Map<Chain>, Keep> spread(spread_options(dev), Map<Chain>{f}, Keep{KeepAbove{1.0f}});
  const std::size_t n = 20 * spread.piece_elems() + 12345;
  PinnedArray<float> in(n);
  for (std::size_t i = 0; i < n; ++i) in.data()[i] = value_at(i);
  Options plain = spread_options(dev);
  plain.devices.clear();
  ChunkedPipeline<Map<Chain>, Keep> one(plain, Map<Chain>{f}, Keep{KeepAbove{1.0f}});
  PinnedArray<float> want(n);
  poison(want);
  const std::size_t count = one.run(in, want);
  std::size_t kept = 0;  // the host's count (the same FMAs in order): about half
  for (std::size_t i = 0; i < n; ++i) kept += f(in.data()[i]) > 1.0f;
  REQUIRE(count == kept);
  REQUIRE(count > n / 10);
  REQUIRE(count < n - n / 10);

  PinnedArray<float> out(n);
  poison(out);
  CHECK(spread.run(in, out) == count);  // undeclared memory: through the piece buffers
  CHECK(std::memcmp(out.data(), want.data(), n * sizeof(float)) == 0);  // the tail left poisoned too
  CHECK(spread.last_summary().in_place == 0);
  poison(out);
  CHECK(spread.run(in, host_span(out, Memory::pinned)) == count);
  CHECK(std::memcmp(out.data(), want.data(), n * sizeof(float)) == 0);
  const SpreadSummary s = spread.last_summary();
  CHECK(s.written == count);
  REQUIRE(s.pieces.size() == 2);
  CHECK(s.pieces[0] + s.pieces[1] == 21);
  CHECK(std::min(s.pieces[0], s.pieces[1]) >= 1);
  // Outputs declared pinned: pieces whose earlier pieces were counted by
  // their first packed chunk went straight into `out`; the first piece always.
  CHECK(s.in_place >= 1);
  CHECK(s.in_place <= 21);

  // Into a Sink: the calls one pipeline makes, in the same order.
  using Call = std::tuple<std::size_t, std::size_t, std::size_t>;
  std::vector<Call> one_calls, spread_calls;
  std::vector<float> one_data, spread_data;
  auto log_into = [](std::vector<Call>& calls, std::vector<float>& data) {
    return sink<float>([&calls, &data](std::size_t k, std::size_t at, ::cuda::std::span<const float> d) {
      calls.emplace_back(k, at, d.size());
      data.insert(data.end(), d.begin(), d.end());
    });
  };
  CHECK(one.run(in, log_into(one_calls, one_data)) == count);
  CHECK(spread.run(in, log_into(spread_calls, spread_data)) == count);
  CHECK(spread_calls == one_calls);
  CHECK(spread_data.size() == count);
  CHECK(std::memcmp(spread_data.data(), want.data(), count * sizeof(float)) == 0);

  // Pageable, and an output too short: what fits, and one pipeline's error.
  std::vector<float> pageable(in.data(), in.data() + n), pout(n);
  poison(pout);
  CHECK(spread.run(pageable, pout) == count);
  CHECK(std::memcmp(pout.data(), want.data(), n * sizeof(float)) == 0);
  CHECK(spread.last_summary().in_place == 0);  // pageable outputs: every piece through its buffer
  const std::size_t room = count / 2;
  std::vector<float> short_one(count), short_spread(count);
  poison(short_one);
  poison(short_spread);
  const std::string one_error = thrown_by([&] { (void)one.run(in, host_span(short_one.data(), room)); });
  REQUIRE(contains(one_error, "emitted"));
  CHECK(thrown_by([&] { (void)spread.run(in, host_span(short_spread.data(), room)); }) == one_error);
  CHECK(std::memcmp(short_spread.data(), want.data(), room * sizeof(float)) == 0);
  CHECK(std::memcmp(short_spread.data() + room, short_one.data() + room, (count - room) * sizeof(float)) == 0);
  // The same into pinned memory, where pieces pack in place: what fits,
  // nothing past it, the same error.
  PinnedArray<float> short_pinned(count);
  poison(short_pinned);
  CHECK(thrown_by([&] { (void)spread.run(in, host_span(short_pinned.data(), room, Memory::pinned)); }) == one_error);
  CHECK(std::memcmp(short_pinned.data(), want.data(), room * sizeof(float)) == 0);
  CHECK(std::memcmp(short_pinned.data() + room, short_one.data() + room, (count - room) * sizeof(float)) == 0);
  CHECK(spread.run(in, out) == count);
}

TEST_CASE("a profiled spread run reports every piece on one time axis, one row set per member", "[gpu][spread][report]") {
  const int dev = current_device();
  const Chain f{64};
  Options o = spread_options(dev);
  o.profile = true;
  SpreadPipeline<Map<Chain>> spread(o, Map<Chain>{f});
  CHECK(thrown_by([&] { (void)spread.report(); }).find("no report") != std::string::npos);
  const std::size_t n = 12 * spread.piece_elems() + 777;
  PinnedArray<float> in(n), out(n), want(n);
  for (std::size_t i = 0; i < n; ++i) in.data()[i] = value_at(i);
  Options plain = spread_options(dev);
  plain.devices.clear();
  poison(want);
  ChunkedPipeline<Map<Chain>>(plain, Map<Chain>{f}).run(in, want);
  poison(out);
  const SpreadSummary s = spread.run(in, out);
  REQUIRE(std::memcmp(out.data(), want.data(), n * sizeof(float)) == 0);
  const Report r = spread.report();
  INFO(r);
  REQUIRE(r.devices.size() == 2);
  CHECK(r.chunks == s.chunks);
  CHECK(r.elems == n);
  // Every chunk of the run once per kind, on the member that ran its piece,
  // in order: copy in, kernel, copy out.
  std::vector<int> seen(3 * s.chunks, 0);
  std::vector<const TimedOp*> of(3 * s.chunks, nullptr);
  std::vector<std::size_t> per_member(2, 0);
  for (const TimedOp& op : r.ops) {
    REQUIRE(op.chunk < s.chunks);
    REQUIRE((op.device == 0 || op.device == 1));
    const std::size_t k = op.kind == OpKind::h2d ? 0 : op.kind == OpKind::stage ? 1 : 2;
    ++seen[3 * op.chunk + k];
    of[3 * op.chunk + k] = &op;
    if (k == 0) ++per_member[static_cast<std::size_t>(op.device)];
  }
  CHECK(std::count(seen.begin(), seen.end(), 1) == static_cast<long>(seen.size()));
  CHECK(std::min(per_member[0], per_member[1]) >= 1);
  const double tol = 2e-3;  // ms: CUDA events resolve about half a microsecond
  // Across streams the timing events of two ops are stamped by different
  // engines after the one that orders them: under racecheck a copy out's
  // start came 2.9 us before its kernel's end (2026-12-03), so allow 10.
  const double across = 1e-2;
  for (std::size_t c = 0; c < s.chunks; ++c) {
    const TimedOp *a = of[3 * c], *k = of[3 * c + 1], *d = of[3 * c + 2];
    if (!a || !k || !d) continue;
    CHECK(a->device == k->device);
    CHECK(k->device == d->device);
    CHECK(a->end_ms <= k->start_ms + across);
    CHECK(k->end_ms <= d->start_ms + across);
  }
  // A stream runs one op at a time, also across pieces: each piece's clock
  // (where it sits on its member's) lines its ops up with the pieces'
  // before it.
  std::size_t crossings = 0;
  for (std::size_t q = 0; q < r.queues.size(); ++q) {
    std::vector<const TimedOp*> on;
    for (const TimedOp& op : r.ops) {
      if (op.queue == static_cast<int>(q)) on.push_back(&op);
    }
    std::sort(on.begin(), on.end(), [](const TimedOp* x, const TimedOp* y) { return x->id < y->id; });
    for (std::size_t i = 1; i < on.size(); ++i) {
      INFO("queue " << r.queues[q].name << ", op " << on[i]->id);
      CHECK(on[i]->start_ms >= on[i - 1]->end_ms - tol);
      if (on[i]->chunk / SpreadPipeline<Map<Chain>>::piece_units != on[i - 1]->chunk / SpreadPipeline<Map<Chain>>::piece_units)
        ++crossings;
    }
  }
  CHECK(crossings > 0);  // the check above did span pieces
  const std::string text = ascii_timeline(r, 80);
  CHECK(text.find("m1 (device " + std::to_string(dev) + ") H2D") != std::string::npos);

  // A call refused before anything was queued is no run: the report
  // stays. A run that fails leaves none behind.
  std::vector<float> short_out(n - 1);
  CHECK(contains(thrown_by([&] { spread.run(in, short_out); }), "input elements"));
  CHECK(spread.report().ops.size() == r.ops.size());
  auto failing = source<float>([&](std::size_t chunk, ::cuda::std::span<float> slot) -> std::size_t {
    if (chunk == 3) throw std::runtime_error("source failed on purpose");
    std::fill(slot.begin(), slot.end(), 0.5f);
    return slot.size();
  });
  PinnedArray<float> big(n);
  CHECK(contains(thrown_by([&] { spread.run(std::move(failing), big); }), "source failed on purpose"));
  CHECK(contains(thrown_by([&] { (void)spread.report(); }), "no report"));
}

TEST_CASE("a spread pipeline refuses devices that do not exist", "[gpu][spread][errors]") {
  int count = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  Options o = spread_options(current_device());
  o.devices = {0, count};
  CHECK(contains(thrown_by([&] { SpreadPipeline<Map<Chain>> s(o, Map<Chain>{Chain{}}); }), "does not exist"));
}

TEST_CASE("a spread run ordered after a stream, an event or a pipeline's run reads what they wrote",
          "[gpu][spread][after]") {
  const int dev = current_device();
  const Chain f{16};
  SpreadPipeline<Map<Chain>> spread(spread_options(dev), Map<Chain>{f});
  const std::size_t n = 6 * spread.piece_elems() + 999;
  PinnedArray<float> in(n), want(n), out(n);
  for (std::size_t i = 0; i < n; ++i) in.data()[i] = value_at(i);
  Options plain = spread_options(dev);
  plain.devices.clear();
  ChunkedPipeline<Map<Chain>> one(plain, Map<Chain>{f});
  one.run(in, want);
  DeviceBuffer d(n * sizeof(float));
  float* made = reinterpret_cast<float*>(d.data());
  Stream user = Stream::create();
  const unsigned blocks = static_cast<unsigned>((n + 255) / 256);
  // The input is made on the GPU behind 100 ms or so of other work, then
  // copied into the spread's input: the spread must not start before.
  auto make_input = [&] {
    poison(in);
    poison(out);
    spin<<<1, 1, 0, user.get()>>>(200'000'000LL);
    fill_values<<<blocks, 256, 0, user.get()>>>(made, n);
    REQUIRE(cudaMemcpyAsync(in.data(), made, n * sizeof(float), cudaMemcpyDeviceToHost, user.get()) == cudaSuccess);
  };

  SECTION("after(stream)") {
    make_input();
    auto t = spread.run_async(in, out, after(user.get()));
    CHECK(cudaStreamQuery(user.get()) == cudaErrorNotReady);  // the caller was not held
    CHECK(t.get().elems == n);
    REQUIRE(std::memcmp(out.data(), want.data(), n * sizeof(float)) == 0);
  }
  SECTION("after(event)") {
    make_input();
    Event e = Event::create();
    REQUIRE(cudaEventRecord(e.get(), user.get()) == cudaSuccess);
    auto t = spread.run_async(in, out, after(e.get()));
    t.wait();
    REQUIRE(std::memcmp(out.data(), want.data(), n * sizeof(float)) == 0);
  }
  SECTION("after(ticket) of one pipeline's run, then of a spread run") {
    PinnedArray<float> mid(n), last(n);
    poison(mid);
    poison(last);
    make_input();
    // The third run is another spread's, which does not see the second's
    // ranges: only after(second) orders it.
    SpreadPipeline<Map<Chain>> other(spread_options(dev), Map<Chain>{f});
    RunTicket first = one.run_async(in, mid, after(user.get()));  // mid = f(in)
    auto second = spread.run_async(mid, out, after(first));      // out = f(f(in))
    auto third = other.run_async(out, last, after(second));      // last = f(f(f(in)))
    third.wait();
    REQUIRE(std::memcmp(mid.data(), want.data(), n * sizeof(float)) == 0);
    PinnedArray<float> want3(n);
    poison(want3);
    one.run(want, out);
    one.run(out, want3);
    REQUIRE(std::memcmp(last.data(), want3.data(), n * sizeof(float)) == 0);
  }
  SECTION("after(ticket) of a counting run's ResultTicket") {
    // A Filter that keeps everything, so what it packs is its input.
    ChunkedPipeline<Filter<All>> keep(plain, filter(All{}));
    PinnedArray<float> mid(n);
    poison(mid);
    make_input();
    ResultTicket<std::size_t, RunTicket> kept = keep.run_async(in, mid, after(user.get()));
    auto t = spread.run_async(mid, out, after(kept));
    t.wait();
    REQUIRE(kept.get() == n);
    REQUIRE(std::memcmp(out.data(), want.data(), n * sizeof(float)) == 0);
  }
  REQUIRE(cudaStreamSynchronize(user.get()) == cudaSuccess);
}

// Threads of this process now (Linux: /proc/self/task).
std::size_t threads_now() {
  std::size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task")) n += e.is_directory() ? 1 : 0;
  return n;
}

TEST_CASE("a spread's members stage pageable runs with one copy team of twice host_threads", "[gpu][spread]") {
  const int dev = current_device();
  const Chain f{16};
  const std::size_t n = std::size_t{3} << 22;  // 12 Mi floats: every member stages pieces both ways
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = value_at(i);
  // The threads a spread over the same GPU twice holds after a pageable run
  // with Options::host_threads = h.
  auto held_after_run = [&](int h) {
    Options o = spread_options(dev);
    o.chunk_elems = std::size_t{1} << 18;  // 1 MiB copies: the team splits them
    o.host_threads = h;
    SpreadPipeline<Map<Chain>> spread(o, Map<Chain>{f});
    std::vector<float> y(n);
    poison(y);
    const SpreadSummary s = spread.run(x, y);
    REQUIRE(s.pieces[0] > 0);
    REQUIRE(s.pieces[1] > 0);  // both members staged
    for (std::size_t i = 0; i < n; i += 4099) REQUIRE(y[i] == f(x[i]));
    return threads_now();
  };
  held_after_run(2);  // CUDA's own threads start with the first
  const std::size_t few = held_after_run(2);
  const std::size_t many = held_after_run(6);
  // One team of 2h threads for both members (the caller and 2h - 1
  // helpers): 3 helpers at h = 2, 11 at h = 6, 8 more. A team of h for each
  // member's host lane (in and out, two members: four teams) would add 16.
  CHECK(many - few == 8);
}
