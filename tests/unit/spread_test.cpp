// SPDX-License-Identifier: MIT
// Runs spread over several pipelines (detail/spread.hpp) on the host
// backend's virtual devices: outputs land in place bit for bit as one
// pipeline writes them, pieces go to whichever member has room, a Source is
// read and a Sink fed in chunk order with the reorder buffer bounded, and
// an error on one member reaches the caller, stops the others and finishes
// nothing; record stages (Reduce, Accumulate, PerChunk) give what one
// pipeline gives, to the bit.
#include <chunkpipe/host_backend.hpp>
#include <chunkpipe/spread.hpp>

#include "catch.hpp"
#include "float_data.hpp"
#include "ordered_sink.hpp"
#include "replay.hpp"
#include "thrown.hpp"
#include "trace_records.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

using namespace chunkpipe;
using test_support::bits;
using test_support::poisoned;
using test_support::contains;
using test_support::OrderedSink;
using test_support::SinkLog;
using test_support::thrown_by;

namespace {

struct Fma {
  float a, b;
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return std::fma(x, a, b); }
};

struct Saxpy {
  float a;
  CHUNKPIPE_HOST_DEVICE float operator()(float x, float y) const { return a * x + y; }
};

// Fma whose first call, on whichever member runs it, stalls that member
// for `stall_ms`: a slow device. And it throws on the value `bad`.
struct Stalling {
  std::atomic<int>* calls;  // the test's; Map functors are trivially copyable
  int stall_ms = 0;
  float bad = -1.0f;
  float operator()(float x) const {
    if (calls->fetch_add(1) == 0 && stall_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(stall_ms));
    if (x == bad) throw std::runtime_error("stage failed on purpose");
    return std::fma(x, 2.0f, 1.0f);
  }
};

float value_at(std::size_t i) { return static_cast<float>(i % 4093) / 4093.0f - 0.5f; }

std::vector<float> values(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value_at(i);
  return v;
}

constexpr float poison_value = -12345.0f;

// The calls the Sources of queued runs made (logged_source): each call's
// run, in call order, and whether two calls ever overlapped.
struct ReadLog {
  std::mutex m;
  std::vector<std::size_t> reads;
  std::atomic<int> inside{0};  // calls in progress, of any run
  std::atomic<bool> overlapped{false};
};

// A Source over `data` (which must outlive the run) that logs each call as
// run `run`'s in `log`, staying in the call a little so that overlapping
// calls show, and throws on its call number `throw_at` (counting from 0).
auto logged_source(ReadLog& log, const std::vector<float>& data, std::size_t run,
                   std::size_t throw_at = static_cast<std::size_t>(-1)) {
  return source<float>([&log, &data, run, throw_at, next = std::size_t{0}, call = std::size_t{0}](
                           std::size_t, ::cuda::std::span<float> slot) mutable {
    if (log.inside.fetch_add(1) != 0) log.overlapped = true;
    {
      std::lock_guard<std::mutex> lock(log.m);
      log.reads.push_back(run);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    log.inside.fetch_sub(1);
    if (call++ == throw_at) throw std::runtime_error("source failed on purpose");
    const std::size_t k = std::min(slot.size(), data.size() - next);
    std::copy(data.begin() + static_cast<std::ptrdiff_t>(next), data.begin() + static_cast<std::ptrdiff_t>(next + k),
              slot.begin());
    next += k;
    return k;
  });
}

Options spread_options(std::vector<int> devices) {
  Options o;
  o.chunk_elems = 1000;
  o.depth = 3;
  o.devices = std::move(devices);
  return o;
}

using Spread1 = HostSpreadPipeline<Map<Fma>>;
constexpr std::size_t piece_elems = Spread1::piece_units * 1000;

// Every (chunk, offset, count) a ChunkFn's context gave it, from whichever
// member's thread called it.
struct ContextLog {
  std::mutex m;
  std::vector<std::tuple<std::size_t, std::size_t, std::size_t>> seen;
  bool misuse = false;  // not the host backend, or spans that are not count long
  std::vector<std::tuple<std::size_t, std::size_t, std::size_t>> sorted() {
    std::lock_guard<std::mutex> lock(m);
    auto v = seen;
    std::sort(v.begin(), v.end());
    return v;
  }
};

// ChunkFn whose output depends on its context's chunk and offset and on
// each element's place in the chunk, and that logs what it saw.
struct Labeller {
  ContextLog* log;
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    auto in = ctx.template in<0>();
    auto out = ctx.template out<0>();
    {
      std::lock_guard<std::mutex> lock(log->m);
      log->seen.emplace_back(ctx.chunk, ctx.offset, ctx.count);
      if (ctx.backend != Backend::host || in.size() != ctx.count || out.size() != ctx.count) log->misuse = true;
    }
    for (std::size_t i = 0; i < ctx.count; ++i) {
      out[i] = static_cast<double>(in[i]) + static_cast<double>(ctx.offset + i) + 1000.0 * static_cast<double>(ctx.chunk);
    }
  }
};

using Labelled = HostSpreadPipeline<Map<Fma>, ChunkFn<Labeller, double>>;

}  // namespace

TEST_CASE("a spread run writes in place what one pipeline writes, over every member", "[spread]") {
  const Fma f{1.5f, -0.25f};
  const std::size_t n = 10 * piece_elems + 2345;  // ten pieces and a ragged one
  const std::vector<float> x = values(n);
  std::vector<float> want(n, poison_value);
  HostPipeline<Map<Fma>>(spread_options({}), Map<Fma>{f}).run(x, want);
  for (std::size_t i = 0; i < n; i += 997) REQUIRE(want[i] == std::fma(x[i], f.a, f.b));

  for (const std::vector<int>& devices : {std::vector<int>{0}, std::vector<int>{0, 1}, std::vector<int>{0, 0, 1}}) {
    Spread1 spread(spread_options(devices), Map<Fma>{f});
    REQUIRE(spread.members() == devices.size());
    std::vector<float> out(n, poison_value);
    const SpreadSummary s = spread.run(x, out);
    INFO(devices.size() << " members");
    REQUIRE(std::memcmp(out.data(), want.data(), n * sizeof(float)) == 0);
    CHECK(s.elems == n);
    CHECK(s.chunks == (n + 999) / 1000);
    REQUIRE(s.pieces.size() == devices.size());
    std::size_t pieces = 0;
    for (std::size_t p : s.pieces) pieces += p;
    CHECK(pieces == 11);
    // The same pipeline runs again, and an empty run is one.
    std::fill(out.begin(), out.end(), poison_value);
    spread.run(x, out);
    REQUIRE(std::memcmp(out.data(), want.data(), n * sizeof(float)) == 0);
    const std::vector<float> none;
    std::vector<float> none_out;
    CHECK(spread.run(none, none_out).elems == 0);
  }

  // Several inputs, and slices of larger arrays.
  HostSpreadPipeline<Map<Saxpy>> saxpy(spread_options({0, 1}), Map<Saxpy>{Saxpy{3.0f}});
  const std::vector<float> y = values(n + 7);
  std::vector<float> z(n, poison_value);
  saxpy.run(inputs(x, host_span(y.data() + 7, n)), outputs(z));
  for (std::size_t i = 0; i < n; ++i) REQUIRE(z[i] == 3.0f * x[i] + y[i + 7]);
}

TEST_CASE("a ChunkFn on a spread run sees the run's chunk numbers, offsets and counts", "[spread][chunk_fn]") {
  const Fma f{1.5f, -0.25f};
  const std::size_t n = 10 * piece_elems + 2345;  // ten pieces and a ragged one, whose last chunk is short
  const std::vector<float> x = values(n);
  ContextLog plain_log;
  std::vector<double> want(n, poison_value);
  HostPipeline<Map<Fma>, ChunkFn<Labeller, double>>(spread_options({}), Map<Fma>{f},
                                                    ChunkFn<Labeller, double>{Labeller{&plain_log}})
      .run(x, want);
  const auto plain_seen = plain_log.sorted();
  REQUIRE(plain_seen.size() == (n + 999) / 1000);
  REQUIRE(plain_seen.back() == std::make_tuple(n / 1000, n / 1000 * 1000, n % 1000));
  for (std::size_t i = 0; i < n; i += 997) {
    REQUIRE(want[i] == static_cast<double>(std::fma(x[i], f.a, f.b)) + static_cast<double>(i) + 1000.0 * (i / 1000));
  }

  for (const std::vector<int>& devices : {std::vector<int>{0}, std::vector<int>{0, 1}, std::vector<int>{0, 0, 1}}) {
    INFO(devices.size() << " members");
    ContextLog log;
    Labelled spread(spread_options(devices), Map<Fma>{f}, ChunkFn<Labeller, double>{Labeller{&log}});
    REQUIRE(spread.piece_elems() == piece_elems);
    for (int round = 0; round < 2; ++round) {  // and again: the members' schedules continue, the numbers do not
      INFO("round " << round);
      log.seen.clear();
      std::vector<double> out(n, poison_value);
      const SpreadSummary s = spread.run(x, out);
      CHECK(s.chunks == (n + 999) / 1000);
      std::size_t pieces = 0;
      for (std::size_t p : s.pieces) pieces += p;
      CHECK(pieces == 11);
      REQUIRE(std::memcmp(out.data(), want.data(), n * sizeof(double)) == 0);
      CHECK_FALSE(log.misuse);
      REQUIRE(log.sorted() == plain_seen);
    }

    // A Source read and a Sink fed by the spread: the same numbers again.
    log.seen.clear();
    std::vector<double> got(n, poison_value);
    SinkLog sink_log;
    auto src = source<float>([&](std::size_t chunk, ::cuda::std::span<float> slot) {
      const std::size_t begin = chunk * slot.size();
      const std::size_t count = begin < n ? std::min(slot.size(), n - begin) : 0;
      std::memcpy(slot.data(), x.data() + begin, count * sizeof(float));
      return count;
    });
    const SpreadSummary s =
        spread.run(std::move(src), Sink<double, OrderedSink<double>>{OrderedSink<double>{&sink_log, got.data(), n}});
    CHECK(s.elems == n);
    CHECK_FALSE(sink_log.misuse);
    CHECK(sink_log.finished == 1);
    CHECK(sink_log.next_offset == n);
    REQUIRE(std::memcmp(got.data(), want.data(), n * sizeof(double)) == 0);
    CHECK_FALSE(log.misuse);
    REQUIRE(log.sorted() == plain_seen);
  }

  // The label on its own: one pipeline's run labelled as chunk 5 at
  // element 5000 of a larger one (what a spread gives piece 5 at a unit
  // of 1000); copies still index the run's own ranges.
  ContextLog one_log;
  HostPipeline<Map<Fma>, ChunkFn<Labeller, double>> one(spread_options({}), Map<Fma>{f},
                                                        ChunkFn<Labeller, double>{Labeller{&one_log}});
  const std::size_t m = 2500;
  std::vector<double> labelled(m, poison_value);
  detail::RunAccess::run_async(one, detail::RunLabel{5, 5000}, host_span(x.data() + 5000, m), labelled).wait();
  for (std::size_t i = 0; i < m; ++i) REQUIRE(labelled[i] == want[5000 + i]);
  using Seen = std::tuple<std::size_t, std::size_t, std::size_t>;
  CHECK(one_log.sorted() == std::vector<Seen>{Seen{5, 5000, 1000}, Seen{6, 6000, 1000}, Seen{7, 7000, 500}});
  // Unlabelled, the same pipeline numbers the run as itself.
  one_log.seen.clear();
  one.run(host_span(x.data() + 5000, m), labelled);
  CHECK(one_log.sorted() == std::vector<Seen>{Seen{0, 0, 1000}, Seen{1, 1000, 1000}, Seen{2, 2000, 500}});
}

TEST_CASE("a spread run hands each piece to the next member with room", "[spread]") {
  // Member with the first piece stalls half a second; the others take
  // the rest. Handing pieces out in turn would give each a third.
  const std::size_t n = 30 * piece_elems;
  const std::vector<float> x = values(n);
  std::atomic<int> calls{0};
  Stalling st{&calls, 500};
  HostSpreadPipeline<Map<Stalling>> spread(spread_options({0, 1, 2}), Map<Stalling>{st});
  std::vector<float> out(n, poison_value);
  const SpreadSummary s = spread.run(x, out);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(out[i] == std::fma(x[i], 2.0f, 1.0f));
  REQUIRE(s.pieces.size() == 3);
  const std::size_t fewest = *std::min_element(s.pieces.begin(), s.pieces.end());
  INFO("pieces per member: " << s.pieces[0] << " " << s.pieces[1] << " " << s.pieces[2]);
  CHECK(s.pieces[0] + s.pieces[1] + s.pieces[2] == 30);
  CHECK(fewest <= Spread1::ahead);  // the stalled member: what it took before it stalled
}

TEST_CASE("a spread run reads a Source and feeds a Sink in chunk order, within its reorder bound", "[spread]") {
  const std::size_t members = 3;
  // The bound on pieces read and not yet delivered, as the header states it.
  const std::size_t bound = members * (Spread1::ahead + 1);
  for (const std::size_t n : {std::size_t{25} * piece_elems + 321, std::size_t{12} * piece_elems}) {
    INFO("n = " << n);
    const std::vector<float> x = values(n);
    std::atomic<int> calls{0};
    Stalling st{&calls, 300};
    HostSpreadPipeline<Map<Stalling>> spread(spread_options({0, 1, 2}), Map<Stalling>{st});

    SinkLog log;
    std::size_t read_chunks = 0, most_ahead = 0;
    bool misuse = false;
    std::vector<float> got(n, poison_value);
    auto src = source<float>([&](std::size_t chunk, ::cuda::std::span<float> slot) {
      std::lock_guard<std::mutex> lock(log.m);
      if (chunk != read_chunks) misuse = true;
      ++read_chunks;
      most_ahead = std::max(most_ahead, read_chunks - log.delivered);
      const std::size_t begin = chunk * slot.size();
      const std::size_t count = begin < n ? std::min(slot.size(), n - begin) : 0;
      std::memcpy(slot.data(), x.data() + begin, count * sizeof(float));
      return count;
    });
    const SpreadSummary s =
        spread.run(std::move(src), Sink<float, OrderedSink<float>>{OrderedSink<float>{&log, got.data(), n}});
    CHECK_FALSE(misuse);
    CHECK_FALSE(log.misuse);
    CHECK(log.finished == 1);
    CHECK(log.aborted == 0);
    CHECK(s.elems == n);
    CHECK(log.next_offset == n);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(got[i] == std::fma(x[i], 2.0f, 1.0f));
    INFO("most chunks read ahead of the sink: " << most_ahead);
    // Bounded: at most `bound` pieces between reading and delivery...
    CHECK(most_ahead <= bound * Spread1::piece_units);
    // ...and used: with the first piece stalled, the others read on.
    CHECK(most_ahead > 2 * Spread1::piece_units);
  }
}

TEST_CASE("an error on one member reaches the caller, stops the others and finishes nothing", "[spread][errors]") {
  const std::size_t n = 40 * piece_elems;
  std::vector<float> x(n, 0.25f);
  const std::size_t bad_at = piece_elems + 17;  // in piece 1
  x[bad_at] = 7.0f;
  const std::size_t bound = 3 * (Spread1::ahead + 1);
  std::atomic<int> calls{0};
  Stalling st{&calls, 0, 7.0f};
  HostSpreadPipeline<Map<Stalling>> spread(spread_options({0, 1, 2}), Map<Stalling>{st});

  // Ranges: the stage's own error.
  std::vector<float> out(n, poison_value);
  CHECK(contains(thrown_by([&] { spread.run(x, out); }), "stage failed on purpose"));

  // A Source and a Sink: reading stops within the bound past the piece
  // that failed, which is never delivered; abort(), not finish().
  std::size_t read = 0, delivered = 0;
  int finished = 0, aborted = 0;
  struct Out {
    std::size_t* delivered;
    int* finished;
    int* aborted;
    void operator()(std::size_t, std::size_t offset, ::cuda::std::span<const float> data) {
      if (offset + data.size() > piece_elems) ++*delivered;  // past piece 0: must not happen
    }
    void finish() { ++*finished; }
    void abort() { ++*aborted; }
  };
  auto src = source<float>([&](std::size_t chunk, ::cuda::std::span<float> slot) {
    ++read;  // one thread at a time
    const std::size_t begin = chunk * slot.size();
    const std::size_t count = begin < n ? std::min(slot.size(), n - begin) : 0;
    std::memcpy(slot.data(), x.data() + begin, count * sizeof(float));
    return count;
  });
  const std::string what =
      thrown_by([&] { spread.run(std::move(src), Sink<float, Out>{Out{&delivered, &finished, &aborted}}); });
  CHECK(contains(what, "stage failed on purpose"));
  CHECK(finished == 0);
  CHECK(aborted == 1);
  CHECK(delivered == 0);
  CHECK(read <= (1 + bound) * Spread1::piece_units);  // piece 1 never delivered: no more than the bound past it
  CHECK(read < n / 1000);

  // A Source's own error too; and the pipeline runs again afterwards.
  auto failing = source<float>([&](std::size_t chunk, ::cuda::std::span<float> slot) -> std::size_t {
    if (chunk == 20) throw std::runtime_error("source failed on purpose");
    std::fill(slot.begin(), slot.end(), 0.5f);
    return slot.size();
  });
  CHECK(contains(thrown_by([&] { spread.run(std::move(failing), out); }), "source failed on purpose"));
  std::fill(x.begin(), x.end(), 0.5f);
  std::fill(out.begin(), out.end(), poison_value);
  spread.run(x, out);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(out[i] == 2.0f);
}

TEST_CASE("device lists are checked", "[spread][errors]") {
  const Fma f{1.0f, 0.0f};
  CHECK(contains(thrown_by([&] { Spread1 s(spread_options({}), Map<Fma>{f}); }), "needs Options::devices"));
  CHECK(contains(thrown_by([&] { Spread1 s(spread_options({0, -2}), Map<Fma>{f}); }), "devices[1]"));
  CHECK(contains(thrown_by([&] { HostPipeline<Map<Fma>> p(spread_options({0, 1}), Map<Fma>{f}); }),
                 "HostSpreadPipeline"));
  Options both = spread_options({3});
  both.device = 2;
  CHECK(contains(thrown_by([&] { HostPipeline<Map<Fma>> p(both, Map<Fma>{f}); }), "name different devices"));
  Options one = spread_options({2});
  CHECK(HostPipeline<Map<Fma>>(one, Map<Fma>{f}).options().device == 2);
  CHECK(contains(thrown_by([&] { Spread1 s(spread_options(std::vector<int>(65, 0)), Map<Fma>{f}); }), "at most 64"));

  Options pinned_to = spread_options({0, 1});
  pinned_to.device = 0;
  CHECK(contains(thrown_by([&] { Spread1 s(pinned_to, Map<Fma>{f}); }), "leave Options::device at -1"));
  Options registered = spread_options({0, 1});
  registered.staging = Staging::registered;
  CHECK(contains(thrown_by([&] { Spread1 s(registered, Map<Fma>{f}); }), "Staging::registered"));

  // Bad ranges fail before anything runs: short outputs, and ranges that
  // overlap, however far apart the pieces that would race are.
  Spread1 spread(spread_options({0, 1}), Map<Fma>{f});
  const std::size_t n = 30 * piece_elems;
  const std::vector<float> x(n, 1.0f);
  std::vector<float> short_out(n - 1, poison_value);
  CHECK(contains(thrown_by([&] { spread.run(x, short_out); }), "input elements"));
  CHECK(std::all_of(short_out.begin(), short_out.end(), [](float v) { return v == poison_value; }));
  std::vector<float> shared(n + 10 * piece_elems, poison_value);
  const std::string overlap = thrown_by([&] {
    spread.run(host_span(static_cast<const float*>(shared.data()), n), host_span(shared.data() + 10 * piece_elems, n));
  });
  CHECK(contains(overlap, "overlap"));
  CHECK(std::all_of(shared.begin(), shared.end(), [](float v) { return v == poison_value; }));
  // In place is fine, as for one pipeline.
  std::vector<float> inplace(n, 1.0f);
  spread.run(host_span(static_cast<const float*>(inplace.data()), n), inplace);
  CHECK(std::all_of(inplace.begin(), inplace.end(), [](float v) { return v == 1.0f; }));  // fma(1, 1, 0)

  // A Source that produces more than the outputs hold.
  std::vector<float> one_piece(piece_elems, poison_value);
  auto endless = source<float>([](std::size_t, ::cuda::std::span<float> slot) {
    std::fill(slot.begin(), slot.end(), 0.5f);
    return slot.size();
  });
  CHECK(contains(thrown_by([&] { spread.run(std::move(endless), one_piece); }), "output 0 holds"));
}

TEST_CASE("a spread run's Sink is aborted when it or its finish() throws", "[spread][errors]") {
  const Fma f{1.0f, 0.0f};
  Spread1 spread(spread_options({0, 1, 2}), Map<Fma>{f});
  const std::size_t n = 20 * piece_elems;
  const std::vector<float> x(n, 0.5f);
  struct Out {
    int* finished;
    int* aborted;
    bool throw_in_fn;
    bool throw_in_finish;
    std::size_t* calls;
    void operator()(std::size_t chunk, std::size_t, ::cuda::std::span<const float>) {
      ++*calls;
      if (throw_in_fn && chunk == 20) throw std::runtime_error("sink failed on purpose");
    }
    void finish() {
      ++*finished;
      if (throw_in_finish) throw std::runtime_error("finish failed on purpose");
    }
    void abort() { ++*aborted; }
  };
  for (const bool in_fn : {true, false}) {
    int finished = 0, aborted = 0;
    std::size_t calls = 0;
    const std::string what =
        thrown_by([&] { spread.run(x, Sink<float, Out>{Out{&finished, &aborted, in_fn, !in_fn, &calls}}); });
    INFO(what);
    CHECK(contains(what, in_fn ? "sink failed on purpose" : "finish failed on purpose"));
    CHECK(aborted == 1);
    CHECK(finished == (in_fn ? 0 : 1));
    CHECK(calls == (in_fn ? 21u : n / 1000));  // nothing after the chunk that threw
  }
}

namespace {

struct Plus {
  CHUNKPIPE_HOST_DEVICE float operator()(float a, float b) const { return a + b; }
};

// Noisy values whose float sum depends on the order it is taken in.
std::vector<float> noisy(std::size_t n) {
  std::vector<float> v(n);
  std::uint32_t s = 12345u;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = static_cast<float>(s >> 8) * (1.0f / 16777216.0f) * 2000.0f - 1000.0f;
  }
  return v;
}

using test_support::MergeTrace;
using test_support::Trace;
using test_support::TraceChunk;

// A PerChunk record: the chunk's number, offset, count and a checksum.
struct Tag {
  std::uint64_t chunk, offset, count, sum;
};
struct TagChunk {
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    Tag& t = ctx.template out<0>()[0];
    t.chunk = ctx.chunk;
    t.offset = ctx.offset;
    t.count = ctx.count;
    for (float v : ctx.template in<0>()) t.sum += static_cast<std::uint64_t>(v * 8.0f + 8192.0f);
  }
};

}  // namespace

TEST_CASE("a spread Reduce returns the bits one pipeline returns, from ranges and from a Source", "[spread][records]") {
  const std::size_t n = 10 * piece_elems + 2345;  // ten pieces and a ragged one, the last segment short
  const std::vector<float> x = noisy(n);
  const auto stage = reduce(0.5f, Plus{}, 250);
  const float want = HostPipeline<Reduce<float, Plus>>(spread_options({}), stage).run(x);
  // The order matters: a plain left-to-right sum lands elsewhere.
  float serial = 0.5f;
  for (float v : x) serial += v;
  double exact = 0.5;
  for (float v : x) exact += v;
  INFO("one pipeline " << want << ", left to right " << serial << ", exact " << exact);
  REQUIRE(want != serial);
  REQUIRE(std::abs(want - exact) < 1e-3 * n);

  for (const std::vector<int>& devices : {std::vector<int>{0}, std::vector<int>{0, 1}, std::vector<int>{0, 0, 1}}) {
    INFO(devices.size() << " members");
    HostSpreadPipeline<Reduce<float, Plus>> spread(spread_options(devices), stage);
    const float got = spread.run(x);
    CHECK(std::memcmp(&got, &want, sizeof got) == 0);
    const SpreadSummary s = spread.last_summary();
    CHECK(s.elems == n);
    std::size_t pieces = 0;
    for (std::size_t p : s.pieces) pieces += p;
    CHECK(pieces == 11);
    const float sourced = spread.run(test_support::replay(x));
    CHECK(std::memcmp(&sourced, &want, sizeof sourced) == 0);
    CHECK(spread.last_summary().elems == n);
    const std::vector<float> none;
    CHECK(spread.run(none) == 0.5f);
  }

  // A run that fails returns nothing and leaves no summary; the next gives
  // the bits again (the records buffer is the spread's, reused).
  HostSpreadPipeline<Reduce<float, Plus>> spread(spread_options({0, 1}), stage);
  auto failing = source<float>([&](std::size_t chunk, ::cuda::std::span<float> slot) -> std::size_t {
    if (chunk == 25) throw std::runtime_error("source failed on purpose");
    std::fill(slot.begin(), slot.end(), 1.0f);
    return slot.size();
  });
  CHECK(contains(thrown_by([&] { (void)spread.run(std::move(failing)); }), "source failed on purpose"));
  CHECK(spread.last_summary().pieces.empty());
  const float again = spread.run(x);
  CHECK(std::memcmp(&again, &want, sizeof again) == 0);
}

TEST_CASE("a spread Accumulate merges every chunk's record in chunk order", "[spread][records]") {
  const std::size_t n = 10 * piece_elems + 2345;
  const std::vector<float> x(n, 1.0f);
  std::uint64_t want = 5;
  for (std::size_t at = 0; at < n; at += 1000) want = want * 1000003u + (at + 1);
  const auto stage = accumulate(Trace{5, 0}, TraceChunk{}, MergeTrace{});
  using Acc = std::decay_t<decltype(stage)>;
  HostSpreadPipeline<Acc> spread(spread_options({0, 1, 2}), stage);
  const Trace got = spread.run(x);
  CHECK(got.hash == want);
  CHECK(got.chunks == (n + 999) / 1000);
  const Trace sourced = spread.run(test_support::replay(x));
  CHECK(sourced.hash == want);
  CHECK(sourced.chunks == got.chunks);
}

TEST_CASE("a spread PerChunk lands each chunk's record in place, or hands it to a Sink in order", "[spread][records]") {
  const std::size_t n = 10 * piece_elems + 2345, chunk = 1000, chunks = (n + chunk - 1) / chunk;
  const std::vector<float> x = values(n);
  const auto stage = per_chunk(Tag{0, 0, 0, 7}, TagChunk{});
  using Per = std::decay_t<decltype(stage)>;
  std::vector<Tag> want(chunks);
  HostPipeline<Per>(spread_options({}), stage).run(x, want);
  for (std::size_t c = 0; c < chunks; ++c) {
    REQUIRE(want[c].chunk == c);
    REQUIRE(want[c].offset == c * chunk);
    REQUIRE(want[c].count == std::min(chunk, n - c * chunk));
  }

  HostSpreadPipeline<Per> spread(spread_options({0, 1}), stage);
  std::vector<Tag> out(chunks + 2, Tag{99, 99, 99, 99});  // poisoned; two past the end stay so
  const SpreadSummary s = spread.run(x, host_span(out.data(), chunks));
  CHECK(s.chunks == chunks);
  for (std::size_t c = 0; c < chunks; ++c) {
    INFO("chunk " << c);
    CHECK(out[c].chunk == want[c].chunk);
    CHECK(out[c].offset == want[c].offset);
    CHECK(out[c].count == want[c].count);
    CHECK(out[c].sum == want[c].sum);
  }
  CHECK(out[chunks].offset == 99);
  CHECK(out[chunks + 1].offset == 99);

  std::vector<Tag> shorter(chunks - 1);
  CHECK(contains(thrown_by([&] { spread.run(x, shorter); }), "records"));

  // A Sink gets each chunk's one record, numbered as one pipeline numbers it.
  std::vector<std::size_t> seen;
  bool misuse = false;
  spread.run(x, sink<Tag>([&](std::size_t k, std::size_t offset, ::cuda::std::span<const Tag> r) {
    if (r.size() != 1 || k != offset || r[0].offset != want[offset].offset || r[0].sum != want[offset].sum) misuse = true;
    seen.push_back(offset);
  }));
  CHECK_FALSE(misuse);
  REQUIRE(seen.size() == chunks);
  for (std::size_t c = 0; c < chunks; ++c) CHECK(seen[c] == c);

  // From a Source into ranges: the records land in place, and ranges too
  // short for the records of what it produced are refused.
  std::vector<Tag> from_source(chunks, Tag{99, 99, 99, 99});
  spread.run(test_support::replay(x), host_span(from_source.data(), chunks));
  for (std::size_t c = 0; c < chunks; ++c) {
    INFO("chunk " << c);
    CHECK(from_source[c].offset == want[c].offset);
    CHECK(from_source[c].sum == want[c].sum);
  }
  std::vector<Tag> too_few(chunks - 1);
  CHECK(contains(thrown_by([&] { spread.run(test_support::replay(x), host_span(too_few.data(), chunks - 1)); }),
                 "records output 0 holds"));
}

namespace {

// Keeps what is above `t`: with t = 1.4, about a third of what Stalling
// makes of values(), unevenly per chunk, and nothing in some chunks.
struct Above {
  float t;
  bool operator()(float x) const { return x > t; }
};

// Every call a Sink got: (chunk, offset, elements), and the elements.
struct CallLog {
  std::vector<std::tuple<std::size_t, std::size_t, std::size_t>> calls;
  std::vector<float> data;
  auto sink() {
    return chunkpipe::sink<float>([this](std::size_t k, std::size_t at, ::cuda::std::span<const float> d) {
      calls.emplace_back(k, at, d.size());
      data.insert(data.end(), d.begin(), d.end());
    });
  }
};

// Emits, for every element above zero, its value's bits and the run offset
// its context gives it (ctx.offset): two outputs packed alike.
struct OddOnes {
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    auto in = ctx.template in<0>();
    auto bits = ctx.template out<0>();
    auto at = ctx.template out<1>();
    std::size_t k = 0;
    for (std::size_t i = 0; i < ctx.count; ++i) {
      if (in[i] > 0.f) {
        std::memcpy(&bits[k], &in[i], sizeof(float));
        at[k++] = static_cast<double>(ctx.offset + i) + 1e6 * static_cast<double>(ctx.chunk);
      }
    }
    *ctx.produced = k;
  }
};

}  // namespace

// The spread Filter tests' reference: one pipeline's Filter over `x`, what
// it wrote into poisoned outputs of x's length, and its count.
struct OneFilter {
  static constexpr float keep_above = 1.4f;
  explicit OneFilter(const std::vector<float>& x)
      : one(spread_options({}), Map<Stalling>{Stalling{&calls}}, Filter<Above>{Above{keep_above}}),
        want(x.size(), poison_value),
        count(one.run(x, want)) {}
  std::atomic<int> calls{0};
  HostPipeline<Map<Stalling>, Filter<Above>> one;
  std::vector<float> want;
  std::size_t count;
};

TEST_CASE("a spread Filter packs what one pipeline packs, into ranges or a Sink, from ranges or a Source",
          "[spread][counted]") {
  constexpr float keep_above = OneFilter::keep_above;
  const std::size_t n = 25 * piece_elems + 321;
  const std::vector<float> x = values(n);
  using Spread = HostSpreadPipeline<Map<Stalling>, Filter<Above>>;
  OneFilter ref(x);
  auto& one = ref.one;
  const std::vector<float>& want = ref.want;
  const std::size_t count = ref.count;
  std::size_t kept = 0;  // the host's own count, as a reference
  for (float v : x) kept += std::fma(v, 2.0f, 1.0f) > keep_above;
  REQUIRE(count == kept);
  REQUIRE(count > n / 5);
  REQUIRE(count < n / 2);
  CallLog want_log;
  REQUIRE(one.run(x, want_log.sink()) == count);
  // Some chunks keep nothing and are not handed over.
  REQUIRE(want_log.calls.size() < (n + 999) / 1000);

  for (const std::vector<int>& devices : {std::vector<int>{0}, std::vector<int>{0, 1, 2}}) {
    INFO(devices.size() << " members");
    // The first piece stalls, so later pieces come done before it.
    std::atomic<int> calls{0};
    Spread spread(spread_options(devices), Map<Stalling>{Stalling{&calls, 200}}, Filter<Above>{Above{keep_above}});
    std::vector<float> out(n, poison_value);
    CHECK(spread.run(x, out) == count);
    CHECK(std::memcmp(out.data(), want.data(), n * sizeof(float)) == 0);  // the tail still poisoned
    const SpreadSummary s = spread.last_summary();
    CHECK(s.written == count);
    CHECK(s.elems == n);
    std::size_t pieces = 0;
    for (std::size_t p : s.pieces) pieces += p;
    CHECK(pieces == 26);

    // A Sink gets the calls one pipeline makes, to the element.
    CallLog log;
    CHECK(spread.run(x, log.sink()) == count);
    CHECK(log.calls == want_log.calls);
    CHECK(log.data == want_log.data);

    // From a Source, into ranges and into a Sink.
    std::fill(out.begin(), out.end(), poison_value);
    CHECK(spread.run(test_support::replay(x), out) == count);
    CHECK(std::memcmp(out.data(), want.data(), n * sizeof(float)) == 0);
    CallLog sourced;
    CHECK(spread.run(test_support::replay(x), sourced.sink()) == count);
    CHECK(sourced.calls == want_log.calls);
    CHECK(sourced.data == want_log.data);

    const std::vector<float> none;
    std::vector<float> none_out;
    CHECK(spread.run(none, none_out) == 0);
  }

  // An output too short gets what fits, nothing past it, and the error one
  // pipeline gives; the spread goes on.
  std::atomic<int> calls{0};
  Spread spread(spread_options({0, 1}), Map<Stalling>{Stalling{&calls, 100}}, Filter<Above>{Above{keep_above}});
  const std::size_t room = count / 2 + 3;
  std::vector<float> one_buf(count, poison_value), spread_buf(count, poison_value);
  const std::string one_error = thrown_by([&] { (void)one.run(x, host_span(one_buf.data(), room)); });
  REQUIRE(contains(one_error, "emitted " + std::to_string(count) + " elements"));
  CHECK(thrown_by([&] { (void)spread.run(x, host_span(spread_buf.data(), room)); }) == one_error);
  CHECK(std::memcmp(spread_buf.data(), one_buf.data(), count * sizeof(float)) == 0);
  CHECK(spread_buf[room] == poison_value);
  CHECK(spread.last_summary().pieces.empty());
  std::vector<float> out(n, poison_value);
  CHECK(spread.run(x, out) == count);
  CHECK(std::memcmp(out.data(), want.data(), n * sizeof(float)) == 0);
}

TEST_CASE("a spread Filter into pinned ranges packs pieces in place once the pieces before them are counted",
          "[spread][counted]") {
  constexpr float keep_above = OneFilter::keep_above;
  const std::size_t n = 25 * piece_elems + 321;
  const std::vector<float> x = values(n);
  using Spread = HostSpreadPipeline<Map<Stalling>, Filter<Above>>;
  OneFilter ref(x);
  auto& one = ref.one;
  const std::vector<float>& want = ref.want;
  const std::size_t count = ref.count;
  REQUIRE(count > n / 5);
  auto pinned = [](std::vector<float>& v, std::size_t size) { return host_span(v.data(), size, Memory::pinned); };

  for (const std::vector<int>& devices : {std::vector<int>{0}, std::vector<int>{0, 1, 2}}) {
    INFO(devices.size() << " members");
    // The first piece stalls on a member: pieces after it finish first,
    // through their buffers, and later ones may pack in place.
    std::atomic<int> calls{0};
    Spread spread(spread_options(devices), Map<Stalling>{Stalling{&calls, 100}}, Filter<Above>{Above{keep_above}});
    std::vector<float> out(n, poison_value);
    CHECK(spread.run(x, pinned(out, n)) == count);
    CHECK(std::memcmp(out.data(), want.data(), n * sizeof(float)) == 0);  // the tail still poisoned
    const SpreadSummary s = spread.last_summary();
    CHECK(s.written == count);
    CHECK(s.in_place >= 1);  // piece 0 knows its offset from the start
    if (devices.size() > 1) CHECK(s.in_place < 26);  // a stalled piece's followers did not
    INFO(s.in_place << " of 26 pieces in place");

    // Outputs not declared pinned: every piece through its buffer.
    std::fill(out.begin(), out.end(), poison_value);
    CHECK(spread.run(x, out) == count);
    CHECK(std::memcmp(out.data(), want.data(), n * sizeof(float)) == 0);
    CHECK(spread.last_summary().in_place == 0);

    // From a Source into pinned ranges.
    std::fill(out.begin(), out.end(), poison_value);
    CHECK(spread.run(test_support::replay(x), pinned(out, n)) == count);
    CHECK(std::memcmp(out.data(), want.data(), n * sizeof(float)) == 0);
    CHECK(spread.last_summary().in_place >= 1);

    // Too short: what fits, nothing past it, one pipeline's error, whether
    // the piece that crosses the end went in place or through its buffer.
    for (const std::size_t room : {count / 2 + 3, std::size_t{5}}) {
      std::vector<float> one_buf(count, poison_value), spread_buf(count, poison_value);
      const std::string one_error = thrown_by([&] { (void)one.run(x, host_span(one_buf.data(), room)); });
      REQUIRE(contains(one_error, "emitted " + std::to_string(count) + " elements"));
      CHECK(thrown_by([&] { (void)spread.run(x, pinned(spread_buf, room)); }) == one_error);
      CHECK(std::memcmp(spread_buf.data(), one_buf.data(), count * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("a spread Emit sees the run's chunk numbers and offsets and packs its two outputs as one pipeline does",
          "[spread][counted][chunk_fn]") {
  const std::size_t n = 12 * piece_elems + 777;
  const std::vector<float> x = values(n);
  using E = Emit<OddOnes, std::uint32_t, double>;
  std::atomic<int> one_calls{0};
  HostPipeline<Map<Stalling>, E> one(spread_options({}), Map<Stalling>{Stalling{&one_calls}}, E{OddOnes{}});
  std::vector<std::uint32_t> want_bits(n, 7);
  std::vector<double> want_at(n, -1.0);
  const std::size_t count = one.run(x, outputs(want_bits, want_at));
  REQUIRE(count > n / 4);
  REQUIRE(want_at[count - 1] > 1e6 * 12);  // the last chunks' numbers and offsets are the run's

  std::atomic<int> calls{0};
  HostSpreadPipeline<Map<Stalling>, E> spread(spread_options({0, 1, 0}), Map<Stalling>{Stalling{&calls, 100}},
                                              E{OddOnes{}});
  std::vector<std::uint32_t> bits(n, 7);
  std::vector<double> at(n, -1.0);
  CHECK(spread.run(x, outputs(bits, at)) == count);
  CHECK(bits == want_bits);
  CHECK(std::memcmp(at.data(), want_at.data(), n * sizeof(double)) == 0);

  // Pinned outputs: both pack in place where a piece can.
  std::fill(bits.begin(), bits.end(), 7u);
  std::fill(at.begin(), at.end(), -1.0);
  CHECK(spread.run(x, outputs(host_span(bits.data(), n, Memory::pinned), host_span(at.data(), n, Memory::pinned))) ==
        count);
  CHECK(bits == want_bits);
  CHECK(std::memcmp(at.data(), want_at.data(), n * sizeof(double)) == 0);
  CHECK(spread.last_summary().in_place >= 1);
}

namespace {
struct AddF {
  CHUNKPIPE_HOST_DEVICE float operator()(float a, float b) const { return a + b; }
};
}  // namespace

TEST_CASE("a spread Scan gives one pipeline's bits: a run's pieces stay on one member, in order", "[spread][scan]") {
  using Member = HostPipeline<Scan<float, AddF>>;
  const Options base{.chunk_elems = 1024, .depth = 3};
  const std::size_t piece = HostSpreadPipeline<Scan<float, AddF>>::piece_units * base.chunk_elems;
  const std::size_t n = 3 * piece + 555;  // four pieces, the last short
  const std::vector<float> x = test_support::noisy(n, 41);
  Member one(base, scan(0.5f, AddF{}, 512));
  std::vector<float> want = poisoned<float>(n);
  one.run(pinned(x), pinned(want));
  // (scan_test.cpp checks one pipeline's bits against the documented order.)
  std::size_t unwritten = 0;
  for (std::size_t i = 0; i < n; ++i) unwritten += bits(want[i]) == bits(poisoned<float>(1)[0]) ? 1 : 0;
  REQUIRE(unwritten == 0);
  for (const std::vector<int>& devices : {std::vector<int>{0}, std::vector<int>{0, 1}, std::vector<int>{0, 0, 1}}) {
    Options o = base;
    o.devices = devices;
    HostSpreadPipeline<Scan<float, AddF>> spread(o, scan(0.5f, AddF{}, 512));
    INFO(devices.size() << " members");
    REQUIRE(spread.piece_elems() == piece);
    // Ranges in and out, twice: the second run starts from init again.
    for (int round = 0; round < 2; ++round) {
      std::vector<float> y = poisoned<float>(n);
      const SpreadSummary s = spread.run(pinned(x), pinned(y));
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) wrong += bits(y[i]) == bits(want[i]) ? 0 : 1;
      CHECK(wrong == 0);
      CHECK(std::count_if(s.pieces.begin(), s.pieces.end(), [](std::size_t k) { return k != 0; }) == 1);
      CHECK(std::accumulate(s.pieces.begin(), s.pieces.end(), std::size_t{0}) == 4);
    }
    // A Source and a Sink, called in chunk order with the run's offsets.
    std::vector<float> got = poisoned<float>(n);
    std::size_t delivered = 0;
    auto in_order = sink<float>([&](std::size_t, std::size_t offset, ::cuda::std::span<const float> d) {
      REQUIRE(offset == delivered);
      std::memcpy(got.data() + offset, d.data(), d.size() * sizeof(float));
      delivered += d.size();
    });
    spread.run(test_support::replay(x), in_order);
    REQUIRE(delivered == n);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += bits(got[i]) == bits(want[i]) ? 0 : 1;
    CHECK(wrong == 0);
    // Queued runs of other lengths and data flow beside each other, each on
    // one member (the others take the runs after it), each its own prefix.
    std::vector<std::vector<float>> ins, outs, wants;
    for (std::size_t b = 0; b < 5; ++b) {
      ins.push_back(test_support::noisy(piece * (b % 3 + 1) + 100 * b + 1, static_cast<unsigned>(b + 50)));
      outs.push_back(poisoned<float>(ins.back().size()));
      wants.push_back(poisoned<float>(ins.back().size()));
      one.run(pinned(ins.back()), pinned(wants.back()));
    }
    std::vector<SpreadTicket<SpreadSummary>> tickets;
    for (std::size_t b = 0; b < ins.size(); ++b) tickets.push_back(spread.run_async(pinned(ins[b]), pinned(outs[b])));
    for (std::size_t b = 0; b < ins.size(); ++b) {
      const SpreadSummary s = tickets[b].get();
      CHECK(std::count_if(s.pieces.begin(), s.pieces.end(), [](std::size_t k) { return k != 0; }) == 1);
      std::size_t off = 0;
      for (std::size_t i = 0; i < ins[b].size(); ++i) off += bits(outs[b][i]) == bits(wants[b][i]) ? 0 : 1;
      CHECK(off == 0);
    }
    // Queued runs from Sources keep to themselves on a carrying spread
    // (its members take whole runs): each Source is read after the one
    // before it ended, never beside it.
    ReadLog log;
    tickets.clear();
    for (std::size_t b = 0; b < ins.size(); ++b) {
      outs[b] = poisoned<float>(ins[b].size());
      tickets.push_back(spread.run_async(logged_source(log, ins[b], b), pinned(outs[b])));
    }
    for (std::size_t b = 0; b < ins.size(); ++b) {
      tickets[b].wait();
      std::size_t off = 0;
      for (std::size_t i = 0; i < ins[b].size(); ++i) off += bits(outs[b][i]) == bits(wants[b][i]) ? 0 : 1;
      CHECK(off == 0);
    }
    CHECK_FALSE(log.overlapped.load());
    CHECK(std::is_sorted(log.reads.begin(), log.reads.end()));
  }
}

TEST_CASE("a spread run's report puts every piece on one time axis", "[spread][report]") {
  // Two members; member 1's clock started 2 ms (host time) after member
  // 0's. Member 0 ran pieces 0 and 2 (its second piece 10 ms after its
  // first on its own clock), member 1 piece 1.
  auto piece = [](std::size_t member, std::size_t first_chunk, long long zero_ns, double clock_ms,
                  std::size_t own_chunk) {
    detail::PieceReport p;
    p.member = member;
    p.first_chunk = first_chunk;
    Report& r = p.report;
    r.label = "stage_streams, depth 3";
    r.policy = Policy::stage_streams;
    r.depth = 3;
    r.chunk_elems = 1000;
    r.chunks = 2;
    r.elems = 2000;
    r.bytes_in = r.bytes_out = 8000;
    r.queues = {{QueueKind::device, "h2d"}, {QueueKind::device, "stage 0"}, {QueueKind::device, "d2h"}};
    r.clock_zero_ns = zero_ns;
    r.clock_ms = clock_ms;
    for (std::size_t c = 0; c < 2; ++c) {
      const double t = static_cast<double>(c);
      TimedOp in, k, out;
      in.kind = OpKind::h2d, in.queue = 0, in.start_ms = t, in.end_ms = t + 1;
      k.kind = OpKind::stage, k.stage = 0, k.queue = 1, k.start_ms = t + 1, k.end_ms = t + 1.5;
      out.kind = OpKind::d2h, out.queue = 2, out.start_ms = t + 1.5, out.end_ms = t + 2.5;
      for (TimedOp* op : {&in, &k, &out}) {
        op->chunk = own_chunk + c;  // numbered across the member's runs
        r.ops.push_back(*op);
      }
    }
    return p;
  };
  const long long zero = 5'000'000'000;
  std::vector<detail::PieceReport> pieces = {piece(0, 4, zero, 10.0, 2), piece(1, 2, zero + 2'000'000, 0.5, 0),
                                             piece(0, 0, zero, 0.0, 0)};
  LinkModel link;
  link.h2d_gbps = link.d2h_gbps = 1.0;
  const Report r = detail::spread_report(pieces, {"m0 (device 0)", "m1 (device 0)"}, link);
  CHECK(r.devices.size() == 2);
  CHECK(r.chunks == 6);
  CHECK(r.elems == 6000);
  CHECK(r.bytes_in == 24000);
  CHECK(r.link.h2d_gbps == 1.0);
  CHECK(contains(r.label, "spread over 2 members"));
  REQUIRE(r.queues.size() == 6);
  CHECK(r.queues[0].name == "m0 (device 0) h2d");
  CHECK(r.queues[5].name == "m1 (device 0) d2h");
  REQUIRE(r.ops.size() == 18);
  // Pieces in run order; chunks numbered as the run's; each member's ops on
  // its own queues; times moved by the piece's clock and its member's zero.
  for (std::size_t i = 0; i < r.ops.size(); ++i) {
    const TimedOp& op = r.ops[i];
    INFO("op " << i);
    CHECK(op.id == i);
    CHECK(op.chunk == i / 3);
    const int member = op.chunk == 2 || op.chunk == 3 ? 1 : 0;
    CHECK(op.device == member);
    const int kind = op.kind == OpKind::h2d ? 0 : op.kind == OpKind::stage ? 1 : 2;
    CHECK(op.queue == 3 * member + kind);
  }
  CHECK(r.ops[0].start_ms == 0.0);                    // piece 0's copy in, the earliest op
  CHECK(std::abs(r.ops[6].start_ms - 2.5) < 1e-9);    // piece 1: 2 ms later zero, 0.5 ms on its clock
  CHECK(std::abs(r.ops[12].start_ms - 10.0) < 1e-9);  // piece 2: 10 ms on member 0's clock
  CHECK(std::abs(makespan_ms(r) - 13.5) < 1e-9);
  CHECK(detail::spread_report({}, {"m0"}, LinkModel{}).ops.empty());
}

namespace {

// Fma that holds every call until the test opens its gate: runs queued
// behind it cannot have started, and run_async() must not wait for it.
struct Gated {
  const std::atomic<bool>* open;
  float operator()(float x) const {
    while (!open->load()) std::this_thread::sleep_for(std::chrono::microseconds(200));
    return std::fma(x, 2.0f, 1.0f);
  }
};

float twice(float x) { return std::fma(x, 2.0f, 1.0f); }

}  // namespace

TEST_CASE("spread runs queued with run_async return at once and run one after another, in order", "[spread][async]") {
  const std::size_t n = 5 * piece_elems + 77;
  const std::vector<float> x = values(n);
  std::atomic<bool> open{false};
  HostSpreadPipeline<Map<Gated>> spread(spread_options({0, 1}), Map<Gated>{Gated{&open}});
  std::vector<float> b(n, poison_value), c(n, poison_value), d(n, poison_value);
  // A chain: each run reads what the run queued before it writes, which is
  // safe only if it starts once that one is complete.
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    open = true;
  });
  SpreadTicket<SpreadSummary> t1 = spread.run_async(x, b);
  SpreadTicket<SpreadSummary> t2 = spread.run_async(b, c);
  SpreadTicket<SpreadSummary> t3 = spread.run_async(c, d);
  const bool returned_while_closed = !open.load();
  const bool none_ready = !t1.ready() && !t2.ready() && !t3.ready();
  opener.join();
  CHECK(returned_while_closed);  // run_async() did not wait for the gated run
  CHECK(none_ready);
  const SpreadSummary s3 = t3.get();
  CHECK(t1.ready());  // in order: the first two were complete before the third
  CHECK(t2.ready());
  for (std::size_t i = 0; i < n; ++i) {
    REQUIRE(b[i] == twice(x[i]));
    REQUIRE(c[i] == twice(twice(x[i])));
    REQUIRE(d[i] == twice(twice(twice(x[i]))));
  }
  for (const SpreadSummary& s : {t1.get(), t2.summary(), s3}) {
    CHECK(s.elems == n);
    CHECK(s.pieces.size() == 2);
    CHECK(s.pieces[0] + s.pieces[1] == 6);
  }
  CHECK(spread.last_summary().elems == n);
  // The blocking run takes its turn behind queued runs too.
  std::vector<float> e(n, poison_value);
  auto t4 = spread.run_async(d, e);
  std::vector<float> f(n, poison_value);
  spread.run(e, f);
  CHECK(t4.ready());
  for (std::size_t i = 0; i < n; ++i) REQUIRE(f[i] == twice(twice(twice(twice(twice(x[i]))))));
}

TEST_CASE("a queued spread run's error reaches its ticket, and the runs after it still run", "[spread][async][errors]") {
  const std::size_t n = 6 * piece_elems;
  std::vector<float> bad(n, 0.25f);
  bad[piece_elems + 5] = 7.0f;
  const std::vector<float> x = values(n);
  std::atomic<int> calls{0};
  HostSpreadPipeline<Map<Stalling>> spread(spread_options({0, 1, 2}), Map<Stalling>{Stalling{&calls, 0, 7.0f}});
  std::vector<float> out1(n, poison_value), out2(n, poison_value);
  auto t1 = spread.run_async(bad, out1);
  auto t2 = spread.run_async(x, out2);
  CHECK(contains(thrown_by([&] { t1.wait(); }), "stage failed on purpose"));
  CHECK(contains(thrown_by([&] { (void)t1.get(); }), "stage failed on purpose"));  // the same error again
  CHECK(t2.get().elems == n);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(out2[i] == twice(x[i]));

  // Bad ranges are refused by run_async() itself, and nothing is queued.
  std::vector<float> short_out(n - 1, poison_value);
  CHECK(contains(thrown_by([&] { (void)spread.run_async(x, short_out); }), "fewer than"));
  CHECK(short_out[0] == poison_value);
  std::vector<float> y(n - 3, 1.0f);
  HostSpreadPipeline<Map<Saxpy>> two(spread_options({0, 1}), Map<Saxpy>{Saxpy{2.0f}});
  CHECK(contains(thrown_by([&] { (void)two.run_async(inputs(x, y), out1); }), "different lengths"));
  CHECK(contains(thrown_by([&] { (void)spread.run_async(host_span(out1.data(), n - 10), host_span(out1.data() + 10, n - 10)); }),
                 "overlap"));

  // A ticket of no run.
  const SpreadTicket<SpreadSummary> none;
  CHECK(none.ready());
  none.wait();
  CHECK(contains(thrown_by([&] { (void)none.get(); }), "no run"));
}

TEST_CASE("queued spread Reduce and Filter runs give what their blocking runs give", "[spread][async][records]") {
  const std::size_t n = 7 * piece_elems + 345;
  const std::vector<float> x = noisy(n);
  const auto stage = reduce(0.5f, Plus{}, 250);
  HostSpreadPipeline<Reduce<float, Plus>> sum(spread_options({0, 1}), stage);
  const float want = HostPipeline<Reduce<float, Plus>>(spread_options({}), stage).run(x);
  auto t1 = sum.run_async(x);
  auto t2 = sum.run_async(test_support::replay(x));  // a move-only Source, held by the queued run
  const std::vector<float> none;
  auto t3 = sum.run_async(none);
  const float got1 = t1.get(), got2 = t2.get();
  CHECK(std::memcmp(&got1, &want, sizeof want) == 0);
  CHECK(std::memcmp(&got2, &want, sizeof want) == 0);
  CHECK(t3.get() == 0.5f);
  CHECK(t1.summary().elems == n);

  constexpr float keep_above = 1.4f;
  std::atomic<int> calls{0};
  using Keep = HostSpreadPipeline<Map<Stalling>, Filter<Above>>;
  Keep keep(spread_options({0, 1, 2}), Map<Stalling>{Stalling{&calls, 50}}, Filter<Above>{Above{keep_above}});
  std::size_t kept = 0;
  std::vector<float> want_out;
  for (float v : x) {
    if (twice(v) > keep_above) {
      ++kept;
      want_out.push_back(twice(v));
    }
  }
  REQUIRE(kept > n / 10);
  std::vector<float> out(n, poison_value);
  SinkLog log;
  std::vector<float> sunk(kept, poison_value);
  auto k1 = keep.run_async(x, out);
  auto k2 = keep.run_async(x, Sink<float, OrderedSink<float>>{OrderedSink<float>{&log, sunk.data(), kept}});
  CHECK(k1.get() == kept);
  CHECK(k2.get() == kept);
  CHECK(std::memcmp(out.data(), want_out.data(), kept * sizeof(float)) == 0);
  CHECK(out[kept] == poison_value);
  CHECK(sunk == want_out);
  CHECK(log.finished == 1);  // before the ticket was ready
  CHECK_FALSE(log.misuse);
}

TEST_CASE("destroying a spread waits for the runs it queued", "[spread][async]") {
  const std::size_t n = 4 * piece_elems + 9;
  const std::vector<float> x = values(n);
  std::vector<float> out(n, poison_value), got(n, poison_value);
  SinkLog log;
  {
    std::atomic<bool> open{false};
    std::thread opener([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      open = true;
    });
    HostSpreadPipeline<Map<Gated>> spread(spread_options({0, 1}), Map<Gated>{Gated{&open}});
    (void)spread.run_async(x, out);  // tickets never waited for
    (void)spread.run_async(x, Sink<float, OrderedSink<float>>{OrderedSink<float>{&log, got.data(), n}});
    opener.join();
  }
  for (std::size_t i = 0; i < n; ++i) {
    REQUIRE(out[i] == twice(x[i]));
    REQUIRE(got[i] == twice(x[i]));
  }
  CHECK(log.finished == 1);
  CHECK(log.aborted == 0);
  CHECK_FALSE(log.misuse);
}

TEST_CASE("a queued spread run lets go of its Source and Sink before its ticket is ready", "[spread][async]") {
  const std::size_t n = 3 * piece_elems + 5;
  const std::vector<float> x = values(n);
  std::atomic<int> calls{0};
  HostSpreadPipeline<Map<Stalling>> spread(spread_options({0, 1}), Map<Stalling>{Stalling{&calls, 50}});
  // Copies of the token live in the Source and Sink the run holds.
  auto token = std::make_shared<int>(7);  // not const: the closures move their copies
  std::vector<float> got(n, poison_value);
  for (int round = 0; round < 20; ++round) {
    std::size_t next = 0;
    auto src = source<float>([&, token](std::size_t, ::cuda::std::span<float> slot) {
      const std::size_t k = std::min(slot.size(), n - next);
      std::memcpy(slot.data(), x.data() + next, k * sizeof(float));
      next += k;
      return k;
    });
    auto out = sink<float>([&, token](std::size_t, std::size_t at, ::cuda::std::span<const float> d) {
      std::memcpy(got.data() + at, d.data(), d.size() * sizeof(float));
    });
    auto t = spread.run_async(std::move(src), std::move(out));
    t.wait();
    REQUIRE(token.use_count() == 1);  // every copy destroyed by now
  }
  for (std::size_t i = 0; i < n; ++i) REQUIRE(got[i] == twice(x[i]));
  // A run from a Source into ranges continues the runs before it, and
  // lets go of its Source when it completes, before its ticket is ready.
  for (int round = 0; round < 50; ++round) {
    std::fill(got.begin(), got.end(), poison_value);
    std::size_t next = 0;
    auto src = source<float>([&, token](std::size_t, ::cuda::std::span<float> slot) {
      const std::size_t k = std::min(slot.size(), n - next);
      std::memcpy(slot.data(), x.data() + next, k * sizeof(float));
      next += k;
      return k;
    });
    auto t = spread.run_async(std::move(src), got);
    t.wait();
    REQUIRE(token.use_count() == 1);
    for (std::size_t i = 0; i < n; i += 97) REQUIRE(got[i] == twice(x[i]));
  }
}

namespace {
// A Sink whose finish() runs the spread again, or waits for a later run:
// both would wait for themselves.
struct Reentrant {
  HostSpreadPipeline<Map<Fma>>* spread;
  const std::vector<float>* x;
  std::vector<float>* y;
  SpreadTicket<SpreadSummary>* later;
  const std::atomic<bool>* queued;  // `later` is set
  std::string* said;
  void operator()(std::size_t, std::size_t, ::cuda::std::span<const float>) {}
  void finish() {
    while (!queued->load()) std::this_thread::sleep_for(std::chrono::microseconds(200));
    *said = thrown_by([&] { spread->run(*x, *y); });
    *said += " | " + thrown_by([&] { later->wait(); });
  }
};
}  // namespace

TEST_CASE("waiting for a spread run from inside one is refused, not a deadlock", "[spread][async][errors]") {
  const std::size_t n = 2 * piece_elems;
  const std::vector<float> x = values(n);
  std::vector<float> y(n, poison_value), z(n, poison_value);
  HostSpreadPipeline<Map<Fma>> spread(spread_options({0, 1}), Map<Fma>{Fma{2.0f, 1.0f}});
  std::string said;
  SpreadTicket<SpreadSummary> later;
  std::atomic<bool> queued{false};
  // The first run's finish() waits until `later` is queued behind it.
  auto held = spread.run_async(x, Sink<float, Reentrant>{Reentrant{&spread, &x, &y, &later, &queued, &said}});
  later = spread.run_async(x, z);
  queued = true;
  held.wait();
  later.wait();
  INFO(said);
  CHECK(contains(said, "run() called from inside a run of the same spread"));
  CHECK(contains(said, "waited for from inside a run of the same spread"));
  CHECK(y[0] == poison_value);  // the refused run queued nothing
  CHECK(z[0] == std::fma(x[0], 2.0f, 1.0f));
  // A ticket's report on the host backend: there is none.
  CHECK(contains(thrown_by([&] { (void)later.report(); }), "no report"));
}

namespace {
// Fma that holds calls on values below -10 (the tagged run's) until the
// test opens its gate, and counts every other call; throws on `bad`.
struct HeldBelow {
  const std::atomic<bool>* open;
  std::atomic<int>* others;
  float bad = 1e30f;
  float operator()(float x) const {
    if (x == bad) throw std::runtime_error("stage failed on purpose");
    if (x < -10.0f) {
      while (!open->load()) std::this_thread::sleep_for(std::chrono::microseconds(200));
    } else {
      others->fetch_add(1);
    }
    return std::fma(x, 2.0f, 1.0f);
  }
};

// Waits up to `ms` for `calls` to be non-zero.
bool called_within(const std::atomic<int>& calls, int ms) {
  for (int i = 0; i < ms && calls.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return calls.load() != 0;
}

std::vector<float> tagged(std::size_t n) {
  std::vector<float> v = values(n);
  for (float& f : v) f -= 20.0f;
  return v;
}

// A spread whose stage holds the tagged runs until `open`, counting the
// other runs' calls in `others` (HeldBelow), and throws on `bad`.
struct HeldSpread {
  explicit HeldSpread(std::vector<int> devices, float bad = 1e30f)
      : spread(spread_options(std::move(devices)), Map<HeldBelow>{HeldBelow{&open, &others, bad}}) {}
  std::atomic<bool> open{false};
  std::atomic<int> others{0};
  HostSpreadPipeline<Map<HeldBelow>> spread;  // last: its stage points at the two above
};
}  // namespace

TEST_CASE("a queued spread run of ranges starts while the run before it is in flight, and completes after it",
          "[spread][async][flow]") {
  const std::vector<float> a = tagged(piece_elems);  // one piece, held
  const std::size_t n = 4 * piece_elems + 123;
  const std::vector<float> x = values(n);
  HeldSpread held_spread({0, 1});
  auto& [open, others, spread] = held_spread;
  std::vector<float> b(a.size(), poison_value), c(n, poison_value);
  auto t1 = spread.run_async(a, b);
  auto t2 = spread.run_async(x, c);
  // The second run touches nothing the first does: it takes pieces (on the
  // member the first leaves room on) while the first is held.
  const bool flowed = called_within(others, 5000);
  const bool first_held = !t1.ready() && !t2.ready();
  open = true;
  CHECK(flowed);
  CHECK(first_held);
  const SpreadSummary s2 = t2.get();
  CHECK(t1.ready());  // complete in order: the first before the second
  CHECK(s2.elems == n);
  CHECK(s2.pieces[0] + s2.pieces[1] == 5);
  CHECK(t1.summary().elems == a.size());
  CHECK(spread.last_summary().elems == n);  // the latest run's
  for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(b[i] == twice(a[i]));
  for (std::size_t i = 0; i < n; ++i) REQUIRE(c[i] == twice(x[i]));
}

TEST_CASE("a queued spread run that writes what a run in flight reads waits for it", "[spread][async][flow]") {
  const std::size_t n = 2 * piece_elems + 7;
  std::vector<float> a = tagged(n);
  const std::vector<float> a0 = a;
  const std::vector<float> y = values(n);
  HeldSpread held_spread({0, 1, 2});
  auto& [open, others, spread] = held_spread;
  std::vector<float> b(n, poison_value), d(n, poison_value);
  auto t1 = spread.run_async(a, b);  // reads a, held
  auto t2 = spread.run_async(y, a);  // overwrites a: must wait for the first
  auto t3 = spread.run_async(b, d);  // reads what the first writes: must wait too
  const bool overtook = called_within(others, 300);
  open = true;
  CHECK_FALSE(overtook);
  t3.wait();
  CHECK(t1.ready());
  CHECK(t2.ready());
  for (std::size_t i = 0; i < n; ++i) {
    REQUIRE(b[i] == twice(a0[i]));
    REQUIRE(a[i] == twice(y[i]));
    REQUIRE(d[i] == twice(twice(a0[i])));
  }
}

TEST_CASE("a failing run in a queue of flowing spread runs fails its own ticket; the others complete, in order",
          "[spread][async][flow][errors]") {
  const std::size_t n = 3 * piece_elems + 11;
  const std::vector<float> x = values(n);
  std::vector<float> bad(n, 0.25f);
  bad[2 * piece_elems + 3] = 7.0f;
  std::atomic<int> calls{0};
  HostSpreadPipeline<Map<Stalling>> spread(spread_options({0, 1}), Map<Stalling>{Stalling{&calls, 20, 7.0f}});
  constexpr std::size_t runs = 10, failing = 4;
  std::vector<std::vector<float>> out(runs, std::vector<float>(n, poison_value));
  std::vector<SpreadTicket<SpreadSummary>> t;
  for (std::size_t k = 0; k < runs; ++k) t.push_back(spread.run_async(k == failing ? bad : x, out[k]));
  // Waited for from the last: once a ticket is ready, every earlier one is.
  for (std::size_t k = runs; k-- > 0;) {
    INFO("run " << k);
    if (k == failing) {
      CHECK(contains(thrown_by([&] { t[k].wait(); }), "stage failed on purpose"));
    } else {
      CHECK(t[k].summary().elems == n);
    }
    for (std::size_t j = 0; j < k; ++j) CHECK(t[j].ready());
  }
  for (std::size_t k = 0; k < runs; ++k) {
    if (k == failing) continue;
    for (std::size_t i = 0; i < n; ++i) REQUIRE(out[k][i] == twice(x[i]));
  }
  CHECK(spread.last_summary().elems == n);
}

TEST_CASE("a queued spread Reduce of ranges continues the runs before it, folds to one pipeline's bits, in order",
          "[spread][async][flow][records]") {
  const std::vector<float> a = tagged(piece_elems);  // one piece, held
  const std::size_t n = 5 * piece_elems + 77;
  std::vector<float> x = noisy(n);
  for (float& v : x) v += 1001.0f;  // none held
  const auto stage = reduce(0.5f, Plus{}, 250);
  std::atomic<bool> open{false};
  std::atomic<int> others{0};
  using Sum = HostSpreadPipeline<Map<HeldBelow>, Reduce<float, Plus>>;
  const Map<HeldBelow> held{HeldBelow{&open, &others}};
  // One pipeline's bits for each (the gate open for it).
  std::atomic<bool> opened{true};
  std::atomic<int> ignored{0};
  HostPipeline<Map<HeldBelow>, Reduce<float, Plus>> one(spread_options({}), Map<HeldBelow>{HeldBelow{&opened, &ignored}},
                                                         stage);
  const float want_a = one.run(a), want_x = one.run(x);

  Sum spread(spread_options({0, 1}), held, stage);
  std::vector<float> y(n, poison_value);
  auto t1 = spread.run_async(a);
  auto t2 = spread.run_async(x);
  auto t3 = spread.run_async(x);
  // The second and third runs read what the first does not write: they
  // take pieces while the first is held.
  const bool flowed = called_within(others, 5000);
  const bool first_held = !t1.ready() && !t2.ready() && !t3.ready();
  open = true;
  CHECK(flowed);
  CHECK(first_held);
  const float got3 = t3.get();
  CHECK(t1.ready());  // complete in order
  CHECK(t2.ready());
  const float got1 = t1.get(), got2 = t2.get();
  CHECK(std::memcmp(&got1, &want_a, sizeof got1) == 0);
  CHECK(std::memcmp(&got2, &want_x, sizeof got2) == 0);
  CHECK(std::memcmp(&got3, &want_x, sizeof got3) == 0);
  CHECK(t2.summary().elems == n);
  CHECK(spread.last_summary().elems == n);
  const std::vector<float> none;
  CHECK(spread.run_async(none).get() == 0.5f);
}

TEST_CASE("a failing Reduce in a queue of flowing spread runs fails its own ticket; the others fold, in order",
          "[spread][async][flow][records][errors]") {
  const std::size_t n = 3 * piece_elems + 11;
  const std::vector<float> x = noisy(n);
  std::vector<float> bad(x);
  bad[2 * piece_elems + 3] = 7.0f;
  std::atomic<int> calls{0};
  const auto stage = reduce(0.5f, Plus{}, 250);
  using Sum = HostSpreadPipeline<Map<Stalling>, Reduce<float, Plus>>;
  Sum spread(spread_options({0, 1}), Map<Stalling>{Stalling{&calls, 20, 7.0f}}, stage);
  std::atomic<int> one_calls{0};
  const float want = HostPipeline<Map<Stalling>, Reduce<float, Plus>>(spread_options({}),
                                                                      Map<Stalling>{Stalling{&one_calls, 0, 7.0f}}, stage)
                         .run(x);
  constexpr std::size_t runs = 8, failing = 3;
  std::vector<SpreadTicket<float>> t;
  for (std::size_t k = 0; k < runs; ++k) t.push_back(spread.run_async(k == failing ? bad : x));
  for (std::size_t k = runs; k-- > 0;) {
    INFO("run " << k);
    if (k == failing) {
      CHECK(contains(thrown_by([&] { (void)t[k].get(); }), "stage failed on purpose"));
    } else {
      const float got = t[k].get();
      CHECK(std::memcmp(&got, &want, sizeof got) == 0);
    }
    for (std::size_t j = 0; j < k; ++j) CHECK(t[j].ready());
  }
  CHECK(t[runs - 1].summary().elems == n);
}

TEST_CASE("queued spread Filter runs into ranges continue the runs before them and pack what one pipeline packs",
          "[spread][async][flow][counted]") {
  constexpr float keep_above = OneFilter::keep_above;
  const std::size_t n = 9 * piece_elems + 321;
  // Runs into pinned ranges (pieces may pack in place) and into ranges not
  // declared pinned (every piece through the run's own buffers), each of
  // its own data, so that a piece buffer two open runs shared would show;
  // one run's output too short, one run failing on a member.
  constexpr std::size_t runs = 7, short_one = 3, failing = 5;
  constexpr float bad = 0.123f;  // in no run but the failing one
  std::vector<std::vector<float>> x(runs, std::vector<float>(n));
  for (std::size_t k = 0; k < runs; ++k) {
    for (std::size_t i = 0; i < n; ++i) x[k][i] = value_at(i + 977 * k);
    std::replace(x[k].begin(), x[k].end(), bad, 0.0f);
  }
  x[failing][4 * piece_elems + 5] = bad;
  std::vector<std::unique_ptr<OneFilter>> ref;
  for (std::size_t k = 0; k < runs; ++k) ref.push_back(std::make_unique<OneFilter>(x[k]));
  const std::size_t room = ref[short_one]->count / 2 + 3;
  std::vector<float> one_buf(ref[short_one]->count, poison_value);
  const std::string one_error =
      thrown_by([&] { (void)ref[short_one]->one.run(x[short_one], host_span(one_buf.data(), room)); });
  REQUIRE(contains(one_error, "emitted " + std::to_string(ref[short_one]->count) + " elements"));

  const std::vector<float> a = tagged(piece_elems);  // one piece, held; keeps nothing
  std::atomic<bool> open{false};
  std::atomic<int> others{0};
  using Keep = HostSpreadPipeline<Map<HeldBelow>, Filter<Above>>;
  Keep spread(spread_options({0, 1, 2}), Map<HeldBelow>{HeldBelow{&open, &others, bad}},
              Filter<Above>{Above{keep_above}});
  auto pinned = [](std::vector<float>& v, std::size_t size) { return host_span(v.data(), size, Memory::pinned); };
  std::vector<float> held_out(a.size(), poison_value);
  auto held = spread.run_async(a, held_out);
  std::vector<std::vector<float>> out(runs, std::vector<float>(n, poison_value));
  std::vector<SpreadTicket<std::size_t>> t;
  for (std::size_t k = 0; k < runs; ++k) {
    if (k == short_one) {
      t.push_back(spread.run_async(x[k], pinned(out[k], room)));
    } else if (k % 2 == 1) {
      t.push_back(spread.run_async(x[k], out[k]));
    } else {
      t.push_back(spread.run_async(x[k], pinned(out[k], n)));
    }
  }
  const bool flowed = called_within(others, 5000);
  const bool first_held = !held.ready() && !t[0].ready();
  open = true;
  CHECK(flowed);
  CHECK(first_held);
  for (std::size_t k = runs; k-- > 0;) {
    INFO("run " << k);
    const std::size_t count = ref[k]->count;
    if (k == short_one) {
      CHECK(thrown_by([&] { (void)t[k].get(); }) == one_error);
      CHECK(std::memcmp(out[k].data(), ref[k]->want.data(), room * sizeof(float)) == 0);
      CHECK(out[k][room] == poison_value);
    } else if (k == failing) {
      CHECK(contains(thrown_by([&] { (void)t[k].get(); }), "stage failed on purpose"));
    } else {
      CHECK(t[k].get() == count);
      CHECK(t[k].summary().written == count);
      CHECK(std::memcmp(out[k].data(), ref[k]->want.data(), n * sizeof(float)) == 0);  // the tail still poisoned
      if (k % 2 == 1) CHECK(t[k].summary().in_place == 0);
    }
    for (std::size_t j = 0; j < k; ++j) CHECK(t[j].ready());
    CHECK(held.ready());
  }
  CHECK(held.get() == 0);
  CHECK(held_out[0] == poison_value);
  CHECK(t[0].summary().in_place >= 1);  // its first piece knew its offset from the start
}

TEST_CASE("queued spread runs from a Source continue the runs before them; Sources are read in queue order",
          "[spread][async][flow][source]") {
  const std::vector<float> a = tagged(piece_elems);  // one piece, held
  const std::size_t n = 6 * piece_elems + 345;
  const std::vector<float> x = values(n);
  HeldSpread held_spread({0, 1, 2});
  auto& [open, others, spread] = held_spread;
  ReadLog log;  // each Source call's run, in the order the calls were made
  std::vector<float> held_out(a.size(), poison_value), b(n, poison_value), c(n, poison_value), d(n, poison_value);
  std::vector<float> short_out(n / 2, poison_value);
  auto t0 = spread.run_async(a, held_out);
  auto t1 = spread.run_async(logged_source(log, x, 1), b);
  auto t2 = spread.run_async(logged_source(log, x, 2), short_out);  // the Source produces more than it holds
  auto t3 = spread.run_async(logged_source(log, x, 3), c);
  auto t4 = spread.run_async(x, d);
  const bool flowed = called_within(others, 5000);
  const bool first_held = !t0.ready() && !t1.ready();
  open = true;
  CHECK(flowed);
  CHECK(first_held);
  const SpreadSummary s4 = t4.get();
  for (const auto* t : {&t0, &t1, &t2, &t3}) CHECK(t->ready());  // in order
  CHECK(contains(thrown_by([&] { t2.wait(); }), "the source produced more than the " + std::to_string(n / 2)));
  CHECK(t1.summary().elems == n);
  CHECK(t1.summary().chunks == (n + 999) / 1000);
  CHECK(t3.summary().elems == n);
  CHECK(s4.elems == n);
  for (std::size_t i = 0; i < n; ++i) {
    REQUIRE(b[i] == twice(x[i]));
    REQUIRE(c[i] == twice(x[i]));
    REQUIRE(d[i] == twice(x[i]));
  }
  for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(held_out[i] == twice(a[i]));
  // Each Source was read after the one queued before it had ended.
  std::lock_guard<std::mutex> lock(log.m);
  CHECK(std::is_sorted(log.reads.begin(), log.reads.end()));
  CHECK(std::count(log.reads.begin(), log.reads.end(), std::size_t{1}) > 6);
  CHECK(std::count(log.reads.begin(), log.reads.end(), std::size_t{3}) > 6);
}

TEST_CASE("a queued Source that throws is never called again, and the next run's Source only after it returned",
          "[spread][async][flow][source][errors]") {
  const std::size_t n = 6 * piece_elems + 345;
  const std::vector<float> x = values(n);
  std::atomic<int> calls{0};
  HostSpreadPipeline<Map<Stalling>> spread(spread_options({0, 1, 2}), Map<Stalling>{Stalling{&calls, 20}});
  for (int round = 0; round < 10; ++round) {
    ReadLog log;
    std::vector<float> a(n, poison_value), b(n, poison_value), c(n, poison_value);
    auto t0 = spread.run_async(logged_source(log, x, 0), a);
    auto t1 = spread.run_async(logged_source(log, x, 1, 20), b);  // throws at its chunk 20 (its third piece)
    auto t2 = spread.run_async(logged_source(log, x, 2), c);
    t2.wait();
    CHECK(t0.summary().elems == n);
    CHECK(contains(thrown_by([&] { t1.wait(); }), "source failed on purpose"));
    CHECK(t2.summary().elems == n);
    for (std::size_t i = 0; i < n; i += 101) {
      REQUIRE(a[i] == twice(x[i]));
      REQUIRE(c[i] == twice(x[i]));
    }
    std::lock_guard<std::mutex> lock(log.m);
    CHECK_FALSE(log.overlapped.load());
    CHECK(std::is_sorted(log.reads.begin(), log.reads.end()));
    CHECK(std::count(log.reads.begin(), log.reads.end(), std::size_t{1}) == 21);  // none after the one that threw
  }
}

TEST_CASE("at most two open spread runs have piece buffers of their own; a run waits only for the runs it meets",
          "[spread][flow]") {
  detail::FlowingRuns flowing;
  std::vector<float> a(100), b(100), c(100);
  auto ranges = [](std::vector<float>& in, std::vector<float>& out) {
    return detail::spread_run_ranges(detail::as_inputs(in), detail::as_outputs(out));
  };
  const detail::RunRanges ab = ranges(a, b), cc = ranges(c, c), ba = ranges(b, a);
  std::vector<std::shared_ptr<detail::OpenRuns::Run>> open;
  std::atomic<int> completed{0};
  auto complete = [&] { ++completed; };
  CHECK(flowing.may_flow(&ab, true));
  open.push_back(flowing.open(ab, true, complete));
  CHECK(flowing.may_flow(&cc, true));  // the second with buffers of its own
  open.push_back(flowing.open(cc, true, complete));
  CHECK_FALSE(flowing.may_flow(&cc, true));  // not a third
  CHECK_FALSE(flowing.may_flow(nullptr, false));  // a run that keeps to itself waits for all
  std::vector<float> d(100), e(100);
  const detail::RunRanges de = ranges(d, e);
  CHECK(flowing.may_flow(&de, false));  // a run that lands in place still flows
  CHECK_FALSE(flowing.may_flow(&ba, false));  // it writes what the first reads
  // The first completes: a third run with buffers may open, and the one
  // that met only the first flows.
  std::thread finisher([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    flowing.runs().seal(*open[0]);
  });
  flowing.make_way(&ba, true);  // waits for the first alone
  CHECK(open[0]->completed());
  finisher.join();
  CHECK_FALSE(open[1]->completed());
  CHECK(flowing.may_flow(&ba, true));
  flowing.runs().seal(*open[1]);
  flowing.make_way(nullptr, false);
  CHECK(completed == 2);
}

TEST_CASE("open spread runs complete in the order they started, each once, whoever finishes their pieces",
          "[spread][flow]") {
  detail::OpenRuns runs;
  std::mutex m;
  std::vector<int> completed;
  auto log = [&](int k) {
    return [&, k] {
      std::lock_guard<std::mutex> lock(m);
      completed.push_back(k);
    };
  };
  auto r0 = runs.open(log(0));
  auto r1 = runs.open(log(1));
  runs.issued(*r1);
  runs.finished(*r1);
  runs.seal(*r1);  // done, but r0 is not
  CHECK(completed.empty());
  CHECK_FALSE(r1->completed());
  runs.issued(*r0);
  runs.seal(*r0);
  CHECK(completed.empty());  // a piece still in flight
  runs.finished(*r0);
  CHECK(completed == std::vector<int>{0, 1});
  CHECK(r0->completed());
  CHECK(r1->completed());
  CHECK(runs.size() == 0);

  // Many runs, their pieces finished by four threads in any order.
  completed.clear();
  constexpr int count = 200, pieces = 5;
  std::vector<std::shared_ptr<detail::OpenRuns::Run>> open;
  for (int k = 0; k < count; ++k) {
    open.push_back(runs.open(log(k)));
    for (int p = 0; p < pieces; ++p) runs.issued(*open.back());
  }
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      for (int k = count; k-- > 0;) {
        for (int p = w; p < pieces; p += 4) runs.finished(*open[static_cast<std::size_t>(k)]);
        if (w == 0) runs.seal(*open[static_cast<std::size_t>(k)]);
      }
    });
  }
  for (auto& th : threads) th.join();
  REQUIRE(completed.size() == static_cast<std::size_t>(count));
  for (int k = 0; k < count; ++k) REQUIRE(completed[static_cast<std::size_t>(k)] == k);
}

TEST_CASE("member lanes finish each member's pieces oldest first, each on its member's thread", "[spread][flow]") {
  constexpr std::size_t members = 3, pieces = 50;
  std::mutex m;
  std::vector<std::vector<std::size_t>> done(members);
  std::vector<std::thread::id> thread_of(members);
  std::atomic<bool> open{false};
  {
    detail::MemberLanes lanes(members, nullptr);
    // Member 0's first piece holds its lane until the test opens it.
    lanes.push(0, detail::MemberLanes::entry([&] {
      while (!open.load()) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }));
    for (std::size_t p = 0; p < pieces; ++p) {
      for (std::size_t k = 0; k < members; ++k) {
        lanes.wait_room(k, 3);  // room for member 0 comes only once its held piece is finished
        if (k == 0 && p == 1) {
          CHECK(lanes.in_flight(0) <= 2);  // the held piece and piece 0
          open = true;
        }
        lanes.push(k, detail::MemberLanes::entry([&, k, p] {
          std::lock_guard<std::mutex> lock(m);
          done[k].push_back(p);
          if (p == 0) thread_of[k] = std::this_thread::get_id();
          if (thread_of[k] != std::this_thread::get_id()) done[k].push_back(pieces);  // another thread: wrong
        }));
      }
    }
    lanes.wait_empty();
    for (std::size_t k = 0; k < members; ++k) CHECK(lanes.in_flight(k) == 0);
  }
  for (std::size_t k = 0; k < members; ++k) {
    INFO("member " << k);
    REQUIRE(done[k].size() == pieces);
    for (std::size_t p = 0; p < pieces; ++p) REQUIRE(done[k][p] == p);
  }
  CHECK(thread_of[0] != thread_of[1]);
}

TEST_CASE("piece counts give a piece its offset once every piece before it is counted, in any order",
          "[spread][counted]") {
  using detail::PackedPlace;
  detail::PieceCounts counts(4);
  CHECK(counts.base_of(0) == 0);  // nothing comes before the first piece
  CHECK(counts.base_of(1) == PackedPlace::unknown);
  counts.counted(2, 30);  // ahead of piece 1: kept until 0 and 1 are counted
  CHECK(counts.base_of(2) == PackedPlace::unknown);
  counts.counted(0, 10);
  CHECK(counts.base_of(1) == 10);
  CHECK(counts.base_of(2) == PackedPlace::unknown);
  counts.counted(1, 0);  // an empty piece
  CHECK(counts.base_of(3) == 40);
  counts.counted(1, 99);  // counted twice: ignored
  CHECK(counts.base_of(3) == 40);
  counts.counted(8, 5);  // further ahead than the bound: ignored, and nothing after it is known
  counts.counted(3, 1);
  counts.counted(4, 2);
  counts.counted(5, 3);
  counts.counted(6, 4);
  counts.counted(7, 5);
  CHECK(counts.base_of(8) == 55);
  CHECK(counts.base_of(9) == PackedPlace::unknown);
}

TEST_CASE("a spread run ordered after(...) starts once what it is after ended, and the caller never waits",
          "[spread][after]") {
  const std::size_t n = 9 * piece_elems + 77;
  std::vector<float> x = values(n);
  // Every stage here is an fma, so each expected value is a closed form.
  auto first = [](float v) { return std::fma(v, 2.0f, 1.0f); };  // Stalling's
  const Fma second{0.5f, -3.0f};
  using Slow = HostSpreadPipeline<Map<Stalling>>;

  SECTION("after a run of another spread: it reads what that run writes") {
    // The ranges outlive the spreads, whose destructors wait for their runs.
    std::vector<float> y(n, poison_value), z(n, poison_value);
    std::atomic<int> calls{0};
    Slow a(spread_options({0, 1}), Map<Stalling>{Stalling{&calls, 150}});
    Spread1 b(spread_options({0, 1, 2}), Map<Fma>{second});
    SpreadTicket<SpreadSummary> ta = a.run_async(x, y);
    SpreadTicket<SpreadSummary> tb = b.run_async(y, z, after(ta));
    CHECK_FALSE(ta.ready());  // the caller was not held: a still stalls
    CHECK(tb.get().elems == n);
    CHECK(ta.ready());
    for (std::size_t i = 0; i < n; ++i) {
      if (z[i] != second(first(x[i]))) FAIL_CHECK("element " << i << ": " << z[i]);
    }
    // A ticket of no run orders nothing.
    std::fill(z.begin(), z.end(), poison_value);
    CHECK(b.run_async(y, z, after(SpreadTicket<SpreadSummary>{})).get().elems == n);
    CHECK(z[n - 1] == second(first(x[n - 1])));
  }

  SECTION("after a host pipeline's run, whose ops run only once it is waited for, and a spread run at once") {
    std::vector<float> y1(n, poison_value), y2(n, poison_value), z(n, poison_value);
    HostPipeline<Map<Fma>> one(spread_options({}), Map<Fma>{second});
    std::atomic<int> calls{0};
    Slow a(spread_options({0, 1}), Map<Stalling>{Stalling{&calls, 50}});
    HostSpreadPipeline<Map<Saxpy>> c(spread_options({0, 1}), Map<Saxpy>{Saxpy{3.0f}});
    HostTicket t1 = one.run_async(x, y1);  // nothing runs until someone waits
    auto t2 = a.run_async(x, y2);
    auto tc = c.run_async(inputs(y1, y2), z, after(t1), after(t2));
    CHECK(tc.get().elems == n);
    for (std::size_t i = 0; i < n; ++i) {
      if (z[i] != 3.0f * second(x[i]) + first(x[i])) FAIL_CHECK("element " << i << ": " << z[i]);
    }
  }

  SECTION("after a run that failed: it still runs, and each ticket keeps its own outcome") {
    x[5 * piece_elems + 3] = -1.0f;  // Stalling's bad value
    std::vector<float> y(n, poison_value), z(n, poison_value);
    std::atomic<int> calls{0};
    Slow a(spread_options({0, 1}), Map<Stalling>{Stalling{&calls, 50, -1.0f}});
    Spread1 b(spread_options({0}), Map<Fma>{second});
    auto ta = a.run_async(x, y);
    auto tb = b.run_async(y, z, after(ta));
    CHECK(tb.get().elems == n);
    CHECK(ta.ready());
    CHECK(contains(thrown_by([&] { ta.wait(); }), "stage failed on purpose"));
    // b read y once a had ended: what a wrote before it failed (its
    // first piece at least), poison where it wrote nothing.
    CHECK(y[0] == first(x[0]));
    for (std::size_t i = 0; i < n; ++i) {
      if (z[i] != second(y[i])) FAIL_CHECK("element " << i << ": " << z[i]);
    }
  }

  SECTION("a folding run after a run that writes its input") {
    std::vector<float> y(n, poison_value);
    std::atomic<int> calls{0};
    Slow a(spread_options({0, 1}), Map<Stalling>{Stalling{&calls, 100}});
    const auto stage = reduce(0.5f, Plus{}, 250);
    for (std::size_t i = 0; i < n; ++i) y[i] = first(x[i]);
    const float want = HostPipeline<Reduce<float, Plus>>(spread_options({}), stage).run(y);
    std::fill(y.begin(), y.end(), poison_value);
    HostSpreadPipeline<Reduce<float, Plus>> sum(spread_options({0, 1}), stage);
    auto ta = a.run_async(x, y);
    auto ts = sum.run_async(y, after(ta));
    const float got = ts.get();
    CHECK(std::memcmp(&got, &want, sizeof(float)) == 0);
  }
}

TEST_CASE("a spread's queue starts its jobs in order, each after what it waits for, the later ones behind it",
          "[spread][queue]") {
  using detail::SpreadQueue;
  std::mutex m;
  std::vector<int> started;
  struct Step final : SpreadQueue::Job {
    Step(int id, bool done, std::mutex* m, std::vector<int>* log) : id(id), done(done), m(m), log(log) {}
    bool run() noexcept override {
      std::lock_guard<std::mutex> lock(*m);
      log->push_back(id);
      return done;
    }
    int id;
    bool done;
    std::mutex* m;
    std::vector<int>* log;
  };
  int dummy_owner = 0;
  std::atomic<int> starts{0};
  SpreadQueue queue([&](SpreadQueue::Job& job) { ++starts; return job.run(); }, &dummy_owner);
  std::size_t places[4] = {};
  std::atomic<bool> gate{false};
  auto first = std::make_unique<Step>(1, true, &m, &started);
  queue.push(std::move(first), &places[0]);
  // The second waits for the gate, which opens later: the third and
  // fourth wait behind it.
  auto second = std::make_unique<Step>(2, false, &m, &started);  // continues: retired by hand
  second->after.push_back([&] {
    while (!gate.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  queue.push(std::move(second), &places[1]);
  queue.push(std::make_unique<Step>(3, true, &m, &started), &places[2]);
  queue.push(std::make_unique<Step>(4, true, &m, &started), &places[3]);
  CHECK(places[0] == 1);
  CHECK(places[3] == 4);
  queue.wait_retired(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  {
    std::lock_guard<std::mutex> lock(m);
    CHECK(started == std::vector<int>{1});  // 2 holds the rest back until its gate opens
  }
  gate = true;
  for (;;) {  // the second starts, and continues
    {
      std::lock_guard<std::mutex> lock(m);
      if (started.size() >= 2) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  queue.retire();  // it completes elsewhere, as a flowing run does
  queue.wait_retired(4);
  queue.close();
  CHECK(started == std::vector<int>{1, 2, 3, 4});
  CHECK(starts == 4);
}

TEST_CASE("a copy team's size is the fewest threads within the slack of the best rate measured", "[spread][copy-team]") {
  HostCopyRates r;
  CHECK(r.team() == 1);  // nothing measured
  CHECK(r.best_gbps() == 0.0);
  r.rates = {{1, 8.0}, {2, 15.0}, {4, 27.0}, {8, 37.0}, {16, 38.5}};
  CHECK(r.best_gbps() == 38.5);
  CHECK(r.team() == 8);         // 37 is within 5% of 38.5
  CHECK(r.team(0.0) == 16);     // only the best
  CHECK(r.team(0.5) == 4);      // 27 is within half
  r.rates = {{1, 20.0}, {2, 18.0}, {4, 12.0}};  // more threads only lose
  CHECK(r.team() == 1);
  r.rates = {{16, 38.0}, {4, 37.5}, {8, 38.5}};  // in any order: the fewest that qualify
  CHECK(r.team() == 4);
  CHECK(r.team(-1.0) == 8);   // a slack below 0 is 0
  CHECK(r.team(2.0) == 4);    // above 1 is 1: every size qualifies
  CHECK(r.team(std::nan("")) == 8);
}

TEST_CASE("measure_host_copy times each team size, fewest first, and refuses sizes of nothing", "[spread][copy-team]") {
  const HostCopyRates r = measure_host_copy(std::size_t{3} << 20, 3);
  REQUIRE(r.rates.size() == 3);
  for (std::size_t i = 0; i < r.rates.size(); ++i) {
    CHECK(r.rates[i].threads == std::vector<int>{1, 2, 3}[i]);
    CHECK(r.rates[i].gbps > 0.0);
  }
  CHECK(r.team() >= 1);
  CHECK(r.team() <= 3);
  CHECK(measure_host_copy(std::size_t{1} << 20, 1).rates.size() == 1);
  CHECK_THROWS_AS(measure_host_copy(0), config_error);
  CHECK_THROWS_AS(measure_host_copy(1024, -1), config_error);
  CHECK_THROWS_AS(measure_host_copy(1024, max_measured_copy_threads + 1), config_error);
}

TEST_CASE("a shared copy team whose sizing throws is sized again by the next caller", "[spread][copy-team]") {
  int calls = 0;
  detail::SharedCopyTeam shared(std::function<int()>([&calls] {
    if (++calls == 1) throw std::runtime_error("no size yet");
    return 3;
  }));
  CHECK_THROWS_AS(shared.get(), std::runtime_error);
  const auto team = shared.get();
  CHECK(team->threads() == 3);
  CHECK(shared.get() == team);  // made once
  CHECK(calls == 2);
}

TEST_CASE("spreads that leave host_threads at 0 share the process's one copy team, sized by measurement",
          "[spread][copy-team]") {
  const Options o = spread_options({0, 1});
  Spread1 a(o, Map<Fma>{Fma{2.0f, 1.0f}});
  Spread1 b(o, Map<Fma>{Fma{2.0f, 1.0f}});
  // One team for both: the same object behind both spreads while both
  // hold it, whatever their members' count.
  auto ta = detail::spread_copy_team(o);
  auto tb = detail::spread_copy_team(o);
  CHECK(ta == tb);
  CHECK(ta->get() == tb->get());
  CHECK(a.copy_threads() == detail::measured_copy_threads());
  CHECK(b.copy_threads() == detail::measured_copy_threads());
  CHECK(static_cast<int>(ta->get()->threads()) == detail::measured_copy_threads());
  // A spread whose options name the threads gets a team of its own, of
  // twice that (one pipeline's two directions).
  Options own = o;
  own.host_threads = 3;
  Spread1 c(own, Map<Fma>{Fma{2.0f, 1.0f}});
  CHECK(c.copy_threads() == 6);
  CHECK(detail::spread_copy_team(own) != ta);
  // And the shared team still runs: a run over both members is right.
  const std::size_t n = 20000;
  std::vector<float> x = noisy(n), y(n, -1.0f);
  a.run(x, y);
  for (std::size_t i = 0; i < n; i += 97) REQUIRE(y[i] == std::fma(x[i], 2.0f, 1.0f));
}

namespace {
// A Sink that logs every call as (run, what) in one log shared by several
// runs' Sinks, and keeps what it gets at its offset.
struct RunLog {
  std::mutex mutex;
  std::vector<std::pair<int, char>> calls;  // 'c': a chunk, 'f': finish(), 'a': abort()
  void add(int run, char what) {
    std::lock_guard<std::mutex> lock(mutex);
    calls.emplace_back(run, what);
  }
  std::size_t count(int run) {
    std::lock_guard<std::mutex> lock(mutex);
    return static_cast<std::size_t>(
        std::count_if(calls.begin(), calls.end(), [&](const auto& c) { return c.first == run; }));
  }
};
struct LoggedSink {
  RunLog* log;
  int run;
  float* out;
  void operator()(std::size_t, std::size_t offset, ::cuda::std::span<const float> d) {
    log->add(run, 'c');
    std::memcpy(out + offset, d.data(), d.size() * sizeof(float));
  }
  void finish() { log->add(run, 'f'); }
  void abort() { log->add(run, 'a'); }
};

// The runs each call of `log` came from, one entry per run in the order
// first seen; and whether each run's calls came all together.
std::vector<int> runs_in_turn(const RunLog& log, bool& together) {
  std::vector<int> order;
  together = true;
  for (const auto& c : log.calls) {
    if (order.empty() || order.back() != c.first) {
      if (std::find(order.begin(), order.end(), c.first) != order.end()) together = false;
      order.push_back(c.first);
    }
  }
  return order;
}
}  // namespace

TEST_CASE("a queued spread run into a Sink starts while the run before it is in flight; its Sink is fed after "
          "the one before it finished",
          "[spread][async][flow]") {
  const std::vector<float> a = tagged(piece_elems);  // one piece, held: the other member is free
  const std::size_t n = 4 * piece_elems + 123;
  const std::vector<float> x = values(n);
  HeldSpread held_spread({0, 1});
  auto& [open, others, spread] = held_spread;
  RunLog log;
  std::vector<float> b(a.size(), poison_value), c(n, poison_value);
  auto t1 = spread.run_async(a, Sink<float, LoggedSink>{LoggedSink{&log, 1, b.data()}});
  auto t2 = spread.run_async(x, Sink<float, LoggedSink>{LoggedSink{&log, 2, c.data()}});
  // The second run reads and writes nothing the first does: its pieces
  // run while the first is held, but its Sink hears nothing yet.
  const bool flowed = called_within(others, 5000);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // time for a delivery that should not happen
  const std::size_t early = log.count(2);
  const bool first_held = !t1.ready() && !t2.ready();
  open = true;
  CHECK(flowed);
  CHECK(first_held);
  CHECK(early == 0);
  const SpreadSummary s2 = t2.get();
  CHECK(t1.ready());
  CHECK(s2.elems == n);
  bool together = false;
  CHECK(runs_in_turn(log, together) == std::vector<int>{1, 2});
  CHECK(together);
  REQUIRE(log.calls.size() >= 4);
  CHECK(std::count(log.calls.begin(), log.calls.end(), std::make_pair(1, 'f')) == 1);
  CHECK(std::count(log.calls.begin(), log.calls.end(), std::make_pair(2, 'f')) == 1);
  CHECK(log.calls.back() == std::make_pair(2, 'f'));
  for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(b[i] == twice(a[i]));
  for (std::size_t i = 0; i < n; ++i) REQUIRE(c[i] == twice(x[i]));

  // A run into a Sink that reads what a run in flight writes waits for it
  // (one that did not would read the poison, which the stage holds too).
  open = false;
  std::vector<float> d(a.size(), poison_value), e(a.size(), poison_value);
  RunLog reads;
  auto t3 = spread.run_async(a, d);  // writes d, held
  auto t4 = spread.run_async(d, Sink<float, LoggedSink>{LoggedSink{&reads, 4, e.data()}});
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  open = true;
  t4.wait();
  CHECK(t3.ready());
  for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(e[i] == twice(twice(a[i])));

  // What a Sink writes is not a range the spread checks: a run that reads
  // it is ordered after(ticket) the Sink's run, and then reads it whole.
  open = false;
  std::vector<float> f(a.size(), poison_value), g(a.size(), poison_value);
  RunLog writes;
  auto t5 = spread.run_async(a, Sink<float, LoggedSink>{LoggedSink{&writes, 5, f.data()}});  // held
  auto t6 = spread.run_async(f, g, after(t5));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  open = true;
  t6.wait();
  CHECK(t5.ready());
  for (std::size_t i = 0; i < a.size(); ++i) REQUIRE(g[i] == twice(twice(a[i])));
}

TEST_CASE("a spread run into a Sink that fails while its Sink is held back is aborted, never fed or finished",
          "[spread][async][flow][errors]") {
  const std::vector<float> a = tagged(piece_elems);  // one piece, held
  const std::size_t n = 2 * piece_elems + 5;
  std::vector<float> bad = values(n);
  bad[piece_elems + 2] = 7.0f;
  HeldSpread held_spread({0, 1}, 7.0f);
  auto& [open, others, spread] = held_spread;
  RunLog log;
  std::vector<float> b(a.size(), poison_value), c(n, poison_value), d(n, poison_value);
  auto t1 = spread.run_async(a, Sink<float, LoggedSink>{LoggedSink{&log, 1, b.data()}});
  auto t2 = spread.run_async(bad, Sink<float, LoggedSink>{LoggedSink{&log, 2, c.data()}});
  const std::vector<float> x = values(n);
  auto t3 = spread.run_async(x, Sink<float, LoggedSink>{LoggedSink{&log, 3, d.data()}});
  // The second run's pieces run, and one fails, while the first holds its
  // Sink back.
  const bool flowed = called_within(others, 5000);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::size_t early = log.count(2);
  open = true;
  CHECK(flowed);
  CHECK(early == 0);
  CHECK(contains(thrown_by([&] { t2.wait(); }), "stage failed on purpose"));
  t3.wait();
  CHECK(t1.ready());
  bool together = false;
  CHECK(runs_in_turn(log, together) == std::vector<int>{1, 2, 3});
  CHECK(together);
  CHECK(log.count(2) == 1);  // its abort() alone
  CHECK(std::count(log.calls.begin(), log.calls.end(), std::make_pair(2, 'a')) == 1);
  CHECK(std::count(log.calls.begin(), log.calls.end(), std::make_pair(1, 'f')) == 1);
  CHECK(std::count(log.calls.begin(), log.calls.end(), std::make_pair(3, 'f')) == 1);
  for (std::size_t i = 0; i < n; ++i) REQUIRE(d[i] == twice(x[i]));
}

TEST_CASE("a failing run in a queue of spread runs into Sinks aborts its own Sink; the others are fed in turn and "
          "finished",
          "[spread][async][flow][errors]") {
  const std::size_t n = 3 * piece_elems + 11;
  const std::vector<float> x = values(n);
  std::vector<float> bad(n, 0.25f);
  bad[2 * piece_elems + 3] = 7.0f;
  std::atomic<int> calls{0};
  HostSpreadPipeline<Map<Stalling>> spread(spread_options({0, 1}), Map<Stalling>{Stalling{&calls, 20, 7.0f}});
  constexpr int runs = 6, failing = 3;
  RunLog log;
  std::vector<std::vector<float>> out(runs, std::vector<float>(n, poison_value));
  std::vector<SpreadTicket<SpreadSummary>> t;
  for (int k = 0; k < runs; ++k) {
    const std::vector<float>& in = k == failing ? bad : x;
    if (k % 2 == 0) {
      t.push_back(spread.run_async(in, Sink<float, LoggedSink>{LoggedSink{&log, k, out[k].data()}}));
    } else {
      t.push_back(spread.run_async(in, out[k]));  // ranges between them
    }
  }
  for (int k = runs; k-- > 0;) {
    INFO("run " << k);
    if (k == failing) {
      CHECK(contains(thrown_by([&] { t[k].wait(); }), "stage failed on purpose"));
    } else {
      t[k].wait();
      for (std::size_t i = 0; i < n; i += 7) REQUIRE(out[k][i] == twice(x[i]));
    }
  }
  bool together = false;
  CHECK(runs_in_turn(log, together) == std::vector<int>{0, 2, 4});
  CHECK(together);
  for (int k : {0, 2, 4}) {
    INFO("Sink of run " << k);
    CHECK(std::count(log.calls.begin(), log.calls.end(), std::make_pair(k, 'f')) == 1);
    CHECK(std::count(log.calls.begin(), log.calls.end(), std::make_pair(k, 'a')) == 0);
  }
  // A Sink run that fails: aborted, never finished.
  std::vector<float> lost(n, poison_value);
  RunLog failed;
  auto tf = spread.run_async(bad, Sink<float, LoggedSink>{LoggedSink{&failed, 9, lost.data()}});
  auto after = spread.run_async(x, Sink<float, LoggedSink>{LoggedSink{&failed, 10, out[0].data()}});
  CHECK(contains(thrown_by([&] { tf.wait(); }), "stage failed on purpose"));
  after.wait();
  CHECK(std::count(failed.calls.begin(), failed.calls.end(), std::make_pair(9, 'a')) == 1);
  CHECK(std::count(failed.calls.begin(), failed.calls.end(), std::make_pair(9, 'f')) == 0);
  CHECK(failed.calls.back() == std::make_pair(10, 'f'));
  CHECK(runs_in_turn(failed, together) == std::vector<int>{9, 10});
  CHECK(together);
}
