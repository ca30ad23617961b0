// SPDX-License-Identifier: MIT
//
// Probe (2026-12-03, benchmarks/RESULTS.md "CUDA graphs"): why a
// stage_streams graph replays 1 to 1.5% slower than the same schedule on
// streams at 1 and 4 MiB windows (graphs_bench runs 1 to 3), where
// slot_streams graphs do not. stage_streams depth 3 written by hand (one
// stream each for copies in, kernels and copies out, events between them,
// a copy in waiting for the copy out of its slot's last chunk), 1 GiB each
// way, 0 FMAs, as:
//   streams         the schedule on three streams
//   graph, queue+waits   one node per op, edges as chunkpipe builds them
//                   (graph_of: the op before on its queue, and its waits)
//   graph, waits    only the waits: ops of one queue may overlap
//   graph, captured the streams version captured (what CUDA makes of it)
// Event medians of 9 interleaved rounds; every pass checked.
//   build-gpu/benchmarks/probe_graph_edges
#include "probe.hpp"

#include <cstdio>
#include <vector>

namespace {

struct Ring {
  std::size_t chunk, chunks;
  static constexpr std::size_t slots = 3;
  float* dev = nullptr;  // per slot: in, out
  float* in(std::size_t k) const { return dev + 2 * (k % slots) * chunk; }
  float* out(std::size_t k) const { return in(k) + chunk; }
};

void add_kernel(cudaGraph_t g, cudaGraphNode_t* node, const std::vector<cudaGraphNode_t>& deps, const Ring& r,
                std::size_t k) {
  const float* kin = r.in(k);
  float* kout = r.out(k);
  std::size_t n = r.chunk;
  probe::Fma f{0};
  void* args[] = {&kin, &kout, &n, &f};
  cudaKernelNodeParams kp{};
  kp.func = reinterpret_cast<void*>(&probe::kern);
  kp.gridDim = dim3(static_cast<unsigned>((r.chunk + 255) / 256));
  kp.blockDim = dim3(256);
  kp.kernelParams = args;
  CK(cudaGraphAddKernelNode(node, g, deps.data(), deps.size(), &kp));
}

// One node per op; `queue_edges`: each op also follows the op before it on
// its queue, as chunkpipe's graph_of makes it.
cudaGraphExec_t build(const Ring& r, const float* h_in, float* h_out, bool queue_edges) {
  cudaGraph_t g = nullptr;
  CK(cudaGraphCreate(&g, 0));
  std::vector<cudaGraphNode_t> h2d(r.chunks), ker(r.chunks), d2h(r.chunks);
  std::vector<cudaGraphNode_t> deps;
  for (std::size_t k = 0; k < r.chunks; ++k) {
    const std::size_t bytes = r.chunk * sizeof(float);
    deps.clear();
    if (k >= Ring::slots) deps.push_back(d2h[k - Ring::slots]);
    if (queue_edges && k > 0) deps.push_back(h2d[k - 1]);
    CK(cudaGraphAddMemcpyNode1D(&h2d[k], g, deps.data(), deps.size(), r.in(k), h_in + k * r.chunk, bytes,
                                cudaMemcpyDefault));
    deps.assign(1, h2d[k]);
    if (k >= Ring::slots) deps.push_back(d2h[k - Ring::slots]);
    if (queue_edges && k > 0) deps.push_back(ker[k - 1]);
    add_kernel(g, &ker[k], deps, r, k);
    deps.assign(1, ker[k]);
    if (queue_edges && k > 0) deps.push_back(d2h[k - 1]);
    CK(cudaGraphAddMemcpyNode1D(&d2h[k], g, deps.data(), deps.size(), h_out + k * r.chunk, r.out(k), bytes,
                                cudaMemcpyDefault));
  }
  cudaGraphExec_t exec = nullptr;
  CK(cudaGraphInstantiate(&exec, g, 0));
  CK(cudaGraphDestroy(g));
  return exec;
}

struct Streams {
  cudaStream_t s[3];
  std::vector<cudaEvent_t> h2d, ker, d2h;
  cudaEvent_t fork = probe::new_event();
};

void issue_streams(const Ring& r, Streams& st, const float* h_in, float* h_out) {
  const std::size_t bytes = r.chunk * sizeof(float);
  for (std::size_t k = 0; k < r.chunks; ++k) {
    if (k >= Ring::slots) CK(cudaStreamWaitEvent(st.s[0], st.d2h[k - Ring::slots], 0));
    CK(cudaMemcpyAsync(r.in(k), h_in + k * r.chunk, bytes, cudaMemcpyHostToDevice, st.s[0]));
    CK(cudaEventRecord(st.h2d[k], st.s[0]));
    CK(cudaStreamWaitEvent(st.s[1], st.h2d[k], 0));
    if (k >= Ring::slots) CK(cudaStreamWaitEvent(st.s[1], st.d2h[k - Ring::slots], 0));
    probe::kern<<<static_cast<unsigned>((r.chunk + 255) / 256), 256, 0, st.s[1]>>>(r.in(k), r.out(k), r.chunk,
                                                                                    probe::Fma{0});
    CK(cudaGetLastError());
    CK(cudaEventRecord(st.ker[k], st.s[1]));
    CK(cudaStreamWaitEvent(st.s[2], st.ker[k], 0));
    CK(cudaMemcpyAsync(h_out + k * r.chunk, r.out(k), bytes, cudaMemcpyDeviceToHost, st.s[2]));
    CK(cudaEventRecord(st.d2h[k], st.s[2]));
  }
}

}  // namespace

int main() {
  if (const int status = probe::require_gpu()) return status;
  const probe::Host host;
  const std::size_t total = probe::Host::total;
  for (std::size_t window_kib : {1024, 4096}) {
    Ring r{window_kib * 1024 / sizeof(float), 0};
    r.chunks = total / r.chunk;
    CK(cudaMalloc(&r.dev, 2 * Ring::slots * r.chunk * sizeof(float)));
    Streams st;
    for (auto& s : st.s) s = probe::new_stream();
    for (auto* v : {&st.h2d, &st.ker, &st.d2h}) {
      v->resize(r.chunks);
      for (auto& e : *v) e = probe::new_event();
    }
    cudaGraphExec_t queue_waits = build(r, host.in, host.out, true);
    cudaGraphExec_t waits_only = build(r, host.in, host.out, false);
    // The streams version captured: the other streams join the capture by
    // waiting for an event of the capturing one, and it joins them at the end.
    cudaGraphExec_t captured = nullptr;
    {
      CK(cudaStreamBeginCapture(st.s[0], cudaStreamCaptureModeThreadLocal));
      CK(cudaEventRecord(st.fork, st.s[0]));
      CK(cudaStreamWaitEvent(st.s[1], st.fork, 0));
      CK(cudaStreamWaitEvent(st.s[2], st.fork, 0));
      issue_streams(r, st, host.in, host.out);
      CK(cudaEventRecord(st.ker.back(), st.s[1]));
      CK(cudaStreamWaitEvent(st.s[0], st.ker.back(), 0));
      CK(cudaStreamWaitEvent(st.s[0], st.d2h.back(), 0));
      cudaGraph_t g = nullptr;
      CK(cudaStreamEndCapture(st.s[0], &g));
      CK(cudaGraphInstantiate(&captured, g, 0));
      CK(cudaGraphDestroy(g));
    }
    const cudaStream_t launch = probe::new_stream();
    const auto streams_join = probe::join_streams({st.s[0], st.s[1], st.s[2]});
    const auto launch_join = probe::join_streams({launch});
    auto check = [&] {
      for (std::size_t i = 0; i < total; i += 4099) {
        if (host.out[i] != host.in[i]) {
          std::fprintf(stderr, "FAIL: element %zu\n", i);
          std::exit(1);
        }
      }
    };
    auto poison = [&] {
      for (std::size_t i = 0; i < total; i += 4099) host.out[i] = -7.f;
    };
    std::vector<probe::Variant> vs;
    vs.push_back({"streams", [&] {
                    poison();
                    issue_streams(r, st, host.in, host.out);
                  },
                  streams_join, check});
    for (auto [name, exec] : {std::pair{"graph, queue+waits", queue_waits}, std::pair{"graph, waits", waits_only},
                              std::pair{"graph, captured", captured}}) {
      vs.push_back({name, [&, exec = exec] {
                      poison();
                      CK(cudaGraphLaunch(exec, launch));
                    },
                    launch_join, check});
    }
    std::printf("\n%zu KiB window, %zu chunks, stage_streams d3 by hand, 0 FMAs\n", window_kib, r.chunks);
    probe::run_rounds(vs, 9, 1);
    CK(cudaDeviceSynchronize());
    for (auto e : {queue_waits, waits_only, captured}) CK(cudaGraphExecDestroy(e));
    CK(cudaFree(r.dev));
  }
  return 0;
}
