// SPDX-License-Identifier: MIT
//
// file_convert: a file of float32 to a file of float16, through the GPU,
// chunk by chunk.
//
// The data a GPU job reads often starts in a file, and the file may be
// larger than host RAM. Reading it into a std::vector first then fails, or
// pushes the rest of the machine into swap, and leaves the GPU idle while
// the disk works. chunkpipe's file ends avoid both:
//
//   chunkpipe::file_source<float>(in)   reads each chunk straight into one
//                                       of the pipeline's pinned slots;
//   chunkpipe::file_sink<__half>(out)   writes each converted chunk straight
//                                       from its pinned slot.
//
// So at any moment the host holds only the pipeline's slots (a few times
// the chunk size), never the file; and reading chunk k+2, converting chunk
// k+1 and writing chunk k happen at the same time: a host thread reads, the
// copy engines and the SMs do their part, another host thread writes.
//
// The output never exists half-written under its own name: the sink writes
// `out.partial`, flushes it to disk when the run succeeds and only then
// renames it to `out`. If anything fails (a read error, a full disk, a CUDA
// error), the run throws and `out.partial` is removed.
//
// With no --in, the program makes its own input (--mib MiB of float32 that
// cover every case of the conversion: normal numbers, numbers that become
// float16 subnormals or zero, overflow to infinity, infinities and NaN) in
// a temporary directory, and removes everything it made at the end.
// Either way it checks every element of the output against the host's own
// __float2half_rn, bit for bit, reading both files back chunk by chunk.
//
// Build: part of the chunkpipe build (target `file_convert`), or
//   nvcc -std=c++17 -O3 -arch=sm_90 -I include -o file_convert examples/file_convert.cu
// Run:   ./file_convert [--in PATH] [--out PATH] [--mib 4096] [--chunk-mib 64]
// Needs (for its own input) --mib x 1.5 MiB of free disk in $TMPDIR (or /tmp).
//
// The helpers every example and benchmark repeats (device check, command
// line, timing, checks) are in support.hpp.

#include <chunkpipe/files.hpp>
#include <chunkpipe/pipeline.cuh>
#include <chunkpipe/storage.hpp>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// The stage: one float in, one __half out. Map writes the kernel around it.
// __float2half_rn is also a host function, which is what lets the check
// below hold the GPU to the host's rounding, bit for bit.
struct ToHalf {
  __host__ __device__ __half operator()(float x) const { return __float2half_rn(x); }
};

std::uint16_t bits_of(__half h) {
  std::uint16_t b = 0;
  std::memcpy(&b, &h, sizeof b);
  return b;
}

std::uint32_t bits_of(float f) {
  std::uint32_t b = 0;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// Whether `got` is the conversion of `x`. NaN is the one input where
// bit-for-bit is not the contract: any float16 NaN is a right answer (the
// host and PTX's cvt both give 0x7fff today, but payloads are not promised).
bool converts_to(float x, __half got) {
  const std::uint16_t g = bits_of(got);
  if (std::isnan(x)) return (g & 0x7c00u) == 0x7c00u && (g & 0x03ffu) != 0;
  return g == bits_of(__float2half_rn(x));
}

// Element i of the input this program makes: a hash of i picks the sign,
// a binary exponent from 2^-28 (below float16's smallest subnormal, 2^-24,
// so it rounds to zero) to 2^17 (above its largest finite value, 65504, so
// it overflows to infinity) and all 23 mantissa bits, so every rounding path
// of the conversion is taken. A few elements are infinities and NaN.
float varied(std::size_t i) {
  std::uint32_t h = static_cast<std::uint32_t>(i) * 0x9E3779B1u ^ static_cast<std::uint32_t>(i >> 32);
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  if (i % 1000003 == 17) return (h & 1) ? -INFINITY : INFINITY;
  if (i % 1000003 == 29) return NAN;
  const std::uint32_t exponent = 127 - 28 + (h >> 24) % 46;  // 2^-28 .. 2^17
  const std::uint32_t b = (h & 0x80000000u) | (exponent << 23) | ((h * 0x2C1B3C6Du) & 0x7FFFFFu);
  float f = 0.f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// ---------------------------------------------------------------------------
// Files: a descriptor that closes itself, and a directory for what this
// program makes, removed with its contents at the end (or on an error).

class File {
 public:
  File(const std::string& path, int flags) : path_(path), fd_(::open(path.c_str(), flags | O_CLOEXEC, 0644)) {
    if (fd_ < 0) throw std::runtime_error("cannot open '" + path + "': " + std::strerror(errno));
  }
  ~File() {
    if (fd_ >= 0) ::close(fd_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  std::uint64_t size() const {
    struct ::stat st {};
    if (::fstat(fd_, &st) != 0) throw std::runtime_error("cannot stat '" + path_ + "': " + std::strerror(errno));
    return static_cast<std::uint64_t>(st.st_size);
  }
  // Exactly `bytes` at `offset`, or an exception.
  void read_at(void* dst, std::size_t bytes, std::uint64_t offset) const {
    auto* p = static_cast<char*>(dst);
    while (bytes > 0) {
      const ::ssize_t r = ::pread(fd_, p, bytes, static_cast<::off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) {
        throw std::runtime_error("reading '" + path_ + "' at byte " + std::to_string(offset) + ": " +
                                 (r == 0 ? "unexpected end of file" : std::strerror(errno)));
      }
      p += r;
      bytes -= static_cast<std::size_t>(r);
      offset += static_cast<std::uint64_t>(r);
    }
  }
  void write_all(const void* src, std::size_t bytes) {
    auto* p = static_cast<const char*>(src);
    while (bytes > 0) {
      const ::ssize_t r = ::write(fd_, p, bytes);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) throw std::runtime_error("writing '" + path_ + "': " + std::strerror(r == 0 ? ENOSPC : errno));
      p += r;
      bytes -= static_cast<std::size_t>(r);
    }
  }

 private:
  std::string path_;
  int fd_;
};

class ScratchDir {
 public:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/chunkpipe_file_convert.XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error("cannot make a temporary directory from '" + pattern + "': " + std::strerror(errno));
    }
    dir_ = pattern;
  }
  ~ScratchDir() {
    // Only what this program made: the files it named and, if a run failed
    // half-way in some way the sink could not clean up, their temporaries.
    for (const std::string& f : made_) {
      (void)::unlink(f.c_str());
      (void)::unlink((f + ".partial").c_str());
    }
    (void)::rmdir(dir_.c_str());
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  // A path in the directory, removed at the end.
  std::string file(const std::string& name) {
    made_.push_back(dir_ + "/" + name);
    return made_.back();
  }
  const std::string& path() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::string> made_;
};

void require_free_space(const std::string& dir, std::uint64_t bytes) {
  struct ::statvfs vfs {};
  if (::statvfs(dir.c_str(), &vfs) != 0) return;  // unknown: let the writes say
  const std::uint64_t free_bytes = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  if (free_bytes < bytes + bytes / 16) {
    throw std::runtime_error("not enough free space in " + dir + ": the input and output need " +
                             std::to_string(bytes / kMiB) + " MiB, " + std::to_string(free_bytes / kMiB) +
                             " MiB are free; use a smaller --mib or point TMPDIR elsewhere");
  }
}

// Writes `elems` varied floats to `path`, 16 MiB at a time: the input, too,
// may be larger than RAM.
void make_input(const std::string& path, std::size_t elems) {
  File f(path, O_WRONLY | O_CREAT | O_TRUNC);
  std::vector<float> block(4 * kMiB);
  for (std::size_t begin = 0; begin < elems; begin += block.size()) {
    const std::size_t n = std::min(block.size(), elems - begin);
    for (std::size_t i = 0; i < n; ++i) block[i] = varied(begin + i);
    f.write_all(block.data(), n * sizeof(float));
  }
}

// Every element of `out` against the host conversion of `in`, read back a
// block at a time by every core. Returns the index of the first wrong
// element, or `elems` when all are right.
std::size_t first_mismatch(const std::string& in, const std::string& out, std::size_t elems) {
  const File fin(in, O_RDONLY), fout(out, O_RDONLY);
  const unsigned workers = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  constexpr std::size_t block = 4 * kMiB;  // elements per read
  const std::size_t blocks = (elems + block - 1) / block;
  std::vector<std::size_t> first(workers, elems);
  std::vector<std::exception_ptr> errors(workers);
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      try {
        std::vector<float> x(block);
        std::vector<__half> y(block);
        // Blocks dealt round-robin; each worker stops at its first mismatch.
        for (std::size_t b = w; b < blocks && first[w] == elems; b += workers) {
          const std::size_t begin = b * block, n = std::min(block, elems - begin);
          fin.read_at(x.data(), n * sizeof(float), begin * sizeof(float));
          fout.read_at(y.data(), n * sizeof(__half), begin * sizeof(__half));
          for (std::size_t i = 0; i < n; ++i) {
            if (!converts_to(x[i], y[i])) {
              first[w] = begin + i;
              break;
            }
          }
        }
      } catch (...) {
        errors[w] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return *std::min_element(first.begin(), first.end());
}

// ---------------------------------------------------------------------------
// Command line.

struct Args {
  std::string in, out;
  long long mib = 4096;
  long long chunk_mib = 64;
};

const char* const kUsage =
    "file_convert: a float32 file to float16 through the GPU, chunk by chunk\n"
    "usage: file_convert [--in PATH] [--out PATH] [--mib N] [--chunk-mib N]\n"
    "  --in PATH       float32 input (native byte order, no header). Default: make\n"
    "                  --mib MiB of varied floats in a temporary directory\n"
    "  --out PATH      float16 output. Default: in the temporary directory\n"
    "  --mib N         size of the input made when --in is not given (default 4096)\n"
    "  --chunk-mib N   MiB of input per pipeline window (default 64)\n"
    "  --help          this text\n"
    "What it made (input, output, directory) is removed at the end; files you\n"
    "named are kept. Every output element is checked against the host's\n"
    "__float2half_rn.\n";

// Reads "--name VALUE" or "--name=VALUE"; --in and --out must not name the
// same file. Returns -1 to go on, or the exit status to leave with: 0 after
// --help, 2 after bad input.
int parse_args(int argc, char** argv, Args& args) {
  const int status = example::CommandLine("file_convert", kUsage)
                         .text("--in", args.in)
                         .text("--out", args.out)
                         .integer("--mib", args.mib, 1, 1ll << 24)
                         .integer("--chunk-mib", args.chunk_mib, 1, 16384)
                         .parse(argc, argv);
  if (status < 0 && !args.in.empty() && args.in == args.out) {
    std::fprintf(stderr, "file_convert: --in and --out name the same file; the output would replace the input\n");
    return 2;
  }
  return status;
}

// ---------------------------------------------------------------------------

// The clocks: a steady clock, and the milliseconds between two readings.
using example::Clock;
using example::ms_between;

// The file sink, timed: finish() (fsync and rename) runs inside run(), and
// this says how much of the run it was. A Sink's functor is anything with
// the call operator and, optionally, finish() and abort(); this one forwards
// all three to the file sink it wraps.
template <class FileSink>
struct TimedFinish {
  FileSink file;
  double* finish_ms;
  void operator()(std::size_t chunk, std::size_t offset, ::cuda::std::span<const __half> data) {
    file.fn(chunk, offset, data);
  }
  // A sink that can write at any offset says so, and the pipeline's host
  // threads then write each chunk in parts at once (a regular file; a pipe
  // is written in order).
  void write_at(std::size_t offset, ::cuda::std::span<const __half> data) const { file.fn.write_at(offset, data); }
  bool positional() const { return file.fn.positional(); }
  void finish() {
    const auto t0 = Clock::now();
    file.fn.finish();
    *finish_ms = ms_between(t0, Clock::now());
  }
  void abort() { file.fn.abort(); }
};

int run(const Args& args) {
  const cudaDeviceProp prop = example::current_gpu();
  std::printf("GPU: %s\n", prop.name);

  // Declared before the pipeline so that it is removed after it: the
  // pipeline keeps its last run's source, and with it the input open.
  std::optional<ScratchDir> scratch;
  std::string in = args.in, out = args.out;
  if (in.empty() || out.empty()) scratch.emplace();
  if (out.empty()) out = scratch->file("output.f16");

  // The sink creates out.partial now: an output directory that does not
  // exist or is not writable is reported before minutes of work, not after.
  auto file = chunkpipe::file_sink<__half>(out);

  if (in.empty()) {
    in = scratch->file("input.f32");
    const std::size_t elems = static_cast<std::size_t>(args.mib) * (kMiB / sizeof(float));
    require_free_space(scratch->path(), elems * (sizeof(float) + (args.out.empty() ? sizeof(__half) : 0)));
    const auto t0 = Clock::now();
    make_input(in, elems);
    std::printf("made %s: %lld MiB of varied float32 in %.0f ms\n", in.c_str(), args.mib, ms_between(t0, Clock::now()));
  }

  // The source opens the file now: a missing file, or one that is not a
  // whole number of floats, is reported here, before any GPU work.
  auto source = chunkpipe::file_source<float>(in);
  const std::uint64_t in_bytes = File(in, O_RDONLY).size();
  const std::size_t elems = static_cast<std::size_t>(in_bytes / sizeof(float));
  const std::uint64_t out_bytes = elems * sizeof(__half);

  // The library's default schedule over a window of --chunk-mib of input.
  // Element-wise work lets it cycle the window in finer grains; the file
  // source and sink read and write each grain where it lies, in parts, on
  // the pipeline's host threads.
  const std::size_t window = std::max<std::size_t>(1, static_cast<std::size_t>(args.chunk_mib) * kMiB / sizeof(float));
  chunkpipe::ChunkedPipeline<chunkpipe::Map<ToHalf>> pipe(chunkpipe::Options{.chunk_elems = window});
  const auto& g = pipe.geometry();
  std::printf("%s -> %s: %zu elements, %.1f MiB in, %.1f MiB out\n", in.c_str(), out.c_str(), elems,
              static_cast<double>(in_bytes) / kMiB, static_cast<double>(out_bytes) / kMiB);
  std::printf("pipeline: %s, %d slots of %zu elements (%.1f MiB of float in, %.1f MiB of half out)\n",
              std::string(chunkpipe::to_string(g.policy)).c_str(), g.depth, g.chunk_elems,
              static_cast<double>(g.chunk_elems * sizeof(float)) / kMiB,
              static_cast<double>(g.chunk_elems * sizeof(__half)) / kMiB);

  // Warm-up: one window from a generator into a sink that drops it, so that
  // the timed run pays neither the module load nor the one-time allocation
  // of the pipeline's device and pinned slots.
  pipe.run(chunkpipe::generate<float>(window, varied),
           chunkpipe::sink<__half>([](std::size_t, std::size_t, ::cuda::std::span<const __half>) {}));

  // The conversion. run() returns when the last chunk is written, the file
  // flushed to disk and renamed; a failure throws and leaves no `out`.
  double finish_ms = 0;
  const auto t0 = Clock::now();
  pipe.run(source, chunkpipe::sink<__half>(TimedFinish<decltype(file)>{file, &finish_ms}));
  const double run_ms = ms_between(t0, Clock::now());

  const double s = run_ms / 1e3;
  std::printf("\nconverted in %.1f ms, of which %.1f ms were finish() (fsync of the output, rename)\n", run_ms,
              finish_ms);
  std::printf("  input    %7.2f GB/s  (%.2f GB of float32 read, copied in, converted)\n",
              static_cast<double>(in_bytes) / 1e9 / s, static_cast<double>(in_bytes) / 1e9);
  std::printf("  moved    %7.2f GB/s  (input and output bytes together, each read or written once\n"
              "                       and crossing the link once)\n",
              static_cast<double>(in_bytes + out_bytes) / 1e9 / s);
  if (args.in.empty()) {
    std::printf("  (the input was just written, so it is likely still in the page cache: this measures\n"
                "   the pipeline more than the disk; give --in an uncached file to include the disk)\n");
  }
  // Against what this directory's storage gives the pipeline's host threads
  // (measure_storage: a temporary file of 1 GiB written with fsync, read
  // back): the run can go no faster than reading the input or than writing
  // the output durably, each at its own rate, with everything else
  // overlapped.
  {
    const std::string dir = out.substr(0, out.find_last_of('/') == std::string::npos ? 0 : out.find_last_of('/'));
    const chunkpipe::StorageRates r =
        chunkpipe::measure_storage(dir.empty() ? "." : dir, std::size_t{1} << 30, chunkpipe::default_host_threads());
    const double limit_s = std::max(static_cast<double>(in_bytes) / 1e9 / r.read_gbps,
                                    static_cast<double>(out_bytes) / 1e9 / r.write_gbps);
    std::printf("  storage  reads %.2f GB/s (cached; %.2f from the device), writes %.2f GB/s with fsync\n"
                "           (measure_storage, %d threads): this file's limit is %.1f ms, and the run took\n"
                "           %.2fx that\n",
                r.read_gbps, r.uncached_read_gbps, r.write_gbps, chunkpipe::default_host_threads(), limit_s * 1e3,
                s / limit_s);
  }

  // The check, from the files as they are on disk now.
  const std::uint64_t written = File(out, O_RDONLY).size();
  if (written != out_bytes) {
    std::fprintf(stderr, "FAIL: %s has %llu bytes, want %llu\n", out.c_str(),
                 static_cast<unsigned long long>(written), static_cast<unsigned long long>(out_bytes));
    return EXIT_FAILURE;
  }
  const auto v0 = Clock::now();
  const std::size_t bad = first_mismatch(in, out, elems);
  if (bad != elems) {
    float x = 0.f;
    __half y{};
    File(in, O_RDONLY).read_at(&x, sizeof x, bad * sizeof(float));
    File(out, O_RDONLY).read_at(&y, sizeof y, bad * sizeof(__half));
    std::fprintf(stderr, "FAIL: element %zu (chunk %zu): float %.9g (0x%08x) became 0x%04x, want 0x%04x\n", bad,
                 bad / g.chunk_elems, static_cast<double>(x), bits_of(x), bits_of(y), bits_of(__float2half_rn(x)));
    return EXIT_FAILURE;
  }
  std::printf("\nverify: all %zu elements match the host's __float2half_rn bit for bit (NaN: any NaN), "
              "read back in %.0f ms\n",
              elems, ms_between(v0, Clock::now()));
  return EXIT_SUCCESS;
}

}  // namespace

int main(int argc, char** argv) {
  // Reads the command line, checks for a GPU and runs (support.hpp). An
  // exception is printed and gives EXIT_FAILURE.
  // chunkpipe::pipeline_error names the file, the byte offset and the
  // reason; chunkpipe::cuda_error the CUDA call and where it was made.
  return example::run_example("file_convert", argc, argv, parse_args, run);
}
