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

#include <chunkpipe/pipeline.cuh>

#include <cuda_runtime.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

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
// index, so filling tens of millions of elements stays fast even in a debug
// build, and x and y differ (different seeds).
float pattern(std::size_t i, std::uint32_t seed) {
  std::uint32_t h = (static_cast<std::uint32_t>(i) * 0x9E3779B1u) ^ seed;
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return static_cast<float>(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

// Page-locked host memory for `n` elements of T. chunkpipe::PinnedBuffer
// owns the bytes (cudaMallocHost, freed by its destructor); this adds the
// element type, and data() and size() so chunkpipe takes it as a range.
template <class T>
class PinnedArray {
 public:
  explicit PinnedArray(std::size_t n) : n_(n), bytes_(n * sizeof(T)) {}
  T* data() const noexcept { return reinterpret_cast<T*>(bytes_.data()); }
  std::size_t size() const noexcept { return n_; }

 private:
  std::size_t n_;
  chunkpipe::PinnedBuffer bytes_;
};

// NaN in every float: an element nobody wrote can never pass for a result.
void poison(float* p, std::size_t n) { std::memset(p, 0xFF, n * sizeof(float)); }

bool same_bits(float a, float b) {
  std::uint32_t u = 0, v = 0;
  std::memcpy(&u, &a, sizeof u);
  std::memcpy(&v, &b, sizeof v);
  return u == v;
}

// Every element against the host reference, bit for bit.
bool verify(const float* z, const float* x, const float* y, std::size_t n, const Saxpy& f, const char* what) {
  for (std::size_t i = 0; i < n; ++i) {
    const float want = f(x[i], y[i]);
    if (!same_bits(z[i], want)) {
      std::fprintf(stderr, "%s: WRONG at %zu: got %.9g, want %.9g (x = %.9g, y = %.9g)\n", what, i,
                   static_cast<double>(z[i]), static_cast<double>(want), static_cast<double>(x[i]),
                   static_cast<double>(y[i]));
      return false;
    }
  }
  std::printf("%-10s results OK (bit for bit, %zu elements)\n", what, n);
  return true;
}

// Mean wall time of `runs` calls; each call returns only when its output is
// on the host, so this is the work, not the enqueueing.
template <class F>
double mean_ms(int runs, F&& run_once) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < runs; ++r) run_once();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / runs;
}

// ---------------------------------------------------------------------------
// Command line and device check.

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
  struct Option {
    const char* name;
    long long* value;
    long long min, max;
  };
  const Option options[] = {{"--elems", &args.elems, 1, 1ll << 30}, {"--runs", &args.runs, 1, 1000}};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("%s", kUsage);
      return 0;
    }
    const Option* option = nullptr;
    std::string text;
    for (const Option& o : options) {
      const std::string name = o.name;
      if (arg == name && i + 1 < argc) {
        option = &o;
        text = argv[++i];
        break;
      }
      if (arg.rfind(name + "=", 0) == 0) {
        option = &o;
        text = arg.substr(name.size() + 1);
        break;
      }
    }
    if (option == nullptr) {
      std::fprintf(stderr, "saxpy: unknown or incomplete option '%s'\n%s", arg.c_str(), kUsage);
      return 2;
    }
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno != 0 || v < option->min || v > option->max) {
      std::fprintf(stderr, "saxpy: %s wants an integer from %lld to %lld, got '%s'\n", option->name, option->min,
                   option->max, text.c_str());
      return 2;
    }
    *option->value = v;
  }
  return -1;
}

// 0 when there is a CUDA device; otherwise says why and returns 77, which
// CTest reports as "skipped" rather than passed or failed.
int require_gpu() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::printf("no CUDA device found: %s; this example needs a GPU\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount reports 0 devices");
    return 77;
  }
  return 0;
}

// ---------------------------------------------------------------------------

int run(const Args& args) {
  const auto n = static_cast<std::size_t>(args.elems);
  const int runs = static_cast<int>(args.runs);
  const Saxpy saxpy{2.5f};

  int device = 0;
  CHUNKPIPE_CUDA_TRY(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CHUNKPIPE_CUDA_TRY(cudaGetDeviceProperties(&prop, device));
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
  PinnedArray<float> px(n), py(n), pz(n);
  std::memcpy(px.data(), x.data(), n * sizeof(float));
  std::memcpy(py.data(), y.data(), n * sizeof(float));
  auto direct_run = [&] {
    pipe.run(chunkpipe::inputs(chunkpipe::pinned(px), chunkpipe::pinned(py)), chunkpipe::outputs(chunkpipe::pinned(pz)));
  };

  // Correctness first; each first run is also the warm-up.
  poison(z.data(), n);
  staged_run();
  if (!verify(z.data(), x.data(), y.data(), n, saxpy, "pageable")) return EXIT_FAILURE;
  poison(pz.data(), n);
  direct_run();
  if (!verify(pz.data(), px.data(), py.data(), n, saxpy, "pinned")) return EXIT_FAILURE;

  const double staged_ms = mean_ms(runs, staged_run);
  const double direct_ms = mean_ms(runs, direct_run);

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
  Args args;
  if (const int status = parse_args(argc, argv, args); status >= 0) return status;
  if (const int status = require_gpu(); status != 0) return status;
  try {
    return run(args);
  } catch (const std::exception& e) {
    // chunkpipe::cuda_error says which call failed and where;
    // chunkpipe::config_error says which setting or range was wrong.
    std::fprintf(stderr, "saxpy: %s\n", e.what());
    return EXIT_FAILURE;
  }
}
