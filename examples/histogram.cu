// SPDX-License-Identifier: MIT
//
// histogram: a multi-GiB file of bytes to a 256-bin histogram, through the
// GPU chunk by chunk, checked bin for bin against a host count.
//
// A histogram is a fold: gigabytes go in, 256 numbers come out. Element-wise
// stages would send back as many bytes as went in; chunkpipe::accumulate
// sends back one small State per chunk instead:
//
//   accumulate(Hist{}, CountBytes{}, MergeHist{})
//     Hist{}       every chunk's State starts as this (all bins 0), on the device;
//     CountBytes   is called on the host per chunk, like a ChunkFn, and launches
//                  a kernel on ctx.stream that adds the chunk into its State;
//     MergeHist    adds each chunk's State into the total, on the host, in order.
//
// pipe.run(in) returns the total. `in` may be a file source (files.hpp),
// which reads each chunk straight into a pinned slot, so the file need not
// fit in host memory (this program also holds it in pinned memory, for the
// other rows); or a range in memory, here pinned.
//
// It is timed against what one writes without chunkpipe, in the same process:
//   (a) the host pass: a plain single-threaded loop over the bytes in memory.
//       ("A full-length copy out and a host pass" is the alternative when the
//       GPU transforms data before it is folded; here the bytes are already on
//       the host and a byte is its own bin, so only the host pass is left.)
//   (b) the hand-written GPU version: the whole buffer copied to the device
//       in one cudaMemcpy (device memory the size of the data; skipped if it
//       does not fit), one kernel, 2 KiB of bins copied back. Nothing overlaps.
//
// Build: target `histogram`, or nvcc -std=c++17 -O3 -arch=sm_90 -I include examples/histogram.cu
// Run:   ./histogram [--mib 4096] [--file PATH] [--rounds 3] [--chunk-mib 16]
// Needs the data's size in pinned host memory and, without --file, on disk.

#include <chunkpipe/files.hpp>
#include <chunkpipe/pipeline.cuh>

#include <cuda_runtime.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support.hpp"

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// 64-bit bins: a multi-GiB run can put more than 2^32 bytes in one bin.
struct Hist {
  unsigned long long bins[256];
};

// Each block counts into 256 shared-memory bins of its own (privatised:
// the block's threads contend only with each other, in fast shared memory),
// then adds them into `out` with one global atomic per non-empty bin. A
// block sees about max(64 KiB, n / 2048) bytes, so its 32-bit counters
// cannot overflow below 8 TiB. Four bytes per load where the data is
// word-aligned (cudaMalloc and the pipeline's slots are), the rest one by one.
__global__ void count_bytes_kernel(const std::uint8_t* data, std::size_t n, Hist* out) {
  __shared__ unsigned local[256];
  for (unsigned b = threadIdx.x; b < 256; b += blockDim.x) local[b] = 0;
  __syncthreads();
  const std::size_t first = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  const std::size_t stride = std::size_t{gridDim.x} * blockDim.x;
  const std::size_t words = reinterpret_cast<std::uintptr_t>(data) % 4 == 0 ? n / 4 : 0;
  const auto* w = reinterpret_cast<const std::uint32_t*>(data);
  for (std::size_t i = first; i < words; i += stride) {
    const std::uint32_t v = w[i];
    atomicAdd(&local[v & 0xffu], 1u);
    atomicAdd(&local[(v >> 8) & 0xffu], 1u);
    atomicAdd(&local[(v >> 16) & 0xffu], 1u);
    atomicAdd(&local[v >> 24], 1u);
  }
  for (std::size_t i = words * 4 + first; i < n; i += stride) atomicAdd(&local[data[i]], 1u);
  __syncthreads();
  for (unsigned b = threadIdx.x; b < 256; b += blockDim.x) {
    if (local[b] != 0) atomicAdd(&out->bins[b], static_cast<unsigned long long>(local[b]));
  }
}

// One launch over n bytes on `stream`: a block per 64 KiB, at most 2048.
void launch_count(const std::uint8_t* data, std::size_t n, Hist* out, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>(std::clamp<std::size_t>((n + 65535) / 65536, 1, 2048));
  count_bytes_kernel<<<blocks, 256, 0, stream>>>(data, n, out);
}

// The accumulate stage's per-chunk functor. The State (ctx.out()) already
// holds Hist{}; the kernel only adds. No sync: chunkpipe orders the State's
// copy back after the kernel on the same stream.
struct CountBytes {
  template <class Ctx>
  void operator()(const Ctx& ctx) const {
    launch_count(ctx.in().data(), ctx.count, ctx.out().data(), ctx.stream.get());
  }
};

// On the host, in chunk order. Integer sums are exact, so the result does
// not depend on the chunk size or the schedule.
struct MergeHist {
  void operator()(Hist& total, const Hist& chunk) const {
    for (int b = 0; b < 256; ++b) total.bins[b] += chunk.bins[b];
  }
};

// (a) The host pass: the obvious loop, one thread. (Several threads would
// go faster; this is what one writes first, and the reference count.)
Hist host_count(const std::uint8_t* p, std::size_t n) {
  Hist h{};
  for (std::size_t i = 0; i < n; ++i) ++h.bins[p[i]];
  return h;
}

// (b) The hand-written GPU version over a device buffer already allocated.
Hist whole_copy_count(const std::uint8_t* host, std::size_t n, std::uint8_t* dev, Hist* dev_hist) {
  CHUNKPIPE_CUDA_TRY(cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice));
  CHUNKPIPE_CUDA_TRY(cudaMemset(dev_hist, 0, sizeof(Hist)));
  launch_count(dev, n, dev_hist, nullptr);
  CHUNKPIPE_CUDA_TRY(cudaGetLastError());
  Hist h{};
  CHUNKPIPE_CUDA_TRY(cudaMemcpy(&h, dev_hist, sizeof(Hist), cudaMemcpyDeviceToHost));
  return h;
}

// The data. Generated byte i is the smaller of two bytes of a hash of i, so
// bin v is hit with probability (511 - 2v) / 65536: falling from bin 0 to
// bin 255, every bin different, so a swapped or dropped bin shows. Filled by
// every core (a single thread would take seconds per GiB).
void generate(std::uint8_t* dst, std::size_t n) {
  const unsigned workers = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < workers; ++w) {
    threads.emplace_back([=] {
      for (std::size_t i = n * w / workers; i < n * (w + 1) / workers; ++i) {
        const std::uint32_t h = example::mix(i, static_cast<std::uint32_t>(i >> 32));
        dst[i] = static_cast<std::uint8_t>(std::min(h & 0xffu, (h >> 8) & 0xffu));
      }
    });
  }
  for (std::thread& t : threads) t.join();
}

// A temporary directory holding one file, both removed at the end.
struct ScratchFile {
  std::string dir, path;
  ScratchFile() {
    const char* tmp = std::getenv("TMPDIR");
    dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/chunkpipe_histogram.XXXXXX";
    if (::mkdtemp(dir.data()) == nullptr) throw std::runtime_error("cannot make " + dir + ": " + std::strerror(errno));
    path = dir + "/data.u8";
  }
  ~ScratchFile() {
    (void)::unlink(path.c_str());
    (void)::rmdir(dir.c_str());
  }
};

// Reads (or writes) exactly n bytes at the start of the file, or throws.
void transfer(const std::string& path, std::uint8_t* p, std::size_t n, bool write) {
  const int fd = ::open(path.c_str(), write ? O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC : O_RDONLY | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot open '" + path + "': " + std::strerror(errno));
  for (std::size_t done = 0; done < n;) {
    const std::size_t ask = std::min(n - done, 64 * kMiB);
    const ::ssize_t r = write ? ::pwrite(fd, p + done, ask, static_cast<::off_t>(done))
                              : ::pread(fd, p + done, ask, static_cast<::off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const std::string why = r == 0 ? (write ? "no space left" : "unexpected end of file") : std::strerror(errno);
      ::close(fd);
      throw std::runtime_error((write ? "writing '" : "reading '") + path + "': " + why);
    }
    done += static_cast<std::size_t>(r);
  }
  if (::close(fd) != 0) throw std::runtime_error("closing '" + path + "': " + std::strerror(errno));
}

// The command line.
struct Args {
  std::string file;
  long long mib = 4096, rounds = 3, chunk_mib = 16;
};

const char* const kUsage =
    "histogram: a file of bytes to a 256-bin histogram through chunkpipe::accumulate\n"
    "usage: histogram [--mib N] [--file PATH] [--rounds R] [--chunk-mib N]\n"
    "  --mib N        MiB of bytes to generate into a temporary file (default 4096)\n"
    "  --file PATH    count this file's bytes instead (kept; --mib is then ignored)\n"
    "  --rounds R     timed rounds per path, after one warm-up; all are checked (default 3)\n"
    "  --chunk-mib N  MiB per pipeline chunk (default 16)\n"
    "  --help         this text\n";

int parse_args(int argc, char** argv, Args& args) {
  return example::CommandLine("histogram", kUsage)
      .integer("--mib", args.mib, 1, 1ll << 20)
      .text("--file", args.file)
      .integer("--rounds", args.rounds, 1, 100)
      .integer("--chunk-mib", args.chunk_mib, 1, 4096)
      .parse(argc, argv);
}

// Why `got` is not the host's count `want` of `bytes` bytes ("" if it is):
// every bin must be equal, and the bins must sum to the byte count.
std::string mismatch(const Hist& got, const Hist& want, std::size_t bytes) {
  unsigned long long total = 0;
  for (int b = 0; b < 256; ++b) {
    total += got.bins[b];
    if (got.bins[b] != want.bins[b]) {
      return "bin " + std::to_string(b) + " holds " + std::to_string(got.bins[b]) + ", the host counted " +
             std::to_string(want.bins[b]);
    }
  }
  if (total != bytes) return "the bins sum to " + std::to_string(total) + ", not " + std::to_string(bytes);
  return "";
}

int run(const Args& args) {
  std::printf("GPU: %s\n", example::current_gpu().name);

  // The bytes, in pinned memory and in a file: --file is read in, or data is
  // generated and written to a temporary file (declared before the pipeline,
  // which keeps its last source open, so that it is removed after it).
  std::optional<ScratchFile> scratch;
  std::string path = args.file;
  std::size_t bytes = static_cast<std::size_t>(args.mib) * kMiB;
  if (!path.empty()) {
    struct ::stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
      throw std::runtime_error("--file '" + path + "' is not a non-empty regular file");
    }
    bytes = static_cast<std::size_t>(st.st_size);
  }
  chunkpipe::PinnedArray<std::uint8_t> data(bytes);
  const auto t0 = example::Clock::now();
  if (path.empty()) {
    scratch.emplace();
    path = scratch->path;
    generate(data.data(), bytes);
  }
  transfer(path, data.data(), bytes, /*write=*/scratch.has_value());
  std::printf("%s %s (%zu bytes, also kept in pinned memory) in %.0f ms\n", scratch ? "wrote" : "read", path.c_str(),
              bytes, example::ms_between(t0, example::Clock::now()));
  auto source = chunkpipe::file_source<std::uint8_t>(path);  // opens now; each run reads from the start

  auto pipe =
      chunkpipe::make_pipeline(chunkpipe::Options{.chunk_elems = static_cast<std::size_t>(args.chunk_mib) * kMiB},
                               chunkpipe::accumulate(Hist{}, CountBytes{}, MergeHist{}));
  const auto& g = pipe.geometry();
  const std::size_t chunks = (bytes + g.chunk_elems - 1) / g.chunk_elems;
  std::printf("pipeline: %s, %d slots of %zu MiB; %zu chunks\n\n", std::string(chunkpipe::to_string(g.policy)).c_str(),
              g.depth, g.chunk_elems / kMiB, chunks);

  // Each path: one warm-up pass (module load, the pipeline's slots and
  // record buffers), then `rounds` timed (support.hpp). Every pass returns
  // with its Hist on the host, so the clock measures the work, not the
  // enqueueing; every pass's Hist is kept and checked afterwards.
  struct Row {
    const char* path;
    example::Timing t;
    std::vector<Hist> got;
  };
  std::vector<Row> rows;
  auto measure = [&](const char* path, auto&& pass) {
    Row& r = rows.emplace_back(Row{path, {}, {}});
    r.got.reserve(static_cast<std::size_t>(args.rounds) + 1);
    r.t = example::time_passes(static_cast<int>(args.rounds), [&] { r.got.push_back(pass()); });
  };
  measure("(a) host pass, 1 thread", [&] { return host_count(data.data(), bytes); });
  const Hist want = rows[0].got[0];  // the reference
  std::printf("host count: bin 0 %llu, bin 128 %llu, bin 255 %llu\n", want.bins[0], want.bins[128], want.bins[255]);
  measure("chunkpipe, file source", [&] { return pipe.run(source); });
  measure("chunkpipe, pinned memory", [&] { return pipe.run(chunkpipe::pinned(data)); });

  // (b) needs the whole buffer on the device (the pipeline needed only its
  // slots); allocated outside the clock, as the pipeline's slots were.
  std::size_t free_mem = 0, total_mem = 0;
  CHUNKPIPE_CUDA_TRY(cudaMemGetInfo(&free_mem, &total_mem));  // the pipeline's slots included
  if (bytes + 256 * kMiB <= free_mem) {
    chunkpipe::DeviceBuffer dev(bytes), dev_hist(sizeof(Hist));
    auto* d = reinterpret_cast<std::uint8_t*>(dev.data());
    auto* dh = reinterpret_cast<Hist*>(dev_hist.data());
    measure("(b) whole copy in, one kernel", [&] { return whole_copy_count(data.data(), bytes, d, dh); });
  } else {
    std::printf("skip  (b) whole copy in: %zu MiB do not fit in %zu MiB of free device memory\n", bytes / kMiB,
                free_mem / kMiB);
  }

  // The check: every pass of every path against the host's first count.
  bool ok = true;
  for (const Row& r : rows) {
    std::string why;
    for (const Hist& h : r.got) {
      if (why.empty()) why = mismatch(h, want, bytes);
    }
    std::printf("%s  %-30s %s\n", why.empty() ? "PASS" : "FAIL", r.path,
                why.empty() ? "every bin equals the host count; they sum to the byte count" : why.c_str());
    ok = ok && why.empty();
  }

  std::printf("\n%-32s %12s %8s\n", "path", "median ms", "GB/s");
  for (const Row& r : rows) {
    std::printf("%-32s %12.1f %8.1f\n", r.path, r.t.median, static_cast<double>(bytes) / 1e9 / (r.t.median / 1e3));
  }
  std::printf(
      "\nGB/s: %.2f GB of input counted, over the median of %lld rounds. The in-memory rows start with the\n"
      "bytes in pinned memory; the file row reads the file too (likely from the page cache, as it was just\n"
      "%s: drop the cache to include the disk).\n",
      static_cast<double>(bytes) / 1e9, args.rounds, args.file.empty() ? "written" : "read");
  std::printf(
      "Only %zu KiB per chunk crossed back: a chunk's result is one Hist of 256 64-bit bins, so %zu chunks\n"
      "returned %zu KiB for %zu MiB in; element-wise stages would have sent back every byte.\n",
      sizeof(Hist) / 1024, chunks, chunks * sizeof(Hist) / 1024, bytes / kMiB);
  std::printf("\n%s\n", ok ? "PASS: every path counted every bin as the host did" : "FAIL");
  return ok ? EXIT_SUCCESS : EXIT_FAILURE;
}

}  // namespace

int main(int argc, char** argv) {
  // Reads the command line, checks for a GPU (77 without one) and runs
  // (support.hpp). An exception is printed and gives EXIT_FAILURE.
  return example::run_example("histogram", argc, argv, parse_args, run);
}
