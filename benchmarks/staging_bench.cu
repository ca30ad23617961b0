// SPDX-License-Identifier: MIT
//
// staging_bench: data in pageable memory (a std::vector) through the GPU,
// four ways, side by side in one run on one GPU.
//
// A plain cudaMemcpyAsync from pageable memory is staged by the driver
// through a small pinned buffer of its own, synchronously, at 7 to 12 GB/s
// on the test machine (shared/DEVICE.md), and nothing overlaps. The target
// (DESIGN.md, "Host stages") is that pageable input must not fall to that.
// The workload is the lesson's: 1 GiB of float in a std::vector in, 1 GiB
// out, 512 chained FMAs per element, a 64 MiB window, the default policy.
//
//   direct        Staging::direct: plain cudaMemcpyAsync from the vectors.
//                 The baseline this issue is about.
//   threads N     Staging::threads: chunkpipe's host threads copy each chunk
//                 into a pinned slot (and out of one) while the GPU works on
//                 other chunks; N threads share each copy, per direction.
//   registered    Staging::registered: cudaHostRegister the vectors in place
//                 and copy directly. The first run pays the registration;
//                 repeated runs over the same vectors do not.
//   pinned        the same data in PinnedArray: what the link gives, the
//                 reference every other row is a fraction of.
//
// Every output is poisoned (NaN) before each run and checked against the
// closed form of the recurrence after it. Times are wall-clock medians of
// --runs runs after a warm-up; each run returns with its output on the host.
//
// Run:   ./staging_bench [--runs 5] [--csv staging_bench.csv] [--total-mib 1024]
//                        [--chunk-mib 64] [--iters 512] [--threads 1,2,4,8,12]
// Needs about 4x total-mib of host RAM (vectors and their pinned copies).
//
// The helpers every example and benchmark repeats (device check, command line, timing, checks) are in
// examples/support.hpp.

#include <chunkpipe/pipeline.cuh>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// The lesson's recurrence (examples/double_buffer.cu). Its constants keep
// every step contractive, so the closed form below is a sharp reference.
constexpr float kA = 0.999f;
constexpr float kB = 0.0625f;

struct ChainedFma {
  int iters;
  __host__ __device__ float operator()(float y) const {
#ifdef __CUDA_ARCH__
#pragma unroll 16  // a runtime trip count: unrolling keeps the loop overhead off the FMA pipe
#endif
    for (int k = 0; k < iters; ++k) y = fmaf(y, kA, kB);
    return y;
  }
};

using Pipe = chunkpipe::ChunkedPipeline<chunkpipe::Map<ChainedFma>>;

struct Args {
  std::size_t total_mib = 1024;
  std::size_t chunk_mib = 64;
  int iters = 512;
  int runs = 5;
  std::vector<int> threads{1, 2, 4, 8, 12};
  std::string csv = "staging_bench.csv";
};

void usage() {
  std::printf(
      "staging_bench: pageable memory through the GPU: direct, staged by threads, registered, pinned\n"
      "  --runs N            timed runs per row after a warm-up, median kept (default 5)\n"
      "  --csv PATH          where to write the table (default staging_bench.csv)\n"
      "  --total-mib N       MiB of float in, and out (default 1024)\n"
      "  --chunk-mib N       the window, MiB of float (default 64)\n"
      "  --iters N           chained FMAs per element (default 512)\n"
      "  --threads a,b,...   host_threads for the threads rows (default 1,2,4,8,12)\n");
}

// A positive integer, or exit 2 naming the option.
long positive(const std::string& name, const char* text) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (*text == '\0' || *end != '\0' || v <= 0) {
    std::fprintf(stderr, "%s wants a positive integer, got '%s'\n", name.c_str(), text);
    std::exit(2);
  }
  return v;
}

bool parse(int argc, char** argv, Args& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&] { return example::next_value(argc, argv, i); };
    if (k == "--help" || k == "-h") {
      usage();
      return false;
    } else if (k == "--runs") {
      a.runs = static_cast<int>(positive(k, next()));
    } else if (k == "--csv") {
      a.csv = next();
    } else if (k == "--total-mib") {
      a.total_mib = static_cast<std::size_t>(positive(k, next()));
    } else if (k == "--chunk-mib") {
      a.chunk_mib = static_cast<std::size_t>(positive(k, next()));
    } else if (k == "--iters") {
      a.iters = static_cast<int>(positive(k, next()));
    } else if (k == "--threads") {
      a.threads.clear();
      std::stringstream list(next());
      std::string item;
      while (std::getline(list, item, ',')) a.threads.push_back(static_cast<int>(positive(k, item.c_str())));
      if (a.threads.empty()) {
        std::fprintf(stderr, "--threads needs at least one count\n");
        std::exit(2);
      }
    } else {
      std::fprintf(stderr, "unknown option %s\n", k.c_str());
      usage();
      std::exit(2);
    }
  }
  return true;
}

// Runs fn(begin, end) over [0, n) split across the host's cores: poisoning
// and checking 1 GiB stay well under the time of the runs between them.
void parallel_for(std::size_t n, const std::function<void(std::size_t, std::size_t)>& fn) {
  const std::size_t workers = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  const std::size_t share = (n + workers - 1) / workers;
  std::vector<std::thread> threads;
  for (std::size_t w = 0; w < workers && w * share < n; ++w) {
    threads.emplace_back([&fn, w, share, n] { fn(w * share, std::min(n, (w + 1) * share)); });
  }
  for (std::thread& t : threads) t.join();
}

// NaN in every element: one the run did not write cannot pass the check.
void poison(float* p, std::size_t n) {
  parallel_for(n, [p](std::size_t b, std::size_t e) { example::poison(p + b, e - b); });
}

// The closed form of the recurrence in double: after n steps of
// y = a*y + b, y = x*a^n + b*(1 - a^n)/(1 - a). The kernel rounds once per
// step and |a| < 1 keeps that error to a few hundred ULP, so 1e-4 relative
// clears it and still catches a skipped, doubled or stale chunk. Returns the
// first wrong index, or n.
std::size_t first_mismatch(const float* got, const float* in, std::size_t n, int iters) {
  const double a = kA, scale = std::pow(a, iters), offset = static_cast<double>(kB) * (1.0 - scale) / (1.0 - a);
  std::vector<std::size_t> firsts;
  std::mutex m;
  parallel_for(n, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) {
      const double want = scale * in[i] + offset;
      if (!(std::fabs(got[i] - want) <= 1e-4 * std::fabs(want))) {
        std::lock_guard<std::mutex> lock(m);
        firsts.push_back(i);
        return;
      }
    }
  });
  return firsts.empty() ? n : *std::min_element(firsts.begin(), firsts.end());
}

// Each row's figures (Timing): the median, min and max of its runs, timed
// with support.hpp's steady clock.
using example::Clock;
using example::ms_between;
using example::summarise;
using example::Timing;

// Everything a row needs: the data, and the check after every run.
struct Bench {
  const Args& args;
  std::size_t n;
  std::size_t chunk;
  const float* in;  // the input's values, for the check

  // poison `out`, time `run`, check `out`; exits naming `what` and the chunk
  // on a wrong element.
  double timed(const char* what, float* out, const std::function<void()>& run) const {
    poison(out, n);
    const auto t0 = Clock::now();
    run();
    const double ms = ms_between(t0, Clock::now());
    if (const std::size_t bad = first_mismatch(out, in, n, args.iters); bad != n) {
      std::fprintf(stderr, "FAIL: %s: output wrong at i=%zu (chunk %zu): got %.9g\n", what, bad, bad / chunk,
                   static_cast<double>(out[bad]));
      std::exit(EXIT_FAILURE);
    }
    return ms;
  }

  // One checked warm-up (slot allocation, module load), then --runs timed.
  Timing median(const char* what, float* out, const std::function<void()>& run) const {
    (void)timed(what, out, run);
    std::vector<double> t;
    for (int r = 0; r < args.runs; ++r) t.push_back(timed(what, out, run));
    return summarise(std::move(t));
  }
};

struct Row {
  std::string mode;
  int host_threads;  // 0: not a threads row
  Timing t;
};

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, a)) return 0;
  if (const int status = example::require_gpu("benchmark"); status != 0) return status;

  try {
    const cudaDeviceProp prop = example::current_gpu();  // device 0, the default
    const std::size_t n = a.total_mib * kMiB / sizeof(float);
    const std::size_t window = std::min(n, a.chunk_mib * kMiB / sizeof(float));
    const chunkpipe::Map<ChainedFma> stage{{a.iters}};
    auto options = [&](chunkpipe::Staging mode, int threads) {
      return chunkpipe::Options{.chunk_elems = window, .staging = mode, .host_threads = threads};
    };
    {
      const Pipe shape(options(chunkpipe::Staging::automatic, 0), stage);
      const auto& g = shape.geometry();
      std::printf("GPU: %s; %zu MiB of float in and out, %zu MiB window (%s, %d slots of %zu KiB), "
                  "%d FMAs per element\n",
                  prop.name, a.total_mib, window * sizeof(float) / kMiB,
                  std::string(chunkpipe::to_string(g.policy)).c_str(),
                  g.depth, g.chunk_elems * sizeof(float) / 1024, a.iters);
      std::printf("median of %d runs after a warm-up; each output poisoned before and checked after every run\n\n",
                  a.runs);
    }

    // The data, as most programs hold it: std::vectors. 4093 is prime, so
    // the pattern never lines up with a chunk boundary.
    std::vector<float> x(n), y(n);
    parallel_for(n, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) x[i] = static_cast<float>(i % 4093) / 4093.0f - 0.5f;
    });
    const Bench bench{a, n, window, x.data()};
    // chunkpipe::pageable() says outright that these ranges are pageable,
    // so every mode below sees them as such, whatever ran before.
    auto run_pageable = [&](Pipe& p) { p.run(chunkpipe::pageable(x), chunkpipe::pageable(y)); };

    std::vector<Row> rows;
    // Each pipeline lives only for its rows: its pinned slots are freed
    // before the next one allocates its own.
    {
      Pipe p(options(chunkpipe::Staging::direct, 0), stage);
      rows.push_back({"direct", 0, bench.median("direct", y.data(), [&] { run_pageable(p); })});
    }
    for (int t : a.threads) {
      Pipe p(options(chunkpipe::Staging::threads, t), stage);
      rows.push_back({"threads", t, bench.median("threads", y.data(), [&] { run_pageable(p); })});
    }
    {
      // The same bytes in pinned memory, copied directly: the reference.
      chunkpipe::PinnedArray<float> pin_in(n), pin_out(n);
      std::memcpy(pin_in.data(), x.data(), n * sizeof(float));
      Pipe p(options(chunkpipe::Staging::automatic, 0), stage);
      const Bench pinned_bench{a, n, window, pin_in.data()};
      rows.push_back({"pinned", 0, pinned_bench.median("pinned", pin_out.data(), [&] {
                        p.run(chunkpipe::pinned(pin_in), chunkpipe::pinned(pin_out));
                      })});
    }
    {
      // Warm-up on a buffer of its own: the slot allocation stays out of the
      // first-run figure, which is then the registration plus one run. The
      // buffers outlive the pipeline, which may still hold them registered.
      std::vector<float> wx(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(window)), wy(window);
      Pipe p(options(chunkpipe::Staging::registered, 0), stage);
      const Bench warm{a, window, window, wx.data()};
      (void)warm.timed("registered, warm-up", wy.data(),
                       [&] { p.run(chunkpipe::pageable(wx), chunkpipe::pageable(wy)); });
      std::vector<double> first;
      for (int r = 0; r < a.runs; ++r) {
        p.release_registrations();  // so this run registers x and y again
        first.push_back(bench.timed("registered, first run", y.data(), [&] { run_pageable(p); }));
      }
      rows.push_back({"registered, first run", 0, summarise(first)});
      rows.push_back({"registered, repeated", 0,
                      bench.median("registered, repeated", y.data(), [&] { run_pageable(p); })});
      // Unregistered before the vectors go, and before the next program
      // could mistake them for pinned memory.
      p.release_registrations();
    }

    auto find = [&](const std::string& mode) -> const Row& {
      for (const Row& r : rows) {
        if (r.mode == mode) return r;
      }
      throw std::logic_error("no row " + mode);
    };
    const double direct_ms = find("direct").t.median;
    const double pinned_ms = find("pinned").t.median;
    const double moved_gb = 2.0 * static_cast<double>(n * sizeof(float)) / 1e9;

    std::printf("%-24s %7s %10s %10s %10s %11s %10s\n", "mode", "threads", "median ms", "min ms", "GB/s moved",
                "of pinned", "vs direct");
    for (const Row& r : rows) {
      const std::string threads = r.host_threads > 0 ? std::to_string(r.host_threads) : "-";
      std::printf("%-24s %7s %10.2f %10.2f %10.2f %11.3f %9.2fx\n", r.mode.c_str(), threads.c_str(), r.t.median,
                  r.t.min, moved_gb / (r.t.median / 1e3), pinned_ms / r.t.median, direct_ms / r.t.median);
    }
    std::printf("GB/s moved: %.2f GB (in and out) over the median wall time; of pinned: the pinned run's time over\n"
                "this one's (1 = as fast as pinned memory).\n\n",
                moved_gb);

    const Row* best = nullptr;
    for (const Row& r : rows) {
      if (r.mode == "threads" && (!best || r.t.median < best->t.median)) best = &r;
    }
    const double speedup = direct_ms / best->t.median;
    std::printf("threads (best) vs direct: %.2fx (target >= 3x)\n", speedup);
    std::printf("  best: host_threads %d, %.2f ms, %.3f of pinned; target %s\n", best->host_threads,
                best->t.median, pinned_ms / best->t.median, speedup >= 3.0 ? "met" : "NOT met");
    const double first_ms = find("registered, first run").t.median;
    const double again_ms = find("registered, repeated").t.median;
    std::printf("  registered: the first run costs %.2f ms more than a repeated one (cudaHostRegister of %.2f GB);",
                first_ms - again_ms, moved_gb);
    if (again_ms < best->t.median) {
      std::printf(" it pays back against the best threads row after %.1f runs\n",
                  (first_ms - again_ms) / (best->t.median - again_ms));
    } else {
      std::printf(" repeated runs are no faster than the best threads row, so it never pays back\n");
    }

    std::ofstream csv(a.csv);
    csv << "gpu,total_mib,chunk_mib,iters,runs,mode,host_threads,median_ms,min_ms,max_ms,gb_per_s_moved,"
           "fraction_of_pinned,speedup_vs_direct\n";
    for (const Row& r : rows) {
      csv << '"' << prop.name << "\"," << a.total_mib << ',' << a.chunk_mib << ',' << a.iters << ',' << a.runs << ",\""
          << r.mode << "\"," << r.host_threads << ',' << r.t.median << ',' << r.t.min << ',' << r.t.max << ','
          << moved_gb / (r.t.median / 1e3) << ',' << pinned_ms / r.t.median << ',' << direct_ms / r.t.median << '\n';
    }
    csv.close();
    if (!csv) {
      std::fprintf(stderr, "error: could not write %s\n", a.csv.c_str());
      return EXIT_FAILURE;
    }
    std::printf("\nwrote %s\n", a.csv.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return EXIT_FAILURE;
  }
  return EXIT_SUCCESS;
}
