// SPDX-License-Identifier: MIT
// A steady-state run allocates nothing per chunk: the C++ allocations a run
// makes (counted by replacing operator new in this program) do not grow
// with its number of chunks, for pinned and staged runs and every policy.
// A program of its own because it replaces the global allocator
// (alloc_counter.cpp, compiled by the host compiler).
//
// And memory from the program (Options::device_memory, pinned_memory): a
// counting resource over cudaMalloc and cudaMallocHost gets back every
// byte it gave a Map, a Reduce, a Filter, a graph run and a spread, and the
// device's free memory says nothing was allocated behind its back; a
// cudaMallocAsync pool (CudaPoolResource) holds the slots while a pipeline
// lives; memory of the wrong kind, and a resource that throws, give clear
// errors.
#include <chunkpipe/pipeline.cuh>

#include "catch.hpp"

#include "alloc_counter.hpp"
#include "counting_resource.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

using namespace chunkpipe;

namespace {

struct Scale {
  float s;
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return x * s; }
};

// Allocations per run, over `runs` runs of `chunks` chunks each, after the
// pipeline has warmed up on the same shape.
template <class In, class Out>
double allocations_per_run(ChunkedPipeline<Map<Scale>>& pipe, In& in, Out& out, std::size_t chunk, std::size_t chunks,
                           int runs) {
  auto a = host_span(in.data(), chunk * chunks, Memory::automatic);
  auto b = host_span(out.data(), chunk * chunks, Memory::automatic);
  for (int w = 0; w < 3; ++w) pipe.run(a, b);
  test_alloc::start();
  for (int r = 0; r < runs; ++r) pipe.run(a, b);
  return static_cast<double>(test_alloc::stop()) / runs;
}

}  // namespace

TEST_CASE("allocations per run do not grow with the run's chunks", "[gpu][streaming][alloc]") {
  const std::size_t chunk = 1 << 12;
  PinnedArray<float> pin_in(chunk * 64), pin_out(chunk * 64);
  std::vector<float> page_in(chunk * 64, 1.f), page_out(chunk * 64);
  for (std::size_t i = 0; i < pin_in.size(); ++i) pin_in[i] = 1.f;
  for (Policy policy : {Policy::serial, Policy::slot_streams, Policy::stage_streams}) {
    for (bool staged : {false, true}) {
      ChunkedPipeline<Map<Scale>> pipe({.chunk_elems = chunk, .depth = 3, .policy = policy}, Map<Scale>{{2.f}});
      double few = 0, many = 0;
      if (staged) {
        few = allocations_per_run(pipe, page_in, page_out, chunk, 4, 16);
        many = allocations_per_run(pipe, page_in, page_out, chunk, 64, 16);
      } else {
        few = allocations_per_run(pipe, pin_in, pin_out, chunk, 4, 16);
        many = allocations_per_run(pipe, pin_in, pin_out, chunk, 64, 16);
      }
      INFO(to_string(policy) << (staged ? " staged" : " pinned") << ": " << few << " allocations per run of 4 chunks, "
                             << many << " per run of 64");
      // A run allocates a fixed handful (its state, endpoints, ranges and
      // their index entries, its completion event's slot), the same for 4
      // chunks as for 64: nothing per chunk or per op.
      REQUIRE(many <= few + 0.5);
      REQUIRE(few <= 32);
      REQUIRE((staged ? page_out[chunk * 64 - 1] : pin_out[chunk * 64 - 1]) == 2.f);
    }
  }
}

// -- Memory from the program (Options::device_memory, pinned_memory) --------

namespace {

using test_memory::CountingResource;

constexpr std::size_t mib = std::size_t{1} << 20;

// Device memory from cudaMalloc, poisoned with 0xA5 (and the poison
// complete before the pipeline sees it).
std::shared_ptr<CountingResource> counting_device() {
  return std::make_shared<CountingResource>(
      [](std::size_t bytes, std::size_t) {
        void* p = nullptr;
        CHUNKPIPE_CUDA_TRY(cudaMalloc(&p, bytes));
        return p;
      },
      [](void* p, std::size_t, std::size_t) { (void)cudaFree(p); },
      [](void* p, std::size_t bytes) {
        CHUNKPIPE_CUDA_TRY(cudaMemset(p, 0xA5, bytes));
        CHUNKPIPE_CUDA_TRY(cudaDeviceSynchronize());
      });
}

// Page-locked host memory from cudaMallocHost, poisoned with 0xA5.
std::shared_ptr<CountingResource> counting_pinned() {
  return std::make_shared<CountingResource>(
      [](std::size_t bytes, std::size_t) {
        void* p = nullptr;
        CHUNKPIPE_CUDA_TRY(cudaMallocHost(&p, bytes));
        return p;
      },
      [](void* p, std::size_t, std::size_t) { (void)cudaFreeHost(p); },
      [](void* p, std::size_t bytes) { std::memset(p, 0xA5, bytes); });
}

std::size_t free_device_memory() {
  CHUNKPIPE_CUDA_TRY(cudaDeviceSynchronize());
  std::size_t free = 0, total = 0;
  CHUNKPIPE_CUDA_TRY(cudaMemGetInfo(&free, &total));
  return free;
}

// How far free memory fell from `before` to `after` (0 if it rose).
std::size_t drop(std::size_t before, std::size_t after) { return before > after ? before - after : 0; }

struct SquareU64 {
  CHUNKPIPE_HOST_DEVICE std::uint64_t operator()(std::uint32_t x) const { return std::uint64_t{x} * x; }
};
struct AddU64 {
  CHUNKPIPE_HOST_DEVICE std::uint64_t operator()(std::uint64_t a, std::uint64_t b) const { return a + b; }
};
struct Above {
  float t;
  CHUNKPIPE_HOST_DEVICE bool operator()(float x) const { return x > t; }
};

void require_all_returned(const CountingResource& r) {
  REQUIRE(r.outstanding_bytes() == 0);
  REQUIRE(r.outstanding_calls() == 0);
  REQUIRE(r.mismatches() == 0);
  REQUIRE(r.bad_requests() == 0);
}

// The pipelines of the test below, one run each: a Map (staged and
// direct), a Reduce, a Filter, a Map on CUDA graphs (copy kernels and their
// range table), a spread Reduce. Returns the device bytes the resource
// handed out and still holds. `o` chooses where the memory comes from.
struct MemoryInputs {
  std::size_t n = (std::size_t{1} << 20) + 4321;
  std::vector<float> x;
  PinnedArray<float> pin_x;
  std::vector<std::uint32_t> u;
  MemoryInputs() : pin_x(n) {
    x.resize(n);
    u.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.f;
      pin_x[i] = x[i];
      u[i] = static_cast<std::uint32_t>(i % 65536);
    }
  }
};

void run_every_kind(const Options& o, const MemoryInputs& in, const std::function<void()>& while_alive) {
  const std::size_t n = in.n;
  ChunkedPipeline<Map<Scale>> map_pipe(o, Map<Scale>{{2.f}});
  {
    std::vector<float> y(n, -1.f);
    map_pipe.run(in.x, y);  // staged through the pinned slots
    for (std::size_t i = 0; i < n; ++i) REQUIRE(y[i] == 2.f * in.x[i]);
    PinnedArray<float> py(n);
    std::fill(py.begin(), py.end(), -1.f);
    map_pipe.run(in.pin_x, py);  // direct
    for (std::size_t i = 0; i < n; ++i) REQUIRE(py[i] == 2.f * in.x[i]);
  }
  auto sum = make_pipeline(o, map(SquareU64{}), reduce(std::uint64_t{11}, AddU64{}, 1024));
  std::uint64_t want = 11;
  for (std::uint32_t v : in.u) want += std::uint64_t{v} * v;
  REQUIRE(sum.run(in.u) == want);
  auto keep = make_pipeline(o, map(Scale{2.f}), filter(Above{1.f}));
  {
    std::vector<float> kept(n, -1.f);
    const std::size_t wrote = keep.run(in.pin_x, kept);
    std::vector<float> ref;
    for (float v : in.x) {
      if (2.f * v > 1.f) ref.push_back(2.f * v);
    }
    REQUIRE(wrote == ref.size());
    REQUIRE(std::equal(ref.begin(), ref.end(), kept.begin()));
  }
  Options g = o;
  g.chunk_elems = 4096;  // 16 KiB units: copies as kernels, reading a range table
  g.policy = Policy::slot_streams;
  g.depth = 3;
  g.executor = Executor::graphs;
  ChunkedPipeline<Map<Scale>> graphs(g, Map<Scale>{{2.f}});
  {
    PinnedArray<float> py(n);
    for (int r = 0; r < 2; ++r) {  // built, then replayed
      std::fill(py.begin(), py.end(), -1.f);
      RunTicket t = graphs.run_async(in.pin_x, py);
      t.wait();
      REQUIRE(t.executor() == Executor::graphs);
      for (std::size_t i = 0; i < n; ++i) REQUIRE(py[i] == 2.f * in.x[i]);
    }
    REQUIRE(graphs.graph_stats().copy_kernels);
  }
  Options s = o;
  {
    int current = 0;
    CHUNKPIPE_CUDA_TRY(cudaGetDevice(&current));
    s.devices = {current, current};
    SpreadPipeline<Map<SquareU64>, Reduce<std::uint64_t, AddU64>> spread(s, map(SquareU64{}),
                                                                         reduce(std::uint64_t{11}, AddU64{}, 1024));
    REQUIRE(spread.run(in.u) == want);
  }
  while_alive();
}

}  // namespace

TEST_CASE("a pipeline takes every slot, record and table from the program's resources, and gives all back",
          "[gpu][memory]") {
  const MemoryInputs in;
  Options o;
  o.chunk_elems = 1 << 16;
  o.depth = 3;
  // The same pipelines on CUDA's own allocations first: CUDA loads their
  // kernels and sets up what a context keeps, so that what is measured
  // below is the pipelines' own memory.
  run_every_kind(o, in, [] {});
  const std::size_t before = free_device_memory();

  auto device = counting_device();
  auto pinned_memory = counting_pinned();
  o.device_memory = device;
  o.pinned_memory = pinned_memory;
  run_every_kind(o, in, [&] {
    // While the pipelines live: their slots (at least depth units of input
    // and output on the device, and of staging in pinned memory), a range
    // table, records; and nothing on the device the resource did not give,
    // beyond CUDA's own bookkeeping for streams, events and graphs (8 MiB)
    // and cudaMalloc's rounding to 2 MiB pages.
    const std::size_t slots = 2 * static_cast<std::size_t>(o.depth) * o.chunk_elems * sizeof(float);
    REQUIRE(device->outstanding_bytes() >= slots);
    REQUIRE(pinned_memory->outstanding_bytes() >= slots / 2);
    REQUIRE(device->allocations() >= 6);  // 4 pipelines, 2 spread members, a range table
    const std::size_t fell = drop(before, free_device_memory());
    const std::size_t handed = device->outstanding_bytes() + device->outstanding_calls() * 2 * mib;
    INFO("free device memory fell " << fell / mib << " MiB; the resource holds " << device->outstanding_bytes() / mib
                                    << " MiB in " << device->outstanding_calls() << " allocations");
    REQUIRE(fell <= handed + 8 * mib);
  });
  require_all_returned(*device);
  require_all_returned(*pinned_memory);
  REQUIRE(drop(before, free_device_memory()) <= 8 * mib);
}

TEST_CASE("a cudaMallocAsync pool holds the device slots while the pipeline lives", "[gpu][memory]") {
  CudaPoolResource pool;
  // Counted on the way through, to know what the pipeline asked for.
  auto counted = std::make_shared<CountingResource>(
      [&](std::size_t bytes, std::size_t alignment) { return pool.allocate(bytes, alignment); },
      [&](void* p, std::size_t bytes, std::size_t alignment) { pool.deallocate(p, bytes, alignment); });
  auto used = [&] {
    CHUNKPIPE_CUDA_TRY(cudaStreamSynchronize(pool.stream().get()));
    std::uint64_t bytes = 0;
    CHUNKPIPE_CUDA_TRY(cudaMemPoolGetAttribute(pool.pool(), cudaMemPoolAttrUsedMemCurrent, &bytes));
    return static_cast<std::size_t>(bytes);
  };
  const std::size_t before = used();
  const std::size_t n = (std::size_t{1} << 22) + 77;
  PinnedArray<float> x(n), y(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 4099);
  {
    Options o{.chunk_elems = 1 << 18, .depth = 3, .policy = Policy::stage_streams};
    o.device_memory = counted;
    ChunkedPipeline<Map<Scale>> pipe(o, Map<Scale>{{2.f}});
    for (int r = 0; r < 3; ++r) {
      std::fill(y.begin(), y.end(), -1.f);
      pipe.run(x, y);
      for (std::size_t i = 0; i < n; ++i) REQUIRE(y[i] == 2.f * x[i]);
    }
    const std::size_t slots = 2 * static_cast<std::size_t>(o.depth) * o.chunk_elems * sizeof(float);
    REQUIRE(counted->outstanding_bytes() >= slots);
    REQUIRE(used() >= before + counted->outstanding_bytes());
    // Straight from the pool too, without the counting wrapper.
    Options direct = o;
    direct.device_memory = borrow_resource(pool);
    ChunkedPipeline<Map<Scale>> other(direct, Map<Scale>{{2.f}});
    const std::size_t with_one = used();
    std::fill(y.begin(), y.end(), -1.f);
    other.run(x, y);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(y[i] == 2.f * x[i]);
    REQUIRE(used() >= with_one + slots);
  }
  require_all_returned(*counted);
  REQUIRE(used() == before);
}

TEST_CASE("memory of the wrong kind from a resource is refused, and nothing leaks", "[gpu][memory]") {
  auto host = CountingResource::host();  // pageable host memory: neither device nor pinned
  const std::size_t n = 100000;
  std::vector<float> x(n, 1.f), y(n);
  {
    Options o{.chunk_elems = 1 << 14, .depth = 2};
    o.device_memory = host;
    ChunkedPipeline<Map<Scale>> pipe(o, Map<Scale>{{2.f}});
    try {
      pipe.run(x, y);
      FAIL("a run on host memory as device slots ran");
    } catch (const config_error& e) {
      const std::string what = e.what();
      INFO(what);
      REQUIRE(what.find("the device slots") != std::string::npos);
      REQUIRE(what.find("must give device memory") != std::string::npos);
    }
  }
  {
    Options o{.chunk_elems = 1 << 14, .depth = 2};
    o.pinned_memory = host;
    ChunkedPipeline<Map<Scale>> pipe(o, Map<Scale>{{2.f}});
    REQUIRE_THROWS_AS(pipe.run(x, y), config_error);  // staged: needs pinned slots
  }
  {
    // A resource that throws: the run names what it was allocating, the
    // resource's error nested; the next run asks again and runs.
    auto device = counting_device();
    Options o{.chunk_elems = 1 << 14, .depth = 2};
    o.device_memory = device;
    ChunkedPipeline<Map<Scale>> pipe(o, Map<Scale>{{2.f}});
    device->fail_next(1);
    try {
      pipe.run(x, y);
      FAIL("the run ran without slots");
    } catch (const pipeline_error& e) {
      REQUIRE(std::string(e.what()).find("the device slots") != std::string::npos);
      REQUIRE_THROWS_AS(std::rethrow_if_nested(e), test_memory::exhausted);
    }
    pipe.run(x, y);
    for (float v : y) REQUIRE(v == 2.f);
  }
  require_all_returned(*host);
}
