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
//     overlap is gone. chunkpipe::thrust_policy(ctx.stream) (thrust.cuh) is
//     par_nosync.on(ctx.stream) with an allocator that allocates and frees
//     in stream order (cudaMallocAsync, cudaFreeAsync on ctx.stream).
//
// The host checks each chunk against its own reference (a counting sort,
// stable by construction), bit for bit, under three schedules.
//
// Build: part of the chunkpipe build (target `chunk_sort`), or
//   nvcc -std=c++17 -O3 -arch=sm_90 --extended-lambda -I include -o chunk_sort examples/chunk_sort.cu
// Run:   ./chunk_sort [--pairs N] [--chunk N] [--runs 5]
//
// The helpers every example and benchmark repeats (device check, command
// line, timing, checks) are in support.hpp.

#include <chunkpipe/pipeline.cuh>
#include <chunkpipe/thrust.cuh>

#include <cuda/std/functional>
#include <cuda_runtime.h>
#include <thrust/scan.h>
#include <thrust/sort.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "support.hpp"

namespace {

// Flow ids are 0 .. kFlows - 1; packet sizes 40 .. 1500 bytes.
constexpr std::uint32_t kFlows = 4096;

// Element types in and out of each stage: (flow id, packet bytes) in,
// (flow id, running bytes) out.
using Packets = chunkpipe::types<std::uint32_t, std::uint32_t>;
using Grouped = chunkpipe::types<std::uint32_t, std::uint64_t>;

// Both stages run Thrust under chunkpipe::thrust_policy(ctx.stream): its
// scratch memory is allocated and freed in stream order on the chunk's
// stream, so there is no device-wide synchronisation, and the memory pool
// reuses the blocks chunk after chunk. Freeing never throws (Thrust frees
// from a destructor); a failure is not lost: it is the thread's last CUDA
// error, and chunkpipe checks cudaGetLastError() after every chunk stage.

// Stage 1, in place: sort the chunk's packets by flow id. Stable, so the
// packets of one flow keep their arrival order. The context's spans are the
// slot's device buffers; ctx.count says how many elements of them are this
// chunk's (the last chunk may be short).
struct GroupByFlow {
  void operator()(const chunkpipe::ChunkContext<Packets, Packets>& ctx) const {
    std::uint32_t* flow = ctx.in<0>().data();
    std::uint32_t* bytes = ctx.in<1>().data();
    // Thrust sorts all 32 bits of the key. cub::DeviceRadixSort::SortPairs
    // with end_bit = 12 would sort only the bits flow ids use, if this stage
    // ever became the slow one.
    thrust::stable_sort_by_key(chunkpipe::thrust_policy(ctx.stream), flow, flow + ctx.count, bytes);
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
                                       ctx.stream.get()));
    thrust::inclusive_scan(chunkpipe::thrust_policy(ctx.stream), bytes, bytes + ctx.count, running, std::uint64_t{0},
                           ::cuda::std::plus<std::uint64_t>{});
  }
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

// ---------------------------------------------------------------------------
// Command line.

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
  return example::CommandLine("chunk_sort", kUsage)
      .integer("--pairs", args.pairs, 1, 1ll << 30)
      .integer("--chunk", args.chunk, 1, 1ll << 28)
      .integer("--runs", args.runs, 1, 1000)
      .parse(argc, argv);
}

// ---------------------------------------------------------------------------

int run(const Args& args) {
  const auto n = static_cast<std::size_t>(args.pairs);
  const auto chunk = static_cast<std::size_t>(args.chunk);
  const int runs = static_cast<int>(args.runs);

  const cudaDeviceProp prop = example::current_gpu();
  std::printf("GPU: %s\n", prop.name);

  // By default the pool behind cudaMallocAsync hands freed memory back to
  // the system whenever the program synchronises, and the next chunk's
  // allocation must map it again. Keeping it in the pool makes each chunk's
  // scratch allocation a cheap reuse.
  int device = 0;
  CHUNKPIPE_CUDA_TRY(cudaGetDevice(&device));
  cudaMemPool_t pool = nullptr;
  CHUNKPIPE_CUDA_TRY(cudaDeviceGetDefaultMemPool(&pool, device));
  std::uint64_t keep_everything = UINT64_MAX;
  CHUNKPIPE_CUDA_TRY(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_everything));

  // The records, in pinned memory so the copies run at the link's full speed
  // and the table below compares schedules. From pageable std::vectors
  // chunkpipe would stage every byte through its pinned slots (saxpy.cu
  // measures that), and the host copies would set the pace, not the GPU.
  chunkpipe::PinnedArray<std::uint32_t> flow(n), bytes(n), flow_out(n);
  chunkpipe::PinnedArray<std::uint64_t> running(n);
  // Deterministic pseudo-random records: example::mix is an integer hash of
  // the index, so filling millions of them stays fast even in a debug build.
  for (std::size_t i = 0; i < n; ++i) {
    flow.data()[i] = example::mix(i, 1) % kFlows;
    bytes.data()[i] = 40 + example::mix(i, 2) % 1461;
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
    ms[s] = example::mean_ms(runs, run_once);  // each run returns with its output on the host
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
  // Reads the command line, checks for a GPU and runs (support.hpp). An
  // exception is printed and gives EXIT_FAILURE.
  // chunkpipe::cuda_error says which call failed and where; an exception
  // thrown inside a chunk stage (Thrust's included) arrives here too,
  // after the pipeline has stopped every stream of the run.
  return example::run_example("chunk_sort", argc, argv, parse_args, run);
}
