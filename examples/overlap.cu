// SPDX-License-Identifier: MIT
//
// The overlap guide's benchmark ("Serial vs Pipelined"), rebuilt on chunkpipe.
//
// One job, three ways: copy 16 chunks of 4 MiB of float to the GPU, multiply
// every element by a factor `iters` times (a deliberately heavy kernel), copy
// the result back.
//
//   serial     pageable memory, one synchronous cudaMemcpy in, one kernel on
//              the default stream, one synchronous cudaMemcpy out. The
//              "before streams" baseline, written with the plain runtime.
//   naive      pinned memory, chunk by chunk on one stream: chunkpipe's
//              Policy::serial. The async API with no structure; every copy
//              and kernel still waits for the one before it.
//   pipelined  one stream for copies in, one for kernels, one for copies
//              out, chained with events: chunkpipe's Policy::stage_streams.
//
// Three things differ from the guide's own program, on purpose:
//   - Its serial variant launches one chunk's grid (FLOATS_PER_CHUNK / 256
//     blocks) over the whole array, so everything past the first 4 MiB comes
//     back unprocessed and the program stops at its own check. Here the grid
//     covers the array.
//   - Its input is all 1.0f. With every element equal, a chunk copied to the
//     wrong place, or twice, looks exactly right. Here the input cycles
//     through 4093 values; 4093 is prime, so the pattern never lines up with
//     a chunk and a misplaced chunk shows.
//   - Every variant gets the same check, bit for bit against one host
//     reference, and a mismatch ends the program with a non-zero status.
//
// Build: part of the chunkpipe build (target `overlap`), or
//   nvcc -std=c++17 -O3 -arch=sm_90 --extended-lambda -I include -o overlap examples/overlap.cu
// Run:   ./overlap [--iters 5000] [--chunks 16] [--runs 5]
//
// The helpers every example and benchmark repeats (device check, command
// line, timing, checks) are in support.hpp.

#include <chunkpipe/pipeline.cuh>

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "support.hpp"

namespace {

// The guide's workload. 1 Mi floats is 4 MiB per chunk; the chunk count,
// and with it the array size, is a command-line knob.
constexpr std::size_t kFloatsPerChunk = std::size_t{1} << 20;
constexpr float kFactor = 1.0000001f;
constexpr unsigned kThreads = 256;

// The input cycles through kPeriod distinct values, so the host reference
// needs only kPeriod evaluations of the kernel's arithmetic, not one per
// element: at 5000 multiplies each, 16 Mi elements would take the host
// longer than the whole benchmark.
constexpr std::size_t kPeriod = 4093;

// Values in [0.5, 1.5): far from zero (no subnormals, where a device that
// flushes them to zero and a host that does not would disagree) and far
// from overflow at any sensible iteration count.
float input_value(std::size_t p) { return 0.5f + static_cast<float>(p) / static_cast<float>(kPeriod); }

// The kernel's arithmetic, as a functor. chunkpipe writes the kernel around
// it for the two pipelined variants; the serial variant's plain kernel calls
// it too, and the host reference calls it on the CPU. A chain of multiplies
// has nothing to contract into an FMA, so the GPU and the CPU round every
// step identically and the results must match bit for bit, as the guide
// says: same float operations, in the same order.
struct Scale {
  float factor;
  int iters;
  CHUNKPIPE_HOST_DEVICE float operator()(float v) const {
#ifdef __CUDA_ARCH__
#pragma unroll 16  // a runtime trip count: unrolling keeps the loop overhead off the multiplies
#endif
    for (int it = 0; it < iters; ++it) v *= factor;
    return v;
  }
};

// The serial variant's kernel: one thread per element, in place, as in the
// guide. Launch assumption: gridDim.x * blockDim.x >= n.
__global__ void scale_kernel(float* data, std::size_t n, Scale scale) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) data[i] = scale(data[i]);
}

// ---------------------------------------------------------------------------
// The three variants. Each returns once every output element is on the host.

// serial: the whole array in one synchronous copy from pageable memory (the
// driver stages it through a pinned buffer of its own, at a fraction of the
// link's speed), one kernel on the legacy default stream, one synchronous
// copy back. Nothing overlaps anything.
void run_serial(const float* in, float* out, float* d_data, std::size_t n, const Scale& scale) {
  const std::size_t bytes = n * sizeof(float);
  CHUNKPIPE_CUDA_TRY(cudaMemcpy(d_data, in, bytes, cudaMemcpyHostToDevice));
  // Enough blocks for the whole array. The guide launched FLOATS_PER_CHUNK /
  // 256 blocks here, one chunk's worth, and so processed only the first chunk.
  const auto blocks = static_cast<unsigned>((n + kThreads - 1) / kThreads);
  scale_kernel<<<blocks, kThreads>>>(d_data, n, scale);
  CHUNKPIPE_CUDA_TRY(cudaGetLastError());
  // Waits for the kernel (same stream) and returns when the data is in `out`.
  CHUNKPIPE_CUDA_TRY(cudaMemcpy(out, d_data, bytes, cudaMemcpyDeviceToHost));
}

// naive and pipelined are the same pipeline type with two policies. chunkpipe
// owns the streams, the events and the device slots; the slots are a ring of
// `depth` chunks, so the device never holds the whole array (the guide gave
// every chunk its own place in a full-size device array).
using Pipeline = chunkpipe::ChunkedPipeline<chunkpipe::Map<Scale>>;

Pipeline make_naive(const Scale& scale) {
  chunkpipe::Options options;
  options.chunk_elems = kFloatsPerChunk;
  // One stream, one slot: copy in, kernel, copy out, chunk after chunk. This
  // is what "converting to async" without restructuring buys: nothing.
  options.policy = chunkpipe::Policy::serial;
  return Pipeline(options, chunkpipe::Map<Scale>{scale});
}

Pipeline make_pipelined(const Scale& scale) {
  chunkpipe::Options options;
  options.chunk_elems = kFloatsPerChunk;
  // The guide's three streams chained with events, over three slots: chunk
  // k+1 copies in while chunk k computes and chunk k-1 copies out. Three is
  // the fewest slots that lets all three be in flight at once.
  options.policy = chunkpipe::Policy::stage_streams;
  options.depth = 3;
  return Pipeline(options, chunkpipe::Map<Scale>{scale});
}

// ---------------------------------------------------------------------------
// Checking.

// Compares every element, bit for bit, with the reference for its input
// value; names the first wrong element and its chunk.
bool verify(const float* got, std::size_t n, const std::vector<float>& ref_table, const char* what) {
  for (std::size_t i = 0, p = 0; i < n; ++i, p = (p + 1 == kPeriod) ? 0 : p + 1) {
    if (!example::same_bits(got[i], ref_table[p])) {
      std::fprintf(stderr, "%s: WRONG at %zu (chunk %zu): got %.9g, want %.9g\n", what, i, i / kFloatsPerChunk,
                   static_cast<double>(got[i]), static_cast<double>(ref_table[p]));
      return false;
    }
  }
  std::printf("%-12s results OK (bit for bit)\n", what);
  return true;
}

// ---------------------------------------------------------------------------
// Command line.

struct Args {
  long long iters = 5000;
  long long chunks = 16;
  long long runs = 5;
};

const char* const kUsage =
    "overlap: the overlap guide's serial, naive and pipelined variants, on chunkpipe\n"
    "usage: overlap [--iters N] [--chunks N] [--runs N]\n"
    "  --iters N    multiplies per element, the kernel's weight (default 5000)\n"
    "  --chunks N   chunks of 4 MiB of float; the array is N x 4 MiB (default 16)\n"
    "  --runs N     timed runs per variant, after one verified warm-up (default 5)\n"
    "  --help       this text\n";

// Reads "--name N" or "--name=N". Returns -1 to go on, or the exit status
// to leave with: 0 after --help, 2 after bad input.
int parse_args(int argc, char** argv, Args& args) {
  return example::CommandLine("overlap", kUsage)
      .integer("--iters", args.iters, 0, 1000000)
      .integer("--chunks", args.chunks, 1, 1024)
      .integer("--runs", args.runs, 1, 1000)
      .parse(argc, argv);
}

// ---------------------------------------------------------------------------

int run(const Args& args) {
  const std::size_t chunks = static_cast<std::size_t>(args.chunks);
  const std::size_t n = chunks * kFloatsPerChunk;
  const int runs = static_cast<int>(args.runs);
  const Scale scale{kFactor, static_cast<int>(args.iters)};

  const cudaDeviceProp prop = example::current_gpu();
  std::printf("GPU: %s  (asyncEngineCount = %d)\n", prop.name, prop.asyncEngineCount);
  if (prop.asyncEngineCount == 0) {
    std::printf("NOTE: no async copy engine: copy/kernel overlap is not possible on this device\n");
  }
  std::printf("%zu chunks of 4 MiB = %zu MiB each way, %d multiplies per element, mean of %d runs\n\n", chunks,
              n * sizeof(float) >> 20, scale.iters, runs);

  // The reference: the kernel's arithmetic run on the CPU, once per distinct
  // input value.
  std::vector<float> ref_table(kPeriod);
  for (std::size_t p = 0; p < kPeriod; ++p) ref_table[p] = scale(input_value(p));

  // Pageable buffers (std::vector is plain malloc'd memory) for the serial
  // baseline, pinned ones for the two chunked variants, as in the guide.
  // (Given pageable ranges, chunkpipe would stage them through pinned slots
  // of its own; see saxpy.cu. Here the chunked variants compare schedules.)
  std::vector<float> in_pageable(n), out_pageable(n);
  chunkpipe::PinnedArray<float> in_pinned(n), out_pinned(n);
  for (std::size_t i = 0, p = 0; i < n; ++i, p = (p + 1 == kPeriod) ? 0 : p + 1) {
    in_pageable[i] = input_value(p);
    in_pinned.data()[i] = input_value(p);
  }
  chunkpipe::DeviceBuffer d_data(n * sizeof(float));  // the serial variant's whole array
  auto* d_floats = reinterpret_cast<float*>(d_data.data());

  // chunkpipe::pinned() says the memory is page-locked, so the pipeline
  // copies it directly instead of staging it.
  const auto in = chunkpipe::pinned(in_pinned);
  const auto out = chunkpipe::pinned(out_pinned);
  Pipeline naive = make_naive(scale);
  Pipeline pipelined = make_pipelined(scale);

  auto serial_once = [&] { run_serial(in_pageable.data(), out_pageable.data(), d_floats, n, scale); };
  auto naive_once = [&] { naive.run(in, out); };
  auto pipelined_once = [&] { pipelined.run(in, out); };

  // Correctness first. Each variant's first run writes over a poisoned
  // output (NaN in every float, so an element nobody wrote can never pass
  // for a result) and is checked; it is also the warm-up that pays one-time
  // costs (module loading, the pipelines' slot allocation), so the timed
  // runs below do not.
  example::poison(out_pageable.data(), n);
  serial_once();
  if (!verify(out_pageable.data(), n, ref_table, "serial")) return EXIT_FAILURE;
  example::poison(out_pinned.data(), n);
  naive_once();
  if (!verify(out_pinned.data(), n, ref_table, "naive")) return EXIT_FAILURE;
  example::poison(out_pinned.data(), n);
  pipelined_once();
  if (!verify(out_pinned.data(), n, ref_table, "pipelined")) return EXIT_FAILURE;

  // Mean wall time of `runs` calls each. Every call returns only after its
  // work is complete, so the clock never measures just the enqueueing (the
  // lesson's "you timed the enqueue, not the work").
  const double serial_ms = example::mean_ms(runs, serial_once);
  const double naive_ms = example::mean_ms(runs, naive_once);
  const double pipe_ms = example::mean_ms(runs, pipelined_once);

  const auto& g = pipelined.geometry();
  std::printf("\n%-12s %10s %12s   %s\n", "variant", "time (ms)", "vs serial", "how");
  std::printf("%-12s %10.2f %11.2fx   pageable, cudaMemcpy + 1 kernel\n", "serial", serial_ms, 1.0);
  std::printf("%-12s %10.2f %11.2fx   pinned, chunkpipe serial: 1 stream, 1 slot\n", "naive", naive_ms,
              serial_ms / naive_ms);
  std::printf("%-12s %10.2f %11.2fx   pinned, chunkpipe %s: 3 streams, %d slots\n", "pipelined", pipe_ms,
              serial_ms / pipe_ms, std::string(chunkpipe::to_string(g.policy)).c_str(), g.depth);

  // The table's "vs serial" mixes two effects. naive differs from serial in
  // its memory (pinned, not pageable) and in nothing that overlaps, so
  // naive/serial is the price of pageable memory; pipelined differs from
  // naive only in its schedule, so pipelined/naive is the overlap itself.
  std::printf("\nnaive vs serial:     %.2fx  pinned instead of pageable memory; no overlap in either\n",
              serial_ms / naive_ms);
  std::printf("pipelined vs naive:  %.2fx  the overlap: same memory, same chunks, three streams\n",
              naive_ms / pipe_ms);
  return EXIT_SUCCESS;
}

}  // namespace

int main(int argc, char** argv) {
  // Reads the command line, checks for a GPU and runs (support.hpp). An
  // exception is printed and gives EXIT_FAILURE.
  // chunkpipe::cuda_error says which call failed and where;
  // chunkpipe::config_error says which setting or range was wrong.
  return example::run_example("overlap", argc, argv, parse_args, run);
}
