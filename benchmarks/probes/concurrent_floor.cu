// SPDX-License-Identifier: MIT
//
// Probe (2026-12-03, benchmarks/RESULTS.md "What the floor leaves out"):
// pipeline_bench's floor is the slowest of passes timed alone (1 GiB each
// way copied at once; the kernel over 1 GiB), so it assumes that copies
// and kernels running together slow each other not at all. This probe
// runs them together, with no dependence between them: a 1 GiB copy in
// and a 1 GiB copy out on two streams and the kernel over another 1 GiB
// on a third, issued at once. No schedule that overlaps the same work can
// beat that pass, so it is the floor a pipeline can reach. Beside it the
// passes alone, the same concurrent pass with the kernel cut into 8 MiB
// launches, and the default Options{} pipeline. Interleaved rounds, CUDA
// events.
//   build-gpu/benchmarks/probe_concurrent_floor
#include <chunkpipe/pipeline.cuh>

#include "pipeline_variant.hpp"
#include "probe.hpp"

#include <memory>
#include <optional>

int main() {
  if (const int status = probe::require_gpu()) return status;
  const probe::Host host;
  const std::size_t total = probe::Host::total;
  const std::size_t bytes = total * sizeof(float);
  float *d_in = nullptr, *d_out = nullptr, *d_k = nullptr;
  CK(cudaMalloc(&d_in, bytes));
  CK(cudaMalloc(&d_out, bytes));
  CK(cudaMalloc(&d_k, bytes));
  CK(cudaMemcpy(d_out, host.in, bytes, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_k, host.in, bytes, cudaMemcpyHostToDevice));
  cudaStream_t s[3] = {probe::new_stream(), probe::new_stream(), probe::new_stream()};
  const auto join = probe::join_streams({s[0], s[1], s[2]});
  const float* h_in = host.in;
  float* h_out = host.out;
  const std::size_t piece = 8 * 262144;  // 8 MiB of float

  using Pipe = chunkpipe::ChunkedPipeline<chunkpipe::Map<probe::Fma>>;
  std::vector<std::unique_ptr<Pipe>> pipes;
  std::vector<probe::Variant> vs;
  for (int iters : {0, 512, 2048, 4096}) {
    const probe::Fma f{iters};
    auto copies = [=, &s] {
      CK(cudaMemcpyAsync(d_in, h_in, bytes, cudaMemcpyHostToDevice, s[0]));
      CK(cudaMemcpyAsync(h_out, d_out, bytes, cudaMemcpyDeviceToHost, s[1]));
    };
    auto kernel = [=, &s] {
      probe::kern<<<unsigned(total / 256), 256, 0, s[2]>>>(d_k, d_k, total, f);
      CK(cudaGetLastError());
    };
    auto kernel_pieces = [=, &s] {
      for (std::size_t at = 0; at < total; at += piece)
        probe::kern<<<unsigned(piece / 256), 256, 0, s[2]>>>(d_k + at, d_k + at, piece, f);
      CK(cudaGetLastError());
    };
    char name[96];
    std::snprintf(name, sizeof name, "fma %4d copies both ways", iters);
    vs.push_back({name, copies, join});
    std::snprintf(name, sizeof name, "fma %4d kernel", iters);
    vs.push_back({name, kernel, join});
    std::snprintf(name, sizeof name, "fma %4d copies and kernel at once", iters);
    vs.push_back({name, [=] { copies(), kernel(); }, join});
    std::snprintf(name, sizeof name, "fma %4d copies and 8 MiB kernels at once", iters);
    vs.push_back({name, [=] { copies(), kernel_pieces(); }, join});
    pipes.push_back(std::make_unique<Pipe>(chunkpipe::Options{}, chunkpipe::Map<probe::Fma>{f}));
    std::snprintf(name, sizeof name, "fma %4d chunkpipe default", iters);
    vs.push_back(probe::pipeline_variant(name, *pipes.back(), host));
  }
  probe::run_rounds(vs, 9, 3);
  return 0;
}
