// SPDX-License-Identifier: MIT
//
// Probe (2026-11-29, benchmarks/RESULTS.md "Probes"): do more streams per
// copy direction hide the ~3 us each copy costs at small chunks? Times
// 1 GiB of 1, 4 and 16 MiB copies in, and in both directions at once, on 1
// to 4 streams per direction, and the overlap guide's three-stream pipeline
// with 1 to 3 lanes of streams. Interleaved rounds, CUDA events.
//   build-gpu/benchmarks/probe_copy_lanes
// Answer on the H200: no; extra copy streams cost 0.5 to 2%.
#include <cuda_runtime.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>
#define CK(x) do { cudaError_t err_ = (x); if (err_ != cudaSuccess) { std::printf("%s: %s line %d\n", #x, cudaGetErrorString(err_), __LINE__); std::exit(1);} } while (0)

struct Fma { int iters; __device__ float operator()(float y) const {
#pragma unroll 16
  for (int k = 0; k < iters; ++k) y = fmaf(y, 0.999f, 0.0625f); return y; } };
__global__ void kern(const float* in, float* out, size_t n, Fma f) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; if (i < n) out[i] = f(in[i]); }

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device found; this probe needs a GPU\n");
    return 77;
  }
  const size_t total = (size_t(1) << 30) / 4;
  float *h_in, *h_out, *d_in, *d_out;
  CK(cudaMallocHost(&h_in, total * 4)); CK(cudaMallocHost(&h_out, total * 4));
  CK(cudaMalloc(&d_in, total * 4)); CK(cudaMalloc(&d_out, total * 4));
  for (size_t i = 0; i < total; ++i) h_in[i] = float(i % 4093) / 4093.f - 0.5f;
  std::vector<cudaStream_t> s(16);
  for (auto& x : s) CK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
  cudaStream_t ts; CK(cudaStreamCreateWithFlags(&ts, cudaStreamNonBlocking));
  std::vector<cudaEvent_t> ev(3 * 1024 * 4);
  for (auto& e : ev) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  std::vector<cudaEvent_t> tails(16); for (auto& e : tails) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));

  struct V {
    V(std::string n, std::function<void()> fn) : name(std::move(n)), f(std::move(fn)) {}
    std::string name;
    std::function<void()> f;
    std::vector<double> wall, evt;
  };
  std::vector<V> vs;
  auto sync_all = [&] { for (auto& x : s) CK(cudaStreamSynchronize(x)); };
  for (size_t mib : {1, 4, 16}) {
    const size_t chunk = mib * 262144, chunks = total / chunk;
    for (int L : {1, 2, 3, 4}) {
      vs.push_back({"h2d " + std::to_string(mib) + "MiB lanes " + std::to_string(L), [=, &s] {
        for (size_t k = 0; k < chunks; ++k) CK(cudaMemcpyAsync(d_in + k * chunk, h_in + k * chunk, chunk * 4, cudaMemcpyHostToDevice, s[k % L])); }});
      vs.push_back({"both " + std::to_string(mib) + "MiB lanes " + std::to_string(L), [=, &s] {
        for (size_t k = 0; k < chunks; ++k) {
          CK(cudaMemcpyAsync(d_in + k * chunk, h_in + k * chunk, chunk * 4, cudaMemcpyHostToDevice, s[k % L]));
          CK(cudaMemcpyAsync(h_out + k * chunk, d_out + k * chunk, chunk * 4, cudaMemcpyDeviceToHost, s[4 + k % L])); } }});
    }
    for (int iters : {0, 2048, 4096}) for (int L : {1, 2, 3}) {
      vs.push_back({"guide " + std::to_string(mib) + "MiB fma " + std::to_string(iters) + " lanes " + std::to_string(L), [=, &s, &ev] {
        for (size_t k = 0; k < chunks; ++k) {
          const size_t off = k * chunk; const int l = int(k % L);
          cudaStream_t a = s[l], b = s[4 + l], c = s[8 + l];
          CK(cudaMemcpyAsync(d_in + off, h_in + off, chunk * 4, cudaMemcpyHostToDevice, a));
          CK(cudaEventRecord(ev[2 * k], a)); CK(cudaStreamWaitEvent(b, ev[2 * k], 0));
          kern<<<unsigned((chunk + 255) / 256), 256, 0, b>>>(d_in + off, d_in + off, chunk, Fma{iters});
          CK(cudaEventRecord(ev[2 * k + 1], b)); CK(cudaStreamWaitEvent(c, ev[2 * k + 1], 0));
          CK(cudaMemcpyAsync(h_out + off, d_in + off, chunk * 4, cudaMemcpyDeviceToHost, c)); } }});
    }
  }
  for (auto& v : vs) { v.f(); sync_all(); }  // warm-up
  const int rounds = 7;
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < vs.size(); ++i) {
      V& v = vs[(i + r * 7) % vs.size()];
      CK(cudaDeviceSynchronize());
      const auto t0 = std::chrono::steady_clock::now();
      CK(cudaEventRecord(e0, ts));
      for (auto& x : s) CK(cudaStreamWaitEvent(x, e0, 0));
      v.f();
      for (size_t q = 0; q < s.size(); ++q) { CK(cudaEventRecord(tails[q], s[q])); CK(cudaStreamWaitEvent(ts, tails[q], 0)); }
      CK(cudaEventRecord(e1, ts));
      CK(cudaEventSynchronize(e1));
      v.wall.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      float ms = 0; CK(cudaEventElapsedTime(&ms, e0, e1)); v.evt.push_back(ms);
    }
  }
  auto med = [](std::vector<double> x) { std::sort(x.begin(), x.end()); return x[x.size() / 2]; };
  for (auto& v : vs) {
    auto mn = *std::min_element(v.evt.begin(), v.evt.end()), mx = *std::max_element(v.evt.begin(), v.evt.end());
    std::printf("%-34s event %8.3f ms (min %8.3f max %8.3f)  wall %8.3f\n", v.name.c_str(), med(v.evt), mn, mx, med(v.wall));
  }
}
