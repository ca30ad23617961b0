// SPDX-License-Identifier: MIT
//
// Probe (2026-12-02, benchmarks/RESULTS.md "CUDA graphs"): what re-pointing
// an instantiated graph's copies at new host memory costs, three ways, on
// a graph shaped like chunkpipe's for 1 GiB in 64 KiB chunks (per chunk a
// copy in, a kernel, a copy out; four chains):
//   exec setters   cudaGraphExecMemcpyNodeSetParams1D on every copy node
//   graph + update cudaGraphMemcpyNodeSetParams1D on the graph's nodes, then
//                  one cudaGraphExecUpdate
//   rebuild        a new graph, then cudaGraphInstantiate
// against building and instantiating it. Host clock, median of 5.
//   build-gpu/benchmarks/probe_graph_update
#include "probe.hpp"

#include <vector>

namespace {

}  // namespace

int main() {
  if (const int status = probe::require_gpu()) return status;
  const probe::Host host;  // 1 GiB each way, pinned
  const std::size_t total = probe::Host::total;
  float *h_in2 = nullptr, *h_out2 = nullptr;  // a second pinned pair: the "new pointers"
  CK(cudaMallocHost(&h_in2, total * sizeof(float)));
  CK(cudaMallocHost(&h_out2, total * sizeof(float)));
  for (std::size_t window_kib : {64, 1024}) {
    const std::size_t chunk = window_kib * 1024 / sizeof(float), chunks = total / chunk, slots = 4;
    float* dev = nullptr;
    CK(cudaMalloc(&dev, 2 * slots * chunk * sizeof(float)));
    std::vector<cudaGraphNode_t> copies;
    auto build = [&](const float* in, float* out, cudaGraph_t& g) {
      CK(cudaGraphCreate(&g, 0));
      copies.clear();
      std::vector<cudaGraphNode_t> last(slots, nullptr);
      const probe::Fma f{0};
      for (std::size_t c = 0; c < chunks; ++c) {
        const std::size_t s = c % slots;
        float* d_in = dev + 2 * s * chunk;
        float* d_out = d_in + chunk;
        cudaGraphNode_t h2d, k, d2h;
        const std::size_t deps = last[s] ? 1 : 0;
        CK(cudaGraphAddMemcpyNode1D(&h2d, g, deps ? &last[s] : nullptr, deps, d_in, in + c * chunk,
                                    chunk * sizeof(float), cudaMemcpyDefault));
        const float* kin = d_in;
        float* kout = d_out;
        std::size_t n = chunk;
        probe::Fma ff = f;
        void* args[] = {&kin, &kout, &n, &ff};
        cudaKernelNodeParams kp{};
        kp.func = reinterpret_cast<void*>(&probe::kern);
        kp.gridDim = dim3(static_cast<unsigned>((chunk + 255) / 256));
        kp.blockDim = dim3(256);
        kp.kernelParams = args;
        CK(cudaGraphAddKernelNode(&k, g, &h2d, 1, &kp));
        CK(cudaGraphAddMemcpyNode1D(&d2h, g, &k, 1, out + c * chunk, d_out, chunk * sizeof(float),
                                    cudaMemcpyDefault));
        copies.push_back(h2d);
        copies.push_back(d2h);
        last[s] = d2h;
      }
    };
    std::vector<double> t_build, t_inst, t_exec_set, t_graph_set, t_update;
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    for (int r = 0; r < 5; ++r) {
      if (exec) CK(cudaGraphExecDestroy(exec));
      if (g) CK(cudaGraphDestroy(g));
      auto t0 = std::chrono::steady_clock::now();
      build(host.in, host.out, g);
      t_build.push_back(probe::ms_since(t0));
      t0 = std::chrono::steady_clock::now();
      CK(cudaGraphInstantiate(&exec, g, 0));
      t_inst.push_back(probe::ms_since(t0));
    }
    // Every copy node at round r's buffers (the two pairs alternate), through `set`.
    auto repoint = [&](int r, auto&& set) {
      const bool flip = r % 2 == 0;
      const float* in = flip ? h_in2 : host.in;
      float* out = flip ? h_out2 : host.out;
      for (std::size_t c = 0; c < chunks; ++c) {
        float* d_in = dev + 2 * (c % slots) * chunk;
        CK(set(copies[2 * c], d_in, in + c * chunk));
        CK(set(copies[2 * c + 1], out + c * chunk, d_in + chunk));
      }
    };
    const std::size_t bytes = chunk * sizeof(float);
    for (int r = 0; r < 5; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      repoint(r, [&](cudaGraphNode_t node, void* dst, const void* src) {
        return cudaGraphExecMemcpyNodeSetParams1D(exec, node, dst, src, bytes, cudaMemcpyDefault);
      });
      t_exec_set.push_back(probe::ms_since(t0));
    }
    for (int r = 0; r < 5; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      repoint(r, [&](cudaGraphNode_t node, void* dst, const void* src) {
        return cudaGraphMemcpyNodeSetParams1D(node, dst, src, bytes, cudaMemcpyDefault);
      });
      t_graph_set.push_back(probe::ms_since(t0));
      t0 = std::chrono::steady_clock::now();
      cudaGraphExecUpdateResultInfo info{};
      CK(cudaGraphExecUpdate(exec, g, &info));
      t_update.push_back(probe::ms_since(t0));
    }
    // The updated graph still runs, and writes where it now points.
    CK(cudaGraphLaunch(exec, nullptr));
    CK(cudaDeviceSynchronize());
    using probe::median;
    const double built = median(t_build), inst = median(t_inst), es = median(t_exec_set), gs = median(t_graph_set),
                 up = median(t_update);
    std::printf("%5zu KiB, %zu chunks, %zu copy nodes: build %.2f ms + instantiate %.2f ms = %.2f; exec setters %.2f ms "
                "(%.2fx cheaper, %.3f us/node); graph setters %.2f + cudaGraphExecUpdate %.2f = %.2f ms (%.2fx cheaper)\n",
                window_kib, chunks, copies.size(), built, inst, built + inst, es, (built + inst) / es,
                1000.0 * es / static_cast<double>(copies.size()), gs, up, gs + up, (built + inst) / (gs + up));
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(g));
    CK(cudaFree(dev));
  }
  CK(cudaFreeHost(h_in2));
  CK(cudaFreeHost(h_out2));
  return 0;
}
