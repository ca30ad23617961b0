// SPDX-License-Identifier: MIT
// Sources, sinks and staging modes on the host backend: runs whose length
// a source decides, short final chunks, inputs that end exactly on a chunk
// boundary or at once, sinks that see every chunk once and in order, and
// failures that reach the caller and leave the pipeline usable.
#include <chunkpipe/host_backend.hpp>
#include <chunkpipe/spread.hpp>

#include "catch.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

using namespace chunkpipe;

namespace {

struct Fma {
  float a, b;
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return std::fma(x, a, b); }
};

float value_at(std::size_t i) { return static_cast<float>(i % 4093) / 4093.0f - 0.5f; }

// A source of `total` elements that checks it is called in chunk order and
// never again once it has ended the input.
struct Counting {
  std::size_t total;
  std::size_t* calls;
  bool* misuse;
  std::size_t next = 0;
  bool ended = false;
  std::size_t operator()(std::size_t chunk, ::cuda::std::span<float> slot) {
    if (ended || chunk != next) *misuse = true;
    ++*calls;
    ++next;
    const std::size_t begin = chunk * slot.size();
    const std::size_t n = begin < total ? std::min(slot.size(), total - begin) : 0;
    for (std::size_t i = 0; i < n; ++i) slot[i] = value_at(begin + i);
    if (n < slot.size()) ended = true;
    return n;
  }
};

// A sink that records what it got, and whether finish/abort ran.
struct Collect {
  std::vector<float>* out;
  std::vector<std::size_t>* chunks;
  int* finished;
  int* aborted;
  void operator()(std::size_t chunk, std::size_t offset, ::cuda::std::span<const float> data) {
    chunks->push_back(chunk);
    if (out->size() < offset + data.size()) out->resize(offset + data.size(), std::numeric_limits<float>::quiet_NaN());
    for (std::size_t i = 0; i < data.size(); ++i) (*out)[offset + i] = data[i];
  }
  void finish() { ++*finished; }
  void abort() { ++*aborted; }
};

const Policy all_policies[] = {Policy::serial, Policy::slot_streams, Policy::stage_streams, Policy::automatic};

}  // namespace

TEST_CASE("a source of unknown length, ragged or exact or empty, into a range", "[host][source]") {
  const Fma f{2.f, 0.5f};
  for (std::size_t total : {std::size_t{1000}, std::size_t{640}, std::size_t{0}, std::size_t{5}}) {
    for (Policy policy : all_policies) {
      for (int depth : {1, 2, 4}) {
        for (std::uint64_t seed : {0u, 3u, 9u}) {
          HostPipeline<Map<Fma>> pipe({.chunk_elems = 64, .depth = depth, .policy = policy, .grain_elems = 64}, Map<Fma>{f});
          pipe.set_seed(seed);
          std::size_t calls = 0;
          bool misuse = false;
          std::vector<float> y(1200, std::numeric_limits<float>::quiet_NaN());
          pipe.run(source<float>(Counting{total, &calls, &misuse}), y);
          INFO(to_string(policy) << " depth " << depth << " total " << total << " seed " << seed);
          REQUIRE_FALSE(misuse);
          REQUIRE(calls == total / 64 + 1);  // one call past the end only when the end is on a boundary
          REQUIRE(pipe.last_run().chunks == (total + 63) / 64);
          for (std::size_t i = 0; i < total; ++i) REQUIRE(y[i] == f(value_at(i)));
          for (std::size_t i = total; i < y.size(); ++i) REQUIRE(std::isnan(y[i]));
        }
      }
    }
  }
}

TEST_CASE("source to sink: every chunk once, in order, then finish", "[host][source][sink]") {
  const Fma f{-1.f, 3.f};
  for (Policy policy : all_policies) {
    HostPipeline<Map<Fma>> pipe({.chunk_elems = 100, .depth = 3, .policy = policy}, Map<Fma>{f});
    std::size_t calls = 0;
    bool misuse = false;
    std::vector<float> got;
    std::vector<std::size_t> chunks;
    int finished = 0, aborted = 0;
    pipe.run(source<float>(Counting{1234, &calls, &misuse}), sink<float>(Collect{&got, &chunks, &finished, &aborted}));
    REQUIRE(finished == 1);
    REQUIRE(aborted == 0);
    REQUIRE(got.size() == 1234);
    for (std::size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == f(value_at(i)));
    REQUIRE(chunks.size() == 13);
    for (std::size_t k = 0; k < chunks.size(); ++k) REQUIRE(chunks[k] == k);
  }
}

TEST_CASE("a range into a sink", "[host][sink]") {
  std::vector<float> x(777);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = value_at(i * 7);
  std::vector<float> got;
  std::vector<std::size_t> chunks;
  int finished = 0, aborted = 0;
  HostPipeline<Map<Fma>> pipe({.chunk_elems = 50, .depth = 2}, Map<Fma>{{1.f, 1.f}});
  pipe.run(x, sink<float>(Collect{&got, &chunks, &finished, &aborted}));
  REQUIRE(finished == 1);
  REQUIRE(got.size() == x.size());
  for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(got[i] == Fma{1.f, 1.f}(x[i]));
}

TEST_CASE("a failing source or sink reaches the caller; the pipeline stays usable", "[host][errors]") {
  HostPipeline<Map<Fma>> pipe({.chunk_elems = 64, .depth = 3}, Map<Fma>{{2.f, 0.f}});
  std::vector<float> got;
  std::vector<std::size_t> chunks;
  int finished = 0, aborted = 0;
  auto failing = source<float>([](std::size_t chunk, ::cuda::std::span<float> slot) -> std::size_t {
    if (chunk == 3) throw std::runtime_error("source failed at chunk 3");
    for (float& v : slot) v = 1.f;
    return slot.size();
  });
  try {
    pipe.run(failing, sink<float>(Collect{&got, &chunks, &finished, &aborted}));
    FAIL("expected the source's error");
  } catch (const std::runtime_error& e) {
    REQUIRE(std::string(e.what()) == "source failed at chunk 3");
  }
  REQUIRE(finished == 0);
  REQUIRE(aborted == 1);

  struct Throws {
    void operator()(std::size_t chunk, std::size_t, ::cuda::std::span<const float>) const {
      if (chunk == 1) throw std::runtime_error("sink failed");
    }
  };
  std::vector<float> x(300, 1.f);
  REQUIRE_THROWS_AS(pipe.run(x, sink<float>(Throws{})), std::runtime_error);

  // A source that overfills its slot, or produces more than the output holds.
  auto liar = source<float>([](std::size_t, ::cuda::std::span<float> slot) { return slot.size() + 1; });
  std::vector<float> y(1000);
  REQUIRE_THROWS_AS(pipe.run(liar, y), pipeline_error);
  std::size_t calls = 0;
  bool misuse = false;
  std::vector<float> small(100);
  REQUIRE_THROWS_AS(pipe.run(source<float>(Counting{500, &calls, &misuse}), small), pipeline_error);

  // And then it works.
  std::vector<float> out(300);
  pipe.run(x, out);
  for (float v : out) REQUIRE(v == 2.f);
}

TEST_CASE("staging modes: host ops only where pageable memory is staged by threads", "[host][staging]") {
  std::vector<float> x(500), y(500);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = value_at(i);
  for (Staging mode : {Staging::automatic, Staging::threads, Staging::registered, Staging::direct}) {
    HostPipeline<Map<Fma>> pipe({.chunk_elems = 64, .depth = 2, .staging = mode, .host_threads = 3}, Map<Fma>{{3.f, 1.f}});
    std::fill(y.begin(), y.end(), std::numeric_limits<float>::quiet_NaN());
    pipe.run(x, y);
    for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(y[i] == Fma{3.f, 1.f}(x[i]));
    bool host_ops = false;
    for (const Op& op : pipe.issued_plan().ops) {
      host_ops = host_ops || op.kind == OpKind::host_in || op.kind == OpKind::host_out;
    }
    REQUIRE(host_ops == (mode == Staging::automatic || mode == Staging::threads));
  }
  REQUIRE_THROWS_AS(HostPipeline<Map<Fma>>({.host_threads = -1}), config_error);
}

TEST_CASE("sink hooks: an empty run finishes, a failing finish aborts, abort cannot hide the error", "[host][sink]") {
  HostPipeline<Map<Fma>> pipe({.chunk_elems = 64, .depth = 2}, Map<Fma>{{1.f, 0.f}});
  std::vector<float> got;
  std::vector<std::size_t> chunks;
  int finished = 0, aborted = 0;
  std::vector<float> empty;
  pipe.run(empty, sink<float>(Collect{&got, &chunks, &finished, &aborted}));
  REQUIRE(finished == 1);
  REQUIRE(aborted == 0);
  REQUIRE(chunks.empty());

  struct FinishFails {
    int* aborted;
    void operator()(std::size_t, std::size_t, ::cuda::std::span<const float>) const {}
    void finish() const { throw pipeline_error("could not rename"); }
    void abort() const { ++*aborted; }
  };
  aborted = 0;
  std::vector<float> x(100, 1.f);
  REQUIRE_THROWS_AS(pipe.run(x, sink<float>(FinishFails{&aborted})), pipeline_error);
  REQUIRE(aborted == 1);

  struct AbortThrows {
    void operator()(std::size_t chunk, std::size_t, ::cuda::std::span<const float>) const {
      if (chunk == 0) throw std::runtime_error("the real error");
    }
    void abort() const { throw std::logic_error("cleanup failed too"); }
  };
  try {
    pipe.run(x, sink<float>(AbortThrows{}));
    FAIL("expected the sink's error");
  } catch (const std::runtime_error& e) {
    REQUIRE(std::string(e.what()) == "the real error");
  }
}

TEST_CASE("a move-only source and sink are moved into the run", "[host][source]") {
  struct Owning {  // move-only: owns its state
    std::unique_ptr<std::size_t> left = std::make_unique<std::size_t>(150);
    std::size_t operator()(std::size_t, ::cuda::std::span<float> slot) {
      const std::size_t n = std::min(*left, slot.size());
      for (std::size_t i = 0; i < n; ++i) slot[i] = 2.f;
      *left -= n;
      return n;
    }
  };
  struct Sum {
    std::unique_ptr<double> total = std::make_unique<double>(0.0);
    double* result;
    void operator()(std::size_t, std::size_t, ::cuda::std::span<const float> d) {
      for (float v : d) *total += v;
    }
    void finish() { *result = *total; }
  };
  double result = 0;
  HostPipeline<Map<Fma>> pipe({.chunk_elems = 64, .depth = 2}, Map<Fma>{{3.f, 0.f}});
  pipe.run(source<float>(Owning{}), sink<float>(Sum{std::make_unique<double>(0.0), &result}));
  REQUIRE(result == 150 * 6.0);
}

// -- Callbacks see the window (Options::chunk_elems), whatever the unit ------
//
// The automatic policy may schedule units other than the window: grains of
// a large window (here and on the GPU) or coarser units for a small one
// (the GPU only, tests/gpu/streaming_test.cu). A Source must still be asked
// for whole windows and a Sink handed whole windows, the last one short.

namespace {

// A Source that produces `total` elements in calls of exactly `window`, in
// order, never called again after it ended; and a Sink that checks it gets
// windows of `delivery` records numbered in order, only the last short.
struct WindowLog {
  explicit WindowLog(std::size_t w) : window(w) {}
  std::size_t window = 0;
  std::vector<std::size_t> sizes;  // of every call, in order
  bool misuse = false;
};

struct WindowSource {
  std::size_t total;
  WindowLog* log;
  std::size_t next = 0;
  bool ended = false;
  std::size_t operator()(std::size_t chunk, ::cuda::std::span<float> slot) {
    if (ended || chunk != next || slot.size() != log->window) log->misuse = true;
    log->sizes.push_back(slot.size());
    ++next;
    const std::size_t begin = chunk * slot.size();
    const std::size_t n = begin < total ? std::min(slot.size(), total - begin) : 0;
    for (std::size_t i = 0; i < n; ++i) slot[i] = value_at(begin + i);
    if (n < slot.size()) ended = true;
    return n;
  }
};

struct WindowSink {
  std::vector<float>* out;
  WindowLog* log;
  int* finished;
  std::size_t next = 0;
  bool short_seen = false;
  void operator()(std::size_t chunk, std::size_t offset, ::cuda::std::span<const float> data) {
    // Windows in order, at their own offsets; only the last may be short
    // (and an empty one is never handed over).
    if (chunk != next || offset != chunk * log->window || short_seen || data.empty() ||
        data.size() > log->window) {
      log->misuse = true;
    }
    if (data.size() < log->window) short_seen = true;
    ++next;
    log->sizes.push_back(data.size());
    out->insert(out->end(), data.begin(), data.end());
  }
  void finish() { ++*finished; }
};

// Calls of a stream of `total` elements cut into windows of `w`.
std::vector<std::size_t> expected_windows(std::size_t total, std::size_t w, bool trailing_empty) {
  std::vector<std::size_t> v(total / w, w);
  if (total % w != 0) v.push_back(total % w);
  if (trailing_empty && total % w == 0) v.push_back(0);  // a Source ends with an empty call
  return v;
}

}  // namespace

TEST_CASE("windows: a source and a sink cut into windows of any size against units of any size",
          "[host][source][sink][window]") {
  // The engine's pieces alone (detail/windows.hpp), for windows smaller
  // than, equal to and larger than the units, and units that do not divide.
  for (std::size_t window : {std::size_t{7}, std::size_t{64}, std::size_t{100}}) {
    for (std::size_t unit : {std::size_t{64}, std::size_t{30}}) {
      for (std::size_t total : {std::size_t{0}, std::size_t{1}, std::size_t{63}, std::size_t{64}, std::size_t{700},
                                std::size_t{1000}}) {
        INFO("window " << window << " unit " << unit << " total " << total);
        WindowLog in_log{window}, out_log{window};
        WindowSource src{total, &in_log};
        std::vector<float> got;
        int finished = 0;
        WindowSink snk{&got, &out_log, &finished};
        detail::Window w;
        w.elems = window;
        w.delivery = window;
        auto end = std::make_shared<detail::WindowEnd>();
        detail::SourceWindows<float, WindowSource> source(src, window, end);
        detail::SinkWindows<float, WindowSink> sink(snk, w, end);
        std::vector<float> slot(unit);
        std::size_t at = 0;
        for (;;) {
          const std::size_t n = source.fill(slot.data(), unit);
          if (n != 0) sink.put(at, slot.data(), n);
          at += n;
          if (n < unit) break;
        }
        // The Source's end told the Sink where the output ends: nothing is
        // left for flush().
        const std::size_t before_flush = out_log.sizes.size();
        sink.flush();
        CHECK(out_log.sizes.size() == before_flush);
        REQUIRE_FALSE(in_log.misuse);
        REQUIRE_FALSE(out_log.misuse);
        CHECK(at == total);
        CHECK(in_log.sizes.size() == expected_windows(total, window, true).size());
        CHECK(out_log.sizes == expected_windows(total, window, false));
        REQUIRE(got.size() == total);
        for (std::size_t i = 0; i < total; ++i) REQUIRE(got[i] == value_at(i));
      }
    }
  }
}

TEST_CASE("windows: a pipeline whose unit is a grain of its window calls its Source and Sink in windows",
          "[host][source][sink][window]") {
  // A window of 1000 elements in grains of at most 300: units of 250.
  const Fma f{2.f, 0.5f};
  const Options o{.chunk_elems = 1000, .depth = 2, .grain_elems = 300};
  for (std::size_t total : {std::size_t{0}, std::size_t{999}, std::size_t{1000}, std::size_t{2500}, std::size_t{4321}}) {
    for (std::uint64_t seed : {0u, 5u}) {
      HostPipeline<Map<Fma>> pipe(o, Map<Fma>{f});
      REQUIRE(pipe.geometry().chunk_elems == 250);  // the unit is not the window: the case under test
      pipe.set_seed(seed);
      INFO("total " << total << " seed " << seed);
      WindowLog in_log{1000}, out_log{1000};
      std::vector<float> got;
      int finished = 0;
      pipe.run(source<float>(WindowSource{total, &in_log}), sink<float>(WindowSink{&got, &out_log, &finished}));
      REQUIRE_FALSE(in_log.misuse);
      REQUIRE_FALSE(out_log.misuse);
      CHECK(out_log.sizes == expected_windows(total, 1000, false));
      CHECK(finished == 1);
      REQUIRE(got.size() == total);
      for (std::size_t i = 0; i < total; ++i) REQUIRE(got[i] == f(value_at(i)));

      // Ranges into a Sink: the length is known, the last window leaves
      // with its unit; a Source into ranges.
      std::vector<float> x(total);
      for (std::size_t i = 0; i < total; ++i) x[i] = value_at(i);
      WindowLog out2{1000};
      std::vector<float> got2;
      pipe.run(x, sink<float>(WindowSink{&got2, &out2, &finished}));
      REQUIRE_FALSE(out2.misuse);
      CHECK(out2.sizes == expected_windows(total, 1000, false));
      CHECK(got2 == got);
      WindowLog in2{1000};
      std::vector<float> y(total + 10, std::numeric_limits<float>::quiet_NaN());
      pipe.run(source<float>(WindowSource{total, &in2}), y);
      REQUIRE_FALSE(in2.misuse);
      for (std::size_t i = 0; i < total; ++i) REQUIRE(y[i] == got[i]);
      CHECK(std::isnan(y[total]));  // nothing past the end
    }
  }
}

namespace {
struct KeepPositive {
  CHUNKPIPE_HOST_DEVICE bool operator()(float v) const { return v > 0.0f; }
};
}  // namespace

TEST_CASE("windows: a Filter's Sink gets its packed output in windows; a Reduce over a Source gives the same bits",
          "[host][source][sink][window]") {
  const Options o{.chunk_elems = 512, .depth = 3, .grain_elems = 100};
  const std::size_t total = 5000;
  std::vector<float> x(total);
  for (std::size_t i = 0; i < total; ++i) x[i] = value_at(i);
  std::vector<float> kept;
  for (float v : x) {
    if (v > 0.0f) kept.push_back(v);
  }
  REQUIRE(kept.size() > 1024);  // several windows of packed output

  auto keep = make_host_pipeline(o, filter(KeepPositive{}));
  REQUIRE(keep.geometry().chunk_elems != 512);
  WindowLog in_log{512}, out_log{512};
  std::vector<float> got;
  int finished = 0;
  const std::size_t n = keep.run(source<float>(WindowSource{total, &in_log}), sink<float>(WindowSink{&got, &out_log, &finished}));
  REQUIRE_FALSE(in_log.misuse);
  REQUIRE_FALSE(out_log.misuse);
  CHECK(n == kept.size());
  CHECK(out_log.sizes == expected_windows(kept.size(), 512, false));
  CHECK(got == kept);
  CHECK(finished == 1);

  struct Plus {
    CHUNKPIPE_HOST_DEVICE float operator()(float a, float b) const { return a + b; }
  };
  auto sum = make_host_pipeline(o, reduce(0.0f, Plus{}, 4));
  REQUIRE(sum.geometry().chunk_elems != 512);
  WindowLog sum_log{512};
  const float from_source = sum.run(source<float>(WindowSource{total, &sum_log}));
  REQUIRE_FALSE(sum_log.misuse);
  const float from_ranges = sum.run(x);
  CHECK(std::memcmp(&from_source, &from_ranges, sizeof(float)) == 0);
}

TEST_CASE("windows: a spread calls the user's Source and Sink in windows", "[host][source][sink][window][spread]") {
  const Fma f{2.f, 0.5f};
  Options o{.chunk_elems = 1000, .depth = 2, .grain_elems = 300};
  o.devices = {0, 1};
  HostSpreadPipeline<Map<Fma>> spread(o, Map<Fma>{f});
  for (std::size_t total : {std::size_t{0}, std::size_t{999}, std::size_t{20000}, std::size_t{20123}}) {
    INFO("total " << total);
    WindowLog in_log{1000}, out_log{1000};
    std::vector<float> got;
    int finished = 0;
    spread.run(source<float>(WindowSource{total, &in_log}), sink<float>(WindowSink{&got, &out_log, &finished}));
    REQUIRE_FALSE(in_log.misuse);
    REQUIRE_FALSE(out_log.misuse);
    CHECK(out_log.sizes == expected_windows(total, 1000, false));
    CHECK(finished == 1);
    REQUIRE(got.size() == total);
    for (std::size_t i = 0; i < total; ++i) REQUIRE(got[i] == f(value_at(i)));
  }
  // A Filter spread's Sink: the packed output in windows.
  auto keep = HostSpreadPipeline<Filter<KeepPositive>>(o, filter(KeepPositive{}));
  const std::size_t total = 30000;
  std::vector<float> kept;
  for (std::size_t i = 0; i < total; ++i) {
    if (value_at(i) > 0.0f) kept.push_back(value_at(i));
  }
  WindowLog in_log{1000}, out_log{1000};
  std::vector<float> got;
  int finished = 0;
  keep.run(source<float>(WindowSource{total, &in_log}), sink<float>(WindowSink{&got, &out_log, &finished}));
  REQUIRE_FALSE(in_log.misuse);
  REQUIRE_FALSE(out_log.misuse);
  CHECK(out_log.sizes == expected_windows(kept.size(), 1000, false));
  CHECK(got == kept);
  // The Source ends exactly where a piece ends (15 pieces of 2000): the
  // empty piece after it adds nothing (it once added an earlier piece's
  // count again).
  std::vector<float> z(total, std::numeric_limits<float>::quiet_NaN());
  WindowLog in2{1000};
  CHECK(keep.run(source<float>(WindowSource{total, &in2}), z) == kept.size());
  REQUIRE_FALSE(in2.misuse);
  CHECK(std::equal(kept.begin(), kept.end(), z.begin()));
  CHECK(std::isnan(z[kept.size()]));
}

// -- Sources and Sinks that read and write at any offset ----------------------

namespace {

// A Source that reads element i as value_at(i) at any offset, from any
// thread, counting the elements each call covered; its plain call must
// never be used.
struct AtSource {
  std::size_t total;
  std::vector<std::atomic<int>>* covered;  // [element]: reads that covered it
  std::atomic<int>* plain_calls;
  std::atomic<int>* at_calls = nullptr;    // read_at calls, where counted
  std::size_t operator()(std::size_t, ::cuda::std::span<float>) {
    ++*plain_calls;
    return 0;
  }
  std::size_t read_at(std::size_t offset, ::cuda::std::span<float> dst) const {
    if (at_calls) ++*at_calls;
    const std::size_t n = offset < total ? std::min(dst.size(), total - offset) : 0;
    for (std::size_t i = 0; i < n; ++i) {
      dst[i] = value_at(offset + i);
      ++(*covered)[offset + i];
    }
    return n;
  }
};

struct AtSink {
  std::vector<float>* out;
  std::vector<std::atomic<int>>* written;
  std::atomic<int>* plain_calls;
  std::atomic<int>* at_calls = nullptr;  // write_at calls, where counted
  void operator()(std::size_t, std::size_t, ::cuda::std::span<const float>) { ++*plain_calls; }
  void write_at(std::size_t offset, ::cuda::std::span<const float> data) const {
    if (at_calls) ++*at_calls;
    for (std::size_t i = 0; i < data.size(); ++i) {
      (*out)[offset + i] = data[i];
      ++(*written)[offset + i];
    }
  }
};

// A read_at that says the input ended and then gives more past that point.
struct Inconsistent {
  std::size_t operator()(std::size_t, ::cuda::std::span<float>) { return 0; }
  std::size_t read_at(std::size_t offset, ::cuda::std::span<float> dst) const {
    if (offset == 0) return dst.size() / 2;  // "ends" half way through its part
    std::fill(dst.begin(), dst.end(), 1.0f);
    return dst.size();
  }
};

}  // namespace

TEST_CASE("a Source with read_at is read in parts and a Sink with write_at written a chunk a call, each element once",
          "[host][source][sink][positional]") {
  const Fma f{2.f, 0.5f};
  const std::size_t chunk = std::size_t{1} << 19;  // 2 MiB of float: cut into parts
  for (std::size_t total : {std::size_t{0}, std::size_t{1000}, chunk * 2, chunk * 3 + 77777}) {
    INFO("total " << total);
    HostPipeline<Map<Fma>> pipe({.chunk_elems = chunk, .depth = 2}, Map<Fma>{f});
    std::vector<std::atomic<int>> covered(total + chunk), written(total + chunk);
    std::atomic<int> plain{0}, reads{0}, writes{0};
    std::vector<float> got(total + chunk, std::numeric_limits<float>::quiet_NaN());
    pipe.run(source<float>(AtSource{total, &covered, &plain, &reads}),
             sink<float>(AtSink{&got, &written, &plain, &writes}));
    CHECK(plain == 0);
    CHECK(pipe.last_run().elems == total);
    // Reads of whole 2 MiB chunks are split (the host backend's three
    // parts); writes never are: one write_at per chunk that holds data.
    const std::size_t whole = total / chunk, chunks = (total + chunk - 1) / chunk;
    CHECK(static_cast<std::size_t>(reads.load()) >= 3 * whole);
    CHECK(static_cast<std::size_t>(writes.load()) == chunks);
    for (std::size_t i = 0; i < total; ++i) {
      REQUIRE(covered[i] == 1);
      REQUIRE(written[i] == 1);
      REQUIRE(got[i] == f(value_at(i)));
    }
    for (std::size_t i = total; i < covered.size(); ++i) REQUIRE(written[i] == 0);
  }
  // A read_at that contradicts itself fails the run, saying where; the
  // pipeline runs again.
  HostPipeline<Map<Fma>> pipe({.chunk_elems = chunk, .depth = 2}, Map<Fma>{f});
  std::vector<float> y(chunk * 2);
  try {
    pipe.run(source<float>(Inconsistent{}), y);
    FAIL("no error");
  } catch (const pipeline_error& e) {
    CHECK(std::string(e.what()).find("said the input ends at element") != std::string::npos);
  }
  std::vector<std::atomic<int>> covered(chunk), written(chunk);
  std::atomic<int> plain{0};
  std::vector<float> got(chunk);
  pipe.run(source<float>(AtSource{100, &covered, &plain, nullptr}), sink<float>(AtSink{&got, &written, &plain, nullptr}));
  CHECK(got[99] == f(value_at(99)));
}
