// SPDX-License-Identifier: MIT
//
// running_totals: the running total of a stream of readings longer than the
// GPU needs to hold, through the GPU chunk by chunk, checked against the
// exact prefix computed on the host.
//
// A running total is a prefix: output i is init + x[0] + ... + x[i]. CUB's
// DeviceScan needs the whole input on the device; chunkpipe::scan passes a
// carry from each chunk to the next, so that the input streams through:
//
//   chunkpipe::scan(0.0, Plus{})   init, then an associative operator
//
// Each chunk's kernels wait for the chunk before's (the carry), while the
// copies of other chunks overlap them. The order of combination depends on
// the data alone, so every schedule gives the same bits (scan.hpp says
// which order). Readings here are generated (chunkpipe::generate: reading
// i is a function of i), so no input is ever held in full; the totals go
// to pinned memory.
//
// Build: target `running_totals`, or nvcc -std=c++17 -O3 -arch=sm_90 -I include examples/running_totals.cu
// Run:   ./running_totals [--mib 1024]

#include <chunkpipe/files.hpp>
#include <chunkpipe/pipeline.cuh>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "support.hpp"

namespace {

constexpr const char* kUsage = "usage: running_totals [--mib N (default 1024: MiB of doubles out)]\n";

struct Plus {
  CHUNKPIPE_HOST_DEVICE double operator()(double a, double b) const { return a + b; }
};

// Reading i: a small integer in [0, 1000), so that every total is exact in
// a double and the check can ask for equality.
double reading(std::size_t i) {
  std::uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull;
  return static_cast<double>((h >> 33) % 1000);
}

}  // namespace

int main(int argc, char** argv) {
  long long mib = 1024;
  example::CommandLine cli("running_totals", kUsage);
  cli.integer("--mib", mib, 1, 1 << 16);
  if (const int status = cli.parse(argc, argv); status >= 0) return status;
  if (const int rc = example::require_gpu(); rc != 0) return rc;
  try {
    const std::size_t n = static_cast<std::size_t>(mib) * (std::size_t{1} << 20) / sizeof(double);
    chunkpipe::PinnedArray<double> totals(n);
    std::fill(totals.begin(), totals.end(), -1.0);  // poison: an unwritten total shows

    auto pipe = chunkpipe::make_pipeline(chunkpipe::Options{}, chunkpipe::scan(0.0, Plus{}));
    const auto t0 = example::Clock::now();
    pipe.run(chunkpipe::generate<double>(n, reading), totals);
    const double ms = example::ms_between(t0, example::Clock::now());

    double exact = 0;
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += totals[i] == (exact += reading(i)) ? 0 : 1;
    std::printf("running_totals: %zu readings (%lld MiB of totals) in %.1f ms, %.2f GB/s out; %zu wrong\n", n, mib,
                ms, static_cast<double>(n * sizeof(double)) / (ms * 1e6), wrong);
    const chunkpipe::Geometry& g = pipe.geometry();
    std::printf("  schedule: %s, %d slots, units of %zu elements\n", std::string(chunkpipe::to_string(g.policy)).c_str(),
                g.depth, g.chunk_elems);
    return wrong == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "running_totals: %s\n", e.what());
    return EXIT_FAILURE;
  }
}
