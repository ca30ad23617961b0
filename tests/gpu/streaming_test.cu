// SPDX-License-Identifier: MIT
// GPU tests of streaming: back-to-back runs on one pipeline (pinned and
// pageable, sources and sinks, every policy) against a host reference with
// poisoned outputs; the ops as issued pass the hazard check; a failing run
// in the middle fails alone; ordering after user streams, events and
// tickets; runs that would race are refused; small runs that continue
// each other are issued together (Options::coalesce) and still complete
// one by one.
#include <chunkpipe/files.hpp>
#include <chunkpipe/pipeline.cuh>

#include "catch.hpp"
#include "scratch_dir.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <stdexcept>
#include <thread>
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

namespace {

// Keeps a stream busy for about `ns` nanoseconds of GPU time.
__global__ void busy_for(long long ns) {
  const long long start = clock64();
  while (clock64() - start < ns * 2) {  // at most 2 GHz: at least ns
  }
}

// A pipeline's first run held up on the device for `ms` behind a stream of
// ours, so that the small runs queued after it find the GPU busy.
RunTicket gated_run(ChunkedPipeline<Map<Chain>>& pipe, const Stream& user, float* in, float* out, std::size_t n,
                    int ms) {
  busy_for<<<1, 1, 0, user.get()>>>(static_cast<long long>(ms) * 1'000'000);
  CHUNKPIPE_CUDA_TRY(cudaGetLastError());
  return pipe.run_async(pinned(host_span(in, n)), pinned(host_span(out, n)), after(::cuda::stream_ref(user.get())));
}

// Sizes of `runs` consecutive small runs, each under `most` elements.
std::vector<std::size_t> small_sizes(int runs, std::size_t most, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::size_t> size(1, most - 1);
  std::vector<std::size_t> sizes;
  for (int r = 0; r < runs; ++r) sizes.push_back(size(rng));
  return sizes;
}

std::size_t wrong_of(const PinnedArray<float>& out, std::size_t from, std::size_t to, unsigned salt, int times = 1) {
  std::size_t wrong = 0;
  for (std::size_t i = from; i < to; ++i) {
    float want = value_at(i, salt);
    for (int k = 0; k < times; ++k) want = Chain{}(want);
    wrong += out[i] == want ? 0 : 1;
  }
  return wrong;
}

}  // namespace

TEST_CASE("small runs that continue each other are issued together; every ticket gets its own data",
          "[gpu][streaming][coalesce]") {
  for (bool coalesce : {true, false}) {
    ChunkedPipeline<Map<Chain>> pipe({.chunk_elems = 1 << 16, .depth = 3, .record_issued = true, .coalesce = coalesce});
    const std::size_t unit = pipe.geometry().chunk_elems;
    const int runs = 64;
    // Runs of up to a twentieth of the unit: several units' worth in all,
    // so the held runs are issued both by filling a unit and by the waits.
    const auto sizes = small_sizes(runs, unit / 20, 11);
    std::size_t total = 16;  // the gated run's
    for (std::size_t s : sizes) total += s;
    PinnedArray<float> in(total), out(total);
    for (std::size_t i = 0; i < total; ++i) in[i] = value_at(i, 21);
    poison(out);
    Stream user = Stream::create();
    std::vector<RunTicket> tickets{gated_run(pipe, user, in.data(), out.data(), 16, 300)};
    std::size_t off = 16;
    for (std::size_t s : sizes) {
      tickets.push_back(pipe.run_async(pinned(host_span(in.data() + off, s)), pinned(host_span(out.data() + off, s))));
      off += s;
    }
    // Waiting for a held run issues it; the last first.
    for (auto it = tickets.rbegin(); it != tickets.rend(); ++it) it->wait();
    CHECK(wrong_of(out, 0, total, 21) == 0);
    // Every small run was held behind the gated one; they went in groups
    // of a unit or more (a group of one is issued as itself).
    std::size_t joined = 0, group = 0, elems = 0;
    for (std::size_t s : sizes) {
      ++group;
      elems += s;
      if (elems >= unit) {
        joined += group > 1 ? group : 0;
        group = elems = 0;
      }
    }
    joined += group > 1 ? group : 0;
    CHECK(joined > static_cast<std::size_t>(runs) / 2);
    CHECK(pipe.runs_coalesced() == (coalesce ? joined : 0));
    // The ops as issued (the joined runs' own ops included) are hazard-free.
    CHECK(check_hazards(pipe.issued_plan()).ok());
  }
}

TEST_CASE("held runs are issued by enqueue_wait, by a run that does not continue them, and by the GPU going idle",
          "[gpu][streaming][coalesce]") {
  ChunkedPipeline<Map<Chain>> pipe({.chunk_elems = 1 << 16, .depth = 3});
  const std::size_t unit = pipe.geometry().chunk_elems;
  const std::size_t n = unit / 8;  // eight such runs fill a unit
  Stream user = Stream::create();
  PinnedArray<float> in(4 * n + 16), out(4 * n + 16), apart(n), apart_out(n), chained(2 * n);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = value_at(i, 31);
  for (std::size_t i = 0; i < n; ++i) apart[i] = value_at(i, 32);

  SECTION("enqueue_wait on a held run issues it; a stream of ours then sees its output") {
    poison(out);
    RunTicket gate = gated_run(pipe, user, in.data(), out.data(), 16, 100);
    RunTicket a = pipe.run_async(pinned(host_span(in.data() + 16, n)), pinned(host_span(out.data() + 16, n)));
    RunTicket b = pipe.run_async(pinned(host_span(in.data() + 16 + n, n)), pinned(host_span(out.data() + 16 + n, n)));
    Stream mine = Stream::create();
    b.enqueue_wait(::cuda::stream_ref(mine.get()));
    CHUNKPIPE_CUDA_TRY(cudaStreamSynchronize(mine.get()));
    CHECK(wrong_of(out, 16 + n, 16 + 2 * n, 31) == 0);
    CHECK(b.executor() == Executor::streams);
    a.wait();
    b.wait();
    gate.wait();
    CHECK(wrong_of(out, 0, 16 + 2 * n, 31) == 0);
    CHECK(pipe.runs_coalesced() == 2);
  }
  SECTION("a run that does not continue the held ones goes after them, and a run after(a held one) waits for it") {
    poison(out);
    poison(apart_out);
    poison(chained);
    RunTicket gate = gated_run(pipe, user, in.data(), out.data(), 16, 100);
    RunTicket a = pipe.run_async(pinned(host_span(in.data() + 16, n)), pinned(host_span(out.data() + 16, n)));
    RunTicket b = pipe.run_async(pinned(host_span(in.data() + 16 + n, n)), pinned(host_span(out.data() + 16 + n, n)));
    RunTicket c = pipe.run_async(apart, apart_out);  // elsewhere: a and b are issued first
    // Reads what a and b write: ordered after them, on the device.
    RunTicket d = pipe.run_async(pinned(host_span(out.data() + 16, 2 * n)), chained, after(a, b));
    d.wait();
    c.wait();
    CHECK(wrong_of(out, 0, 16 + 2 * n, 31) == 0);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += apart_out[i] == Chain{}(apart[i]) ? 0 : 1;
    CHECK(wrong == 0);
    wrong = 0;
    for (std::size_t i = 0; i < 2 * n; ++i) wrong += chained[i] == Chain{}(Chain{}(value_at(16 + i, 31))) ? 0 : 1;
    CHECK(wrong == 0);
    a.wait();
    b.wait();
    gate.wait();
    CHECK(pipe.runs_coalesced() == 2);
  }
  SECTION("with nothing waiting, held runs are issued once the work ahead of them is done") {
    poison(out);
    RunTicket gate = gated_run(pipe, user, in.data(), out.data(), 16, 50);
    std::vector<RunTicket> held;
    for (std::size_t k = 0; k < 3; ++k) {
      held.push_back(
          pipe.run_async(pinned(host_span(in.data() + 16 + k * n, n)), pinned(host_span(out.data() + 16 + k * n, n))));
    }
    // ready() never issues anything; only the pipeline's watcher can.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!held.back().ready() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    REQUIRE(held.back().ready());
    for (auto& t : held) t.wait();
    gate.wait();
    CHECK(wrong_of(out, 0, 16 + 3 * n, 31) == 0);
    CHECK(pipe.runs_coalesced() == 3);
  }
  SECTION("runs in place continue each other too") {
    PinnedArray<float> data(4 * n + 16);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = value_at(i, 31);
    RunTicket gate = gated_run(pipe, user, data.data(), data.data(), 16, 100);
    std::vector<RunTicket> held;
    for (std::size_t k = 0; k < 4; ++k) {
      auto slice = pinned(host_span(data.data() + 16 + k * n, n));
      held.push_back(pipe.run_async(slice, slice));
    }
    for (auto& t : held) t.wait();
    gate.wait();
    CHECK(wrong_of(data, 0, data.size(), 31) == 0);
    CHECK(pipe.runs_coalesced() == 4);
  }
}

TEST_CASE("runs that alternate between two buffers are never held", "[gpu][streaming][coalesce]") {
  // A double buffer: each run continues the one before the one before it,
  // never the one just before, so holding it would only delay it.
  ChunkedPipeline<Map<Chain>> pipe({.chunk_elems = 1 << 16});
  const std::size_t n = 1 << 12;
  PinnedArray<float> a(8 * n + 16), b(8 * n), a_out(8 * n + 16), b_out(8 * n);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = value_at(i, 51);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = value_at(i, 52);
  poison(a_out);
  poison(b_out);
  Stream user = Stream::create();
  std::vector<RunTicket> tickets{gated_run(pipe, user, a.data(), a_out.data(), 16, 100)};
  for (std::size_t k = 0; k < 8; ++k) {
    tickets.push_back(pipe.run_async(pinned(host_span(b.data() + k * n, n)), pinned(host_span(b_out.data() + k * n, n))));
    CHECK(tickets.back().state()->is_issued());  // issued by run_async itself, not held
    tickets.push_back(
        pipe.run_async(pinned(host_span(a.data() + 16 + k * n, n)), pinned(host_span(a_out.data() + 16 + k * n, n))));
    CHECK(tickets.back().state()->is_issued());
  }
  for (auto& t : tickets) t.wait();
  // Runs one after another along one buffer, while the GPU is busy, are held.
  RunTicket gate = gated_run(pipe, user, b.data(), b_out.data(), 16, 100);
  RunTicket held = pipe.run_async(pinned(host_span(b.data() + 16, n)), pinned(host_span(b_out.data() + 16, n)));
  const bool was_held = !held.state()->is_issued();
  held.wait();
  gate.wait();
  CHECK(was_held);
  CHECK(pipe.runs_coalesced() == 0);
  CHECK(wrong_of(a_out, 0, a_out.size(), 51) == 0);
  CHECK(wrong_of(b_out, 0, b_out.size(), 52) == 0);
}

TEST_CASE("a pipeline destroyed with held runs issues and waits for them", "[gpu][streaming][coalesce]") {
  const std::size_t n = 1 << 12;
  PinnedArray<float> in(8 * n + 16), out(8 * n + 16);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = value_at(i, 41);
  poison(out);
  std::vector<RunTicket> tickets;
  Stream user = Stream::create();
  std::size_t coalesced = 0;
  {
    ChunkedPipeline<Map<Chain>> pipe({.chunk_elems = 1 << 16});
    tickets.push_back(gated_run(pipe, user, in.data(), out.data(), 16, 100));
    for (std::size_t k = 0; k < 8; ++k) {
      tickets.push_back(
          pipe.run_async(pinned(host_span(in.data() + 16 + k * n, n)), pinned(host_span(out.data() + 16 + k * n, n))));
    }
    coalesced = pipe.runs_coalesced();  // none issued yet: all eight are held
  }
  CHECK(coalesced == 0);
  for (auto& t : tickets) REQUIRE(t.ready());
  for (auto& t : tickets) t.wait();
  CHECK(wrong_of(out, 0, out.size(), 41) == 0);
}

namespace {
// Records every call's size and number; produces `total` elements of salt 7.
struct SizedSource {
  std::size_t total;
  std::vector<std::size_t>* sizes;
  std::size_t operator()(std::size_t chunk, ::cuda::std::span<float> slot) {
    sizes->push_back(slot.size());
    const std::size_t begin = chunk * slot.size();
    const std::size_t n = begin < total ? std::min(slot.size(), total - begin) : 0;
    for (std::size_t i = 0; i < n; ++i) slot[i] = value_at(begin + i, 7);
    return n;
  }
};
struct SizedSink {
  std::vector<float>* out;
  std::vector<std::size_t>* sizes;
  std::vector<std::size_t>* chunks;
  void operator()(std::size_t chunk, std::size_t offset, ::cuda::std::span<const float> d) {
    sizes->push_back(d.size());
    chunks->push_back(chunk);
    if (offset + d.size() <= out->size()) std::memcpy(out->data() + offset, d.data(), d.size() * sizeof(float));
  }
};
struct Positive {
  CHUNKPIPE_HOST_DEVICE bool operator()(float v) const { return v > 0.0f; }
};
}  // namespace

TEST_CASE("sources and sinks see the window the user set, whatever unit the GPU schedules",
          "[gpu][streaming][source][window]") {
  const Chain f{};
  // 64 Ki-element windows in the automatic policy's coarser units (smaller
  // than the unit), and 8 Mi-element windows in its 2 Mi grains (larger).
  for (std::size_t window : {std::size_t{1} << 16, std::size_t{1} << 23}) {
    ChunkedPipeline<Map<Chain>> pipe({.chunk_elems = window});
    REQUIRE(pipe.geometry().chunk_elems != window);  // the case under test
    for (std::size_t total : {std::size_t{1} << 20, (std::size_t{5} << 22) + 3}) {
      INFO("window " << window << " unit " << pipe.geometry().chunk_elems << " total " << total);
      std::vector<std::size_t> in_sizes, out_sizes, chunks;
      std::vector<float> got(total + 16);
      poison(got);
      pipe.run(source<float>(SizedSource{total, &in_sizes}), sink<float>(SizedSink{&got, &out_sizes, &chunks}));
      // Every Source call asks for one window; the Sink gets whole windows,
      // numbered in order, the last one short.
      for (std::size_t s : in_sizes) REQUIRE(s == window);
      REQUIRE(out_sizes.size() == (total + window - 1) / window);
      for (std::size_t c = 0; c < out_sizes.size(); ++c) {
        REQUIRE(chunks[c] == c);
        REQUIRE(out_sizes[c] == std::min(window, total - c * window));
      }
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < total; ++i) wrong += got[i] == f(value_at(i, 7)) ? 0 : 1;
      REQUIRE(wrong == 0);
      REQUIRE(std::isnan(got[total]));
    }
  }
  // A 4 MiB run of a 64 Ki-element window reaches the Sink in 16 windows,
  // and a Filter's packed output in windows of 64 Ki elements.
  {
    const std::size_t window = std::size_t{1} << 16, total = std::size_t{1} << 20;
    auto keep = make_pipeline({.chunk_elems = window}, filter(Positive{}));
    REQUIRE(keep.geometry().chunk_elems != window);
    std::vector<float> kept;
    for (std::size_t i = 0; i < total; ++i) {
      if (value_at(i, 7) > 0.0f) kept.push_back(value_at(i, 7));
    }
    std::vector<std::size_t> in_sizes, out_sizes, chunks;
    std::vector<float> got(total);
    poison(got);
    REQUIRE(keep.run(source<float>(SizedSource{total, &in_sizes}), sink<float>(SizedSink{&got, &out_sizes, &chunks})) ==
            kept.size());
    for (std::size_t s : in_sizes) REQUIRE(s == window);
    REQUIRE(out_sizes.size() == (kept.size() + window - 1) / window);
    for (std::size_t c = 0; c + 1 < out_sizes.size(); ++c) REQUIRE(out_sizes[c] == window);
    REQUIRE(std::equal(kept.begin(), kept.end(), got.begin()));

    auto plain = make_pipeline({.chunk_elems = window}, map(Chain{}));
    std::vector<float> x(total);
    for (std::size_t i = 0; i < total; ++i) x[i] = value_at(i, 7);
    out_sizes.clear();
    chunks.clear();
    plain.run(x, sink<float>(SizedSink{&got, &out_sizes, &chunks}));
    REQUIRE(out_sizes.size() == 16);
    for (std::size_t s : out_sizes) REQUIRE(s == window);
  }
  // A spread over the same device twice calls the user's Source and Sink in windows too.
  {
    const std::size_t window = std::size_t{1} << 16, total = (std::size_t{3} << 20) + 11;
    Options o{.chunk_elems = window};
    int device = 0;
    REQUIRE(cudaGetDevice(&device) == cudaSuccess);
    o.devices = {device, device};
    SpreadPipeline<Map<Chain>> spread(o, map(Chain{}));
    std::vector<std::size_t> in_sizes, out_sizes, chunks;
    std::vector<float> got(total + 1);
    poison(got);
    spread.run(source<float>(SizedSource{total, &in_sizes}), sink<float>(SizedSink{&got, &out_sizes, &chunks}));
    for (std::size_t s : in_sizes) REQUIRE(s == window);
    REQUIRE(out_sizes.size() == (total + window - 1) / window);
    for (std::size_t c = 0; c < out_sizes.size(); ++c) REQUIRE(chunks[c] == c);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < total; ++i) wrong += got[i] == f(value_at(i, 7)) ? 0 : 1;
    REQUIRE(wrong == 0);
    REQUIRE(std::isnan(got[total]));
  }
}

TEST_CASE("a file run on the GPU reads in parts and writes a chunk a call, and its report says so",
          "[gpu][streaming][files][report]") {
  const test_support::ScratchDir dir("chunkpipe_gpu_files");
  const std::string in = dir / "in.f32", out = dir / "out.f32";
  // 5 Mi floats and 3 more: whole 2 MiB-or-larger chunks cut into parts
  // over four threads, and a ragged end.
  const std::size_t n = (std::size_t{5} << 20) + 3;
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = value_at(i, 11);
  {
    std::ofstream f(in, std::ios::binary);
    f.write(reinterpret_cast<const char*>(x.data()), static_cast<std::streamsize>(n * sizeof(float)));
  }
  const Chain f{};
  ChunkedPipeline<Map<Chain>> pipe({.chunk_elems = std::size_t{1} << 20, .depth = 3, .policy = Policy::stage_streams,
                                    .profile = true, .host_threads = 4});
  pipe.run(file_source<float>(in), file_sink<float>(out));
  std::vector<float> got(n + 1, std::numeric_limits<float>::quiet_NaN());
  {
    std::ifstream g(out, std::ios::binary);
    g.read(reinterpret_cast<char*>(got.data()), static_cast<std::streamsize>((n + 1) * sizeof(float)));
    REQUIRE(g.gcount() == static_cast<std::streamsize>(n * sizeof(float)));  // no more, no less
  }
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += got[i] == f(x[i]) ? 0 : 1;
  REQUIRE(wrong == 0);
  const Report r = pipe.report();
  INFO(r.io);
  CHECK(r.io.find("each chunk of 1 MiB or more over 4 threads (Options::host_threads)") != std::string::npos);
  CHECK(r.io.find("into 3 free slots (Options::depth)") != std::string::npos);
  CHECK(r.io.find("read through the page cache") != std::string::npos);  // just written: cached
  CHECK(r.io.find("write-back started per chunk, fsync at the end") != std::string::npos);
  // A run over ranges has nothing to say.
  std::vector<float> y(n);
  pipe.run(x, y);
  CHECK(pipe.report().io.empty());
}
