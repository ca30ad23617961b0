// SPDX-License-Identifier: MIT
// Sources, sinks and staging modes on the host backend: runs whose length
// a source decides, short final chunks, inputs that end exactly on a chunk
// boundary or at once, sinks that see every chunk once and in order, and
// failures that reach the caller and leave the pipeline usable.
#include <chunkpipe/host_backend.hpp>

#include "catch.hpp"

#include <cmath>
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
