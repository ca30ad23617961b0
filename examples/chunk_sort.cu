// SPDX-License-Identifier: MIT
//
// Chunk-level stages: whole-chunk work with Thrust, one chunk at a time.
//
// A Map sees one element at a time. Some work needs the whole chunk: a sort,
// a scan, a reduction, a cuBLAS call. A chunkpipe::ChunkFn is called on the
// host once per chunk with a ChunkContext (the chunk's device spans, its
// index, offset and element count, and the stream to use) and may launch
// anything on ctx.stream.
//
// The job: a capture of network packets, each a flow id and a size in
// bytes, arrives in blocks (chunks). For every block we want its packets
// grouped by flow, arrival order kept within a flow, and a running byte
// count through the grouped block. Two stages:
//
//   GroupByFlow    ChunkFn, in place: thrust::stable_sort_by_key on the
//                  chunk's two arrays. Naming no output types makes it work
//                  on its input buffers.
//   RunningBytes   ChunkFn<..., uint32_t, uint64_t>: new output buffers of
//                  the named types: the flow ids, and thrust::inclusive_scan
//                  of the sizes, widened to 64 bits.
//
// Every stage keeps the element count of its chunk, so a per-chunk
// reduction has no one-element output to go to. The scan gives it anyway:
// the last running total of a chunk is the chunk's total, and the host
// gathers it from there.
//
// Two things every chunk stage must get right, both shown below:
//   - Work goes on ctx.stream, and nothing synchronises. Thrust's
//     par_nosync.on(ctx.stream) does both.
//   - Scratch memory. Thrust's own temporary allocations use cudaMalloc and
//     cudaFree, and cudaFree waits for the whole device: one per chunk is
//     the lesson's "cudaDeviceSynchronize inside the chunk loop", and the
//     overlap is gone. Here Thrust gets an allocator that allocates and
//     frees in stream order (cudaMallocAsync, cudaFreeAsync on ctx.stream).
//
// The host checks each chunk against its own reference (a counting sort,
// stable by construction), bit for bit, under three schedules.
//
// Build: part of the chunkpipe build (target `chunk_sort`), or
//   nvcc -std=c++17 -O3 -arch=sm_90 --extended-lambda -I include -o chunk_sort examples/chunk_sort.cu
// Run:   ./chunk_sort [--pairs N] [--chunk N] [--runs 5]

#include <chunkpipe/pipeline.cuh>

#include <cuda/std/functional>
#include <cuda_runtime.h>
#include <thrust/execution_policy.h>
#include <thrust/scan.h>
#include <thrust/sort.h>

#include <algorithm>
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

// Flow ids are 0 .. kFlows - 1; packet sizes 40 .. 1500 bytes.
constexpr std::uint32_t kFlows = 4096;

// Element types in and out of each stage: (flow id, packet bytes) in,
// (flow id, running bytes) out.
using Packets = chunkpipe::types<std::uint32_t, std::uint32_t>;
using Grouped = chunkpipe::types<std::uint32_t, std::uint64_t>;

// Thrust's scratch memory, allocated and freed in stream order on the
// chunk's stream: no device-wide synchronisation, and the memory pool
// reuses the blocks chunk after chunk. Thrust asks for it through the
// execution policy: thrust::cuda::par_nosync(scratch).on(stream).
struct StreamOrderedScratch {
  using value_type = char;
  cudaStream_t stream;

  char* allocate(std::size_t bytes) {
    void* p = nullptr;
    CHUNKPIPE_CUDA_TRY(cudaMallocAsync(&p, bytes, stream));
    return static_cast<char*>(p);
  }
  // Thrust calls this from a destructor, where throwing would terminate the
  // program. A failure is not lost: it is the thread's last CUDA error, and
  // chunkpipe checks cudaGetLastError() after every chunk stage.
  void deallocate(char* p, std::size_t) noexcept { (void)cudaFreeAsync(p, stream); }
};

// Stage 1, in place: sort the chunk's packets by flow id. Stable, so the
// packets of one flow keep their arrival order. The context's spans are the
// slot's device buffers; ctx.count says how many elements of them are this
// chunk's (the last chunk may be short).
struct GroupByFlow {
  void operator()(const chunkpipe::ChunkContext<Packets, Packets>& ctx) const {
    std::uint32_t* flow = ctx.in<0>().data();
    std::uint32_t* bytes = ctx.in<1>().data();
    StreamOrderedScratch scratch{ctx.stream};
    // Thrust sorts all 32 bits of the key. cub::DeviceRadixSort::SortPairs
    // with end_bit = 12 would sort only the bits flow ids use, if this stage
    // ever became the slow one.
    thrust::stable_sort_by_key(thrust::cuda::par_nosync(scratch).on(ctx.stream), flow, flow + ctx.count, bytes);
  }
};

// Stage 2, into new buffers: a stage's outputs are fresh slot buffers, so
// everything that should reach the host must be written here, the flow ids
// included. Without an initial value Thrust's scan adds in the input's type,
// 32 bits here; starting from a 64-bit zero makes it add in 64 bits.
struct RunningBytes {
  void operator()(const chunkpipe::ChunkContext<Packets, Grouped>& ctx) const {
    const std::uint32_t* flow = ctx.in<0>().data();
    const std::uint32_t* bytes = ctx.in<1>().data();
    std::uint32_t* flow_out = ctx.out<0>().data();
    std::uint64_t* running = ctx.out<1>().data();
    CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(flow_out, flow, ctx.count * sizeof(std::uint32_t), cudaMemcpyDeviceToDevice,
                                       ctx.stream));
    StreamOrderedScratch scratch{ctx.stream};
    thrust::inclusive_scan(thrust::cuda::par_nosync(scratch).on(ctx.stream), bytes, bytes + ctx.count, running,
                           std::uint64_t{0}, ::cuda::std::plus<std::uint64_t>{});
  }
};

// Deterministic pseudo-random numbers: an integer hash of the index, so
// filling millions of records stays fast even in a debug build.
std::uint32_t mix(std::size_t i, std::uint32_t seed) {
  std::uint32_t h = (static_cast<std::uint32_t>(i) * 0x9E3779B1u) ^ seed;
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return h;
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

// ---------------------------------------------------------------------------
// The host's side: reference, check, per-chunk totals.

// Checks every chunk: the flow ids must be the chunk's own, in order, with
// equal ids in arrival order, and the running totals must be those of the
// sizes in that order. The reference is a counting sort: independent of the
// GPU's radix sort, linear, and stable by construction. Fills `totals` with
// each chunk's total as the GPU computed it (its last running total).
bool verify(const std::uint32_t* flow, const std::uint32_t* bytes, const std::uint32_t* flow_out,
            const std::uint64_t* running, std::size_t n, std::size_t chunk, const char* what,
            std::vector<std::uint64_t>& totals) {
  std::vector<std::size_t> start(kFlows);
  std::vector<std::uint32_t> want_flow(chunk), want_bytes(chunk);
  totals.clear();
  for (std::size_t offset = 0, c = 0; offset < n; offset += chunk, ++c) {
    const std::size_t count = std::min(chunk, n - offset);
    std::fill(start.begin(), start.end(), 0);
    for (std::size_t i = 0; i < count; ++i) ++start[flow[offset + i]];
    std::size_t sum = 0;
    for (std::size_t& s : start) {
      const std::size_t here = s;
      s = sum;
      sum += here;
    }
    for (std::size_t i = 0; i < count; ++i) {
      const std::size_t to = start[flow[offset + i]]++;
      want_flow[to] = flow[offset + i];
      want_bytes[to] = bytes[offset + i];
    }
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < count; ++i) {
      total += want_bytes[i];
      if (flow_out[offset + i] != want_flow[i] || running[offset + i] != total) {
        std::fprintf(stderr,
                     "%s: WRONG in chunk %zu at element %zu: flow %u, running bytes %llu; want flow %u, "
                     "running bytes %llu\n",
                     what, c, i, flow_out[offset + i], static_cast<unsigned long long>(running[offset + i]),
                     want_flow[i], static_cast<unsigned long long>(total));
        return false;
      }
    }
    totals.push_back(running[offset + count - 1]);
  }
  std::printf("%-14s results OK (every chunk grouped and totalled, bit for bit)\n", what);
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
  long long pairs = (1ll << 23) + 4321;  // 8 full chunks and a short ninth
  long long chunk = 1ll << 20;
  long long runs = 5;
};

const char* const kUsage =
    "chunk_sort: group each chunk of (flow, bytes) records with Thrust in a chunkpipe ChunkFn\n"
    "usage: chunk_sort [--pairs N] [--chunk N] [--runs N]\n"
    "  --pairs N   records (default 8392929: 8 chunks and a short one)\n"
    "  --chunk N   records per chunk (default 1048576)\n"
    "  --runs N    timed runs per schedule, after one verified warm-up (default 5)\n"
    "  --help      this text\n";

// Reads "--name N" or "--name=N". Returns -1 to go on, or the exit status
// to leave with: 0 after --help, 2 after bad input.
int parse_args(int argc, char** argv, Args& args) {
  struct Option {
    const char* name;
    long long* value;
    long long min, max;
  };
  const Option options[] = {{"--pairs", &args.pairs, 1, 1ll << 30},
                            {"--chunk", &args.chunk, 1, 1ll << 28},
                            {"--runs", &args.runs, 1, 1000}};
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
      std::fprintf(stderr, "chunk_sort: unknown or incomplete option '%s'\n%s", arg.c_str(), kUsage);
      return 2;
    }
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno != 0 || v < option->min || v > option->max) {
      std::fprintf(stderr, "chunk_sort: %s wants an integer from %lld to %lld, got '%s'\n", option->name,
                   option->min, option->max, text.c_str());
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
  const auto n = static_cast<std::size_t>(args.pairs);
  const auto chunk = static_cast<std::size_t>(args.chunk);
  const int runs = static_cast<int>(args.runs);

  int device = 0;
  CHUNKPIPE_CUDA_TRY(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CHUNKPIPE_CUDA_TRY(cudaGetDeviceProperties(&prop, device));
  std::printf("GPU: %s\n", prop.name);

  // By default the pool behind cudaMallocAsync hands freed memory back to
  // the system whenever the program synchronises, and the next chunk's
  // allocation must map it again. Keeping it in the pool makes each chunk's
  // scratch allocation a cheap reuse.
  cudaMemPool_t pool = nullptr;
  CHUNKPIPE_CUDA_TRY(cudaDeviceGetDefaultMemPool(&pool, device));
  std::uint64_t keep_everything = UINT64_MAX;
  CHUNKPIPE_CUDA_TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything));

  // The records, in pinned memory so the copies run at the link's full speed
  // and the table below compares schedules. From pageable std::vectors
  // chunkpipe would stage every byte through its pinned slots (saxpy.cu
  // measures that), and the host copies would set the pace, not the GPU.
  PinnedArray<std::uint32_t> flow(n), bytes(n), flow_out(n);
  PinnedArray<std::uint64_t> running(n);
  for (std::size_t i = 0; i < n; ++i) {
    flow.data()[i] = mix(i, 1) % kFlows;
    bytes.data()[i] = 40 + mix(i, 2) % 1461;
  }
  std::printf("%zu records in chunks of %zu (%zu chunks)\n\n", n, chunk, (n + chunk - 1) / chunk);

  struct Schedule {
    const char* name;
    chunkpipe::Policy policy;
  };
  const Schedule schedules[] = {{"serial", chunkpipe::Policy::serial},
                                {"slot_streams", chunkpipe::Policy::slot_streams},
                                {"stage_streams", chunkpipe::Policy::stage_streams}};
  double ms[3] = {0, 0, 0};
  std::vector<std::uint64_t> totals;

  for (int s = 0; s < 3; ++s) {
    chunkpipe::Options options;
    options.chunk_elems = chunk;
    options.depth = 3;
    options.policy = schedules[s].policy;
    // chunk_fn(f) names no output types: in place. chunk_fn<U...>(f): new
    // buffers of types U.... The pipeline's type is deduced:
    //   ChunkedPipeline<ChunkFn<GroupByFlow>, ChunkFn<RunningBytes, uint32_t, uint64_t>>
    auto pipe = chunkpipe::make_pipeline(options, chunkpipe::chunk_fn(GroupByFlow{}),
                                         chunkpipe::chunk_fn<std::uint32_t, std::uint64_t>(RunningBytes{}));
    auto run_once = [&] {
      pipe.run(chunkpipe::inputs(chunkpipe::pinned(flow), chunkpipe::pinned(bytes)),
               chunkpipe::outputs(chunkpipe::pinned(flow_out), chunkpipe::pinned(running)));
    };

    // Poison: flow ids are below kFlows and running totals far below 2^64 - 1,
    // so an element nobody wrote can never pass.
    std::fill(flow_out.data(), flow_out.data() + n, UINT32_MAX);
    std::fill(running.data(), running.data() + n, UINT64_MAX);
    run_once();  // also the warm-up
    if (!verify(flow.data(), bytes.data(), flow_out.data(), running.data(), n, pipe.geometry().chunk_elems,
                schedules[s].name, totals)) {
      return EXIT_FAILURE;
    }
    ms[s] = mean_ms(runs, run_once);
  }

  std::printf("\n%-14s %10s %12s %12s\n", "schedule", "time (ms)", "M records/s", "vs serial");
  for (int s = 0; s < 3; ++s) {
    std::printf("%-14s %10.2f %12.1f %11.2fx\n", schedules[s].name, ms[s], static_cast<double>(n) / 1e3 / ms[s],
                ms[0] / ms[s]);
  }

  // The per-chunk reduction, gathered on the host: each chunk's total bytes
  // is its last running total (from the last schedule's run; all three were
  // checked).
  std::printf("\n%-7s %10s %14s\n", "chunk", "records", "total bytes");
  for (std::size_t c = 0; c < totals.size(); ++c) {
    if (totals.size() > 10 && c == 8) {
      std::printf("%-7s\n", "...");
      c = totals.size() - 1;
    }
    std::printf("%-7zu %10zu %14llu\n", c, std::min(chunk, n - c * chunk), static_cast<unsigned long long>(totals[c]));
  }
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
    // chunkpipe::cuda_error says which call failed and where; an exception
    // thrown inside a chunk stage (Thrust's included) arrives here too,
    // after the pipeline has stopped every stream of the run.
    std::fprintf(stderr, "chunk_sort: %s\n", e.what());
    return EXIT_FAILURE;
  }
}
