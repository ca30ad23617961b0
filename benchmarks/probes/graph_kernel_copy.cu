// SPDX-License-Identifier: MIT
//
// Probe (2026-12-03, benchmarks/RESULTS.md "CUDA graphs"): can a graph whose
// copies are kernels that read their host addresses at launch (from a
// descriptor in device memory) replay as fast as one of copy nodes? If so,
// pointing a cached graph at new host memory is one 16-byte copy instead of
// setting every copy node (1.7 us a node, probe_graph_update), which is
// what issue 10's "update >= 10x cheaper than building" needs. Over 1 GiB
// of pinned float each way, 4 slots, per chunk a copy in, the lesson's
// kernel (0 FMAs) and a copy out, chunk k on chain k % 4:
//   copy nodes     cudaGraphAddMemcpyNode1D in and out (chunkpipe's shape)
//   copy kernels   the same graph with each copy a kernel node (float4
//                  loads and stores, the host side through the mapped
//                  pinned address read from the descriptor)
//   fused          one kernel node per chunk that reads the host input and
//                  writes the host output itself (no slots, no copies)
//   one kernel     the fused kernel once over the whole run, on a stream:
//                  what SM loads and stores over the link reach
// Every variant is checked against the closed form (output poisoned)
// before it is timed; timing is probe.hpp's (events, interleaved rounds).
// The kernel variants' "update" is timed on the host: writing the
// descriptor and queueing its copy.
//   build/benchmarks/probe_graph_kernel_copy [rounds]
#include "probe.hpp"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

struct Desc {
  const float* in;
  float* out;
};

constexpr unsigned threads = 256;

unsigned blocks_for(std::size_t n4) {
  const std::size_t b = (n4 + threads - 1) / threads;
  return static_cast<unsigned>(std::min<std::size_t>(std::max<std::size_t>(b, 1), 1056));  // 8 a SM at most
}

__global__ void pull(const Desc* d, std::size_t first, float* slot, std::size_t n4) {
  const float4* src = reinterpret_cast<const float4*>(d->in + first);
  float4* dst = reinterpret_cast<float4*>(slot);
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}

__global__ void push(const Desc* d, std::size_t first, const float* slot, std::size_t n4) {
  const float4* src = reinterpret_cast<const float4*>(slot);
  float4* dst = reinterpret_cast<float4*>(d->out + first);
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}

__global__ void fused(const Desc* d, std::size_t first, std::size_t n4, probe::Fma f) {
  const float4* src = reinterpret_cast<const float4*>(d->in + first);
  float4* dst = reinterpret_cast<float4*>(d->out + first);
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    float4 v = src[i];
    v.x = f(v.x);
    v.y = f(v.y);
    v.z = f(v.z);
    v.w = f(v.w);
    dst[i] = v;
  }
}

template <class... A>
cudaGraphNode_t add_kernel(cudaGraph_t g, const std::vector<cudaGraphNode_t>& deps, void (*fn)(A...), unsigned grid,
                           void** args) {
  cudaKernelNodeParams kp{};
  kp.func = reinterpret_cast<void*>(fn);
  kp.gridDim = dim3(grid);
  kp.blockDim = dim3(threads);
  kp.kernelParams = args;
  cudaGraphNode_t node = nullptr;
  CK(cudaGraphAddKernelNode(&node, g, deps.empty() ? nullptr : deps.data(), deps.size(), &kp));
  return node;
}

}  // namespace

int main(int argc, char** argv) {
  if (const int status = probe::require_gpu()) return status;
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  const probe::Host host;  // 1 GiB each way, pinned (mapped: UVA)
  const std::size_t total = probe::Host::total;
  const probe::Fma f{0};
  const cudaStream_t stream = probe::new_stream();
  Desc* d_desc = nullptr;  // what the kernels read their host addresses from
  Desc* h_desc = nullptr;  // pinned: its copy to d_desc is the "update"
  CK(cudaMalloc(&d_desc, sizeof(Desc)));
  CK(cudaMallocHost(&h_desc, sizeof(Desc)));
  *h_desc = Desc{host.in, host.out};
  CK(cudaMemcpy(d_desc, h_desc, sizeof(Desc), cudaMemcpyHostToDevice));

  std::printf("probe_graph_kernel_copy: 1 GiB of float each way, pinned, 0 FMAs, 4 slots, %d rounds\n", rounds);
  bool ok = true;
  for (std::size_t window_kib : {64, 256, 1024, 4096}) {
    const std::size_t chunk = window_kib * 1024 / sizeof(float), chunks = total / chunk, slots = 4;
    std::size_t n4 = chunk / 4;
    float* dev = nullptr;
    CK(cudaMalloc(&dev, 2 * slots * chunk * sizeof(float)));
    enum class Shape { copy_nodes, copy_kernels, fused_nodes };
    auto build = [&](Shape shape, double& build_ms, double& inst_ms) {
      const auto t0 = std::chrono::steady_clock::now();
      cudaGraph_t g = nullptr;
      CK(cudaGraphCreate(&g, 0));
      std::vector<cudaGraphNode_t> last(slots, nullptr);
      for (std::size_t c = 0; c < chunks; ++c) {
        const std::size_t s = c % slots;
        float* d_in = dev + 2 * s * chunk;
        float* d_out = d_in + chunk;
        std::vector<cudaGraphNode_t> deps;
        if (last[s]) deps.push_back(last[s]);
        std::size_t first = c * chunk;
        Desc* desc = d_desc;
        if (shape == Shape::fused_nodes) {
          probe::Fma ff = f;
          void* args[] = {&desc, &first, &n4, &ff};
          last[s] = add_kernel(g, deps, &fused, blocks_for(n4), args);
          continue;
        }
        cudaGraphNode_t in_node = nullptr, out_node = nullptr;
        if (shape == Shape::copy_nodes) {
          CK(cudaGraphAddMemcpyNode1D(&in_node, g, deps.empty() ? nullptr : deps.data(), deps.size(), d_in,
                                      host.in + first, chunk * sizeof(float), cudaMemcpyDefault));
        } else {
          float* slot = d_in;
          void* args[] = {&desc, &first, &slot, &n4};
          in_node = add_kernel(g, deps, &pull, blocks_for(n4), args);
        }
        const float* kin = d_in;
        float* kout = d_out;
        std::size_t n = chunk;
        probe::Fma ff = f;
        void* kargs[] = {&kin, &kout, &n, &ff};
        const cudaGraphNode_t k = add_kernel(g, {in_node}, &probe::kern, static_cast<unsigned>((chunk + 255) / 256), kargs);
        if (shape == Shape::copy_nodes) {
          CK(cudaGraphAddMemcpyNode1D(&out_node, g, &k, 1, host.out + first, d_out, chunk * sizeof(float),
                                      cudaMemcpyDefault));
        } else {
          const float* slot = d_out;
          void* args[] = {&desc, &first, &slot, &n4};
          out_node = add_kernel(g, {k}, &push, blocks_for(n4), args);
        }
        last[s] = out_node;
      }
      build_ms = probe::ms_since(t0);
      const auto t1 = std::chrono::steady_clock::now();
      cudaGraphExec_t exec = nullptr;
      CK(cudaGraphInstantiate(&exec, g, 0));
      inst_ms = probe::ms_since(t1);
      CK(cudaGraphDestroy(g));
      return exec;
    };
    double b_nodes = 0, i_nodes = 0, b_kern = 0, i_kern = 0, b_fused = 0, i_fused = 0;
    const cudaGraphExec_t g_nodes = build(Shape::copy_nodes, b_nodes, i_nodes);
    const cudaGraphExec_t g_kern = build(Shape::copy_kernels, b_kern, i_kern);
    const cudaGraphExec_t g_fused = build(Shape::fused_nodes, b_fused, i_fused);
    std::vector<double> update_ms;
    // The kernels' update: point the descriptor at the run's memory (the
    // same pair each time here) and queue its copy before the launch.
    auto update = [&] {
      const auto t0 = std::chrono::steady_clock::now();
      *h_desc = Desc{host.in, host.out};
      CK(cudaMemcpyAsync(d_desc, h_desc, sizeof(Desc), cudaMemcpyHostToDevice, stream));
      update_ms.push_back(probe::ms_since(t0));
    };
    const auto join = probe::join_streams({stream});
    std::vector<probe::Variant> vs;
    const std::string w = std::to_string(window_kib) + " KiB ";
    vs.push_back({w + "copy nodes", [&] { CK(cudaGraphLaunch(g_nodes, stream)); }, join});
    vs.push_back({w + "copy kernels", [&] { update(); CK(cudaGraphLaunch(g_kern, stream)); }, join});
    vs.push_back({w + "fused", [&] { update(); CK(cudaGraphLaunch(g_fused, stream)); }, join});
    const std::size_t all4 = total / 4;
    vs.push_back({w + "one kernel (stream)", [&] {
                    update();
                    fused<<<blocks_for(all4), threads, 0, stream>>>(d_desc, 0, all4, f);
                    CK(cudaGetLastError());
                  },
                  join});
    for (probe::Variant& v : vs) {
      std::memset(host.out, 0xFF, total * sizeof(float));
      v.issue();
      CK(cudaStreamSynchronize(stream));
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < total; i += 4099) wrong += host.out[i] != f(host.in[i]);
      wrong += host.out[total - 1] != f(host.in[total - 1]);
      if (wrong) {
        std::printf("%s: %zu wrong samples\n", v.name.c_str(), wrong);
        ok = false;
      }
    }
    update_ms.clear();
    probe::run_rounds(vs, rounds, 1);
    std::printf("%5zu KiB, %zu chunks: build + instantiate: copy nodes %.1f + %.1f ms, copy kernels %.1f + %.1f ms, "
                "fused %.1f + %.1f ms; the kernels' update (descriptor + its copy queued) %.4f ms median\n\n",
                window_kib, chunks, b_nodes, i_nodes, b_kern, i_kern, b_fused, i_fused, probe::median(update_ms));
    CK(cudaGraphExecDestroy(g_nodes));
    CK(cudaGraphExecDestroy(g_kern));
    CK(cudaGraphExecDestroy(g_fused));
    CK(cudaFree(dev));
  }
  CK(cudaFree(d_desc));
  CK(cudaFreeHost(h_desc));
  std::printf("probe_graph_kernel_copy: %s\n", ok ? "every variant checked" : "WRONG RESULTS");
  return ok ? 0 : 1;
}
