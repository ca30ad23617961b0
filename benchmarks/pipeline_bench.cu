// SPDX-License-Identifier: MIT
//
// chunkpipe against the floor and against the pipelines people write by
// hand, in one run on one GPU.
//
// For every kernel intensity (chained FMAs per element) and chunk size it
// times, on the same pinned 1 GiB in and out:
//   hand-written, exactly as the seeds wrote them:
//     lesson naive         one stream, one buffer pair
//     lesson double buffer two streams, two buffer pairs
//     guide 3-stream       H2D / kernel / D2H streams chained with events,
//                          the whole array resident on the device
//   chunkpipe:
//     serial, slot_streams at depth 2..4, stage_streams at depth 1..4, 8
//     and 16, and auto (the default policy and depth at this window)
// plus, once per intensity, chunkpipe's untuned default (Options{}) with
// what its calibration decided, the cost of calibrating (a fresh default
// pipeline's first run against a fresh one fixed at one kernel lane, paired
// round by round), and the default at windows under 1 MiB (--small-kib).
//
// Every output is checked: the lesson's naive against the closed form,
// everything else bit for bit against it.
//
// Timing. Every pass starts on an idle GPU and is timed with CUDA events: one
// recorded on a timing stream just before the pass is issued, one after that
// stream has been made to wait for every stream the pass used (the
// hand-written schedules' own streams; a chunkpipe run through
// RunTicket::enqueue_wait). So both families are timed the same way, host
// issuing included, and nothing is added inside either schedule. At each
// sweep point every schedule is built and checked first (which warms it up),
// then timed in --runs rounds; each round runs every schedule once, starting
// one place later each round, so slow drifts of the machine (clocks, the
// link) fall on all schedules alike. Medians, min and max over the rounds;
// ratios between two schedules are medians of the per-round ratios. The
// guide's schedule is timed twice per round (the second as "guide 3-stream
// (again)"): how far apart two copies of one schedule land is the
// resolution a comparison at that point can claim.
//
// The floor comes from component passes measured in the same run (DESIGN.md):
//   floor = max(B_in/BW_h2d, B_out/BW_d2h, (B_in+B_out)/BW_both, K).
//
// Prints a table per intensity and the targets, and writes --csv and --svg
// (the chart: sweep_chart.hpp). `--plot-from CSV --svg OUT` only redraws the
// chart from a CSV an earlier run wrote, and needs no GPU (as does
// benchmarks/plot_sweep.cpp, which draws the same chart).
//
// The helpers every example and benchmark repeats (device check, command line, checks) are in
// examples/support.hpp.

#include <chunkpipe/pipeline.cuh>
#include <chunkpipe/simulate.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "event_clock.hpp"
#include "support.hpp"
#include "sweep_chart.hpp"

namespace {

using timing::EventClock;

constexpr std::size_t kMiB = std::size_t{1} << 20;

template <class T>
struct ChainedFma {
  int iters;
  __host__ __device__ T operator()(T y) const {
#ifdef __CUDA_ARCH__
#pragma unroll 16
#endif
    for (int k = 0; k < iters; ++k) y = fma(y, T(0.999), T(0.0625));
    return y;
  }
};

// The lesson's kernel shape: one thread per element, sized grid.
template <class T>
__global__ void transform_chunk(const T* in, T* out, std::size_t n, ChainedFma<T> f) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = f(in[i]);
}

template <class T>
void launch_chunk(const T* in, T* out, std::size_t n, ChainedFma<T> f, cudaStream_t s) {
  transform_chunk<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s>>>(in, out, n, f);
  CHUNKPIPE_CUDA_TRY(cudaGetLastError());
}

struct Args {
  std::size_t total_mib = 1024;
  std::vector<int> intensities{0, 512, 2048, 4096};
  std::vector<std::size_t> chunks_mib{1, 4, 16, 64, 256};
  std::vector<std::size_t> small_kib{64, 256};  // Map-only windows under 1 MiB, the default only
  int runs = 7;
  bool use_double = false;
  bool tune = true;
  std::string csv = "pipeline_bench.csv";
  std::string svg = "pipeline_bench.svg";
  std::string plot_from;  // a CSV to draw the chart from, instead of measuring
  std::string title;      // the chart's first line (--plot-from)
};

std::vector<long> parse_list(const char* s) {
  std::vector<long> v;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) v.push_back(std::strtol(item.c_str(), nullptr, 10));
  return v;
}

void usage() {
  std::printf(
      "pipeline_bench: chunkpipe against the floor and hand-written pipelines\n"
      "  --total-mib N         bytes per direction in MiB (default 1024; try 4096)\n"
      "  --intensity a,b,...   chained FMAs per element (default 0,512,2048,4096)\n"
      "  --chunk-mib a,b,...   chunk sizes in MiB (default 1,4,16,64,256)\n"
      "  --small-kib a,b,...   windows under 1 MiB timed for the default only (default\n"
      "                        64,256; 0: none)\n"
      "  --runs N              timing rounds per figure, medians kept (default 7)\n"
      "  --double              8-byte elements instead of float\n"
      "  --no-tune             skip the grain x depth table of the automatic policy\n"
      "  --csv PATH --svg PATH outputs (default pipeline_bench.csv/.svg)\n"
      "  --plot-from CSV       measure nothing: draw the chart (--svg) from a CSV this\n"
      "                        benchmark wrote; needs no GPU\n"
      "  --title TEXT          the chart's title with --plot-from\n");
}

bool parse(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&] { return example::next_value(argc, argv, i); };
    if (k == "--help" || k == "-h") {
      usage();
      return false;
    } else if (k == "--total-mib") {
      a.total_mib = std::strtoul(next(), nullptr, 10);
    } else if (k == "--intensity") {
      a.intensities.clear();
      for (long v : parse_list(next())) a.intensities.push_back(static_cast<int>(v));
    } else if (k == "--chunk-mib") {
      a.chunks_mib.clear();
      for (long v : parse_list(next())) a.chunks_mib.push_back(static_cast<std::size_t>(v));
    } else if (k == "--small-kib") {
      a.small_kib.clear();
      for (long v : parse_list(next())) {
        if (v > 0) a.small_kib.push_back(static_cast<std::size_t>(v));
      }
    } else if (k == "--runs") {
      a.runs = std::max(1, std::atoi(next()));
    } else if (k == "--no-tune") {
      a.tune = false;
    } else if (k == "--double") {
      a.use_double = true;
    } else if (k == "--csv") {
      a.csv = next();
    } else if (k == "--svg") {
      a.svg = next();
    } else if (k == "--plot-from") {
      a.plot_from = next();
    } else if (k == "--title") {
      a.title = next();
    } else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      usage();
      std::exit(2);
    }
  }
  if (a.total_mib == 0 || a.chunks_mib.empty() || a.intensities.empty()) {
    std::fprintf(stderr, "nothing to measure\n");
    std::exit(2);
  }
  return true;
}

using example::Timing;

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Row {
  int intensity;
  double chunk_mib;
  std::string schedule;
  std::string family;  // hand / chunkpipe / repeat (the guide timed again)
  int depth;
  Timing t;
  std::vector<double> rounds;  // ms of each round, in round order
  double floor_ms;
  double naive_ms;
  double enqueue_us_per_chunk;  // host time to issue one chunk
  double predicted_ms;          // the simulator's figure for this plan (-1: none)
};

/// Median over the rounds of a's time over b's, both from the same rounds.
double paired(const Row& a, const Row& b) {
  std::vector<double> r;
  for (std::size_t i = 0; i < a.rounds.size() && i < b.rounds.size(); ++i) r.push_back(a.rounds[i] / b.rounds[i]);
  return r.empty() ? a.t.median / b.t.median : median_of(r);
}

// Hand-written schedules, as the seeds wrote them. Each method only issues;
// join() makes a stream wait for everything issued.
template <class T>
struct Hand {
  std::size_t total, chunk;
  T* h_in;
  T* h_out;
  ChainedFma<T> f;
  chunkpipe::DeviceBuffer pairs;  // lesson: 2 pairs of (in, out) chunk buffers
  chunkpipe::DeviceBuffer whole;  // guide: the whole array
  chunkpipe::Stream s[3];
  chunkpipe::Event tail[3];
  std::vector<chunkpipe::Event> h2d_done, kernel_done;

  Hand(std::size_t total_, std::size_t chunk_, T* in, T* out, ChainedFma<T> f_)
      : total(total_), chunk(chunk_), h_in(in), h_out(out), f(f_), pairs(4 * chunk_ * sizeof(T)),
        whole(total_ * sizeof(T)) {
    for (auto& st : s) st = chunkpipe::Stream::create();
    for (auto& e : tail) e = chunkpipe::Event::create();
    const std::size_t chunks = count_chunks();
    for (std::size_t k = 0; k < chunks; ++k) {
      h2d_done.push_back(chunkpipe::Event::create());
      kernel_done.push_back(chunkpipe::Event::create());
    }
  }
  std::size_t count_chunks() const { return (total + chunk - 1) / chunk; }
  std::size_t n_of(std::size_t k) const { return std::min(chunk, total - k * chunk); }
  T* d_in(int p) const { return reinterpret_cast<T*>(pairs.data()) + (2 * p) * chunk; }
  T* d_out(int p) const { return reinterpret_cast<T*>(pairs.data()) + (2 * p + 1) * chunk; }
  void join(cudaStream_t waiter) {
    for (int q = 0; q < 3; ++q) {
      CHUNKPIPE_CUDA_TRY(cudaEventRecord(tail[q].get(), s[q].get()));
      CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(waiter, tail[q].get(), 0));
    }
  }

  void naive() {
    for (std::size_t k = 0; k < count_chunks(); ++k) {
      const std::size_t off = k * chunk, n = n_of(k);
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(d_in(0), h_in + off, n * sizeof(T), cudaMemcpyHostToDevice, s[0].get()));
      launch_chunk(d_in(0), d_out(0), n, f, s[0].get());
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(h_out + off, d_out(0), n * sizeof(T), cudaMemcpyDeviceToHost, s[0].get()));
    }
  }
  void double_buffer() {
    for (std::size_t k = 0; k < count_chunks(); ++k) {
      const int p = static_cast<int>(k & 1);
      const std::size_t off = k * chunk, n = n_of(k);
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(d_in(p), h_in + off, n * sizeof(T), cudaMemcpyHostToDevice, s[p].get()));
      launch_chunk(d_in(p), d_out(p), n, f, s[p].get());
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(h_out + off, d_out(p), n * sizeof(T), cudaMemcpyDeviceToHost, s[p].get()));
    }
  }
  void three_streams() {  // the overlap guide: in place, whole array resident
    T* d = reinterpret_cast<T*>(whole.data());
    for (std::size_t k = 0; k < count_chunks(); ++k) {
      const std::size_t off = k * chunk, n = n_of(k);
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(d + off, h_in + off, n * sizeof(T), cudaMemcpyHostToDevice, s[0].get()));
      CHUNKPIPE_CUDA_TRY(cudaEventRecord(h2d_done[k].get(), s[0].get()));
      CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(s[1].get(), h2d_done[k].get(), 0));
      launch_chunk(d + off, d + off, n, f, s[1].get());
      CHUNKPIPE_CUDA_TRY(cudaEventRecord(kernel_done[k].get(), s[1].get()));
      CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(s[2].get(), kernel_done[k].get(), 0));
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(h_out + off, d + off, n * sizeof(T), cudaMemcpyDeviceToHost, s[2].get()));
    }
  }
};

struct Components {
  double h2d, d2h, both, kernel;
  double copy_latency_us;  // fixed cost of one copy, from 1 MiB against 64 MiB copies
  std::vector<double> floor_rounds;  // the floor from each round's own passes
  std::vector<double> extra_rounds;  // the extra pass timed in each round (the default pipeline)
  double floor() const { return std::max({h2d, d2h, both, kernel}); }
  // The simulator's machine, from these passes over `bytes` each way.
  chunkpipe::Machine machine(double bytes, int engines) const {
    chunkpipe::Machine m;
    m.link.name = "measured";
    m.link.h2d_gbps = bytes / 1e9 / (h2d / 1e3);
    m.link.d2h_gbps = bytes / 1e9 / (d2h / 1e3);
    m.link.both_gbps = 2 * bytes / 1e9 / (both / 1e3);
    m.link.copy_engines = engines;
    m.link.latency_us = copy_latency_us;
    return m;
  }
};

// Component passes at 64 MiB copies (the link is saturated from 4 MiB up),
// in rounds like the sweep's, with `extra` (one timed pass of something to
// hold against the floor) in every round, so that the floor and what is
// measured against it see the same state of the machine.
template <class T>
Components components(const Args& a, EventClock& clock, std::size_t total, T* h_in, T* h_out, ChainedFma<T> f,
                      const std::function<double()>& extra) {
  const std::size_t chunk = std::min(total, 64 * kMiB / sizeof(T));
  Hand<T> h(total, chunk, h_in, h_out, f);
  const std::size_t chunks = h.count_chunks();
  const std::size_t small = std::min(total, kMiB / sizeof(T));
  const std::size_t n_small = (total + small - 1) / small;
  auto h2d = [&](cudaStream_t st) {
    for (std::size_t k = 0; k < chunks; ++k)
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(h.d_in(static_cast<int>(k & 1)), h_in + k * chunk, h.n_of(k) * sizeof(T),
                                         cudaMemcpyHostToDevice, st));
  };
  auto d2h = [&](cudaStream_t st) {
    for (std::size_t k = 0; k < chunks; ++k)
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(h_out + k * chunk, h.d_out(static_cast<int>(k & 1)), h.n_of(k) * sizeof(T),
                                         cudaMemcpyDeviceToHost, st));
  };
  // The same bytes in 1 MiB copies: the difference is the per-copy cost
  // the simulator needs for small chunks.
  auto h2d_small = [&] {
    for (std::size_t k = 0; k < n_small; ++k)
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(h.d_in(static_cast<int>(k & 1)), h_in + k * small,
                                         std::min(small, total - k * small) * sizeof(T), cudaMemcpyHostToDevice,
                                         h.s[0].get()));
  };
  auto kernel = [&] {
    for (std::size_t k = 0; k < chunks; ++k) launch_chunk(h.d_in(0), h.d_out(0), h.n_of(k), f, h.s[0].get());
  };
  auto both = [&] {
    h2d(h.s[0].get());
    d2h(h.s[1].get());
  };
  const std::function<void()> passes[] = {[&] { h2d(h.s[0].get()); }, [&] { d2h(h.s[0].get()); }, both, h2d_small,
                                          kernel};
  auto time = [&](const std::function<void()>& issue) {
    return clock.time(issue, [&](cudaStream_t w) { h.join(w); });
  };
  for (const auto& p : passes) time(p);  // warm-up
  if (extra) extra();
  std::vector<double> t[5];
  Components c{};
  for (int r = 0; r < a.runs; ++r) {
    for (int i = 0; i < 5; ++i) t[i].push_back(time(passes[i]));
    c.floor_rounds.push_back(std::max({t[0].back(), t[1].back(), t[2].back(), t[4].back()}));
    if (extra) c.extra_rounds.push_back(extra());
  }
  c.h2d = median_of(t[0]);
  c.d2h = median_of(t[1]);
  c.both = median_of(t[2]);
  c.kernel = median_of(t[4]);
  const double t_small = median_of(t[3]);
  c.copy_latency_us =
      n_small > chunks ? std::max(0.0, (t_small - c.h2d) * 1e3 / static_cast<double>(n_small - chunks)) : 0.0;
  return c;
}

template <class T>
std::size_t first_mismatch_closed_form(const T* got, const T* in, std::size_t n, int iters) {
  const double a = static_cast<double>(T(0.999)), scale = std::pow(a, iters);
  const double offset = static_cast<double>(T(0.0625)) * (1.0 - scale) / (1.0 - a);
  for (std::size_t i = 0; i < n; ++i) {
    const double want = scale * static_cast<double>(in[i]) + offset;
    if (!(std::fabs(static_cast<double>(got[i]) - want) <= 1e-4 * std::fabs(want) + 1e-6)) return i;
  }
  return n;
}

template <class T>
void check_same(const char* what, const T* got, const std::vector<T>& want, std::size_t chunk) {
  if (std::memcmp(got, want.data(), want.size() * sizeof(T)) == 0) return;
  std::size_t i = 0;
  while (std::memcmp(&got[i], &want[i], sizeof(T)) == 0) ++i;
  std::fprintf(stderr, "FAIL: %s differs from the lesson's naive at i=%zu (chunk %zu)\n", what, i, i / chunk);
  std::exit(EXIT_FAILURE);
}

template <class T>
int bench(const Args& a, int engines) {
  using Pipe = chunkpipe::ChunkedPipeline<chunkpipe::Map<ChainedFma<T>>>;
  const std::size_t total = a.total_mib * kMiB / sizeof(T);
  chunkpipe::PinnedBuffer in_buf(total * sizeof(T)), out_buf(total * sizeof(T));
  T* h_in = reinterpret_cast<T*>(in_buf.data());
  T* h_out = reinterpret_cast<T*>(out_buf.data());
  for (std::size_t i = 0; i < total; ++i) h_in[i] = static_cast<T>(static_cast<double>(i % 4093) / 4093.0 - 0.5);
  auto in = chunkpipe::pinned(chunkpipe::host_span(h_in, total));
  auto out = chunkpipe::pinned(chunkpipe::host_span(h_out, total));

  EventClock clock;
  std::vector<Row> rows;
  std::map<int, Components> comps;
  std::map<int, Timing> defaults;
  std::map<int, double> default_enqueue, default_eff;
  struct CalibrationCost {
    int iters;
    std::vector<double> calibrating, fixed;  // first runs' ms
    double cost;                             // median paired ratio - 1
  };
  std::vector<CalibrationCost> calibrations;
  struct Small {
    int iters;
    std::size_t kib;
    Timing t;
    double floor_ms;
  };
  std::vector<Small> small;
  for (int iters : a.intensities) {
    const ChainedFma<T> f{iters};
    // chunkpipe's untuned default, checked, then timed in the component
    // passes' rounds: its efficiency is each round's floor over its time.
    Pipe def(chunkpipe::Options{}, chunkpipe::Map<ChainedFma<T>>{f});
    example::poison(h_out, total);
    def.run(in, out);
    if (const std::size_t bad = first_mismatch_closed_form(h_out, h_in, total, iters); bad != total) {
      std::fprintf(stderr, "FAIL: chunkpipe default wrong at i=%zu\n", bad);
      return EXIT_FAILURE;
    }
    std::vector<double> issue;
    const Components c = components(a, clock, total, h_in, h_out, f, [&] {
      double us = 0;
      const double ms = clock.run(def, in, out, &us);
      issue.push_back(us);
      return ms;
    });
    comps[iters] = c;
    std::printf("\n== intensity %d FMAs/element: h2d %.2f  d2h %.2f  both %.2f  kernel %.2f ms  -> floor %.2f ms"
                " (per-copy cost %.2f us)\n",
                iters, c.h2d, c.d2h, c.both, c.kernel, c.floor(), c.copy_latency_us);
    {
      std::vector<double> eff;
      for (std::size_t r = 0; r < c.floor_rounds.size(); ++r) eff.push_back(c.floor_rounds[r] / c.extra_rounds[r]);
      defaults[iters] = example::summarise(c.extra_rounds);
      default_eff[iters] = median_of(eff);
      default_enqueue[iters] = median_of(issue) / static_cast<double>(def.plan_for(total).chunks);
      std::printf("   chunkpipe default (Options{}): %.3f ms, efficiency %.3f (median of per-round floor / time), "
                  "issue %.1f us/chunk\n",
                  defaults[iters].median, default_eff[iters], default_enqueue[iters]);
      const std::optional<chunkpipe::Decision> d = def.decision();
      std::printf("   its calibration: %s\n", d ? d->why.c_str() : "none (nothing decided)");
    }
    {
      // What calibrating costs: a fresh default pipeline's first run (the
      // one that times its first chunks) against a fresh one fixed at one
      // lane, which times nothing; both allocate their slots in that run.
      std::vector<double> ratio;
      CalibrationCost cal{iters, {}, {}, 0.0};
      for (int r = 0; r < std::max(15, a.runs); ++r) {  // fresh pipelines vary: many pairs
        Pipe calibrating(chunkpipe::Options{}, chunkpipe::Map<ChainedFma<T>>{f});
        Pipe fixed(chunkpipe::Options{.kernel_lanes = 1}, chunkpipe::Map<ChainedFma<T>>{f});
        double c_ms = 0, f_ms = 0;
        if (r % 2 == 0) {
          c_ms = clock.run(calibrating, in, out);
          f_ms = clock.run(fixed, in, out);
        } else {
          f_ms = clock.run(fixed, in, out);
          c_ms = clock.run(calibrating, in, out);
        }
        cal.calibrating.push_back(c_ms);
        cal.fixed.push_back(f_ms);
        ratio.push_back(c_ms / f_ms);
      }
      cal.cost = median_of(ratio) - 1.0;
      std::printf("   calibration: first run of a fresh default pipeline %.3f ms, of one fixed at 1 lane %.3f ms: "
                  "%+.2f%% (median of %zu paired rounds)\n",
                  median_of(cal.calibrating), median_of(cal.fixed), 100 * cal.cost, ratio.size());
      calibrations.push_back(cal);
    }
    for (std::size_t kib : a.small_kib) {
      // Windows under 1 MiB, Map only: the default with the window set.
      Pipe pipe(chunkpipe::Options{.chunk_elems = kib * 1024 / sizeof(T)}, chunkpipe::Map<ChainedFma<T>>{f});
      example::poison(h_out, total);
      pipe.run(in, out);
      if (const std::size_t bad = first_mismatch_closed_form(h_out, h_in, total, iters); bad != total) {
        std::fprintf(stderr, "FAIL: chunkpipe at a %zu KiB window wrong at i=%zu\n", kib, bad);
        return EXIT_FAILURE;
      }
      const Timing t = clock.passes(a.runs, [&] { return clock.run(pipe, in, out); });
      small.push_back({iters, kib, t, c.floor()});
      std::printf("   %zu KiB window, default: %.3f ms, %.3f of the floor (unit %zu KiB)\n", kib, t.median,
                  c.floor() / t.median, pipe.geometry().chunk_elems * sizeof(T) / 1024);
    }

    std::printf("%9s %-24s %9s %9s %9s %7s %8s %9s %7s %8s\n", "chunk", "schedule", "median", "min", "max", "eff",
                "vs naive", "predicted", "error", "issue/ch");
    for (std::size_t cm : a.chunks_mib) {
      const std::size_t chunk = std::min(total, cm * kMiB / sizeof(T));
      const std::size_t chunks = (total + chunk - 1) / chunk;
      Hand<T> h(total, chunk, h_in, h_out, f);
      example::poison(h_out, total);
      h.naive();
      CHUNKPIPE_CUDA_TRY(cudaDeviceSynchronize());
      if (const std::size_t bad = first_mismatch_closed_form(h_out, h_in, total, iters); bad != total) {
        std::fprintf(stderr, "FAIL: lesson naive wrong at i=%zu (chunk %zu)\n", bad, bad / chunk);
        return EXIT_FAILURE;
      }
      const std::vector<T> want(h_out, h_out + total);

      // Every schedule at this point, built and checked before any is timed.
      struct Contender {
        std::string name, family;
        int depth;
        std::function<double(double*)> pass;  // one timed pass; the host's issue time in us
        std::size_t chunks;                   // chunks it issues (for the issue cost per chunk)
        double predicted = -1;
        std::vector<double> ms, issue_us;
      };
      std::vector<Contender> cs;
      auto hand = [&](const char* name, const char* family, int depth, void (Hand<T>::*issue)()) {
        cs.push_back({name, family, depth, [&h, &clock, issue](double* us) {
                        return clock.time([&] { (h.*issue)(); }, [&](cudaStream_t w) { h.join(w); }, us);
                      }, chunks, -1, {}, {}});
      };
      hand("lesson naive", "hand", 1, &Hand<T>::naive);
      hand("lesson double buffer", "hand", 2, &Hand<T>::double_buffer);
      hand("guide 3-stream", "hand", 1, &Hand<T>::three_streams);
      hand("guide 3-stream (again)", "repeat", 1, &Hand<T>::three_streams);

      struct Cfg {
        const char* name;
        chunkpipe::Policy policy;
        int depth;
        int lanes = 0;  // Options::kernel_lanes
      };
      const Cfg cfgs[] = {{"cp serial", chunkpipe::Policy::serial, 1},
                          {"cp slot_streams d2", chunkpipe::Policy::slot_streams, 2},
                          {"cp slot_streams d3", chunkpipe::Policy::slot_streams, 3},
                          {"cp slot_streams d4", chunkpipe::Policy::slot_streams, 4},
                          {"cp stage_streams d1", chunkpipe::Policy::stage_streams, 1},
                          {"cp stage_streams d2", chunkpipe::Policy::stage_streams, 2},
                          {"cp stage_streams d3", chunkpipe::Policy::stage_streams, 3},
                          {"cp stage_streams d4", chunkpipe::Policy::stage_streams, 4},
                          {"cp stage_streams d8", chunkpipe::Policy::stage_streams, 8},
                          {"cp stage_streams d16", chunkpipe::Policy::stage_streams, 16},
                          {"cp stage_streams d3 lanes 2", chunkpipe::Policy::stage_streams, 3, 2},
                          {"cp stage_streams d4 lanes 2", chunkpipe::Policy::stage_streams, 4, 2},
                          {"cp stage_streams d4 lanes 3", chunkpipe::Policy::stage_streams, 4, 3},
                          {"cp auto lanes 2", chunkpipe::Policy::automatic, chunkpipe::default_depth, 2},
                          {"cp auto lanes 3", chunkpipe::Policy::automatic, chunkpipe::default_depth, 3},
                          {"cp auto", chunkpipe::Policy::automatic, chunkpipe::default_depth}};
      const chunkpipe::Machine machine = c.machine(static_cast<double>(total * sizeof(T)), engines);
      std::vector<std::unique_ptr<Pipe>> pipes;
      for (const Cfg& cfg : cfgs) {
        // On streams: the schedules as planned, op by op (graphs_bench
        // measures the graph executor).
        const chunkpipe::Options o{.chunk_elems = chunk, .depth = cfg.depth, .policy = cfg.policy,
                                   .executor = chunkpipe::Executor::streams, .kernel_lanes = cfg.lanes};
        pipes.push_back(std::make_unique<Pipe>(o, chunkpipe::Map<ChainedFma<T>>{f}));
        Pipe* pipe = pipes.back().get();
        const chunkpipe::Plan plan = pipe->plan_for(total);
        const chunkpipe::Workload w{total, pipe->geometry().chunk_elems, sizeof(T), sizeof(T),
                                    {c.kernel * 1e6 / static_cast<double>(total)}};
        cs.push_back({cfg.name, "chunkpipe", cfg.depth,
                      [pipe, &clock, &in, &out](double* us) { return clock.run(*pipe, in, out, us); }, plan.chunks,
                      chunkpipe::makespan_ms(chunkpipe::simulate(plan, w, machine)), {}, {}});
      }
      for (Contender& x : cs) {  // checked (and warmed up) on a poisoned output
        example::poison(h_out, total);
        x.pass(nullptr);
        check_same(x.name.c_str(), h_out, want, chunk);
      }
      for (int r = 0; r < a.runs; ++r) {
        for (std::size_t i = 0; i < cs.size(); ++i) {
          Contender& x = cs[(i + static_cast<std::size_t>(r)) % cs.size()];
          double us = 0;
          x.ms.push_back(x.pass(&us));
          x.issue_us.push_back(us);
        }
      }
      const double naive_ms = example::summarise(cs.front().ms).median;
      for (const Contender& x : cs) {
        const Timing t = example::summarise(x.ms);
        const double issue = median_of(x.issue_us) / static_cast<double>(x.chunks);
        rows.push_back({iters, static_cast<double>(cm), x.name, x.family, x.depth, t, x.ms, c.floor(), naive_ms, issue,
                        x.predicted});
        std::printf("%5zu MiB %-24s %9.3f %9.3f %9.3f %7.3f %7.2fx", cm, x.name.c_str(), t.median, t.min, t.max,
                    c.floor() / t.median, naive_ms / t.median);
        if (x.predicted > 0) {
          std::printf(" %9.3f %+6.1f%%", x.predicted, 100 * (x.predicted - t.median) / t.median);
        } else {
          std::printf(" %9s %7s", "", "");
        }
        std::printf(" %6.1fus\n", issue);
      }
      // Host cost of issuing a chunk against the time the chunk's copy in takes.
      const double copy_us = c.h2d * 1e3 * static_cast<double>(chunk) / static_cast<double>(total);
      auto issue_of = [&](const char* name) {
        for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
          if (it->schedule == name) return it->enqueue_us_per_chunk;
        }
        return -1.0;
      };
      std::printf("%9s issue cost per chunk: guide %.1f us, stage_streams d3 %.1f us, auto %.1f us; one chunk's copy in "
                  "takes %.1f us\n",
                  "", issue_of("guide 3-stream"), issue_of("cp stage_streams d3"), issue_of("cp auto"), copy_us);
    }
  }

  // Defaults: the automatic policy at the lesson's 64 MiB window, across
  // grains and depths, so the library's defaults rest on this run.
  struct Tuning {
    int iters;
    std::size_t grain_kib;
    int depth;
    Timing t;
    double floor_ms;
  };
  std::vector<Tuning> tuning;
  if (a.tune) {
    std::printf("\n== defaults: automatic policy at a 64 MiB window (grain x depth)\n%6s %9s %6s %9s %7s\n", "FMAs",
                "grain", "depth", "median", "eff");
    const std::size_t window = std::min(total, 64 * kMiB / sizeof(T));
    for (int iters : a.intensities) {
      if (iters != 0 && iters != 512 && iters != 2048) continue;
      const ChainedFma<T> f{iters};
      for (std::size_t grain_kib : {1024, 2048, 4096, 8192, 16384, 65536}) {
        for (int depth : {2, 3, 4}) {
          Pipe pipe({.chunk_elems = window, .depth = depth, .grain_elems = grain_kib * 1024 / sizeof(T)},
                    chunkpipe::Map<ChainedFma<T>>{f});
          const Timing t = clock.passes(a.runs, [&] { return clock.run(pipe, in, out); });
          tuning.push_back({iters, grain_kib, depth, t, comps[iters].floor()});
          std::printf("%6d %6zu KiB %6d %9.3f %7.3f\n", iters, grain_kib, depth, t.median,
                      comps[iters].floor() / t.median);
        }
      }
    }
  }

  // CSV: every figure of the run.
  {
    std::ofstream csv(a.csv);
    csv << "elem_bytes,total_mib,intensity,chunk_mib,schedule,family,depth,median_ms,min_ms,max_ms,floor_ms,"
           "efficiency,speedup_vs_naive,issue_us_per_chunk,predicted_ms\n";
    for (const Row& r : rows) {
      csv << sizeof(T) << ',' << a.total_mib << ',' << r.intensity << ',' << r.chunk_mib << ',' << r.schedule << ','
          << r.family << ',' << r.depth << ',' << r.t.median << ',' << r.t.min << ',' << r.t.max << ','
          << r.floor_ms << ',' << r.floor_ms / r.t.median << ',' << r.naive_ms / r.t.median << ','
          << r.enqueue_us_per_chunk << ',' << r.predicted_ms << '\n';
    }
    for (const auto& [iters, t] : defaults) {
      csv << sizeof(T) << ',' << a.total_mib << ',' << iters << ",default,cp default (Options{}),chunkpipe,"
          << chunkpipe::default_depth << ',' << t.median << ',' << t.min << ',' << t.max << ','
          << comps[iters].floor() << ',' << default_eff[iters] << ",," << default_enqueue[iters]
          << ",-1\n";
    }
    for (const CalibrationCost& k : calibrations) {
      csv << sizeof(T) << ',' << a.total_mib << ',' << k.iters << ",first run,cp default first run (calibrating),"
          << "calibration," << chunkpipe::default_depth << ',' << median_of(k.calibrating) << ",,,"
          << comps[k.iters].floor() << ",,,,-1\n";
      csv << sizeof(T) << ',' << a.total_mib << ',' << k.iters << ",first run,cp first run (1 lane fixed),"
          << "calibration," << chunkpipe::default_depth << ',' << median_of(k.fixed) << ",,,"
          << comps[k.iters].floor() << ",,,,-1\n";
    }
    for (const Small& w : small) {
      csv << sizeof(T) << ',' << a.total_mib << ',' << w.iters << ',' << static_cast<double>(w.kib) / 1024.0
          << ",cp auto,small," << chunkpipe::default_depth << ',' << w.t.median << ',' << w.t.min << ',' << w.t.max
          << ',' << w.floor_ms << ',' << w.floor_ms / w.t.median << ",,,-1\n";
    }
    for (const Tuning& u : tuning) {
      csv << sizeof(T) << ',' << a.total_mib << ',' << u.iters << ",64,cp auto grain " << u.grain_kib << " KiB,tuning,"
          << u.depth << ',' << u.t.median << ',' << u.t.min << ',' << u.t.max << ',' << u.floor_ms << ','
          << u.floor_ms / u.t.median << ",,,-1\n";
    }
    if (!csv) std::fprintf(stderr, "warning: could not write %s\n", a.csv.c_str());
  }

  // SVG: the chart (sweep_chart.hpp), from the same rows; plot_sweep and
  // --plot-from draw it again from the CSV.
  {
    std::vector<sweep_chart::Row> chart;
    for (const Row& r : rows) {
      chart.push_back({r.intensity, r.chunk_mib, r.schedule, r.family, r.depth, r.t.median, r.t.min, r.t.max,
                       r.floor_ms});
    }
    sweep_chart::Info info;
    info.elem_bytes = static_cast<int>(sizeof(T));
    info.total_mib = static_cast<double>(a.total_mib);
    std::ofstream svg(a.svg);
    svg << sweep_chart::svg(chart, info);
    if (!svg) std::fprintf(stderr, "warning: could not write %s\n", a.svg.c_str());
  }

  // The targets (issue: benchmarks against the floor), from this run.
  auto find = [&](int iters, double cm, const std::string& name) -> const Row* {
    for (const Row& r : rows) {
      if (r.intensity == iters && r.chunk_mib == cm && r.schedule == name) return &r;
    }
    return nullptr;
  };
  std::printf("\n== targets (this run; ratios are medians of per-round ratios)\n");
  bool t1 = true;
  for (const auto& [iters, t] : defaults) {
    const double eff = default_eff[iters];
    t1 = t1 && eff >= 0.95;
    std::printf("1. default efficiency at %4d FMAs: %.3f (target >= 0.95)\n", iters, eff);
  }
  std::printf("   -> %s\n", t1 ? "met" : "MISSED");
  for (int iters : {512, 2048}) {
    const Row* lesson = find(iters, 64, "lesson double buffer");
    const Row* def = find(iters, 64, "cp auto");
    if (lesson && def) {
      const double need = iters == 512 ? 1.08 : 1.3;
      const double got = paired(*lesson, *def);
      std::printf("2. 64 MiB window, %d FMAs: default %.3f ms vs lesson double buffer %.3f ms: %.3fx (target >= %.2fx) %s\n",
                  iters, def->t.median, lesson->t.median, got, need, got >= need ? "met" : "MISSED");
    }
  }
  std::vector<double> ratios3;
  for (const Row& r : rows) {
    if (r.schedule != "cp slot_streams d2") continue;
    if (const Row* hand = find(r.intensity, r.chunk_mib, "lesson double buffer")) ratios3.push_back(paired(r, *hand) - 1.0);
  }
  if (!ratios3.empty()) {
    const double worst3 = *std::max_element(ratios3.begin(), ratios3.end());
    std::printf("3. chunkpipe slot_streams d2 vs hand-written double buffer: worst %+.2f%%, median %+.2f%% over %zu points "
                "(target within 2%%) %s\n",
                100 * worst3, 100 * median_of(ratios3), ratios3.size(), worst3 <= 0.02 ? "met" : "MISSED");
  }
  // Target 4: the fastest of each family by median, compared round by round.
  // "tie" means the gap is within what the guide's schedule timed twice
  // showed at that point (the resolution); only a gap beyond it is a miss.
  int ahead = 0, ties = 0, behind = 0;
  for (int iters : a.intensities) {
    for (std::size_t cm : a.chunks_mib) {
      const Row* best_hand = nullptr;
      const Row* best_cp = nullptr;
      for (const Row& r : rows) {
        if (r.intensity != iters || r.chunk_mib != static_cast<double>(cm)) continue;
        if (r.family == "repeat") continue;
        const Row*& best = r.family == "hand" ? best_hand : best_cp;
        if (!best || r.t.median < best->t.median) best = &r;
      }
      const Row* guide = find(iters, static_cast<double>(cm), "guide 3-stream");
      const Row* again = find(iters, static_cast<double>(cm), "guide 3-stream (again)");
      if (!best_hand || !best_cp || !guide || !again) continue;
      const double ratio = paired(*best_cp, *best_hand);
      const double resolution = std::fabs(again->t.median / guide->t.median - 1.0);
      const char* verdict = ratio <= 1.0 ? "faster" : ratio - 1.0 <= resolution ? "tie" : "SLOWER";
      (ratio <= 1.0 ? ahead : ratio - 1.0 <= resolution ? ties : behind) += 1;
      std::printf("4. %4d FMAs, %3zu MiB: best chunkpipe %-20s %8.3f ms, best hand-written %-20s %8.3f ms: %+.2f%% "
                  "(resolution %.2f%%) %s\n",
                  iters, cm, best_cp->schedule.c_str(), best_cp->t.median, best_hand->schedule.c_str(),
                  best_hand->t.median, 100 * (ratio - 1.0), 100 * resolution, verdict);
    }
  }
  std::printf("   -> faster at %d points, tied within resolution at %d, slower at %d: %s\n", ahead, ties, behind,
              behind == 0 ? "met" : "MISSED");
  // The automatic policy's grid: the default with only the window set ("cp
  // auto") against the floor and against the best fixed schedule there
  // (any explicit policy, depth and lane count this sweep ran).
  std::printf("\n== the default with the window set, against the floor and the best fixed schedule\n");
  // A point is judged only where the machine held still: the guide's
  // schedule timed twice there within 1% (the resolution), and the default
  // not above the floor (which would mean the floor's own passes were the
  // disturbed ones). Slower than the best fixed counts beyond 2% plus the
  // resolution, as target 4 does.
  std::printf("%6s %7s %11s %7s  %-28s %9s %12s %6s\n", "FMAs", "window", "default ms", "/floor", "best fixed", "ms",
              "default/best", "res");
  int grid_points = 0, judged = 0, under_floor_goal = 0, over_best = 0;
  for (int iters : a.intensities) {
    for (std::size_t cm : a.chunks_mib) {
      const Row* def = find(iters, static_cast<double>(cm), "cp auto");
      const Row* best = nullptr;
      for (const Row& r : rows) {
        if (r.intensity != iters || r.chunk_mib != static_cast<double>(cm) || r.family != "chunkpipe") continue;
        if (r.schedule.rfind("cp auto", 0) == 0) continue;  // the automatic policy's own variants
        if (!best || r.t.median < best->t.median) best = &r;
      }
      if (!def || !best) continue;
      ++grid_points;
      const Row* guide = find(iters, static_cast<double>(cm), "guide 3-stream");
      const Row* again = find(iters, static_cast<double>(cm), "guide 3-stream (again)");
      const double res = guide && again ? std::fabs(again->t.median / guide->t.median - 1.0) : 0.0;
      const double eff = def->floor_ms / def->t.median, vs_best = paired(*def, *best);
      const bool still = res <= 0.01 && eff <= 1.005;
      judged += still ? 1 : 0;
      under_floor_goal += still && eff < 0.97 ? 1 : 0;
      over_best += vs_best - 1.02 > res ? 1 : 0;
      std::printf("%6d %4zu MiB %11.3f %7.3f  %-28s %9.3f %12.3f %5.1f%%%s\n", iters, cm, def->t.median, eff,
                  best->schedule.c_str(), best->t.median, vs_best, 100 * res, still ? "" : "  (noisy: not judged)");
    }
  }
  std::printf("   -> default below 0.97 of the floor at %d of the %d of %d points the machine held still for; more "
              "than 2%% slower than the best fixed, beyond the resolution, at %d\n",
              under_floor_goal, judged, grid_points, over_best);
  if (!small.empty()) {
    int under = 0;
    for (const Small& w : small) {
      const double eff = w.floor_ms / w.t.median;
      under += eff < 0.95 ? 1 : 0;
      std::printf("%6d %4zu KiB %11.3f %7.3f  (Map only, window under 1 MiB)\n", w.iters, w.kib, w.t.median, eff);
    }
    std::printf("   -> windows under 1 MiB below 0.95 of the floor at %d of %zu points\n", under, small.size());
  }
  for (const CalibrationCost& k : calibrations) {
    std::printf("calibration cost at %4d FMAs: %+.2f%% of a first run (target <= 2%%) %s\n", k.iters, 100 * k.cost,
                k.cost <= 0.02 ? "met" : "MISSED");
  }
  std::vector<double> errors;
  for (const Row& r : rows) {
    if (r.predicted_ms > 0) errors.push_back(std::fabs(r.predicted_ms - r.t.median) / r.t.median);
  }
  if (!errors.empty()) {
    std::sort(errors.begin(), errors.end());
    const auto within = std::count_if(errors.begin(), errors.end(), [](double e) { return e <= 0.10; });
    std::printf("simulator vs measured, %zu chunkpipe runs: median error %.1f%%, worst %.1f%%, %ld within 10%%\n",
                errors.size(), 100 * errors[errors.size() / 2], 100 * errors.back(), static_cast<long>(within));
  }
  std::printf("wrote %s and %s\n", a.csv.c_str(), a.svg.c_str());
  return EXIT_SUCCESS;
}

// --plot-from: the chart of an earlier run, from its CSV.
int plot_from(const Args& a) {
  std::ifstream in(a.plot_from);
  if (!in) {
    std::fprintf(stderr, "error: cannot read %s\n", a.plot_from.c_str());
    return EXIT_FAILURE;
  }
  std::vector<sweep_chart::Row> rows;
  sweep_chart::Info info;
  std::string error;
  if (!sweep_chart::read_csv(in, rows, info, error)) {
    std::fprintf(stderr, "error: %s: %s\n", a.plot_from.c_str(), error.c_str());
    return EXIT_FAILURE;
  }
  info.title = a.title;
  const std::size_t slash = a.plot_from.find_last_of('/');
  info.source = slash == std::string::npos ? a.plot_from : a.plot_from.substr(slash + 1);
  std::ofstream svg(a.svg);
  svg << sweep_chart::svg(rows, info);
  if (!svg) {
    std::fprintf(stderr, "error: cannot write %s\n", a.svg.c_str());
    return EXIT_FAILURE;
  }
  std::printf("wrote %s from %zu rows of %s\n", a.svg.c_str(), rows.size(), a.plot_from.c_str());
  return EXIT_SUCCESS;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, a)) return 0;
  if (!a.plot_from.empty()) return plot_from(a);
  if (const int status = example::require_gpu("benchmark"); status != 0) return status;
  try {
    const cudaDeviceProp prop = example::current_gpu();  // device 0, the default
    int driver = 0;
    CHUNKPIPE_CUDA_TRY(cudaDriverGetVersion(&driver));
    std::printf("GPU: %s, %d SMs, asyncEngineCount %d, driver API %d\n", prop.name, prop.multiProcessorCount,
                prop.asyncEngineCount, driver);
    return a.use_double ? bench<double>(a, prop.asyncEngineCount) : bench<float>(a, prop.asyncEngineCount);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return EXIT_FAILURE;
  }
}
