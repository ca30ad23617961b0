// SPDX-License-Identifier: MIT
// GPU tests of record stages: a Reduce gives the host backend's bits (the
// documented order) under every policy, depth, grain and executor, over
// pinned, pageable and Source inputs, in streams of runs whose record
// buffers are reused; an Accumulate histogram and PerChunk checksums from
// real kernels equal host counts; the ops as issued pass the hazard check.
#include <chunkpipe/host_backend.hpp>
#include <chunkpipe/pipeline.cuh>

#include "catch.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

using namespace chunkpipe;

namespace {

struct Plus {
  CHUNKPIPE_HOST_DEVICE float operator()(float a, float b) const { return a + b; }
};
struct Scale {
  float k;
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return x * k - 0.25f; }
};

std::vector<float> noisy(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-100.f, 100.f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// The reference: the host backend, whose fold order the CPU suite checks
// against the documented one.
float host_sum(const std::vector<float>& x, std::size_t segment, float init, float k) {
  auto pipe = make_host_pipeline({.chunk_elems = segment * 4}, map(Scale{k}), reduce(init, Plus{}, segment));
  return pipe.run(pinned(x));
}

struct Hist {
  unsigned bins[256];
};

__global__ void histogram_kernel(const std::uint8_t* in, std::size_t n, Hist* out) {
  __shared__ unsigned local[256];
  for (unsigned b = threadIdx.x; b < 256; b += blockDim.x) local[b] = 0;
  __syncthreads();
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    atomicAdd(&local[in[i]], 1u);
  }
  __syncthreads();
  for (unsigned b = threadIdx.x; b < 256; b += blockDim.x) {
    if (local[b] != 0) atomicAdd(&out->bins[b], local[b]);
  }
}

struct CountBytes {
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    REQUIRE(ctx.backend == Backend::cuda);
    const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>(1024, (ctx.count + 255) / 256));
    histogram_kernel<<<blocks, 256, 0, ctx.stream.get()>>>(ctx.template in<0>().data(), ctx.count,
                                                           ctx.template out<0>().data());
  }
};
struct MergeHist {
  void operator()(Hist& total, const Hist& chunk) const {
    for (int b = 0; b < 256; ++b) total.bins[b] += chunk.bins[b];
  }
};

struct Check {
  unsigned long long sum;
  unsigned long long count;
};
__global__ void checksum_kernel(const std::uint32_t* in, std::size_t n, Check* out) {
  unsigned long long mine = 0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    mine += in[i];
  }
  atomicAdd(&out->sum, mine);
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(&out->count, static_cast<unsigned long long>(n));
}
struct ChecksumChunk {
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    checksum_kernel<<<64, 256, 0, ctx.stream.get()>>>(ctx.template in<0>().data(), ctx.count,
                                                      ctx.template out<0>().data());
  }
};

}  // namespace

TEST_CASE("a Reduce on the GPU gives the host backend's bits under every schedule", "[gpu][reduce]") {
  const std::size_t segment = 4096;
  for (std::size_t n : {std::size_t{1}, std::size_t{4095}, std::size_t{300001}, std::size_t{1} << 20}) {
    const std::vector<float> x = noisy(n, static_cast<unsigned>(n));
    PinnedArray<float> in(n);
    std::copy(x.begin(), x.end(), in.begin());
    const float want = host_sum(x, segment, 3.f, 0.5f);
    for (Policy p : {Policy::serial, Policy::slot_streams, Policy::stage_streams, Policy::automatic}) {
      for (int depth : {1, 3}) {
        if (p == Policy::serial && depth != 1) continue;
        for (Executor ex : {Executor::streams, Executor::graphs}) {
          auto pipe = make_pipeline({.chunk_elems = segment * 16, .depth = depth, .policy = p, .executor = ex},
                                    map(Scale{0.5f}), reduce(3.f, Plus{}, segment));
          // A decoy run first, so the record buffer the real run reuses
          // holds other partials: a partial left unwritten would show.
          std::vector<float> decoy(n, 1.f);
          (void)pipe.run(pinned(decoy));
          const float got = pipe.run(in);
          INFO("n " << n << " policy " << to_string(p) << " depth " << depth << " executor " << to_string(ex));
          CHECK(bits(got) == bits(want));
        }
      }
    }
  }
}

TEST_CASE("a Reduce over pageable memory, a Source and a stream of runs", "[gpu][reduce]") {
  const std::size_t segment = 2048;
  auto pipe = make_pipeline({.chunk_elems = segment * 8, .depth = 3, .record_issued = true}, map(Scale{2.f}),
                            reduce(0.f, Plus{}, segment));
  const std::vector<float> x = noisy(1000003, 11);
  const float want = host_sum(x, segment, 0.f, 2.f);
  CHECK(bits(pipe.run(x)) == bits(want));  // pageable: staged in
  std::size_t next = 0;
  auto src = source<float>([&](std::size_t, ::cuda::std::span<float> slot) {
    const std::size_t k = std::min(slot.size(), x.size() - next);
    std::copy(x.begin() + static_cast<std::ptrdiff_t>(next), x.begin() + static_cast<std::ptrdiff_t>(next + k), slot.begin());
    next += k;
    return k;
  });
  CHECK(bits(pipe.run(std::move(src))) == bits(want));

  // 40 runs back to back, then each ticket; every third dropped unread.
  std::vector<PinnedArray<float>> batches;
  std::vector<float> wants;
  for (unsigned b = 0; b < 40; ++b) {
    const std::vector<float> v = noisy(30000 + 7919 * b, 200 + b);
    batches.emplace_back(v.size());
    std::copy(v.begin(), v.end(), batches.back().begin());
    wants.push_back(host_sum(v, segment, 0.f, 2.f));
  }
  std::vector<ResultTicket<float, RunTicket>> tickets;
  for (auto& b : batches) tickets.push_back(pipe.run_async(b));
  for (std::size_t b = 0; b < batches.size(); ++b) {
    if (b % 3 == 2) continue;
    CHECK(bits(tickets[b].get()) == bits(wants[b]));
  }
  tickets.clear();
  pipe.wait();
  CHECK(check_hazards(pipe.issued_plan()).ok());
  std::vector<float> none;
  CHECK(pipe.run(pinned(none)) == 0.f);
}

TEST_CASE("an Accumulate histogram from a real kernel equals the host's count", "[gpu][reduce]") {
  const std::size_t n = (std::size_t{1} << 24) + 12345;
  PinnedArray<std::uint8_t> in(n);
  std::mt19937 rng(5);
  for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<std::uint8_t>(rng() % 251);  // bins 251..255 stay empty
  Hist want{};
  for (std::size_t i = 0; i < n; ++i) ++want.bins[in[i]];
  for (std::size_t chunk : {std::size_t{1} << 16, std::size_t{1} << 20, std::size_t{1} << 23}) {
    auto pipe = make_pipeline({.chunk_elems = chunk}, accumulate(Hist{}, CountBytes{}, MergeHist{}));
    const Hist got = pipe.run(in);
    INFO("chunk " << chunk);
    CHECK(std::equal(std::begin(got.bins), std::end(got.bins), std::begin(want.bins)));
  }
}

TEST_CASE("PerChunk checksums from a kernel, one per chunk, into a range and a Sink", "[gpu][reduce]") {
  const std::size_t n = 5000000, chunk = 1 << 18;
  PinnedArray<std::uint32_t> in(n);
  for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<std::uint32_t>(i * 2654435761u);
  const std::size_t chunks = (n + chunk - 1) / chunk;
  auto pipe = make_pipeline({.chunk_elems = chunk, .depth = 4, .policy = Policy::slot_streams},
                            per_chunk(Check{1000, 0}, ChecksumChunk{}));
  PinnedArray<Check> out(chunks + 1);
  for (auto& c : out) c = Check{~0ull, ~0ull};  // poison
  pipe.run(in, out);
  for (std::size_t c = 0; c < chunks; ++c) {
    unsigned long long s = 1000;
    const std::size_t len = std::min(chunk, n - c * chunk);
    for (std::size_t i = 0; i < len; ++i) s += in[c * chunk + i];
    CHECK(out[c].sum == s);
    CHECK(out[c].count == len);
  }
  CHECK(out[chunks].sum == ~0ull);
  std::size_t seen = 0;
  pipe.run(in, sink<Check>([&](std::size_t, std::size_t index, ::cuda::std::span<const Check> r) {
    REQUIRE(r.size() == 1);
    CHECK(index == seen);
    CHECK(r[0].sum == out[index].sum);
    ++seen;
  }));
  CHECK(seen == chunks);
}
