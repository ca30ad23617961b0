// SPDX-License-Identifier: MIT
//
// Prefetching the next batch while the current one is used: the shape of a
// training or inference loop.
//
// The streams page ends with "every training loop is a stream pipeline":
// while the host uses batch k (logs its loss, writes it out, decides what
// comes next), the GPU should already be working on batch k+1. Otherwise the
// two take turns and each idles while the other works.
//
// With chunkpipe that is run_async. It queues a whole batch and returns a
// RunTicket at once; ticket.wait() blocks until that batch's output is on
// the host. The loop queues batch k+1 first, then waits for batch k, then
// uses it:
//
//   ticket[0] = pipe.run_async(batch 0)
//   for k:  ticket[k+1] = pipe.run_async(batch k+1)   // the GPU has its next batch
//           ticket[k].wait()                          // batch k is done
//           use(batch k)                              // while the GPU runs k+1
//
// Runs on one pipeline are ordered: batch k+1's work starts on the GPU after
// batch k's, so they can share the pipeline's slots. Each batch has its own
// output buffer, because batch k+1 writes while batch k is still being read.
// A batch's buffers must stay alive and untouched until its ticket's wait()
// has returned.
//
// The program runs the loop both ways, blocking (run, then use) and
// prefetching, checks every batch of both against a host reference, and
// prints what each loop cost next to the GPU's and the host's shares of it.
//
// Build: part of the chunkpipe build (target `prefetch`), or
//   nvcc -std=c++17 -O3 -arch=sm_90 --extended-lambda -I include -o prefetch examples/prefetch.cu
// Run:   ./prefetch [--batches 8] [--batch N] [--iters 120000]
//
// The helpers every example and benchmark repeats (device check, command
// line, timing, checks) are in support.hpp.

#include <chunkpipe/pipeline.cuh>

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "support.hpp"

namespace {

// The "model": `iters` chained FMAs per element, a stand-in for a forward
// pass that gives the GPU real work per batch. With `a` this close to 1 the
// chain forgets its input only slowly, so the output still depends on the
// input and a batch that got mixed up cannot pass the check.
// fmaf rounds once on the GPU and on the CPU alike, so the host reference,
// which calls this same functor, must agree bit for bit.
struct Layer {
  float a;
  float b;
  int iters;
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const {
#ifdef __CUDA_ARCH__
#pragma unroll 16  // a runtime trip count: unrolling keeps the loop overhead off the FMA pipe
#endif
    for (int k = 0; k < iters; ++k) x = fmaf(x, a, b);
    return x;
  }
};

// The data set cycles through kPeriod values in [-1, 1). 1021 is prime, so
// unless the batch size is a multiple of it every batch holds different
// data; and the host reference needs only kPeriod evaluations of the layer.
constexpr std::size_t kPeriod = 1021;
float input_value(std::size_t p) {
  return -1.0f + 2.0f * static_cast<float>(p) / static_cast<float>(kPeriod);
}

// What the host does with a finished batch: checks every element against
// the reference and computes the batch's mean output (the number a training
// loop would log as its loss). Element i of batch k is element k * size + i
// of the data set.
struct BatchResult {
  bool ok = false;
  double mean = 0.0;
};

BatchResult use_batch(const chunkpipe::PinnedArray<float>& out, std::size_t k, const std::vector<float>& ref_table) {
  const float* y = out.data();
  const std::size_t n = out.size();
  double sum = 0.0;
  for (std::size_t i = 0, p = (k * n) % kPeriod; i < n; ++i, p = (p + 1 == kPeriod) ? 0 : p + 1) {
    if (!example::same_bits(y[i], ref_table[p])) {
      std::fprintf(stderr, "batch %zu: WRONG at %zu: got %.9g, want %.9g\n", k, i, static_cast<double>(y[i]),
                   static_cast<double>(ref_table[p]));
      return {false, 0.0};
    }
    sum += y[i];
  }
  return {true, sum / static_cast<double>(n)};
}

// NaN in every float: an element nobody wrote can never pass for a result.
void poison(std::vector<chunkpipe::PinnedArray<float>>& buffers) {
  for (auto& b : buffers) example::poison(b.data(), b.size());
}

// The loops' clocks: a steady clock, and the milliseconds between two readings.
using example::Clock;
using example::ms_between;

// ---------------------------------------------------------------------------
// Command line.

// Overlap hides the smaller of the GPU's and the host's shares behind the
// larger, so it helps most when they are about equal. The default --iters
// makes them roughly so on an H200 in an unoptimised (default CMake) build,
// where using a batch costs the host 5 to 10 ns per element; raise or lower
// it to watch either side dominate.
struct Args {
  long long batches = 8;
  long long batch = 1ll << 22;  // 4 Mi floats, 16 MiB in and out per batch
  long long iters = 120000;
};

const char* const kUsage =
    "prefetch: a training-style loop that queues batch k+1 with run_async before using batch k\n"
    "usage: prefetch [--batches N] [--batch N] [--iters N]\n"
    "  --batches N   batches per loop (default 8)\n"
    "  --batch N     floats per batch (default 4194304: 16 MiB)\n"
    "  --iters N     chained FMAs per element, the GPU's work per batch (default 120000)\n"
    "  --help        this text\n";

// Reads "--name N" or "--name=N". Returns -1 to go on, or the exit status
// to leave with: 0 after --help, 2 after bad input.
int parse_args(int argc, char** argv, Args& args) {
  return example::CommandLine("prefetch", kUsage)
      .integer("--batches", args.batches, 2, 1000)
      .integer("--batch", args.batch, 1, 1ll << 28)
      .integer("--iters", args.iters, 0, 1000000)
      .parse(argc, argv);
}

// ---------------------------------------------------------------------------

int run(const Args& args) {
  const auto batches = static_cast<std::size_t>(args.batches);
  const auto batch = static_cast<std::size_t>(args.batch);
  const Layer layer{0.999999f, 0.001f, static_cast<int>(args.iters)};

  const cudaDeviceProp prop = example::current_gpu();
  std::printf("GPU: %s\n", prop.name);

  // The reference: the layer on the CPU, once per distinct input value.
  std::vector<float> ref_table(kPeriod);
  for (std::size_t p = 0; p < kPeriod; ++p) ref_table[p] = layer(input_value(p));

  // The batches, each with its own input and output buffer, in pinned
  // memory (chunkpipe::PinnedArray), as a data loader feeding a GPU fills
  // them. They are declared before the pipeline on purpose: objects are
  // destroyed in reverse order, so if anything below throws while batches
  // are in flight, the pipeline's destructor (which waits for its work) runs
  // before these buffers are freed.
  std::vector<chunkpipe::PinnedArray<float>> inputs, outputs;
  inputs.reserve(batches);
  outputs.reserve(batches);
  for (std::size_t k = 0; k < batches; ++k) {
    inputs.emplace_back(batch);
    outputs.emplace_back(batch);
    float* x = inputs.back().data();
    for (std::size_t i = 0, p = (k * batch) % kPeriod; i < batch; ++i, p = (p + 1 == kPeriod) ? 0 : p + 1) {
      x[i] = input_value(p);
    }
  }

  chunkpipe::Options options;
  options.chunk_elems = std::size_t{1} << 20;  // 4 MiB chunks: a batch is several chunks, pipelined
  chunkpipe::ChunkedPipeline<chunkpipe::Map<Layer>> pipe(options, chunkpipe::Map<Layer>{layer});
  auto in = [&](std::size_t k) { return chunkpipe::pinned(inputs[k]); };
  auto out = [&](std::size_t k) { return chunkpipe::pinned(outputs[k]); };

  const auto& g = pipe.geometry();
  std::printf("%zu batches of %zu floats (%zu MiB in and out each), %d FMAs per element\n", batches, batch,
              batch * sizeof(float) >> 20, layer.iters);
  std::printf("pipeline: %s, %d slots of %zu elements\n\n", std::string(chunkpipe::to_string(g.policy)).c_str(),
              g.depth, g.chunk_elems);

  // Warm-up outside the clocks: the first run allocates the device slots and
  // loads the kernel.
  pipe.run(in(0), out(0));

  std::vector<BatchResult> results(batches);
  bool all_ok = true;

  // 1. Blocking: run(k) returns when batch k is on the host, then the host
  // uses it, and the GPU waits for the host to ask for batch k+1.
  poison(outputs);
  double gpu_ms = 0.0, host_ms = 0.0;
  const auto b0 = Clock::now();
  for (std::size_t k = 0; k < batches; ++k) {
    const auto t0 = Clock::now();
    pipe.run(in(k), out(k));
    const auto t1 = Clock::now();
    results[k] = use_batch(outputs[k], k, ref_table);
    gpu_ms += ms_between(t0, t1);
    host_ms += ms_between(t1, Clock::now());
    all_ok = all_ok && results[k].ok;
  }
  const double blocking_ms = ms_between(b0, Clock::now());

  // 2. Prefetching: batch k+1 is queued before batch k is waited for, so the
  // GPU works on it while the host uses batch k.
  poison(outputs);
  std::vector<chunkpipe::RunTicket> tickets(batches);
  const auto p0 = Clock::now();
  tickets[0] = pipe.run_async(in(0), out(0));
  for (std::size_t k = 0; k < batches; ++k) {
    if (k + 1 < batches) tickets[k + 1] = pipe.run_async(in(k + 1), out(k + 1));
    tickets[k].wait();  // throws the batch's error, if it had one
    results[k] = use_batch(outputs[k], k, ref_table);
    all_ok = all_ok && results[k].ok;
  }
  const double prefetch_ms = ms_between(p0, Clock::now());

  std::printf("%-7s %14s   %s\n", "batch", "mean output", "check");
  for (std::size_t k = 0; k < batches; ++k) {
    std::printf("%-7zu %14.6f   %s\n", k, results[k].mean, results[k].ok ? "ok (bit for bit)" : "WRONG");
  }
  if (!all_ok) {
    std::fprintf(stderr, "prefetch: some batches did not match the reference\n");
    return EXIT_FAILURE;
  }

  const double per = static_cast<double>(batches);
  std::printf("\n%-46s %11s %15s\n", "loop", "total (ms)", "per batch (ms)");
  std::printf("%-46s %11.2f %15.2f\n", "blocking: run(k), then use batch k", blocking_ms, blocking_ms / per);
  std::printf("%-46s %11.2f %15.2f\n", "prefetch: run_async(k+1), then use batch k", prefetch_ms, prefetch_ms / per);
  std::printf("%-46s %11.2f %15.2f\n", "  the GPU's share (blocking loop's run(k))", gpu_ms, gpu_ms / per);
  std::printf("%-46s %11.2f %15.2f\n", "  the host's share (using the batches)", host_ms, host_ms / per);
  // Overlap can hide the smaller share behind the larger, never more: the
  // best a prefetching loop can do is the larger share, plus one batch of
  // the other at one end.
  std::printf("\nprefetch vs blocking: %.2fx (overlap can reach at most %.2fx here: sum / larger share)\n",
              blocking_ms / prefetch_ms, (gpu_ms + host_ms) / std::max(gpu_ms, host_ms));
  return EXIT_SUCCESS;
}

}  // namespace

int main(int argc, char** argv) {
  // Reads the command line, checks for a GPU and runs (support.hpp). An
  // exception is printed and gives EXIT_FAILURE.
  // chunkpipe::cuda_error says which call failed and where;
  // chunkpipe::config_error says which setting or range was wrong.
  return example::run_example("prefetch", argc, argv, parse_args, run);
}
