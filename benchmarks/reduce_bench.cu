// SPDX-License-Identifier: MIT
//
// reduce_bench: a run folded into one value, so only the input crosses the
// link. The goal: a sum or a histogram of 4 GiB of pinned floats at >= 0.97
// of the H2D floor, with results equal to a host reference. Rows:
//   H2D floor          the same bytes by cudaMemcpyAsync, 64 MiB pieces, one stream,
//                      into a reused 256 MiB buffer: the ratios' denominator.
//   sum default        Options{}, reduce(0.0f, Plus{}) over the floats.
//   sum 64KiB window   Options{.chunk_elems = 16384}, which the automatic policy
//                      schedules in larger units (the notes under the table say which).
//   histogram of values  Options{}, accumulate(Hist{}, CountValues{}, MergeHist{}):
//                      256 bins of the float values, 1/128 wide.
//   histogram of bytes Options{}, accumulate(Hist{}, CountBytes{}, MergeHist{}) over
//                      the same bytes as uint8 (the default window: 2 Mi elements, 2 MiB).
//   hand sum           without chunkpipe: 3 slots on 3 streams, 8 MiB chunk k on stream
//                      k % 3 copied in, cub::DeviceReduce::Sum into device partial k;
//                      the partials come back at the end; the host adds them in double.
//   filter 10% default Options{}, filter(v >= 0.8) over the floats into a pinned range:
//                      the copy in and the 10% kept, copied out at the same time.
//   hand histogram     the same loop and kernel, every chunk adding into one Hist.
//   hand filter: ...   the same loop, CUB select per chunk, the kept elements
//                      back by the two other strategies: the whole slot copied
//                      back and trimmed by the host, or written to their place
//                      by a kernel with the running offset on the device.
// Data: floats hashed from the index, uniform in [-1, 1) and exact (multiples
// of 2^-23). The histograms count those same bytes: no second 4 GiB buffer,
// and skewed bins (a float's high byte is an exponent byte; 0x3F and 0xBF
// hold about 1/16 of all bytes each) for the shared atomics to absorb.
//
// Timing: host wall time from issue until the result is on the host (the
// floor: until its last copy is done), median of rounds in rotating order,
// after a warm-up pass per row (the first run allocates). A reduction's
// result is of use only on the host, so that is the honest figure; the
// floor is timed alike, and its CUDA-event time shows what wake-up adds.
//
// Checks, every pass; any failure exits 1. Sums: |got - exact| <= d * 2^-24
// * sum|x| * 1.01 (both in double), the first-order bound when an element
// takes part in at most d float additions (1.01: higher orders). chunkpipe:
// d = segment/256 + 8 + 2 ceil(log2 partials) + 1 (stage.hpp; 105 at 4 GiB).
// CUB documents no order; d = 257 is generous (over a 2M-element chunk, a
// few dozen in per-thread items and two block trees, and 1 for the host's
// rounding). On mean-zero data that catches only gross errors, so each
// chunkpipe sum must also have the first one's bits, over rounds and both
// windows: its order depends on the elements alone. Histograms: every bin
// equal to the host's count, the bins summing to N.
#include <chunkpipe/pipeline.cuh>
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_select.cuh>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "event_clock.hpp"
#include "support.hpp"

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr const char* kUsage =
    "usage: reduce_bench [--gib X (default 4; fractions allowed)] [--rounds R (5)] [--csv PATH (reduce_bench.csv)]\n";

struct Plus {
  CHUNKPIPE_HOST_DEVICE float operator()(float a, float b) const { return a + b; }
};

struct Hist {
  unsigned bins[256];
};

// Keeps about 10% of floats uniform in [-1, 1).
struct Above {
  CHUNKPIPE_HOST_DEVICE bool operator()(float v) const { return v >= 0.8f; }
};

// What a filter keeps, as an order-sensitive digest: count, and the sum
// of (position + 1) x the value's bits, so a dropped, extra or swapped
// element shows.
struct Kept {
  std::size_t count = 0;
  std::uint64_t digest = 0;
};
Kept digest_of_kept(const float* x, std::size_t n) {
  Kept k;
  for (std::size_t i = 0; i < n; ++i) {
    if (!Above{}(x[i])) continue;
    std::uint32_t b;
    std::memcpy(&b, &x[i], sizeof b);
    k.digest += (++k.count) * b;
  }
  return k;
}
Kept digest_of(const float* out, std::size_t n) {
  Kept k;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t b;
    std::memcpy(&b, &out[i], sizeof b);
    k.digest += (++k.count) * b;
  }
  return k;
}

// Privatised: 256 bins in shared memory per block, added into *out at the end.
__global__ void histogram_kernel(const std::uint8_t* in, std::size_t n, Hist* out) {
  __shared__ unsigned local[256];
  for (unsigned b = threadIdx.x; b < 256; b += blockDim.x) local[b] = 0;
  __syncthreads();
  const std::size_t tid = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  // 16-byte loads keep byte-wide input at memory speed; slots are aligned,
  // but nothing promises it, so the bytes before and after go one by one.
  const std::size_t skew = (16 - reinterpret_cast<std::uintptr_t>(in) % 16) % 16, head = skew < n ? skew : n;
  const std::size_t words = (n - head) / 16;
  const uint4* w = reinterpret_cast<const uint4*>(in + head);
  for (std::size_t i = tid; i < words; i += stride) {
    const uint4 v = w[i];
    const unsigned part[4] = {v.x, v.y, v.z, v.w};
    for (unsigned q : part) {
      for (unsigned s = 0; s < 32; s += 8) atomicAdd(&local[(q >> s) & 255u], 1u);
    }
  }
  for (std::size_t i = tid; i < head; i += stride) atomicAdd(&local[in[i]], 1u);
  for (std::size_t i = head + words * 16 + tid; i < n; i += stride) atomicAdd(&local[in[i]], 1u);
  __syncthreads();
  for (unsigned b = threadIdx.x; b < 256; b += blockDim.x) {
    if (local[b] != 0) atomicAdd(&out->bins[b], local[b]);
  }
}

// 256 bins of float values in [-1, 1), each 1/128 wide; exact on both sides
// for this data (multiples of 2^-23), so the device and the host agree.
__host__ __device__ inline unsigned value_bin(float v) {
  const unsigned b = static_cast<unsigned>((v + 1.0f) * 128.0f);
  return b < 255u ? b : 255u;
}

__global__ void value_histogram_kernel(const float* in, std::size_t n, Hist* out) {
  __shared__ unsigned local[256];
  for (unsigned b = threadIdx.x; b < 256; b += blockDim.x) local[b] = 0;
  __syncthreads();
  const std::size_t tid = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  // Slots start 256-byte aligned; a chunk's float4 view covers all but its tail.
  const std::size_t quads = n / 4;
  const float4* q = reinterpret_cast<const float4*>(in);
  for (std::size_t i = tid; i < quads; i += stride) {
    const float4 v = q[i];
    atomicAdd(&local[value_bin(v.x)], 1u);
    atomicAdd(&local[value_bin(v.y)], 1u);
    atomicAdd(&local[value_bin(v.z)], 1u);
    atomicAdd(&local[value_bin(v.w)], 1u);
  }
  for (std::size_t i = quads * 4 + tid; i < n; i += stride) atomicAdd(&local[value_bin(in[i])], 1u);
  __syncthreads();
  for (unsigned b = threadIdx.x; b < 256; b += blockDim.x) {
    if (local[b] != 0) atomicAdd(&out->bins[b], local[b]);
  }
}

struct CountValues {
  unsigned max_blocks = 264;
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    const std::size_t blocks = std::clamp<std::size_t>((ctx.count / 4 + 255) / 256, 1, max_blocks);
    value_histogram_kernel<<<static_cast<unsigned>(blocks), 256, 0, ctx.stream.get()>>>(
        ctx.template in<0>().data(), ctx.count, ctx.template out<0>().data());
    CHUNKPIPE_CUDA_TRY(cudaGetLastError());
  }
};

// The hand-written filter that keeps a running offset on the device: the
// kept elements of a chunk go straight to their place in a pinned (mapped)
// output by SM stores over the link, in chunk order on one stream.
__global__ void write_kept(const float* kept, const std::size_t* count, const std::size_t* at, float* out) {
  const std::size_t n = *count, base = *at;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    out[base + i] = kept[i];
  }
}
__global__ void advance(std::size_t* at, const std::size_t* count) { *at += *count; }

// Few blocks, so that each flushes its 256 bins after many bytes.
void launch_histogram(const std::uint8_t* in, std::size_t n, Hist* out, unsigned max_blocks, cudaStream_t s) {
  const std::size_t blocks = std::clamp<std::size_t>((n / 16 + 255) / 256, 1, max_blocks);
  histogram_kernel<<<static_cast<unsigned>(blocks), 256, 0, s>>>(in, n, out);
  CHUNKPIPE_CUDA_TRY(cudaGetLastError());
}

struct CountBytes {
  unsigned max_blocks = 264;
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    launch_histogram(ctx.template in<0>().data(), ctx.count, ctx.template out<0>().data(), max_blocks,
                     ctx.stream.get());
  }
};
struct MergeHist {
  void operator()(Hist& total, const Hist& chunk) const {
    for (int b = 0; b < 256; ++b) total.bins[b] += chunk.bins[b];
  }
};

// The host reference, from the pass that fills the buffer. Its blocks are
// fixed, so the double sums do not depend on the thread count; their error
// (about 2^-33 of sum|x|) is nothing next to a float sum's.
struct HostRef {
  double sum = 0, abs_sum = 0;
  std::array<std::uint64_t, 256> bins{};        // of the bytes
  std::array<std::uint64_t, 256> value_bins{};  // of the float values
};

HostRef fill(float* x, std::size_t n) {
  constexpr std::size_t block = std::size_t{1} << 20;
  const std::size_t blocks = (n + block - 1) / block;
  const unsigned workers = std::max(1u, std::thread::hardware_concurrency());
  std::vector<double> sums(blocks), abss(blocks);
  std::vector<std::array<std::uint64_t, 256>> bins(workers), value_bins(workers);
  std::atomic<std::size_t> next{0};
  auto work = [&](unsigned me) {
    for (std::size_t b; (b = next.fetch_add(1)) < blocks;) {
      const std::size_t lo = b * block, hi = std::min(n, lo + block);
      double sum = 0, abs_sum = 0;
      for (std::size_t i = lo; i < hi; ++i) {
        const std::uint32_t h = example::mix(i, 0x5EEDu ^ static_cast<std::uint32_t>(i >> 32));
        x[i] = static_cast<float>(h >> 8) * 0x1p-23f - 1.0f;
        sum += x[i];
        abs_sum += std::fabs(x[i]);
        ++value_bins[me][value_bin(x[i])];
      }
      sums[b] = sum;
      abss[b] = abs_sum;
      const auto* p = reinterpret_cast<const std::uint8_t*>(x + lo);
      for (std::size_t i = 0; i < (hi - lo) * sizeof(float); ++i) ++bins[me][p[i]];
    }
  };
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < workers; ++w) pool.emplace_back(work, w);
  for (std::thread& t : pool) t.join();
  HostRef r;
  for (std::size_t b = 0; b < blocks; ++b) {
    r.sum += sums[b];
    r.abs_sum += abss[b];
  }
  for (unsigned w = 0; w < workers; ++w) {
    for (int k = 0; k < 256; ++k) {
      r.bins[k] += bins[w][k];
      r.value_bins[k] += value_bins[w][k];
    }
  }
  return r;
}

// The hand-written loop: 3 slots on 3 streams, chunk k on stream k % 3, so
// each stream's own order keeps a slot from being overwritten while it is
// read. Work queued on stream 0 before run() precedes every chunk; `tail`
// runs on stream 0 after them all, and run() returns once it is done.
struct HandLoop {
  static constexpr int slots = 3;
  static constexpr std::size_t chunk = 8 * kMiB;
  chunkpipe::DeviceBuffer buf{slots * chunk};
  chunkpipe::Stream s[slots] = {chunkpipe::Stream::create(), chunkpipe::Stream::create(), chunkpipe::Stream::create()};
  chunkpipe::Event ev[slots] = {chunkpipe::Event::create(), chunkpipe::Event::create(), chunkpipe::Event::create()};

  template <class Work, class Tail>
  void run(const std::uint8_t* host, std::size_t bytes, Work&& work, Tail&& tail) {
    CHUNKPIPE_CUDA_TRY(cudaEventRecord(ev[0].get(), s[0].get()));
    for (int q = 1; q < slots; ++q) CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(s[q].get(), ev[0].get(), 0));
    for (std::size_t k = 0, off = 0; off < bytes; ++k, off += chunk) {
      const std::size_t p = k % slots, n = std::min(chunk, bytes - off);
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(buf.data() + p * chunk, host + off, n, cudaMemcpyHostToDevice, s[p].get()));
      work(k, buf.data() + p * chunk, n, s[p].get());
    }
    for (int q = 1; q < slots; ++q) {
      CHUNKPIPE_CUDA_TRY(cudaEventRecord(ev[q].get(), s[q].get()));
      CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(s[0].get(), ev[q].get(), 0));
    }
    tail(s[0].get());
    CHUNKPIPE_CUDA_TRY(cudaStreamSynchronize(s[0].get()));
  }
};

struct Row {
  std::string name;
  std::function<void()> pass;          // returns with the result on the host
  std::function<std::string()> check;  // "" when right, else what is wrong
  std::vector<double> ms = {};
  int failures = 0;
};

struct Args {
  double gib = 4.0;
  int rounds = 5;
  std::string csv = "reduce_bench.csv";
};

int parse(int argc, char** argv, Args& a) {
  std::string gib = "4";
  example::CommandLine cli("reduce_bench", kUsage);
  cli.text("--gib", gib).integer("--rounds", a.rounds, 1, 1000).text("--csv", a.csv);
  if (const int status = cli.parse(argc, argv); status >= 0) return status;
  char* end = nullptr;
  a.gib = std::strtod(gib.c_str(), &end);
  if (gib.empty() || *end != '\0' || !(a.gib > 0 && a.gib <= 32)) {
    std::fprintf(stderr, "reduce_bench: --gib wants a number in (0, 32], got '%s'\n", gib.c_str());
    return 2;
  }
  return -1;
}

int bench(const Args& a) {
  const cudaDeviceProp prop = example::current_gpu();
  const std::size_t elems = static_cast<std::size_t>(a.gib * 1073741824.0) / sizeof(float), bytes = elems * 4;
  if (elems == 0) throw chunkpipe::config_error("reduce_bench: --gib leaves no whole float");
  chunkpipe::PinnedArray<float> x(elems);
  const HostRef ref = fill(x.data(), elems);
  const auto* base = reinterpret_cast<const std::uint8_t*>(x.data());
  const unsigned max_blocks = 2u * static_cast<unsigned>(prop.multiProcessorCount);
  std::printf("reduce_bench on %s: %.3f GiB of pinned float, %d rounds\n", prop.name, bytes / 1073741824.0, a.rounds);

  const std::size_t partials = (elems + chunkpipe::default_reduce_segment - 1) / chunkpipe::default_reduce_segment;
  int lg = 0;
  while ((std::size_t{1} << lg) < partials) ++lg;
  const double d_chunkpipe = static_cast<double>(chunkpipe::default_reduce_segment / 256 + 8 + 2 * lg + 1);
  const double d_hand = 257;
  auto bound = [&](double d) { return d * 0x1p-24 * ref.abs_sum * 1.01; };
  std::vector<float> chunkpipe_sums;  // each one's bits must be the first's
  auto sum_check = [&](float got, double d, bool fixed_order) -> std::string {
    const double err = std::fabs(static_cast<double>(got) - ref.sum);
    if (fixed_order) chunkpipe_sums.push_back(got);
    char why[160] = "";
    if (!(err <= bound(d))) {
      std::snprintf(why, sizeof why, "sum %.9g, host %.9g: off by %.3g, bound %.3g", got, ref.sum, err, bound(d));
    } else if (fixed_order && !example::same_bits(got, chunkpipe_sums.front())) {
      std::snprintf(why, sizeof why, "sum %.9g, not the bits of the first, %.9g", got, chunkpipe_sums.front());
    }
    return why;
  };
  auto hist_check = [&](const Hist& got, bool values = false) -> std::string {
    const auto& want = values ? ref.value_bins : ref.bins;
    const std::size_t items = values ? elems : bytes;
    std::uint64_t total = 0;
    for (int b = 0; b < 256; ++b) {
      total += got.bins[b];
      if (got.bins[b] != want[b]) {
        return "bin " + std::to_string(b) + ": " + std::to_string(got.bins[b]) + ", host " + std::to_string(want[b]);
      }
    }
    return total == items ? "" : "bins sum to " + std::to_string(total) + ", not " + std::to_string(items);
  };

  constexpr std::size_t piece = 64 * kMiB;
  chunkpipe::DeviceBuffer floor_buf(4 * piece);
  chunkpipe::Stream floor_stream = chunkpipe::Stream::create();
  chunkpipe::Event floor_done = chunkpipe::Event::create();
  auto issue_floor = [&] {
    for (std::size_t off = 0, k = 0; off < bytes; off += piece, ++k) {
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(floor_buf.data() + (k % 4) * piece, base + off, std::min(piece, bytes - off),
                                         cudaMemcpyHostToDevice, floor_stream.get()));
    }
  };

  using chunkpipe::Options;
  auto sum_pipe = chunkpipe::make_pipeline(Options{}, chunkpipe::reduce(0.0f, Plus{}));
  auto window_pipe = chunkpipe::make_pipeline(Options{.chunk_elems = 16384}, chunkpipe::reduce(0.0f, Plus{}));
  auto hist_pipe =
      chunkpipe::make_pipeline(Options{}, chunkpipe::accumulate(Hist{}, CountBytes{max_blocks}, MergeHist{}));
  auto values_pipe =
      chunkpipe::make_pipeline(Options{}, chunkpipe::accumulate(Hist{}, CountValues{max_blocks}, MergeHist{}));
  auto filter_pipe = chunkpipe::make_pipeline(Options{}, chunkpipe::filter(Above{}));
  const Kept want_kept = digest_of_kept(x.data(), elems);
  chunkpipe::PinnedArray<float> kept(want_kept.count + want_kept.count / 8 + 1024);
  std::size_t got_kept = 0;
  const auto in_floats = chunkpipe::pinned(x);
  const auto in_bytes = chunkpipe::pinned(chunkpipe::host_span(base, bytes));

  HandLoop hand;
  const std::size_t hand_chunks = (bytes + HandLoop::chunk - 1) / HandLoop::chunk;
  chunkpipe::DeviceBuffer d_partials(hand_chunks * sizeof(float)), d_hist(sizeof(Hist));
  chunkpipe::PinnedArray<float> h_partials(hand_chunks);
  chunkpipe::PinnedArray<Hist> h_hist(1);
  float* parts = reinterpret_cast<float*>(d_partials.data());
  Hist* dh = reinterpret_cast<Hist*>(d_hist.data());
  // A temporary per slot, as the slots reduce at once, sized for a whole
  // chunk and for the shorter last one.
  std::size_t temp_bytes = 1;
  for (std::size_t n : {HandLoop::chunk, bytes % HandLoop::chunk}) {
    std::size_t t = 0;
    CHUNKPIPE_CUDA_TRY(
        cub::DeviceReduce::Sum(nullptr, t, static_cast<const float*>(nullptr), parts, static_cast<int>(n / 4)));
    temp_bytes = std::max(temp_bytes, t);
  }
  chunkpipe::DeviceBuffer temp[HandLoop::slots];
  for (auto& t : temp) t = chunkpipe::DeviceBuffer(temp_bytes);

  float got_sum = 0, got_window = 0, got_hand = 0;
  Hist got_hist{}, got_hand_hist{}, got_values{};
  auto hand_sum = [&] {
    auto chunk = [&](std::size_t k, std::byte* d, std::size_t n, cudaStream_t st) {
      std::size_t tb = temp_bytes;
      CHUNKPIPE_CUDA_TRY(cub::DeviceReduce::Sum(temp[k % HandLoop::slots].data(), tb, reinterpret_cast<const float*>(d),
                                                parts + k, static_cast<int>(n / 4), st));
    };
    hand.run(base, bytes, chunk, [&](cudaStream_t st) {
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(h_partials.data(), parts, hand_chunks * 4, cudaMemcpyDeviceToHost, st));
    });
    double s = 0;
    for (float p : h_partials) s += p;
    got_hand = static_cast<float>(s);
  };
  auto hand_hist = [&] {
    auto chunk = [&](std::size_t, std::byte* d, std::size_t n, cudaStream_t st) {
      launch_histogram(reinterpret_cast<const std::uint8_t*>(d), n, dh, max_blocks, st);
    };
    CHUNKPIPE_CUDA_TRY(cudaMemsetAsync(dh, 0, sizeof(Hist), hand.s[0].get()));
    hand.run(base, bytes, chunk, [&](cudaStream_t st) {
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(h_hist.data(), dh, sizeof(Hist), cudaMemcpyDeviceToHost, st));
    });
    got_hand_hist = h_hist[0];
  };
  // Two hand-written filters over the same loop: each chunk selected by
  // CUB into a per-slot buffer, its count on the device; then
  //  - trim: the whole slot copied back (the count does not exist on the
  //    host when the copy is queued), the host keeping the first count
  //    elements once the copy has landed, three chunks later;
  //  - device offset: the kept elements written to their final place by a
  //    kernel, in chunk order on one stream, with the running offset kept
  //    on the device.
  std::size_t select_temp = 1;
  CHUNKPIPE_CUDA_TRY(cub::DeviceSelect::If(nullptr, select_temp, static_cast<const float*>(nullptr),
                                           static_cast<float*>(nullptr), static_cast<std::size_t*>(nullptr),
                                           static_cast<int>(HandLoop::chunk / 4), Above{}));
  chunkpipe::DeviceBuffer sel_temp[HandLoop::slots], sel_buf[HandLoop::slots];
  for (int q = 0; q < HandLoop::slots; ++q) {
    sel_temp[q] = chunkpipe::DeviceBuffer(select_temp);
    sel_buf[q] = chunkpipe::DeviceBuffer(HandLoop::chunk);
  }
  chunkpipe::DeviceBuffer sel_counts(sizeof(std::size_t) * (HandLoop::slots + 1));
  auto* dcount = reinterpret_cast<std::size_t*>(sel_counts.data());  // [slot], then the running offset
  chunkpipe::PinnedArray<float> trim_slots(HandLoop::slots * HandLoop::chunk / 4);
  chunkpipe::PinnedArray<std::size_t> trim_counts(HandLoop::slots);
  chunkpipe::Event landed[HandLoop::slots] = {chunkpipe::Event::create(), chunkpipe::Event::create(),
                                              chunkpipe::Event::create()};
  chunkpipe::Stream out_stream = chunkpipe::Stream::create();
  chunkpipe::Event selected[HandLoop::slots] = {chunkpipe::Event::create(), chunkpipe::Event::create(),
                                                chunkpipe::Event::create()};
  chunkpipe::Event written[HandLoop::slots] = {chunkpipe::Event::create(), chunkpipe::Event::create(),
                                               chunkpipe::Event::create()};
  std::size_t got_trim = 0, got_offset = 0;
  auto select_chunk = [&](std::size_t p, std::byte* d, std::size_t n, cudaStream_t st) {
    std::size_t tb = select_temp;
    CHUNKPIPE_CUDA_TRY(cub::DeviceSelect::If(sel_temp[p].data(), tb, reinterpret_cast<const float*>(d),
                                             reinterpret_cast<float*>(sel_buf[p].data()), dcount + p,
                                             static_cast<int>(n / 4), Above{}, st));
  };
  auto hand_trim = [&] {
    got_trim = 0;
    std::size_t pending[HandLoop::slots] = {};
    bool busy[HandLoop::slots] = {};
    auto keep = [&](std::size_t p) {  // the host's half: the first count elements
      CHUNKPIPE_CUDA_TRY(cudaEventSynchronize(landed[p].get()));
      std::memcpy(kept.data() + got_trim, trim_slots.data() + p * (HandLoop::chunk / 4), trim_counts[p] * 4);
      got_trim += trim_counts[p];
      busy[p] = false;
      (void)pending;
    };
    hand.run(base, bytes,
             [&](std::size_t k, std::byte* d, std::size_t n, cudaStream_t st) {
               const std::size_t p = k % HandLoop::slots;
               if (busy[p]) keep(p);
               select_chunk(p, d, n, st);
               CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(trim_slots.data() + p * (HandLoop::chunk / 4), sel_buf[p].data(), n,
                                                  cudaMemcpyDeviceToHost, st));
               CHUNKPIPE_CUDA_TRY(
                   cudaMemcpyAsync(&trim_counts[p], dcount + p, sizeof(std::size_t), cudaMemcpyDeviceToHost, st));
               CHUNKPIPE_CUDA_TRY(cudaEventRecord(landed[p].get(), st));
               busy[p] = true;
             },
             [](cudaStream_t) {});
    // The last chunks, in order: the loop ends on chunk k, so k+1 % 3 is the oldest.
    const std::size_t chunks = (bytes + HandLoop::chunk - 1) / HandLoop::chunk;
    for (std::size_t k = chunks > HandLoop::slots ? chunks - HandLoop::slots : 0; k < chunks; ++k) {
      if (busy[k % HandLoop::slots]) keep(k % HandLoop::slots);
    }
  };
  auto hand_offset = [&] {
    CHUNKPIPE_CUDA_TRY(cudaMemsetAsync(dcount + HandLoop::slots, 0, sizeof(std::size_t), hand.s[0].get()));
    CHUNKPIPE_CUDA_TRY(cudaEventRecord(written[0].get(), hand.s[0].get()));
    CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(out_stream.get(), written[0].get(), 0));
    std::size_t k_seen = 0;
    hand.run(base, bytes,
             [&](std::size_t k, std::byte* d, std::size_t n, cudaStream_t st) {
               const std::size_t p = k % HandLoop::slots;
               // The slot's kept buffer is free once chunk k - 3 was written out.
               if (k >= HandLoop::slots) CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(st, written[p].get(), 0));
               select_chunk(p, d, n, st);
               CHUNKPIPE_CUDA_TRY(cudaEventRecord(selected[p].get(), st));
               CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(out_stream.get(), selected[p].get(), 0));
               write_kept<<<264, 256, 0, out_stream.get()>>>(reinterpret_cast<const float*>(sel_buf[p].data()),
                                                             dcount + p, dcount + HandLoop::slots, kept.data());
               advance<<<1, 1, 0, out_stream.get()>>>(dcount + HandLoop::slots, dcount + p);
               CHUNKPIPE_CUDA_TRY(cudaEventRecord(written[p].get(), out_stream.get()));
               k_seen = k;
             },
             [&](cudaStream_t st) {
               CHUNKPIPE_CUDA_TRY(cudaEventRecord(written[0].get(), out_stream.get()));
               CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(st, written[0].get(), 0));
               CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(&trim_counts[0], dcount + HandLoop::slots, sizeof(std::size_t),
                                                  cudaMemcpyDeviceToHost, st));
             });
    (void)k_seen;
    got_offset = trim_counts[0];
  };
  auto kept_check = [&](std::size_t got) -> std::string {
    const Kept k = digest_of(kept.data(), got);
    if (got != want_kept.count || k.digest != want_kept.digest) {
      return "kept " + std::to_string(got) + " (host " + std::to_string(want_kept.count) + "), digest " +
             (k.digest == want_kept.digest ? "equal" : "differs");
    }
    std::fill(kept.begin(), kept.begin() + static_cast<std::ptrdiff_t>(got), -9.f);  // poison
    return "";
  };

  std::vector<Row> rows;
  auto floor_pass = [&] {
    issue_floor();
    CHUNKPIPE_CUDA_TRY(cudaStreamSynchronize(floor_stream.get()));
  };
  rows.push_back({"H2D floor", floor_pass, [] { return std::string(); }});
  rows.push_back({"sum default", [&] { got_sum = sum_pipe.run(in_floats); },
                  [&] { return sum_check(got_sum, d_chunkpipe, true); }});
  rows.push_back({"sum 64KiB window", [&] { got_window = window_pipe.run(in_floats); },
                  [&] { return sum_check(got_window, d_chunkpipe, true); }});
  rows.push_back({"histogram of values default", [&] { got_values = values_pipe.run(in_floats); },
                  [&] { return hist_check(got_values, true); }});
  rows.push_back({"histogram of bytes default", [&] { got_hist = hist_pipe.run(in_bytes); },
                  [&] { return hist_check(got_hist); }});
  rows.push_back({"filter 10% default", [&] { got_kept = filter_pipe.run(in_floats, kept); },
                  [&] { return kept_check(got_kept); }});
  rows.push_back({"hand sum: copy all, CUB per chunk", hand_sum, [&] { return sum_check(got_hand, d_hand, false); }});
  rows.push_back({"hand histogram", hand_hist, [&] { return hist_check(got_hand_hist); }});
  rows.push_back({"hand filter: whole slot back, host trims", hand_trim, [&] { return kept_check(got_trim); }});
  rows.push_back({"hand filter: device offset, kernel writes", hand_offset, [&] { return kept_check(got_offset); }});

  auto verify = [](Row& r, const std::string& when) {
    const std::string why = r.check();
    if (why.empty()) return;
    ++r.failures;
    std::fprintf(stderr, "FAIL: %s, %s: %s\n", r.name.c_str(), when.c_str(), why.c_str());
  };
  for (Row& r : rows) {
    r.pass();
    verify(r, "warm-up");
  }
  // Rotated as timing::time_rounds does, which times device work by events;
  // these rows want host wall time.
  for (int round = 0; round < a.rounds; ++round) {
    for (std::size_t i = 0; i < rows.size(); ++i) {
      Row& r = rows[(i + static_cast<std::size_t>(round)) % rows.size()];
      const auto t0 = example::Clock::now();
      r.pass();
      r.ms.push_back(example::ms_between(t0, example::Clock::now()));
      verify(r, "round " + std::to_string(round + 1));
    }
  }
  timing::EventClock clock;
  const example::Timing floor_events = clock.passes(a.rounds, [&] {
    return clock.time(issue_floor, [&](cudaStream_t t) {
      CHUNKPIPE_CUDA_TRY(cudaEventRecord(floor_done.get(), floor_stream.get()));
      CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(t, floor_done.get(), 0));
    });
  });

  const double floor_ms = timing::median_of(rows[0].ms);
  auto gbps = [&](double ms) { return static_cast<double>(bytes) / (ms * 1e6); };
  std::printf("H2D floor: %.3f ms, %.2f GB/s by host wall time (CUDA events: %.3f ms, %.2f GB/s)\n\n", floor_ms,
              gbps(floor_ms), floor_events.median, gbps(floor_events.median));
  std::printf("%-36s %10s %9s %9s  %s\n", "row", "ms", "GB/s", "of floor", "check");
  FILE* fp = std::fopen(a.csv.c_str(), "w");
  if (fp) std::fprintf(fp, "row,ms,gbps,of_floor,ok\n");
  bool ok = fp != nullptr;
  for (const Row& r : rows) {
    const double ms = timing::median_of(r.ms);
    const std::string check = &r == &rows[0] ? "(nothing to check)"
                              : (r.failures == 0 ? "ok, " : "FAILED " + std::to_string(r.failures) + " of ") +
                                    std::to_string(a.rounds + 1) + " passes";
    std::printf("%-36s %10.3f %9.2f %9.3f  %s\n", r.name.c_str(), ms, gbps(ms), floor_ms / ms, check.c_str());
    if (fp) {
      std::fprintf(fp, "\"%s\",%.4f,%.3f,%.4f,%d\n", r.name.c_str(), ms, gbps(ms), floor_ms / ms, r.failures == 0);
    }
    ok = ok && r.failures == 0;
  }
  std::printf("(goal: sums and histograms at >= 0.97 of the floor, the filter at >= 0.95)\n\nhost: sum %.9g, sum|x| %.9g\n", ref.sum, ref.abs_sum);
  std::printf("chunkpipe sums %.9g, %.9g: off by %.3g, bound %.3g (d %.0f)\n", got_sum, got_window,
              std::fabs(got_sum - ref.sum), bound(d_chunkpipe), d_chunkpipe);
  std::printf("hand sum %.9g: off by %.3g, bound %.3g (d %.0f)\n", got_hand, std::fabs(got_hand - ref.sum),
              bound(d_hand), d_hand);
  const chunkpipe::Geometry gs[] = {sum_pipe.geometry(), window_pipe.geometry(), values_pipe.geometry(),
                                    hist_pipe.geometry(), filter_pipe.geometry()};
  for (int k = 0; k < 5; ++k) {
    std::printf("%s: %s d%d, units of %zu KiB\n", rows[1 + k].name.c_str(),
                std::string(to_string(gs[k].policy)).c_str(), gs[k].depth, gs[k].chunk_elems * (k == 3 ? 1 : 4) / 1024);
  }
  std::printf("filter: kept %zu of %zu floats (%.2f%%); its floor is the H2D floor, as the %.0f MiB kept go the "
              "other way at the same time\n",
              want_kept.count, elems, 100.0 * static_cast<double>(want_kept.count) / static_cast<double>(elems),
              static_cast<double>(want_kept.count) * 4 / 1048576.0);
  if (fp) {
    std::fclose(fp);
    std::printf("CSV: %s\n", a.csv.c_str());
  } else {
    std::fprintf(stderr, "reduce_bench: cannot write %s\n", a.csv.c_str());
  }
  return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (const int rc = parse(argc, argv, a); rc >= 0) return rc;
  if (const int rc = example::require_gpu("benchmark"); rc != 0) return rc;
  try {
    return bench(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reduce_bench: %s\n", e.what());
    return EXIT_FAILURE;
  }
}
