// SPDX-License-Identifier: MIT
// predict: what the double-buffering lesson's schedules would do, predicted
// without a GPU.
//
// "The lesson" is a page on double buffering ("day 54") of an online CUDA
// course; its benchmark program, double_buffer.cu, is what
// examples/double_buffer.cu rebuilds on chunkpipe (the course pages are not
// in this repository). It streams 1 GiB of float through the GPU in 64 MiB
// chunks, once serially ("naive") and once with two buffers on two streams
// ("double buffer"), and measures both. This program runs the same two
// schedules, and chunkpipe's default, through the simulator (simulate.hpp)
// on two machine models: an H200 on PCIe Gen5 and a Tesla T4 on PCIe Gen3
// (the machine of the lesson's table). Every time it prints is a
// prediction; where the schedule was also measured at the same settings,
// the measurement is printed next to it so you can judge the model.
//
// It takes double_buffer's options, so that scripts/demo.sh can pass the
// same command line to either: what a prediction cannot use (--runs) is
// named and ignored.
//
// Build: part of chunkpipe's examples (target `predict`). It calls no CUDA
//        function and runs on a machine without a GPU or driver.
// Run:   ./predict [--total-mib 1024] [--chunk-mib 64] [--iters 512]
//                  [--depth 3] [--sweep] [--timeline DIR]
#include <chunkpipe/options.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/simulate.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "support.hpp"

namespace cp = chunkpipe;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

struct Config {  // as double_buffer's
  std::size_t total_mib = example::lesson_total_mib;
  std::size_t chunk_mib = example::lesson_chunk_mib;
  int iters = example::lesson_iters;
  int depth = cp::default_depth;
  bool sweep = false;
  std::string timeline;  // directory for the predicted timelines (SVG, trace), or empty
  std::string out;       // the same, under its older name --out
  int runs = 0;          // double_buffer's; 0 = not given. Ignored: a prediction times nothing
};

/// Whether the run asked for is the one measured (the lesson's settings).
bool lesson_settings(const Config& c) {
  return c.total_mib == example::lesson_total_mib && c.chunk_mib == example::lesson_chunk_mib &&
         c.iters == example::lesson_iters;
}

struct Schedule {
  std::string key;    // file name part
  std::string name;   // row of the table
  std::string why;    // one line printed above its timeline
  cp::Policy policy;
  int depth;
  std::size_t chunk_elems;
};

/// A measured figure and where it comes from; ms 0 where nobody measured it.
struct Measured {
  double naive = 0, double_buffer = 0, chunkpipe = 0;
};

struct Target {
  std::string key;
  std::string name;        // short, for labels
  std::string title;
  cp::Machine machine;
  double kernel_ms;        // measured "kernel only" pass: 1 GiB, 512 FMAs per element, on this machine
  Measured measured;       // the schedules at the lesson's settings (chunkpipe's at the default depth)
  std::string source;      // where the measurements come from, short
  std::string note;        // where they come from, in full
  std::string caveat;      // what in the model is assumed
  // The page's exercise (4, 64, 256 MiB windows): measured pipelined / naive
  // ratios, 0 where not measured.
  double sweep_lesson[3] = {0, 0, 0};
  double sweep_chunkpipe[3] = {0, 0, 0};
};

std::string size_text(std::size_t bytes) {
  if (bytes >= kMiB && bytes % kMiB == 0) return std::to_string(bytes / kMiB) + " MiB";
  if (bytes >= kMiB) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / kMiB);
    return buf;
  }
  return std::to_string(bytes / 1024) + " KiB";
}

std::vector<Schedule> schedules(const Config& c, std::size_t chunk) {
  // chunkpipe's default for the same window: the automatic policy picks
  // per-kind streams and, because the stage is element-wise, cuts the
  // window into grains. The memory is that of depth windows (the double
  // buffer holds two, and needs a third to hide all three stages); only the
  // steps are finer, so the first copy in and the last copy out, which
  // nothing can overlap, shrink from a window to one grain.
  cp::Options defaults;
  defaults.chunk_elems = chunk;
  defaults.depth = c.depth;
  const cp::Geometry g = cp::detail::resolve_geometry(defaults, true, cp::detail::Target::device);
  const std::string window = size_text(chunk * sizeof(float));
  const std::string step = size_text(g.chunk_elems * sizeof(float));

  return {
      {"naive", "naive (serial, " + window + ")",
       "naive: one stream, so every copy and kernel waits for the one before it: the sum of the stages.",
       cp::Policy::serial, 1, chunk},
      {"double-buffer", "double buffer (slot_streams 2)",
       "double buffer: each stream runs its own chunks in order; the bound is half the serial chain.",
       cp::Policy::slot_streams, 2, chunk},
      {"chunkpipe", "chunkpipe default (" + std::string(cp::to_string(g.policy)) + ' ' + std::to_string(g.depth) +
                        " x " + step + ")",
       "chunkpipe default: a stream per kind of work over " + std::to_string(g.depth) + " slots of " + step +
           " (the memory of " + std::to_string(c.depth) + " x " + window + ") keeps all three engines busy.",
       g.policy, g.depth, g.chunk_elems},
  };
}

std::vector<Target> targets() {
  Target h200;
  h200.key = "h200";
  h200.name = "H200";
  h200.title = "H200, PCIe Gen5 x16 (model: chunkpipe::machines::h200_pcie5())";
  h200.machine = cp::machines::h200_pcie5();
  // benchmarks/RESULTS.md, 2026-11-29, the project's H200 test machine,
  // double_buffer --sweep: kernel only 5.29 ms (run 2); the final code's run
  // (gpu-check 22:15Z): naive 44.34, double buffer 25.00, chunkpipe default
  // 21.94 ms against a 21.32 ms floor; the page's exercise (run 2).
  h200.kernel_ms = 5.29;
  h200.measured = {44.34, 25.00, 21.94};
  h200.source = "RESULTS.md, 2026-11-29";
  h200.note =
      "measured: benchmarks/RESULTS.md, 2026-11-29, double_buffer --sweep on the project's H200 test\n"
      "  machine (the final code's run; floor 21.32 ms measured; kernel only 5.29 ms and the sweep's\n"
      "  ratios from run 2 of that day)";
  h200.caveat = "both assumed until measured";
  const double lesson_ratio[3] = {0.537, 0.556, 0.633}, chunkpipe_ratio[3] = {0.450, 0.493, 0.497};
  for (int w = 0; w < 3; ++w) h200.sweep_lesson[w] = lesson_ratio[w], h200.sweep_chunkpipe[w] = chunkpipe_ratio[w];

  Target t4;
  t4.key = "t4";
  t4.name = "T4";
  t4.title = "Tesla T4, PCIe Gen3 x16 (model: chunkpipe::machines::t4_pcie3(), from the lesson's table)";
  t4.machine = cp::machines::t4_pcie3();
  // The lesson's table: kernel only 43.700 ms; measured naive 211.246 ms,
  // double buffer 115.465 ms. chunkpipe was never run on a T4.
  t4.kernel_ms = 43.700;
  t4.measured = {211.246, 115.465, 0.0};
  t4.source = "lesson table";
  t4.note = "measured: the lesson's published table (Tesla T4, CUDA 13.0); chunkpipe was not run on a T4";
  t4.caveat = "already inside its measured passes";
  return {h200, t4};
}

std::string ms(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f ms", v);
  return buf;
}

std::string describe(const Target& t) {
  const cp::Machine& m = t.machine;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "model: H2D %.1f GB/s, D2H %.1f GB/s, both at once %.1f GB/s, %d copy engines,\n"
                "       %.0f us latency per copy, %.0f us overhead per op (%s)",
                m.link.h2d_gbps, m.link.d2h_gbps, m.link.both_gbps, m.link.copy_engines, m.link.latency_us,
                m.op_overhead_us, t.caveat.c_str());
  return buf;
}

/// The kernel's time over the whole run: the measured 1 GiB, 512-FMA pass,
/// scaled in proportion to FMAs x elements.
double run_kernel_ms(const Target& t, const Config& c, std::size_t total) {
  return t.kernel_ms * (static_cast<double>(c.iters) / example::lesson_iters) *
         (static_cast<double>(total) / static_cast<double>(example::lesson_elems));
}

void print_table(const Target& t, const Config& c, const std::vector<cp::Report>& reports,
                 const std::vector<Schedule>& s) {
  std::printf("\n  %-44s %6s %10s %10s %10s %8s   %s\n", "schedule (predicted)", "chunks", "makespan", "floor",
              "efficiency", "speedup", "measured, speedup");
  const double naive = cp::makespan_ms(reports[0]);
  const bool same = lesson_settings(c);
  bool any = false;
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const cp::Report& r = reports[i];
    double measured = 0.0;
    if (same) {
      measured = i == 0 ? t.measured.naive : i == 1 ? t.measured.double_buffer
                         : (c.depth == cp::default_depth ? t.measured.chunkpipe : 0.0);
    }
    std::string seen = "-";
    if (measured > 0.0) {
      char buf[64];
      std::snprintf(buf, sizeof buf, ", %.2fx (%s)", t.measured.naive / measured, t.source.c_str());
      seen = ms(measured) + buf;
      any = true;
    }
    std::printf("  %-44s %6zu %10s %10s %9.1f%% %7.2fx   %s\n", s[i].name.c_str(), r.chunks,
                ms(cp::makespan_ms(r)).c_str(), ms(cp::floor_ms(r)).c_str(), 100.0 * cp::efficiency(r),
                naive / cp::makespan_ms(r), seen.c_str());
  }
  if (any) std::printf("  %s\n", t.note.c_str());
}

/// The page's exercise, predicted: pipelined / naive at 4, 64 and 256 MiB
/// windows (at most the whole array), as double_buffer --sweep measures it.
void print_sweep(const Target& t, const Config& c, std::size_t total) {
  std::printf("\n  sweep (predicted): pipelined / naive at three windows (lower is better)\n");
  std::printf("  %10s %8s %12s %12s %12s %15s   %s\n", "window", "chunks", "naive ms", "lesson ms", "lesson/naive",
              "chunkpipe/naive", "measured lesson/naive, chunkpipe/naive");
  const std::size_t windows[] = {4, 64, 256};
  // double_buffer's sweep keeps its --total-mib, --iters and --depth and
  // ignores --chunk-mib: the measured ratios hold where the first three are
  // the lesson's.
  const bool same = c.total_mib == example::lesson_total_mib && c.iters == example::lesson_iters &&
                    c.depth == cp::default_depth;
  for (int w = 0; w < 3; ++w) {
    const std::size_t wc = std::min(total, windows[w] * kMiB / sizeof(float));
    const std::vector<Schedule> s = schedules(c, wc);
    const cp::Workload work = cp::map_workload(total, wc, run_kernel_ms(t, c, total));
    double made[3];
    for (int i = 0; i < 3; ++i) {
      cp::Workload wi = work;
      wi.chunk_elems = s[static_cast<std::size_t>(i)].chunk_elems;
      made[i] = cp::makespan_ms(cp::simulate(s[static_cast<std::size_t>(i)].policy,
                                             s[static_cast<std::size_t>(i)].depth, wi, t.machine));
    }
    std::string seen = "-";
    if (same && t.sweep_lesson[w] > 0.0) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.3f, %.3f (%s)", t.sweep_lesson[w], t.sweep_chunkpipe[w], t.source.c_str());
      seen = buf;
    }
    std::printf("  %6zu MiB %8zu %12.3f %12.3f %12.3f %15.3f   %s\n", windows[w], (total + wc - 1) / wc, made[0],
                made[1], made[1] / made[0], made[2] / made[0], seen.c_str());
  }
}

std::string usage() {
  char text[2048];
  std::snprintf(text, sizeof text,
                "predict: the double-buffering lesson's schedules, predicted without a GPU\n"
                "%s"
                "Predicts the naive and double-buffer schedules and chunkpipe's default on an H200\n"
                "(PCIe Gen5) model and a Tesla T4 (PCIe Gen3, the lesson's table), prints their\n"
                "timelines and a table. Takes double_buffer's options:\n"
                "  --total-mib N   array size in MiB (default %zu)\n"
                "  --chunk-mib N   device window per chunk in MiB (default %zu)\n"
                "  --iters N       chained FMAs per element (default %d); the kernel time is the\n"
                "                  measured %d-FMA pass scaled in proportion\n"
                "  --depth N       slots for chunkpipe's default schedule (default %d)\n"
                "  --sweep         also predict the page's exercise: 4, 64 and 256 MiB windows\n"
                "  --timeline DIR  write DIR/<machine>-<schedule>.svg and .trace.json\n"
                "                  (ui.perfetto.dev) for each; DIR is created if missing\n"
                "  --out DIR       the same as --timeline\n"
                "  --runs N        accepted and ignored: a prediction times nothing\n",
                example::lesson_about, example::lesson_total_mib, example::lesson_chunk_mib, example::lesson_iters,
                example::lesson_iters, cp::default_depth);
  return text;
}

int parse(int argc, char** argv, Config& c) {
  constexpr long long kLong = std::numeric_limits<long>::max(), kInt = std::numeric_limits<int>::max();
  return example::CommandLine("predict", usage())
      .integer("--total-mib", c.total_mib, 1, kLong)
      .integer("--chunk-mib", c.chunk_mib, 1, kLong)
      .integer("--iters", c.iters, 1, kInt)
      .integer("--depth", c.depth, 1, kInt)
      .integer("--runs", c.runs, 1, kInt)
      .flag("--sweep", c.sweep)
      .text("--timeline", c.timeline)
      .text("--out", c.out)
      .parse(argc, argv);
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  if (const int status = parse(argc, argv, c); status >= 0) return status;
  if (!c.timeline.empty() && !c.out.empty() && c.timeline != c.out) {
    std::fprintf(stderr, "predict: --timeline %s and --out %s name two folders; give one\n", c.timeline.c_str(),
                 c.out.c_str());
    return 2;
  }
  const std::string dir = c.timeline.empty() ? c.out : c.timeline;

  try {
    const std::size_t total = c.total_mib * kMiB / sizeof(float);
    const std::size_t chunk = std::min(total, c.chunk_mib * kMiB / sizeof(float));
    if (!dir.empty()) std::filesystem::create_directories(dir);
    std::printf("chunkpipe predict: the double-buffering lesson's schedules on a model of the machine.\n%s",
                example::lesson_about);
    if (c.runs != 0) {
      std::printf("predict: ignoring --runs %d: a prediction times no passes.\n", c.runs);
    }
    std::printf(
        "Every time below is a PREDICTION of chunkpipe's simulator, not a measurement; measured\n"
        "figures, where they exist for these settings, are in the last column.\n"
        "The work: %zu MiB of float in, one kernel of %d chained FMAs per element, %zu MiB out,\n"
        "in windows of %s (%zu chunks). The floor is what no schedule can beat:\n"
        "max(in / BW_h2d, out / BW_d2h, (in + out) / BW_both, kernel time).\n",
        c.total_mib, c.iters, c.total_mib, size_text(chunk * sizeof(float)).c_str(), (total + chunk - 1) / chunk);
    if (!lesson_settings(c) || c.depth != cp::default_depth) {
      std::printf(
          "Measured figures exist only at the lesson's settings (%zu MiB, %zu MiB windows, %d FMAs,\n"
          "depth %d for chunkpipe's default): rows at other settings show \"-\" there.\n",
          example::lesson_total_mib, example::lesson_chunk_mib, example::lesson_iters, cp::default_depth);
      if (c.total_mib != example::lesson_total_mib || c.iters != example::lesson_iters) {
        std::printf("The kernel time is each machine's measured 1 GiB, %d-FMA pass scaled by FMAs x elements\n"
                    "(this assumes the kernel stays compute-bound).\n",
                    example::lesson_iters);
      }
    }

    const std::vector<Schedule> plan = schedules(c, chunk);
    std::vector<std::string> written;
    for (const Target& t : targets()) {
      std::printf("\n=== %s ===\n%s\n", t.title.c_str(), describe(t).c_str());
      std::vector<cp::Report> reports;
      for (const Schedule& s : plan) {
        // The kernel's total time is fixed; only how the array is cut
        // changes, so every schedule does identical work.
        const cp::Workload work = cp::map_workload(total, s.chunk_elems, run_kernel_ms(t, c, total));
        cp::Report r = cp::simulate(s.policy, s.depth, work, t.machine);
        r.label = t.name + ": " + s.name;
        std::printf("\n%s\n%s", s.why.c_str(), cp::ascii_timeline(r, 90).c_str());
        if (!dir.empty()) {
          const std::string stem = (std::filesystem::path(dir) / (t.key + '-' + s.key)).string();
          cp::write_svg(r, stem + ".svg");
          cp::write_chrome_trace(r, stem + ".trace.json");
          written.push_back(stem + ".svg");
          written.push_back(stem + ".trace.json");
        }
        reports.push_back(std::move(r));
      }
      print_table(t, c, reports, plan);
      if (c.sweep) print_sweep(t, c, total);
    }

    // Why the double buffer misses the floor: a natural guess is the
    // slowest stage plus two chunk edges; the chain of one stream (half the
    // serial total) is the real bound.
    std::printf(
        "\nThe double buffer stops near half the naive time because each of its two streams runs\n"
        "its chunks copy in, kernel, copy out, one after another: the card can overlap one\n"
        "stream's copies with the other's work, never more. Three kinds of work in flight at\n"
        "once need at least three buffers; chunkpipe's default also makes the steps small so the\n"
        "unoverlapped first copy in and last copy out cost one grain, not one whole window.\n");
    if (dir.empty()) {
      std::printf("\n(add --timeline DIR to write each timeline as an SVG and a Chrome trace)\n");
    } else {
      std::printf("\nwrote %zu files:\n", written.size());
      for (const std::string& f : written) std::printf("  %s\n", f.c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "predict: %s\n", e.what());
    return 1;
  }
  return 0;
}
