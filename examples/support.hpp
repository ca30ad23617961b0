// SPDX-License-Identifier: MIT
//
// The support code every example and benchmark needs and none of them is
// about, written once: the device check, the command line, main() itself,
// timing, the small checking helpers (poisoning an output, comparing
// floats bit for bit, a hash for test data), and the settings of the
// double-buffering lesson that double_buffer and predict rebuild. Each
// program keeps only its own subject.
//
// Not part of chunkpipe (the library is include/chunkpipe/). The programs
// include it as "support.hpp": CMake puts examples/ on their include path
// (cmake/chunkpipe-dev.cmake), and an example built by hand finds it next
// to its own source.
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/simulate.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace example {

// ---------------------------------------------------------------------------
// The device.

/// Why there is no usable CUDA device, in plain words: no driver at all, a
/// driver older than this program's CUDA runtime, or no device. `err` and
/// `count` are what cudaGetDeviceCount gave.
inline std::string no_gpu_reason(cudaError_t err, int count) {
  int driver = 0, runtime = 0;
  (void)cudaDriverGetVersion(&driver);  // 0 when no driver is installed
  (void)cudaRuntimeGetVersion(&runtime);
  auto version = [](int v) { return std::to_string(v / 1000) + '.' + std::to_string(v % 1000 / 10); };
  if (driver == 0) return "no CUDA device or driver found: this machine has no NVIDIA driver";
  if (err == cudaSuccess && count == 0) return "no CUDA device found: the NVIDIA driver reports none";
  if (err == cudaErrorNoDevice) return "no CUDA device found: the NVIDIA driver sees none";
  if (err == cudaErrorInsufficientDriver) {
    return "no usable CUDA driver: the installed NVIDIA driver supports CUDA " + version(driver) +
           ", older than this program's CUDA runtime " + version(runtime) + "; update the driver";
  }
  return std::string("no usable CUDA device: ") + cudaGetErrorString(err);
}

/// 0 when there is a CUDA device. Otherwise prints, as its first line, why
/// in plain words, e.g.
///   no CUDA device or driver found: this machine has no NVIDIA driver; this <kind> needs a GPU
/// then, indented, what the CUDA runtime said, and returns 77, which CTest
/// reports as "skipped" rather than passed or failed. `kind` says what the
/// program is: "example" or "benchmark".
inline int require_gpu(const char* kind = "example") {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::printf("%s; this %s needs a GPU\n", no_gpu_reason(err, count).c_str(), kind);
    if (err != cudaSuccess) {
      std::printf("  (CUDA runtime: %s, \"%s\")\n", cudaGetErrorName(err), cudaGetErrorString(err));
    }
    return 77;
  }
  return 0;
}

/// The properties (name, copy engines, ...) of the current CUDA device:
/// device 0 unless the program chose another. Throws chunkpipe::cuda_error.
inline cudaDeviceProp current_gpu() {
  int device = 0;
  CHUNKPIPE_CUDA_TRY(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CHUNKPIPE_CUDA_TRY(cudaGetDeviceProperties(&prop, device));
  return prop;
}

// ---------------------------------------------------------------------------
// The command line.

/// Options written "--name value" or "--name=value": integers within a
/// range, and strings; flags written "--name"; and --help (or -h). Declare
/// the options against the variables that hold their defaults, then parse:
///
///   example::CommandLine cli("overlap", kUsage);
///   cli.integer("--runs", args.runs, 1, 1000);
///   if (const int status = cli.parse(argc, argv); status >= 0) return status;
///
/// parse() returns -1 to go on, or the exit status to leave with:
///   0  after --help: the usage text went to stdout;
///   2  after bad input, said on stderr: an unknown option or one missing its
///      value (with the usage text), or an integer that is malformed or out
///      of its range.
/// Options are matched in the order they were declared.
class CommandLine {
 public:
  CommandLine(std::string program, std::string usage) : program_(std::move(program)), usage_(std::move(usage)) {}

  /// An integer option from `min` to `max` (both within Int's range).
  template <class Int>
  CommandLine& integer(const char* name, Int& value, long long min, long long max) {
    static_assert(std::is_integral_v<Int>, "CommandLine::integer stores into an integer");
    Option o(name, Kind::integer);
    o.min = min;
    o.max = max;
    o.set_integer = [&value](long long v) { value = static_cast<Int>(v); };
    options_.push_back(std::move(o));
    return *this;
  }

  /// A string option: any value, the empty string included.
  CommandLine& text(const char* name, std::string& value) {
    Option o(name, Kind::text);
    o.text = &value;
    options_.push_back(std::move(o));
    return *this;
  }

  /// A flag: "--name" alone sets `value` to true.
  CommandLine& flag(const char* name, bool& value) {
    Option o(name, Kind::flag);
    o.flag = &value;
    options_.push_back(std::move(o));
    return *this;
  }

  /// Reads argv[1..argc-1]; returns -1, 0 or 2 as said above.
  int parse(int argc, char** argv) const {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--help" || arg == "-h") {
        std::printf("%s", usage_.c_str());
        return 0;
      }
      const Option* option = nullptr;
      std::string value;
      for (const Option& o : options_) {
        if (o.kind == Kind::flag) {
          if (arg == o.name) {
            option = &o;
            break;
          }
          continue;
        }
        if (arg == o.name && i + 1 < argc) {
          option = &o;
          value = argv[++i];
          break;
        }
        if (arg.rfind(o.name + "=", 0) == 0) {
          option = &o;
          value = arg.substr(o.name.size() + 1);
          break;
        }
      }
      if (option == nullptr) {
        std::fprintf(stderr, "%s: unknown or incomplete option '%s'\n%s", program_.c_str(), arg.c_str(),
                     usage_.c_str());
        return 2;
      }
      switch (option->kind) {
        case Kind::flag:
          *option->flag = true;
          break;
        case Kind::text:
          *option->text = value;
          break;
        case Kind::integer: {
          char* end = nullptr;
          errno = 0;
          const long long v = std::strtoll(value.c_str(), &end, 10);
          if (value.empty() || *end != '\0' || errno != 0 || v < option->min || v > option->max) {
            std::fprintf(stderr, "%s: %s wants an integer from %lld to %lld, got '%s'\n", program_.c_str(),
                         option->name.c_str(), option->min, option->max, value.c_str());
            return 2;
          }
          option->set_integer(v);
          break;
        }
      }
    }
    return -1;
  }

 private:
  enum class Kind { integer, text, flag };
  struct Option {
    Option(const char* n, Kind k) : name(n), kind(k) {}
    std::string name;
    Kind kind;
    long long min = 0, max = 0;
    std::function<void(long long)> set_integer;
    std::string* text = nullptr;
    bool* flag = nullptr;
  };

  std::string program_;
  std::string usage_;
  std::vector<Option> options_;
};

/// For the benchmarks' own parsers, whose list options and value rules are
/// their own: the value after the option argv[i], moving i onto it; when
/// there is none, "<option> needs a value" on stderr and exit 2.
inline const char* next_value(int argc, char** argv, int& i) {
  if (i + 1 >= argc) {
    std::fprintf(stderr, "%s needs a value\n", argv[i]);
    std::exit(2);
  }
  return argv[++i];
}

// ---------------------------------------------------------------------------
// The examples' main().

/// An example's whole main(), in order:
///   1. parse(argc, argv, args) reads the command line into `args` (which
///      holds the defaults) and returns -1 to go on, or the exit status to
///      leave with (0 after --help, 2 after bad input);
///   2. require_gpu(): with no CUDA device, 77;
///   3. run(args), whose return value is the exit status. An exception ends
///      the program with "<program>: <what>" on stderr and EXIT_FAILURE.
template <class Args>
int run_example(const char* program, int argc, char** argv, int (*parse)(int, char**, Args&),
                int (*run)(const Args&)) {
  Args args;
  if (const int status = parse(argc, argv, args); status >= 0) return status;
  if (const int status = require_gpu(); status != 0) return status;
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return EXIT_FAILURE;
  }
}

// ---------------------------------------------------------------------------
// Timing. Every pass or run timed here must return only when its work is
// complete (its output on the host, the GPU idle), so that the clock
// measures the work, not the enqueueing (the lesson's "you timed the
// enqueue, not the work").

using Clock = std::chrono::steady_clock;

/// Milliseconds from `t0` to `t1`.
inline double ms_between(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

/// Mean wall time of `runs` calls, in ms, with no warm-up: the caller's
/// first, verified run is the warm-up.
template <class F>
double mean_ms(int runs, F&& run_once) {
  const auto t0 = Clock::now();
  for (int r = 0; r < runs; ++r) run_once();
  return ms_between(t0, Clock::now()) / runs;
}

/// The median, the fastest and the slowest of some timings, in ms.
struct Timing {
  double median = 0, min = 0, max = 0;
};

/// Summarises `ms`, which must not be empty.
inline Timing summarise(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front(), ms.back()};
}

/// One warm-up pass, which also pays the first-run costs (module load, slot
/// allocation), then `runs` (at least 1) timed passes. Each pass ends with
/// the GPU idle, so passes do not overlap and every pass pays its own fill
/// and drain, as a single run would.
template <class Pass>
Timing time_passes(int runs, Pass&& pass) {
  pass();
  std::vector<double> t;
  for (int r = 0; r < runs; ++r) {
    const auto t0 = Clock::now();
    pass();
    t.push_back(ms_between(t0, Clock::now()));
  }
  return summarise(std::move(t));
}

/// Median wall time of `runs` passes after a warm-up, as time_passes.
template <class Pass>
double median_ms(int runs, Pass&& pass) {
  return time_passes(runs, std::forward<Pass>(pass)).median;
}

// ---------------------------------------------------------------------------
// Checking.

/// Sets every byte of `n` elements to 0xFF: NaN in every float or double,
/// all ones in every integer, so that an element nobody wrote can never
/// pass for a result.
template <class T>
void poison(T* p, std::size_t n) {
  static_assert(std::is_trivially_copyable_v<T>, "poison writes bytes");
  std::memset(p, 0xFF, n * sizeof(T));
}

/// Whether `a` and `b` are the same float bit for bit (so NaN can match NaN,
/// and 0 does not match -0).
inline bool same_bits(float a, float b) {
  std::uint32_t x = 0, y = 0;
  std::memcpy(&x, &a, sizeof x);
  std::memcpy(&y, &b, sizeof y);
  return x == y;
}

/// A 32-bit hash of an index and a seed: deterministic pseudo-random test
/// data, fast enough to fill tens of millions of elements even in a debug
/// build; different seeds give different sequences.
inline std::uint32_t mix(std::size_t i, std::uint32_t seed) {
  std::uint32_t h = (static_cast<std::uint32_t>(i) * 0x9E3779B1u) ^ seed;
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return h;
}

// ---------------------------------------------------------------------------
// The lesson.
//
// examples/double_buffer.cu rebuilds the benchmark program of an online CUDA
// course's page on double buffering ("the lesson", its "day 54"); the course
// pages are not in this repository. Its settings, which double_buffer uses
// as defaults and predict as the case it has measurements for, live here
// rather than in the library.

/// One sentence that says what "the lesson" is, for programs to print the
/// first time they name it.
inline constexpr const char* lesson_about =
    "(\"The lesson\" is a page on double buffering, \"day 54\", of an online CUDA course; its benchmark\n"
    "program double_buffer.cu is what examples/double_buffer.cu rebuilds on chunkpipe. The course\n"
    "pages are not in this repository.)\n";

/// The lesson's array: 1 GiB of float.
inline constexpr std::size_t lesson_total_mib = 1024;
inline constexpr std::size_t lesson_elems = (lesson_total_mib << 20) / sizeof(float);
/// The lesson's device window: 64 MiB of float, 16 chunks of the array.
inline constexpr std::size_t lesson_chunk_mib = 64;
inline constexpr std::size_t lesson_chunk_elems = (lesson_chunk_mib << 20) / sizeof(float);
/// Chained FMAs per element in the lesson's kernel.
inline constexpr int lesson_iters = 512;

/// The lesson's workload for the simulator: 1 GiB of float in, 1 GiB out,
/// one kernel that takes `kernel_ms` over the whole array (the lesson's
/// "kernel only" pass), cut into chunks of `chunk_elems`. Throws
/// chunkpipe::config_error for a chunk_elems of 0 or a negative kernel time.
inline chunkpipe::Workload lesson_workload(std::size_t chunk_elems, double kernel_ms) {
  return chunkpipe::map_workload(lesson_elems, chunk_elems, kernel_ms, sizeof(float), sizeof(float));
}

}  // namespace example
