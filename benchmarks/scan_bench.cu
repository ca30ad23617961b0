// SPDX-License-Identifier: MIT
//
// scan_bench: a running prefix over a run larger than one chunk, whose
// carry passes from chunk to chunk, against the link and a hand-written
// loop. The question: does the carry (each chunk's kernels wait for the
// chunk before) cost anything where the copies bound the run? Rows:
//   floor              the same bytes in and out by cudaMemcpyAsync at once,
//                      64 MiB pieces on two streams: the ratios' denominator.
//   map default        Options{}, a Map over the floats: what the copies allow.
//   scan default       Options{}, scan(0.0f, Plus{}) over the floats.
//   scan 64KiB window  Options{.chunk_elems = 16384}, scheduled in larger units.
//   hand scan          without chunkpipe: 3 slots on 3 streams, 8 MiB chunk k on
//                      stream k % 3 copied in, cub::DeviceScan::InclusiveSum,
//                      a one-block kernel adding the carry (which waits for
//                      the chunk before's), copied out.
// Data: floats hashed from the index, uniform in [0, 1) and exact (multiples
// of 2^-23), so the prefix grows and a wrong or missing carry shows.
//
// Timing: host wall time from issue until the last byte is back, median of
// rounds in rotating order, after a warm-up pass per row.
//
// Checks, every pass; any failure exits 1. chunkpipe's scans: every element
// the bits of the host backend's scan of the same floats (the documented
// order, computed once). The hand scan (CUB documents no order): at every
// 4099th element and the last, |got - exact| <= 2^-24 * 4 log2(n) * exact,
// with exact the prefix in double. Outputs are poisoned before each pass.
#include <chunkpipe/host_backend.hpp>
#include <chunkpipe/pipeline.cuh>
#include <cub/device/device_scan.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "support.hpp"

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;
constexpr const char* kUsage =
    "usage: scan_bench [--gib X (default 1; fractions allowed)] [--rounds R (5)] [--csv PATH (scan_bench.csv)]\n";

struct Plus {
  CHUNKPIPE_HOST_DEVICE float operator()(float a, float b) const { return a + b; }
};
struct Scale {
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return x * 0.5f + 0.25f; }
};

float value_at(std::size_t i) {
  std::uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 29;
  return static_cast<float>(h >> 41) * 0x1p-23f;  // [0, 1), exact
}

// One block: out[i] += carry for the chunk, then carry = out[last]. The
// block runs after the chunk before's (an event), so the carry is its.
__global__ void add_carry(float* out, std::size_t n, float* carry) {
  const float c = *carry;
  for (std::size_t i = threadIdx.x; i < n; i += blockDim.x) out[i] += c;
  __syncthreads();
  if (threadIdx.x == 0) *carry = out[n - 1];
}

struct Row {
  std::string name;
  std::function<void()> pass;
  std::function<std::string()> check;
  std::vector<double> ms = {};
  int failures = 0;
};

struct Args {
  double gib = 1.0;
  int rounds = 5;
  std::string csv = "scan_bench.csv";
};

int parse(int argc, char** argv, Args& a) {
  std::string gib = "1";
  example::CommandLine cli("scan_bench", kUsage);
  cli.text("--gib", gib).integer("--rounds", a.rounds, 1, 1000).text("--csv", a.csv);
  if (const int status = cli.parse(argc, argv); status >= 0) return status;
  char* end = nullptr;
  a.gib = std::strtod(gib.c_str(), &end);
  if (gib.empty() || *end != '\0' || !(a.gib > 0 && a.gib <= 16)) {
    std::fprintf(stderr, "scan_bench: --gib wants a number in (0, 16], got '%s'\n", gib.c_str());
    return 2;
  }
  return -1;
}

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

int bench(const Args& a) {
  const cudaDeviceProp prop = example::current_gpu();
  const std::size_t n = static_cast<std::size_t>(a.gib * 1073741824.0) / sizeof(float), bytes = n * 4;
  if (n == 0) throw chunkpipe::config_error("scan_bench: --gib leaves no whole float");
  std::printf("scan_bench on %s: %.3f GiB of pinned float in and out, %d rounds\n", prop.name, bytes / 1073741824.0,
              a.rounds);
  chunkpipe::PinnedArray<float> x(n), y(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = value_at(i);

  // References: the documented order (the host backend), and the exact
  // prefix in double at the sampled elements.
  std::vector<float> want(n);
  {
    auto host = chunkpipe::make_host_pipeline({.chunk_elems = std::size_t{1} << 22}, chunkpipe::scan(0.0f, Plus{}));
    host.run(chunkpipe::pinned(x), chunkpipe::pinned(want));
  }
  std::vector<std::size_t> samples;
  std::vector<double> exact;
  {
    double s = 0;
    for (std::size_t i = 0; i < n; ++i) {
      s += x[i];
      if (i % 4099 == 0 || i + 1 == n) {
        samples.push_back(i);
        exact.push_back(s);
      }
    }
  }
  auto poison = [&] { std::fill(y.begin(), y.end(), -1e30f); };
  auto scan_check = [&]() -> std::string {
    for (std::size_t i = 0; i < n; ++i) {
      if (!example::same_bits(y[i], want[i])) {
        return "element " + std::to_string(i) + ": " + std::to_string(y[i]) + ", documented order " +
               std::to_string(want[i]);
      }
    }
    return "";
  };
  auto map_check = [&]() -> std::string {
    for (std::size_t i = 0; i < n; i += 1021) {
      if (y[i] != x[i] * 0.5f + 0.25f) return "element " + std::to_string(i) + " wrong";
    }
    return "";
  };
  const double bound = 0x1p-24 * 4 * std::log2(static_cast<double>(n) + 2);
  auto hand_check = [&]() -> std::string {
    for (std::size_t k = 0; k < samples.size(); ++k) {
      const double got = y[samples[k]];
      if (!(std::fabs(got - exact[k]) <= bound * exact[k] + 1e-6)) {
        return "element " + std::to_string(samples[k]) + ": " + std::to_string(got) + ", exact " +
               std::to_string(exact[k]);
      }
    }
    return "";
  };

  // The floor: in and out at once, 64 MiB pieces, through a device ring.
  constexpr std::size_t piece = 64 * kMiB;
  chunkpipe::DeviceBuffer ring(8 * piece);
  chunkpipe::Stream in_s = chunkpipe::Stream::create(), out_s = chunkpipe::Stream::create();
  auto floor_pass = [&] {
    const auto* src = reinterpret_cast<const std::byte*>(x.data());
    auto* dst = reinterpret_cast<std::byte*>(y.data());
    for (std::size_t off = 0, k = 0; off < bytes; off += piece, ++k) {
      const std::size_t len = std::min(piece, bytes - off);
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(ring.data() + (k % 4) * piece, src + off, len, cudaMemcpyHostToDevice,
                                         in_s.get()));
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(dst + off, ring.data() + (4 + k % 4) * piece, len, cudaMemcpyDeviceToHost,
                                         out_s.get()));
    }
    CHUNKPIPE_CUDA_TRY(cudaStreamSynchronize(in_s.get()));
    CHUNKPIPE_CUDA_TRY(cudaStreamSynchronize(out_s.get()));
  };

  using chunkpipe::Options;
  auto map_pipe = chunkpipe::make_pipeline(Options{}, chunkpipe::map(Scale{}));
  auto scan_pipe = chunkpipe::make_pipeline(Options{}, chunkpipe::scan(0.0f, Plus{}));
  auto window_pipe = chunkpipe::make_pipeline(Options{.chunk_elems = 16384}, chunkpipe::scan(0.0f, Plus{}));
  const auto in = chunkpipe::pinned(x);
  const auto out = chunkpipe::pinned(y);

  // The hand scan.
  constexpr int slots = 3;
  constexpr std::size_t chunk = 8 * kMiB / 4;  // elements
  chunkpipe::DeviceBuffer din(slots * chunk * 4), dout(slots * chunk * 4), dcarry(sizeof(float));
  chunkpipe::Stream s[slots] = {chunkpipe::Stream::create(), chunkpipe::Stream::create(), chunkpipe::Stream::create()};
  chunkpipe::Event carried[slots] = {chunkpipe::Event::create(), chunkpipe::Event::create(), chunkpipe::Event::create()};
  std::size_t temp_bytes = 0;
  CHUNKPIPE_CUDA_TRY(cub::DeviceScan::InclusiveSum(nullptr, temp_bytes, static_cast<const float*>(nullptr),
                                                   static_cast<float*>(nullptr), static_cast<int>(chunk)));
  chunkpipe::DeviceBuffer temp[slots] = {chunkpipe::DeviceBuffer(temp_bytes), chunkpipe::DeviceBuffer(temp_bytes),
                                         chunkpipe::DeviceBuffer(temp_bytes)};
  auto* carry = reinterpret_cast<float*>(dcarry.data());
  auto hand_pass = [&] {
    CHUNKPIPE_CUDA_TRY(cudaMemsetAsync(carry, 0, sizeof(float), s[0].get()));
    CHUNKPIPE_CUDA_TRY(cudaEventRecord(carried[slots - 1].get(), s[0].get()));
    for (std::size_t k = 0, off = 0; off < n; ++k, off += chunk) {
      const std::size_t p = k % slots, len = std::min(chunk, n - off);
      float* i = reinterpret_cast<float*>(din.data()) + p * chunk;
      float* o = reinterpret_cast<float*>(dout.data()) + p * chunk;
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(i, x.data() + off, len * 4, cudaMemcpyHostToDevice, s[p].get()));
      std::size_t tb = temp_bytes;
      CHUNKPIPE_CUDA_TRY(cub::DeviceScan::InclusiveSum(temp[p].data(), tb, i, o, static_cast<int>(len), s[p].get()));
      // The carry of chunk k - 1, recorded on its stream.
      CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(s[p].get(), carried[(k + slots - 1) % slots].get(), 0));
      add_carry<<<1, 1024, 0, s[p].get()>>>(o, len, carry);
      CHUNKPIPE_CUDA_TRY(cudaGetLastError());
      CHUNKPIPE_CUDA_TRY(cudaEventRecord(carried[p].get(), s[p].get()));
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(y.data() + off, o, len * 4, cudaMemcpyDeviceToHost, s[p].get()));
    }
    for (auto& st : s) CHUNKPIPE_CUDA_TRY(cudaStreamSynchronize(st.get()));
  };

  std::vector<Row> rows;
  rows.push_back({"floor: in and out at once", floor_pass, [] { return std::string(); }});
  rows.push_back({"map default", [&] { map_pipe.run(in, out); }, map_check});
  rows.push_back({"scan default", [&] { scan_pipe.run(in, out); }, scan_check});
  rows.push_back({"scan 64KiB window", [&] { window_pipe.run(in, out); }, scan_check});
  rows.push_back({"hand scan: CUB per chunk, carry kernel", hand_pass, hand_check});

  auto verify = [](Row& r, const std::string& when) {
    const std::string why = r.check();
    if (why.empty()) return;
    ++r.failures;
    std::fprintf(stderr, "FAIL: %s, %s: %s\n", r.name.c_str(), when.c_str(), why.c_str());
  };
  for (Row& r : rows) {
    poison();
    r.pass();
    verify(r, "warm-up");
  }
  for (int round = 0; round < a.rounds; ++round) {
    for (std::size_t i = 0; i < rows.size(); ++i) {
      Row& r = rows[(i + static_cast<std::size_t>(round)) % rows.size()];
      poison();
      const auto t0 = example::Clock::now();
      r.pass();
      r.ms.push_back(example::ms_between(t0, example::Clock::now()));
      verify(r, "round " + std::to_string(round + 1));
    }
  }

  const double floor_ms = median_of(rows[0].ms);
  // GB/s over the link: bytes in plus bytes out.
  auto gbps = [&](double ms) { return 2.0 * static_cast<double>(bytes) / (ms * 1e6); };
  const double map_ms = median_of(rows[1].ms);
  std::printf("%-40s %10s %9s %9s %9s  %s\n", "row", "ms", "GB/s", "of floor", "of map", "check");
  FILE* fp = std::fopen(a.csv.c_str(), "w");
  if (fp) std::fprintf(fp, "row,ms,gbps,of_floor,of_map,ok\n");
  bool ok = fp != nullptr;
  for (const Row& r : rows) {
    const double ms = median_of(r.ms);
    const std::string check = &r == &rows[0] ? "(nothing to check)"
                              : (r.failures == 0 ? "ok, " : "FAILED " + std::to_string(r.failures) + " of ") +
                                    std::to_string(a.rounds + 1) + " passes";
    std::printf("%-40s %10.3f %9.2f %9.3f %9.3f  %s\n", r.name.c_str(), ms, gbps(ms), floor_ms / ms, map_ms / ms,
                check.c_str());
    if (fp) {
      std::fprintf(fp, "\"%s\",%.4f,%.3f,%.4f,%.4f,%d\n", r.name.c_str(), ms, gbps(ms), floor_ms / ms, map_ms / ms,
                   r.failures == 0);
    }
    ok = ok && r.failures == 0;
  }
  if (fp && std::fclose(fp) == 0) {
    std::printf("CSV: %s\n", a.csv.c_str());
  } else {
    std::fprintf(stderr, "scan_bench: cannot write %s\n", a.csv.c_str());
    ok = false;
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (const int rc = parse(argc, argv, a); rc >= 0) return rc;
  if (const int rc = example::require_gpu("benchmark"); rc != 0) return rc;
  try {
    return bench(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "scan_bench: %s\n", e.what());
    return EXIT_FAILURE;
  }
}
