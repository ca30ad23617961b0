// SPDX-License-Identifier: MIT
// GPU tests of streaming: back-to-back runs on one pipeline (pinned and
// pageable, sources and sinks, every policy) against a host reference with
// poisoned outputs; the ops as issued pass the hazard check; a failing run
// in the middle fails alone; ordering after user streams, events and
// tickets; runs that would race are refused.
#include <chunkpipe/pipeline.cuh>

#include "catch.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

using namespace chunkpipe;

namespace {

struct Chain {
  int iters = 32;
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const {
    for (int k = 0; k < iters; ++k) x = fmaf(x, 0.999f, 0.0625f);
    return x;
  }
};

// Throws on one chunk of the run that is being issued while `armed` is set.
struct ThrowWhenArmed {
  const std::atomic<bool>* armed;
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    if (armed->load() && ctx.chunk == 2) throw std::runtime_error("stage failed on chunk 2 of the armed run");
  }
};

__host__ __device__ float value_at(std::size_t i, unsigned salt) {
  return static_cast<float>((i * 2654435761u + salt) % 8191) / 8191.0f - 0.5f;
}

template <class V>
void poison(V& v) {
  std::memset(v.data(), 0xFF, v.size() * sizeof(v.data()[0]));  // NaN as float
}

// Spins for about `ns` nanoseconds of GPU time, then writes `n` values.
__global__ void late_fill(float* out, std::size_t n, unsigned salt, long long ns) {
  if (threadIdx.x == 0) {
    const long long start = clock64();
    // clock64 counts SM cycles; 2 GHz is an upper bound, so this waits at least ns.
    while (clock64() - start < ns * 2) {
    }
  }
  __syncthreads();
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    out[i] = value_at(i, salt);
  }
}

const Policy all_policies[] = {Policy::serial, Policy::slot_streams, Policy::stage_streams, Policy::automatic};

}  // namespace

TEST_CASE("back-to-back runs, pinned and pageable, every policy: each matches the reference", "[gpu][streaming]") {
  const Chain f{};
  for (Policy policy : all_policies) {
    for (int depth : {1, 2, 3, 4}) {
      ChunkedPipeline<Map<Chain>> pipe(
          {.chunk_elems = 1 << 14, .depth = depth, .policy = policy, .grain_elems = 1 << 12, .record_issued = true});
      std::mt19937 rng(static_cast<unsigned>(depth * 7 + static_cast<int>(policy)));
      const int runs = 24;
      std::vector<std::size_t> sizes;
      std::vector<PinnedArray<float>> pin_in, pin_out;
      std::vector<std::vector<float>> page_in, page_out;
      std::vector<int> mix;
      for (int k = 0; k < runs; ++k) {
        const std::size_t n = k == 5 ? 0 : 1 + rng() % (std::size_t{5} << 14);  // an empty run, ragged ends
        sizes.push_back(n);
        mix.push_back(static_cast<int>(rng() % 4));
        pin_in.emplace_back(n);
        pin_out.emplace_back(n);
        page_in.emplace_back(n);
        page_out.emplace_back(n);
        for (std::size_t i = 0; i < n; ++i) pin_in.back()[i] = page_in.back()[i] = value_at(i, static_cast<unsigned>(k));
        poison(pin_out.back());
        poison(page_out.back());
      }
      std::vector<RunTicket> tickets;
      for (int k = 0; k < runs; ++k) {
        const auto u = static_cast<std::size_t>(k);
        const bool stage_in = mix[u] & 1, stage_out = mix[u] & 2;
        if (stage_in && stage_out) {
          tickets.push_back(pipe.run_async(page_in[u], page_out[u]));
        } else if (stage_in) {
          tickets.push_back(pipe.run_async(page_in[u], pin_out[u]));
        } else if (stage_out) {
          tickets.push_back(pipe.run_async(pin_in[u], page_out[u]));
        } else {
          tickets.push_back(pipe.run_async(pin_in[u], pin_out[u]));
        }
      }
      // Wait newest first: every ticket must stand on its own.
      for (int k = runs - 1; k >= 0; --k) tickets[static_cast<std::size_t>(k)].wait();
      INFO(to_string(policy) << " depth " << depth);
      for (int k = 0; k < runs; ++k) {
        const auto u = static_cast<std::size_t>(k);
        const float* out = (mix[u] & 2) ? page_out[u].data() : pin_out[u].data();
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < sizes[u]; ++i) wrong += out[i] == f(value_at(i, static_cast<unsigned>(k))) ? 0 : 1;
        INFO("run " << k << " of " << sizes[u] << " elements, mix " << mix[u]);
        REQUIRE(wrong == 0);
      }
      // What the executor really issued (its events and host waits) is safe.
      const Plan issued = pipe.issued_plan();
      REQUIRE(issued.runs.size() == static_cast<std::size_t>(runs - 1));  // the empty run issues nothing
      const HazardReport report = check_hazards(issued);
      INFO(report);
      REQUIRE(report.ok());
    }
  }
}

TEST_CASE("sources and sinks in a stream of runs keep their order and their data", "[gpu][streaming][source]") {
  const Chain f{};
  for (Policy policy : {Policy::slot_streams, Policy::stage_streams, Policy::automatic}) {
    ChunkedPipeline<Map<Chain>> pipe({.chunk_elems = 1 << 16, .depth = 3, .policy = policy, .record_issued = true});
    const std::vector<std::size_t> totals = {300000, 1 << 16, 0, 5, (1 << 18) + 3};
    std::vector<std::vector<float>> got(totals.size());
    std::vector<std::vector<std::size_t>> chunks(totals.size());
    std::vector<RunTicket> tickets;
    for (std::size_t k = 0; k < totals.size(); ++k) {
      got[k].assign(totals[k] + 16, std::numeric_limits<float>::quiet_NaN());
      const std::size_t total = totals[k];
      auto src = source<float>([total, k](std::size_t chunk, ::cuda::std::span<float> slot) {
        const std::size_t begin = chunk * slot.size();
        const std::size_t n = begin < total ? std::min(slot.size(), total - begin) : 0;
        for (std::size_t i = 0; i < n; ++i) slot[i] = value_at(begin + i, static_cast<unsigned>(k));
        return n;
      });
      auto* out = &got[k];
      auto* seen = &chunks[k];
      tickets.push_back(pipe.run_async(src, sink<float>([out, seen](std::size_t chunk, std::size_t offset,
                                                                    ::cuda::std::span<const float> d) {
                                         seen->push_back(chunk);
                                         std::memcpy(out->data() + offset, d.data(), d.size() * sizeof(float));
                                       })));
    }
    for (RunTicket& t : tickets) t.wait();
    INFO(to_string(policy));
    for (std::size_t k = 0; k < totals.size(); ++k) {
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < totals[k]; ++i) wrong += got[k][i] == f(value_at(i, static_cast<unsigned>(k))) ? 0 : 1;
      REQUIRE(wrong == 0);
      for (std::size_t i = totals[k]; i < got[k].size(); ++i) REQUIRE(std::isnan(got[k][i]));
      for (std::size_t c = 0; c < chunks[k].size(); ++c) REQUIRE(chunks[k][c] == c);  // the run's own numbering
    }
    REQUIRE(check_hazards(pipe.issued_plan()).ok());
  }
}

TEST_CASE("a run that fails in the middle of a stream fails alone", "[gpu][streaming][errors]") {
  const std::size_t n = 6 << 14;
  for (Policy policy : all_policies) {
    std::atomic<bool> armed{false};
    ChunkedPipeline<Map<Chain>, ChunkFn<ThrowWhenArmed>> pipe({.chunk_elems = 1 << 14, .depth = 3, .policy = policy},
                                                              Map<Chain>{}, ChunkFn<ThrowWhenArmed>{{&armed}});
    PinnedArray<float> a(n), b(n), c(n), ya(n), yb(n), yc(n);
    for (std::size_t i = 0; i < n; ++i) {
      a[i] = value_at(i, 1);
      b[i] = value_at(i, 2);
      c[i] = value_at(i, 3);
    }
    poison(ya);
    poison(yb);
    poison(yc);
    RunTicket ta = pipe.run_async(a, ya);
    armed = true;  // pinned runs are issued by this thread, inside run_async
    RunTicket tb = pipe.run_async(b, yb);
    armed = false;
    RunTicket tc = pipe.run_async(c, yc);
    tc.wait();
    ta.wait();
    REQUIRE_THROWS_AS(tb.wait(), std::runtime_error);
    REQUIRE_THROWS_AS(tb.wait(), std::runtime_error);
    INFO(to_string(policy));
    for (std::size_t i = 0; i < n; ++i) {
      REQUIRE(ya[i] == Chain{}(a[i]));
      REQUIRE(yc[i] == Chain{}(c[i]));
    }
    REQUIRE(pipe.healthy());
    pipe.run(b, yb);
    for (std::size_t i = 0; i < n; ++i) REQUIRE(yb[i] == Chain{}(b[i]));
  }
}

TEST_CASE("after(stream), after(event) and after(ticket) order a run after other GPU work", "[gpu][streaming]") {
  const std::size_t n = std::size_t{1} << 20;
  const Chain f{};
  ChunkedPipeline<Map<Chain>> pipe({.chunk_elems = 1 << 16, .depth = 3, .grain_elems = 1 << 16});
  Stream user = Stream::create();
  PinnedArray<float> in(n), out(n), out2(n), chained(n);

  // A kernel of ours fills the input late; the run must read what it wrote.
  poison(in);
  poison(out);
  late_fill<<<256, 256, 0, user.get()>>>(in.data(), n, 5, 20'000'000);  // 20 ms of spinning first
  CHUNKPIPE_CUDA_TRY(cudaGetLastError());
  RunTicket t = pipe.run_async(in, out, after(::cuda::stream_ref(user.get())));
  t.wait();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += out[i] == f(value_at(i, 5)) ? 0 : 1;
  REQUIRE(wrong == 0);

  // The same through an event's record.
  poison(in);
  poison(out2);
  Event filled = Event::create();
  late_fill<<<256, 256, 0, user.get()>>>(in.data(), n, 6, 20'000'000);
  CHUNKPIPE_CUDA_TRY(cudaEventRecord(filled.get(), user.get()));
  RunTicket te = pipe.run_async(in, out2, after(filled.get()));
  te.wait();
  wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += out2[i] == f(value_at(i, 6)) ? 0 : 1;
  REQUIRE(wrong == 0);

  // A run that reads what a run in flight writes: refused, or ordered after
  // it. `first` waits for a late kernel of ours, so it is surely in flight.
  poison(in);
  poison(out);
  poison(chained);
  late_fill<<<256, 256, 0, user.get()>>>(in.data(), n, 7, 20'000'000);
  CHUNKPIPE_CUDA_TRY(cudaGetLastError());
  RunTicket first = pipe.run_async(in, out, after(::cuda::stream_ref(user.get())));
  REQUIRE_THROWS_AS((void)pipe.run_async(out, chained), config_error);
  RunTicket second = pipe.run_async(out, chained, after(first));
  // Ordered on the device: a stream of ours can wait for the end of the chain.
  second.enqueue_wait(::cuda::stream_ref(user.get()));
  CHUNKPIPE_CUDA_TRY(cudaStreamSynchronize(user.get()));
  wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += chained[i] == f(f(value_at(i, 7))) ? 0 : 1;
  REQUIRE(wrong == 0);
  second.wait();
  first.wait();

  // A run that ends on host threads cannot be waited for on the device.
  std::vector<float> pageable(n), more(n);
  RunTicket staged = pipe.run_async(in, pageable);
  REQUIRE_THROWS_AS((void)pipe.run_async(pageable, more, after(staged)), pipeline_error);
  staged.wait();
}

TEST_CASE("a pipeline destroyed with runs in flight waits for them", "[gpu][streaming]") {
  const std::size_t n = std::size_t{1} << 21;
  PinnedArray<float> in(n), out(n);
  std::vector<float> x(n), y(n, std::numeric_limits<float>::quiet_NaN());
  for (std::size_t i = 0; i < n; ++i) in[i] = x[i] = value_at(i, 9);
  poison(out);
  RunTicket pinned_run, staged_run;
  {
    ChunkedPipeline<Map<Chain>> pipe({.chunk_elems = 1 << 16, .grain_elems = 1 << 16});
    pinned_run = pipe.run_async(in, out);
    staged_run = pipe.run_async(x, y);
  }
  // The tickets outlive the pipeline; the runs are complete.
  REQUIRE(pinned_run.ready());
  REQUIRE(staged_run.ready());
  pinned_run.wait();
  staged_run.wait();
  for (std::size_t i = 0; i < n; i += 13) {
    REQUIRE(out[i] == Chain{}(x[i]));
    REQUIRE(y[i] == Chain{}(x[i]));
  }
}
