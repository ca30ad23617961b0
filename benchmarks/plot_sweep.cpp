// SPDX-License-Identifier: MIT
//
// plot_sweep: redraws pipeline_bench's chart from a CSV it wrote, with no GPU.
//
//   plot_sweep IN.csv OUT.svg [--title TEXT]
//
// e.g., from the repository root:
//   plot_sweep benchmarks/results/2026-11-29-pipeline-run5.csv
//              benchmarks/results/2026-11-29-pipeline-run5-chart.svg --title "..."
// The chart itself is benchmarks/sweep_chart.hpp, the same code pipeline_bench
// draws with at the end of a run.

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "sweep_chart.hpp"

int main(int argc, char** argv) {
  std::vector<std::string> pos;
  std::string title;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--help" || k == "-h") {
      std::printf("usage: plot_sweep IN.csv OUT.svg [--title TEXT]\n"
                  "  draws pipeline_bench's chart from the CSV it wrote (--csv)\n");
      return 0;
    } else if (k == "--title" && i + 1 < argc) {
      title = argv[++i];
    } else if (!k.empty() && k[0] == '-') {
      std::fprintf(stderr, "plot_sweep: unknown option %s\n", k.c_str());
      return 2;
    } else {
      pos.push_back(k);
    }
  }
  if (pos.size() != 2) {
    std::fprintf(stderr, "usage: plot_sweep IN.csv OUT.svg [--title TEXT]\n");
    return 2;
  }
  std::ifstream in(pos[0]);
  if (!in) {
    std::fprintf(stderr, "plot_sweep: cannot read %s\n", pos[0].c_str());
    return 1;
  }
  std::vector<sweep_chart::Row> rows;
  sweep_chart::Info info;
  std::string error;
  if (!sweep_chart::read_csv(in, rows, info, error)) {
    std::fprintf(stderr, "plot_sweep: %s: %s\n", pos[0].c_str(), error.c_str());
    return 1;
  }
  info.title = title;
  const std::size_t slash = pos[0].find_last_of('/');
  info.source = slash == std::string::npos ? pos[0] : pos[0].substr(slash + 1);
  std::ofstream out(pos[1]);
  out << sweep_chart::svg(rows, info);
  if (!out) {
    std::fprintf(stderr, "plot_sweep: cannot write %s\n", pos[1].c_str());
    return 1;
  }
  std::printf("plot_sweep: %zu rows from %s -> %s\n", rows.size(), pos[0].c_str(), pos[1].c_str());
  return 0;
}
