// SPDX-License-Identifier: MIT
//
// saxpy, z = a * x + y, over data that lives in ordinary std::vectors.
//
// Most data a program wants on the GPU is not pinned: it sits in
// std::vectors that came from a parser, a file or a previous step. A plain
// cudaMemcpyAsync from such pageable memory quietly runs synchronously,
// staged by the driver at 7 to 12 GB/s on the test machine (shared/DEVICE.md),
// and nothing overlaps. chunkpipe stages pageable ranges itself instead: its
// host threads copy each chunk into one of the pipeline's pinned slots while
// the GPU works on earlier chunks, and copy results out of pinned slots the
// same way.
//
// This example shows the other thing saxpy needs: two inputs and one output
// per element. Map's functor takes one argument per input, in the order of
// chunkpipe::inputs(x, y), and its return value fills chunkpipe::outputs(z).
//
// It runs the same pipeline twice, from the std::vectors (staged) and from
// pinned copies of them (copied directly), so the cost of pageable memory is
// a number you can read rather than a warning.
//
// Build: part of the chunkpipe build (target `saxpy`), or
//   nvcc -std=c++17 -O3 -arch=sm_90 --extended-lambda -I include -o saxpy examples/saxpy.cu
// Run:   ./saxpy [--elems N] [--runs 5]
//
// The helpers every example and benchmark repeats (device check, command
// line, timing, checks) are in support.hpp.

#include <chunkpipe/pipeline.cuh>

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "support.hpp"

namespace {

// The stage: two inputs, one output. Map requires a trivially copyable
// functor (it is copied to the device by value, `a` included) whose call
// operator runs on the device; CHUNKPIPE_HOST_DEVICE also lets the host
// reference call the very same code. fmaf rounds once on both sides, so the
// GPU and the CPU agree bit for bit.
struct Saxpy {
  float a;
  CHUNKPIPE_HOST_DEVICE float operator()(float x, float y) const { return fmaf(a, x, y); }
};

// Deterministic pseudo-random floats in [-1, 1): an integer hash of the
// index (example::mix), so filling tens of millions of elements stays fast
// even in a debug build, and x and y differ (different seeds).
float pattern(std::size_t i, std::uint32_t seed) {
  return static_cast<float>(example::mix(i, seed) >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

// Every element against the host reference, bit for bit.
bool verify(const float* z, const float* x, const float* y, std::size_t n, const Saxpy& f, const char* what) {
  for (std::size_t i = 0; i < n; ++i) {
    const float want = f(x[i], y[i]);
    if (!example::same_bits(z[i], want)) {
      std::fprintf(stderr, "%s: WRONG at %zu: got %.9g, want %.9g (x = %.9g, y = %.9g)\n", what, i,
                   static_cast<double>(z[i]), static_cast<double>(want), static_cast<double>(x[i]),
                   static_cast<double>(y[i]));
      return false;
    }
  }
  std::printf("%-10s results OK (bit for bit, %zu elements)\n", what, n);
  return true;
}

// ---------------------------------------------------------------------------
// Command line.

struct Args {
  long long elems = (1ll << 25) + 1234;  // 32 Mi + a ragged last chunk
  long long runs = 5;
};

const char* const kUsage =
    "saxpy: z = a * x + y from pageable std::vectors, through chunkpipe\n"
    "usage: saxpy [--elems N] [--runs N]\n"
    "  --elems N   elements per array (default 33555666: 128 MiB of float, plus a ragged tail)\n"
    "  --runs N    timed runs per row, after one verified warm-up (default 5)\n"
    "  --help      this text\n";

// Reads "--name N" or "--name=N". Returns -1 to go on, or the exit status
// to leave with: 0 after --help, 2 after bad input.
int parse_args(int argc, char** argv, Args& args) {
  return example::CommandLine("saxpy", kUsage)
      .integer("--elems", args.elems, 1, 1ll << 30)
      .integer("--runs", args.runs, 1, 1000)
      .parse(argc, argv);
}

// ---------------------------------------------------------------------------

int run(const Args& args) {
  const auto n = static_cast<std::size_t>(args.elems);
  const int runs = static_cast<int>(args.runs);
  const Saxpy saxpy{2.5f};

  const cudaDeviceProp prop = example::current_gpu();
  std::printf("GPU: %s\n", prop.name);

  // The data, as most programs hold it: pageable std::vectors.
  std::vector<float> x(n), y(n), z(n);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = pattern(i, 1);
    y[i] = pattern(i, 2);
  }

  // The library's defaults: the automatic policy (one stream per kind of
  // work), three slots, 2 Mi elements per chunk and per array. The first run
  // allocates the device slots and, because the data is pageable, the pinned
  // staging slots; later runs reuse them.
  chunkpipe::ChunkedPipeline<chunkpipe::Map<Saxpy>> pipe(chunkpipe::Options{}, chunkpipe::Map<Saxpy>{saxpy});
  const auto& g = pipe.geometry();
  std::printf("%zu elements per array; pipeline: %s, %d slots of %zu elements\n\n", n,
              std::string(chunkpipe::to_string(g.policy)).c_str(), g.depth, g.chunk_elems);

  // chunkpipe::pageable() says outright that these ranges must be staged.
  // Left unmarked, chunkpipe asks the CUDA runtime and reaches the same
  // answer; marking them documents the cost where the run is written.
  auto staged_run = [&] {
    pipe.run(chunkpipe::inputs(chunkpipe::pageable(x), chunkpipe::pageable(y)),
             chunkpipe::outputs(chunkpipe::pageable(z)));
  };

  // For comparison: pinned copies of the same arrays, copied directly by the
  // copy engines. Pinning costs tens to hundreds of milliseconds per GiB, so
  // it pays only for buffers that are reused; that is why chunkpipe pins its
  // small slots once rather than your arrays on every run.
  chunkpipe::PinnedArray<float> px(n), py(n), pz(n);
  std::memcpy(px.data(), x.data(), n * sizeof(float));
  std::memcpy(py.data(), y.data(), n * sizeof(float));
  auto direct_run = [&] {
    pipe.run(chunkpipe::inputs(chunkpipe::pinned(px), chunkpipe::pinned(py)), chunkpipe::outputs(chunkpipe::pinned(pz)));
  };

  // Correctness first; each first run is also the warm-up. The output is
  // poisoned first (NaN in every float), so an element nobody wrote can
  // never pass for a result.
  example::poison(z.data(), n);
  staged_run();
  if (!verify(z.data(), x.data(), y.data(), n, saxpy, "pageable")) return EXIT_FAILURE;
  example::poison(pz.data(), n);
  direct_run();
  if (!verify(pz.data(), px.data(), py.data(), n, saxpy, "pinned")) return EXIT_FAILURE;

  // Mean wall time of `runs` calls each; every call returns only when its
  // output is on the host, so this is the work, not the enqueueing.
  const double staged_ms = example::mean_ms(runs, staged_run);
  const double direct_ms = example::mean_ms(runs, direct_run);

  // Bytes that cross the link per run: x and y in, z out.
  const double gb = 3.0 * static_cast<double>(n * sizeof(float)) / 1e9;
  std::printf("\n%-30s %10s %12s\n", "host memory", "time (ms)", "GB/s moved");
  std::printf("%-30s %10.2f %12.1f\n", "pageable std::vector (staged)", staged_ms, gb / (staged_ms / 1e3));
  std::printf("%-30s %10.2f %12.1f\n", "pinned (copied directly)", direct_ms, gb / (direct_ms / 1e3));
  std::printf("\nGB/s moved: %.0f MiB (x and y in, z out) per run over its wall time.\n",
              3.0 * static_cast<double>(n * sizeof(float)) / (1 << 20));
  std::printf("The pageable row also pays a host memcpy of every byte into and out of pinned slots,\n"
              "done by chunkpipe's host threads while the GPU works on other chunks.\n");
  return EXIT_SUCCESS;
}

}  // namespace

int main(int argc, char** argv) {
  // Reads the command line, checks for a GPU and runs (support.hpp). An
  // exception is printed and gives EXIT_FAILURE.
  // chunkpipe::cuda_error says which call failed and where;
  // chunkpipe::config_error says which setting or range was wrong.
  return example::run_example("saxpy", argc, argv, parse_args, run);
}
