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
// plus, once per intensity, chunkpipe's untuned default (Options{}).
//
// Every output is checked: the lesson's naive against the closed form,
// everything else bit for bit against it. Times are wall-clock medians of
// --runs passes after a warm-up; each pass ends with the GPU idle. The floor
// comes from component passes measured in the same run (DESIGN.md):
//   floor = max(B_in/BW_h2d, B_out/BW_d2h, (B_in+B_out)/BW_both, K).
//
// Prints a table per intensity and the targets, and writes --csv and --svg.
//
// The helpers every example and benchmark repeats (device check, command line, timing, checks) are in
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
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "support.hpp"

namespace {

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
  int runs = 5;
  bool use_double = false;
  bool tune = true;
  std::string csv = "pipeline_bench.csv";
  std::string svg = "pipeline_bench.svg";
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
      "  --runs N              timed passes per figure, median kept (default 5)\n"
      "  --double              8-byte elements instead of float\n"
      "  --no-tune             skip the grain x depth table of the automatic policy\n"
      "  --csv PATH --svg PATH outputs (default pipeline_bench.csv/.svg)\n");
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

// Every figure: a warm-up, then `runs` passes, each leaving the GPU idle;
// their median, min and max.
using example::Timing;
using example::time_passes;

struct Row {
  int intensity;
  double chunk_mib;
  std::string schedule;
  std::string family;  // hand / chunkpipe
  int depth;
  Timing t;
  double floor_ms;
  double naive_ms;
  double enqueue_us_per_chunk;  // host time to issue one chunk (-1: not measured)
  double predicted_ms;          // the simulator's figure for this plan (-1: none)
};

// Hand-written schedules, as the seeds wrote them.
template <class T>
struct Hand {
  std::size_t total, chunk;
  T* h_in;
  T* h_out;
  ChainedFma<T> f;
  chunkpipe::DeviceBuffer pairs;  // lesson: 2 pairs of (in, out) chunk buffers
  chunkpipe::DeviceBuffer whole;  // guide: the whole array
  chunkpipe::Stream s[3];
  std::vector<chunkpipe::Event> h2d_done, kernel_done;

  Hand(std::size_t total_, std::size_t chunk_, T* in, T* out, ChainedFma<T> f_)
      : total(total_), chunk(chunk_), h_in(in), h_out(out), f(f_), pairs(4 * chunk_ * sizeof(T)),
        whole(total_ * sizeof(T)) {
    for (auto& st : s) st = chunkpipe::Stream::create();
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
  void sync() {
    for (auto& st : s) CHUNKPIPE_CUDA_TRY(cudaStreamSynchronize(st.get()));
  }

  void naive() {
    for (std::size_t k = 0; k < count_chunks(); ++k) {
      const std::size_t off = k * chunk, n = n_of(k);
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(d_in(0), h_in + off, n * sizeof(T), cudaMemcpyHostToDevice, s[0].get()));
      launch_chunk(d_in(0), d_out(0), n, f, s[0].get());
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(h_out + off, d_out(0), n * sizeof(T), cudaMemcpyDeviceToHost, s[0].get()));
    }
    sync();
  }
  void double_buffer() {
    for (std::size_t k = 0; k < count_chunks(); ++k) {
      const int p = static_cast<int>(k & 1);
      const std::size_t off = k * chunk, n = n_of(k);
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(d_in(p), h_in + off, n * sizeof(T), cudaMemcpyHostToDevice, s[p].get()));
      launch_chunk(d_in(p), d_out(p), n, f, s[p].get());
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(h_out + off, d_out(p), n * sizeof(T), cudaMemcpyDeviceToHost, s[p].get()));
    }
    sync();
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
    sync();
  }
};

struct Components {
  double h2d, d2h, both, kernel;
  double copy_latency_us;  // fixed cost of one copy, from 1 MiB against 64 MiB copies
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

// Component passes at 64 MiB copies (the link is saturated from 4 MiB up).
template <class T>
Components components(const Args& a, std::size_t total, T* h_in, T* h_out, ChainedFma<T> f) {
  const std::size_t chunk = std::min(total, 64 * kMiB / sizeof(T));
  Hand<T> h(total, chunk, h_in, h_out, f);
  const std::size_t chunks = h.count_chunks();
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
  Components c{};
  c.h2d = time_passes(a.runs, [&] { h2d(h.s[0].get()); h.sync(); }).median;
  c.d2h = time_passes(a.runs, [&] { d2h(h.s[0].get()); h.sync(); }).median;
  c.both = time_passes(a.runs, [&] { h2d(h.s[0].get()); d2h(h.s[1].get()); h.sync(); }).median;
  // The same bytes in 1 MiB copies: the difference is the per-copy cost
  // the simulator needs for small chunks.
  {
    const std::size_t small = std::min(total, kMiB / sizeof(T));
    const std::size_t n_small = (total + small - 1) / small;
    const double t_small = time_passes(a.runs, [&] {
                             for (std::size_t k = 0; k < n_small; ++k)
                               CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(h.d_in(static_cast<int>(k & 1)), h_in + k * small,
                                                                  std::min(small, total - k * small) * sizeof(T),
                                                                  cudaMemcpyHostToDevice, h.s[0].get()));
                             h.sync();
                           }).median;
    c.copy_latency_us = n_small > chunks ? std::max(0.0, (t_small - c.h2d) * 1e3 / static_cast<double>(n_small - chunks)) : 0.0;
  }
  c.kernel = time_passes(a.runs, [&] {
               for (std::size_t k = 0; k < chunks; ++k) launch_chunk(h.d_in(0), h.d_out(0), h.n_of(k), f, h.s[0].get());
               h.sync();
             }).median;
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

  std::vector<Row> rows;
  std::map<int, Components> comps;
  std::map<int, Timing> defaults;
  std::map<int, double> default_enqueue;
  for (int iters : a.intensities) {
    const ChainedFma<T> f{iters};
    const Components c = components(a, total, h_in, h_out, f);
    comps[iters] = c;
    std::printf("\n== intensity %d FMAs/element: h2d %.2f  d2h %.2f  both %.2f  kernel %.2f ms  -> floor %.2f ms"
                " (per-copy cost %.2f us)\n",
                iters, c.h2d, c.d2h, c.both, c.kernel, c.floor(), c.copy_latency_us);

    // chunkpipe's untuned default, once per intensity.
    {
      Pipe def(chunkpipe::Options{}, chunkpipe::Map<ChainedFma<T>>{f});
      example::poison(h_out, total);
      def.run(in, out);
      if (const std::size_t bad = first_mismatch_closed_form(h_out, h_in, total, iters); bad != total) {
        std::fprintf(stderr, "FAIL: chunkpipe default wrong at i=%zu\n", bad);
        return EXIT_FAILURE;
      }
      defaults[iters] = time_passes(a.runs, [&] { def.run(in, out); });
      // Host cost of issuing: time for run_async to return, per chunk.
      const auto t0 = std::chrono::steady_clock::now();
      chunkpipe::RunTicket t = def.run_async(in, out);
      const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      t.wait();
      default_enqueue[iters] = us / static_cast<double>(def.plan_for(total).chunks);
      std::printf("   chunkpipe default (Options{}): %.3f ms, efficiency %.3f, issue %.1f us/chunk\n",
                  defaults[iters].median, c.floor() / defaults[iters].median, default_enqueue[iters]);
    }

    std::printf("%9s %-24s %9s %9s %9s %7s %8s %9s %7s\n", "chunk", "schedule", "median", "min", "max", "eff",
                "vs naive", "predicted", "error");
    for (std::size_t cm : a.chunks_mib) {
      const std::size_t chunk = std::min(total, cm * kMiB / sizeof(T));
      Hand<T> h(total, chunk, h_in, h_out, f);
      example::poison(h_out, total);
      h.naive();
      if (const std::size_t bad = first_mismatch_closed_form(h_out, h_in, total, iters); bad != total) {
        std::fprintf(stderr, "FAIL: lesson naive wrong at i=%zu (chunk %zu)\n", bad, bad / chunk);
        return EXIT_FAILURE;
      }
      const std::vector<T> want(h_out, h_out + total);
      double naive_ms = 0;
      auto add = [&](const std::string& name, const std::string& family, int depth, const Timing& t, double enq,
                     double predicted) {
        if (name == "lesson naive") naive_ms = t.median;
        rows.push_back({iters, static_cast<double>(cm), name, family, depth, t, c.floor(), naive_ms, enq, predicted});
        std::printf("%5zu MiB %-24s %9.3f %9.3f %9.3f %7.3f %7.2fx", cm, name.c_str(), t.median, t.min, t.max,
                    c.floor() / t.median, naive_ms / t.median);
        if (predicted > 0) std::printf(" %9.3f %+6.1f%%", predicted, 100 * (predicted - t.median) / t.median);
        std::printf("\n");
      };
      const chunkpipe::Machine machine = c.machine(static_cast<double>(total * sizeof(T)), engines);
      auto hand = [&](const char* name, void (Hand<T>::*pass)()) {
        example::poison(h_out, total);
        (h.*pass)();
        check_same(name, h_out, want, chunk);
        add(name, "hand", name == std::string("lesson double buffer") ? 2 : 1, time_passes(a.runs, [&] { (h.*pass)(); }),
            -1, -1);
      };
      hand("lesson naive", &Hand<T>::naive);
      hand("lesson double buffer", &Hand<T>::double_buffer);
      hand("guide 3-stream", &Hand<T>::three_streams);

      struct Cfg {
        const char* name;
        chunkpipe::Policy policy;
        int depth;
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
                          {"cp auto", chunkpipe::Policy::automatic, chunkpipe::default_depth}};
      for (const Cfg& cfg : cfgs) {
        Pipe pipe({.chunk_elems = chunk, .depth = cfg.depth, .policy = cfg.policy}, chunkpipe::Map<ChainedFma<T>>{f});
        example::poison(h_out, total);
        pipe.run(in, out);
        check_same(cfg.name, h_out, want, chunk);
        const Timing t = time_passes(a.runs, [&] { pipe.run(in, out); });
        const auto t0 = std::chrono::steady_clock::now();
        chunkpipe::RunTicket ticket = pipe.run_async(in, out);
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        ticket.wait();
        const chunkpipe::Workload w{total, pipe.geometry().chunk_elems, sizeof(T), sizeof(T),
                                    {c.kernel * 1e6 / static_cast<double>(total)}};
        const double predicted = chunkpipe::makespan_ms(chunkpipe::simulate(pipe.plan_for(total), w, machine));
        add(cfg.name, "chunkpipe", cfg.depth, t, us / static_cast<double>(pipe.plan_for(total).chunks), predicted);
      }
      // Host cost of issuing a chunk against the time the chunk's copy in takes.
      const double copy_us = c.h2d * 1e3 * static_cast<double>(chunk) / static_cast<double>(total);
      std::printf("%9s issue cost per chunk: stage_streams d3 %.1f us, auto %.1f us; one chunk's copy in takes %.1f us\n",
                  "", rows[rows.size() - 5].enqueue_us_per_chunk, rows.back().enqueue_us_per_chunk, copy_us);
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
          pipe.run(in, out);
          const Timing t = time_passes(a.runs, [&] { pipe.run(in, out); });
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
          << comps[iters].floor() << ',' << comps[iters].floor() / t.median << ",," << default_enqueue[iters]
          << ",-1\n";
    }
    for (const Tuning& u : tuning) {
      csv << sizeof(T) << ',' << a.total_mib << ',' << u.iters << ",64,cp auto grain " << u.grain_kib << " KiB,tuning,"
          << u.depth << ',' << u.t.median << ',' << u.t.min << ',' << u.t.max << ',' << u.floor_ms << ','
          << u.floor_ms / u.t.median << ",,,-1\n";
    }
    if (!csv) std::fprintf(stderr, "warning: could not write %s\n", a.csv.c_str());
  }

  // SVG: efficiency against chunk size, one panel per intensity, one line
  // per schedule.
  {
    const int panel_w = 460, panel_h = 300, margin = 50;
    const int width = panel_w * static_cast<int>(a.intensities.size()) + 20, height = panel_h + 190;
    std::ofstream svg(a.svg);
    svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height
        << "' font-family='sans-serif' font-size='11'>\n<rect width='100%' height='100%' fill='white'/>\n";
    svg << "<text x='10' y='18' font-size='14'>efficiency (floor / time) against chunk size, " << a.total_mib
        << " MiB each way, " << sizeof(T) << "-byte elements</text>\n";
    std::vector<std::string> names;
    for (const Row& r : rows) {
      if (std::find(names.begin(), names.end(), r.schedule) == names.end()) names.push_back(r.schedule);
    }
    auto colour = [&](std::size_t i) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "hsl(%d,70%%,%d%%)", static_cast<int>(i * 360 / names.size()),
                    i % 2 ? 35 : 50);
      return std::string(buf);
    };
    const double lmin = std::log2(static_cast<double>(a.chunks_mib.front()));
    const double lmax = std::max(lmin + 1, std::log2(static_cast<double>(a.chunks_mib.back())));
    for (std::size_t p = 0; p < a.intensities.size(); ++p) {
      const int x0 = 10 + static_cast<int>(p) * panel_w + margin, y0 = 40, w = panel_w - margin - 20,
                h = panel_h - 40;
      svg << "<rect x='" << x0 << "' y='" << y0 << "' width='" << w << "' height='" << h
          << "' fill='none' stroke='#888'/>\n";
      svg << "<text x='" << x0 << "' y='" << y0 - 6 << "'>" << a.intensities[p] << " FMAs per element</text>\n";
      for (int e = 0; e <= 10; e += 2) {
        const double yy = y0 + h - h * e / 10.0;
        svg << "<line x1='" << x0 << "' x2='" << x0 + w << "' y1='" << yy << "' y2='" << yy
            << "' stroke='#eee'/><text x='" << x0 - 28 << "' y='" << yy + 4 << "'>" << e / 10.0 << "</text>\n";
      }
      for (std::size_t cm : a.chunks_mib) {
        const double xx = x0 + w * (std::log2(static_cast<double>(cm)) - lmin) / (lmax - lmin);
        svg << "<text x='" << xx - 8 << "' y='" << y0 + h + 14 << "'>" << cm << "</text>\n";
      }
      svg << "<text x='" << x0 + w / 2 - 30 << "' y='" << y0 + h + 28 << "'>chunk (MiB)</text>\n";
      for (std::size_t s = 0; s < names.size(); ++s) {
        std::ostringstream pts;
        for (const Row& r : rows) {
          if (r.intensity != a.intensities[p] || r.schedule != names[s]) continue;
          const double xx = x0 + w * (std::log2(r.chunk_mib) - lmin) / (lmax - lmin);
          const double yy = y0 + h - h * std::min(1.0, r.floor_ms / r.t.median);
          pts << xx << ',' << yy << ' ';
        }
        svg << "<polyline fill='none' stroke-width='1.5' stroke='" << colour(s) << "' points='" << pts.str()
            << "'/>\n";
      }
    }
    for (std::size_t s = 0; s < names.size(); ++s) {
      const int lx = 20 + static_cast<int>(s % 4) * 220, ly = panel_h + 60 + static_cast<int>(s / 4) * 18;
      svg << "<line x1='" << lx << "' x2='" << lx + 20 << "' y1='" << ly - 4 << "' y2='" << ly - 4 << "' stroke='"
          << colour(s) << "' stroke-width='3'/><text x='" << lx + 26 << "' y='" << ly << "'>" << names[s]
          << "</text>\n";
    }
    svg << "</svg>\n";
  }

  // The targets (issue: benchmarks against the floor), from this run.
  auto find = [&](int iters, double cm, const std::string& name) -> const Row* {
    for (const Row& r : rows) {
      if (r.intensity == iters && r.chunk_mib == cm && r.schedule == name) return &r;
    }
    return nullptr;
  };
  std::printf("\n== targets (this run)\n");
  bool t1 = true;
  for (const auto& [iters, t] : defaults) {
    const double eff = comps[iters].floor() / t.median;
    t1 = t1 && eff >= 0.95;
    std::printf("1. default efficiency at %4d FMAs: %.3f (target >= 0.95)\n", iters, eff);
  }
  std::printf("   -> %s\n", t1 ? "met" : "MISSED");
  for (int iters : {512, 2048}) {
    const Row* lesson = find(iters, 64, "lesson double buffer");
    const Row* def = find(iters, 64, "cp auto");
    if (lesson && def) {
      const double need = iters == 512 ? 1.08 : 1.3;
      const double got = lesson->t.median / def->t.median;
      std::printf("2. 64 MiB window, %d FMAs: default %.3f ms vs lesson double buffer %.3f ms: %.3fx (target >= %.2fx) %s\n",
                  iters, def->t.median, lesson->t.median, got, need, got >= need ? "met" : "MISSED");
    }
  }
  double worst3 = 0;
  for (const Row& r : rows) {
    if (r.schedule != "cp slot_streams d2") continue;
    const Row* hand = find(r.intensity, r.chunk_mib, "lesson double buffer");
    if (hand) worst3 = std::max(worst3, r.t.median / hand->t.median - 1.0);
  }
  std::printf("3. chunkpipe slot_streams d2 vs hand-written double buffer: worst %+.2f%% (target within 2%%) %s\n",
              100 * worst3, worst3 <= 0.02 ? "met" : "MISSED");
  bool t4 = true;
  for (int iters : a.intensities) {
    for (std::size_t cm : a.chunks_mib) {
      double best_hand = 1e30, best_cp = 1e30;
      for (const Row& r : rows) {
        if (r.intensity != iters || r.chunk_mib != static_cast<double>(cm)) continue;
        (r.family == "hand" ? best_hand : best_cp) = std::min(r.family == "hand" ? best_hand : best_cp, r.t.median);
      }
      const bool ok = best_cp <= best_hand * 1.005;  // within timing noise of a tie
      t4 = t4 && ok;
      std::printf("4. %4d FMAs, %3zu MiB: best chunkpipe %.3f ms, best hand-written %.3f ms %s\n", iters, cm, best_cp,
                  best_hand, ok ? "" : " MISSED");
    }
  }
  std::printf("   -> %s\n", t4 ? "met" : "MISSED");
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

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, a)) return 0;
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
