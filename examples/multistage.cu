// SPDX-License-Identifier: MIT
//
// Several stages in a row, with the element type changing along the way.
//
// A 12-bit sensor delivers raw codes (uint16_t, 0 to 4095). We want them as
// symmetric int8 values, ready for an int8 model or for compact storage:
//
//   raw code  --Calibrate-->  float, in quantisation steps
//             --Clamp------>  float, within [-127, 127]
//             --Quantise--->  int8_t
//
// Each stage is a chunkpipe::Map. The element types flow from the run's
// input through each functor's return type, and chunkpipe gives every slot
// a device buffer for each intermediate, so the floats in the middle never
// exist on the host and never cross PCIe: 2 bytes per element go in, 1 byte
// comes back. The output range must have exactly the type the last stage
// returns (int8_t here); anything else is a compile-time error.
//
// Each Map is its own kernel reading and writing its own slot buffers. When
// the stages are yours to change, one fused functor does the same work in
// one kernel with no intermediates in device memory; the program runs both
// and checks they agree bit for bit. Here the link, not device memory, sets
// the pace, so the two should take about the same time: splitting work into
// stages for readability is cheap while the copies dominate.
//
// Build: part of the chunkpipe build (target `multistage`), or
//   nvcc -std=c++17 -O3 -arch=sm_90 --extended-lambda -I include -o multistage examples/multistage.cu
// Run:   ./multistage [--elems N] [--runs 5]
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

// The raw codes a 12-bit converter can produce.
constexpr std::size_t kCodes = 4096;

// The three stages. Each is trivially copyable (Map copies it to the device
// by value) and CHUNKPIPE_HOST_DEVICE, so the host reference below runs the
// very same code. None of them multiplies and then adds, so there is nothing
// the device compiler could contract into an FMA that the host would round
// differently: the two must agree bit for bit.

// uint16_t -> float: offset and gain, here chosen so the far ends of the
// range overshoot +-127 steps and the clamp has work to do.
struct Calibrate {
  float zero;  // the code that reads as 0
  float gain;  // quantisation steps per code
  CHUNKPIPE_HOST_DEVICE float operator()(std::uint16_t code) const {
    return (static_cast<float>(code) - zero) * gain;
  }
};

// float -> float: symmetric int8 range. -128 is left out on purpose, as
// symmetric quantisation does, so that it can mark unwritten output below.
struct Clamp {
  float limit;
  CHUNKPIPE_HOST_DEVICE float operator()(float v) const { return fminf(fmaxf(v, -limit), limit); }
};

// float -> int8_t: round to nearest, ties to even, on both sides.
struct Quantise {
  CHUNKPIPE_HOST_DEVICE std::int8_t operator()(float v) const { return static_cast<std::int8_t>(rintf(v)); }
};

// The same work as one stage: the three functors called in a row.
struct Fused {
  Calibrate calibrate;
  Clamp clamp;
  Quantise quantise;
  CHUNKPIPE_HOST_DEVICE std::int8_t operator()(std::uint16_t code) const {
    return quantise(clamp(calibrate(code)));
  }
};

// Deterministic pseudo-random 12-bit codes: an integer hash of the index.
std::uint16_t raw_code(std::size_t i) {
  std::uint32_t h = static_cast<std::uint32_t>(i) * 0x9E3779B1u;
  h ^= h >> 15;
  h *= 0x2C1B3C6Du;
  h ^= h >> 12;
  return static_cast<std::uint16_t>(h % kCodes);
}

// Quantise never produces -128, so it marks every element nobody wrote.
constexpr std::int8_t kPoison = -128;

// The output depends only on the raw code, so the host reference is a table
// of 4096 entries, computed with the functors themselves, and every element
// is checked against it.
bool verify(const std::int8_t* got, const std::uint16_t* codes, std::size_t n, const std::vector<std::int8_t>& lut,
            const char* what) {
  for (std::size_t i = 0; i < n; ++i) {
    if (got[i] != lut[codes[i]]) {
      std::fprintf(stderr, "%s: WRONG at %zu: got %d, want %d (raw code %u)%s\n", what, i, got[i], lut[codes[i]],
                   static_cast<unsigned>(codes[i]), got[i] == kPoison ? ": never written" : "");
      return false;
    }
  }
  std::printf("%-16s results OK (bit for bit, %zu elements)\n", what, n);
  return true;
}

// ---------------------------------------------------------------------------
// Command line.

struct Args {
  long long elems = (1ll << 25) + 321;  // 32 Mi codes, and a ragged last chunk
  long long runs = 5;
};

const char* const kUsage =
    "multistage: calibrate, clamp and quantise sensor codes to int8 in three chunkpipe stages\n"
    "usage: multistage [--elems N] [--runs N]\n"
    "  --elems N   raw codes to convert (default 33554753: 64 MiB in, 32 MiB out)\n"
    "  --runs N    timed runs per pipeline, after one verified warm-up (default 5)\n"
    "  --help      this text\n";

// Reads "--name N" or "--name=N". Returns -1 to go on, or the exit status
// to leave with: 0 after --help, 2 after bad input.
int parse_args(int argc, char** argv, Args& args) {
  return example::CommandLine("multistage", kUsage)
      .integer("--elems", args.elems, 1, 1ll << 31)
      .integer("--runs", args.runs, 1, 1000)
      .parse(argc, argv);
}

// ---------------------------------------------------------------------------

int run(const Args& args) {
  const auto n = static_cast<std::size_t>(args.elems);
  const int runs = static_cast<int>(args.runs);

  const cudaDeviceProp prop = example::current_gpu();
  std::printf("GPU: %s\n", prop.name);

  const Calibrate calibrate{2047.5f, 0.08f};  // codes 0..4095 map to about -163.8..163.8 steps
  const Clamp clamp{127.0f};
  const Quantise quantise{};

  // Host reference: every possible code through the same three functors.
  std::vector<std::int8_t> lut(kCodes);
  for (std::size_t c = 0; c < kCodes; ++c) lut[c] = quantise(clamp(calibrate(static_cast<std::uint16_t>(c))));

  // Pinned on both ends, so chunkpipe::pinned() lets the pipeline copy them
  // directly (pageable ranges would be staged; see saxpy.cu).
  chunkpipe::PinnedArray<std::uint16_t> codes(n);
  chunkpipe::PinnedArray<std::int8_t> q(n);
  for (std::size_t i = 0; i < n; ++i) codes.data()[i] = raw_code(i);
  const auto in = chunkpipe::pinned(codes);
  const auto out = chunkpipe::pinned(q);

  // The three-stage pipeline. make_pipeline deduces
  //   ChunkedPipeline<Map<Calibrate>, Map<Clamp>, Map<Quantise>>
  // and the run below deduces the types between them: uint16_t in, float,
  // float, int8_t out.
  chunkpipe::Options options;
  options.chunk_elems = std::size_t{4} << 20;
  // The automatic policy (the default) may cut each 4 Mi window into finer
  // grains, since element-wise stages cannot see chunk boundaries: same
  // memory, smaller first copy in and last copy out. geometry() says what it
  // chose.
  auto staged = chunkpipe::make_pipeline(options, chunkpipe::map(calibrate), chunkpipe::map(clamp),
                                         chunkpipe::map(quantise));
  // The same work in one stage.
  auto fused = chunkpipe::make_pipeline(options, chunkpipe::map(Fused{calibrate, clamp, quantise}));

  const auto& g = staged.geometry();
  std::printf("%zu raw codes; both pipelines: %s, %d slots of %zu elements\n\n", n,
              std::string(chunkpipe::to_string(g.policy)).c_str(), g.depth, g.chunk_elems);

  auto staged_once = [&] { staged.run(in, out); };
  auto fused_once = [&] { fused.run(in, out); };

  // Correctness first; each first run is also the warm-up.
  std::memset(q.data(), kPoison, n);
  staged_once();
  if (!verify(q.data(), codes.data(), n, lut, "three stages")) return EXIT_FAILURE;
  std::memset(q.data(), kPoison, n);
  fused_once();
  if (!verify(q.data(), codes.data(), n, lut, "one fused stage")) return EXIT_FAILURE;

  // Mean wall time of `runs` calls each; every call returns only when its
  // output is on the host, so this is the work, not the enqueueing.
  const double staged_ms = example::mean_ms(runs, staged_once);
  const double fused_ms = example::mean_ms(runs, fused_once);

  // Bytes over the link per run: 2 per element in, 1 out. The floats
  // between the stages stay in device memory.
  const double gb = static_cast<double>(n * (sizeof(std::uint16_t) + sizeof(std::int8_t))) / 1e9;
  std::printf("\n%-42s %10s %12s\n", "pipeline", "time (ms)", "GB/s moved");
  std::printf("%-42s %10.2f %12.1f\n", "calibrate -> clamp -> quantise (3 Maps)", staged_ms, gb / (staged_ms / 1e3));
  std::printf("%-42s %10.2f %12.1f\n", "fused (1 Map)", fused_ms, gb / (fused_ms / 1e3));

  // A short look at what came out: the share of values at the ends of the
  // range, nearly all of them the clamp's work.
  std::size_t at_ends = 0;
  for (std::size_t i = 0; i < n; ++i) at_ends += (q.data()[i] == 127 || q.data()[i] == -127) ? 1 : 0;
  std::printf("\n%.1f%% of the values sit at +-127; the types went uint16_t -> float -> float -> int8_t\n",
              100.0 * static_cast<double>(at_ends) / static_cast<double>(n));
  return EXIT_SUCCESS;
}

}  // namespace

int main(int argc, char** argv) {
  // Reads the command line, checks for a GPU and runs (support.hpp). An
  // exception is printed and gives EXIT_FAILURE.
  // chunkpipe::cuda_error says which call failed and where;
  // chunkpipe::config_error says which setting or range was wrong.
  return example::run_example("multistage", argc, argv, parse_args, run);
}
