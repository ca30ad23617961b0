// SPDX-License-Identifier: MIT
//
// Probe (2026-11-29, benchmarks/RESULTS.md "Probes"): what separates
// chunkpipe's slot_streams depth 2 from the lesson's hand-written double
// buffer at 1 and 4 MiB chunks: the copy kind (cudaMemcpyDefault against
// the explicit direction) and the kernel (grid-stride loop against one
// element per thread), each against chunkpipe itself. Interleaved rounds,
// CUDA events.
//   build-gpu/benchmarks/probe_lesson_variants
#include <chunkpipe/pipeline.cuh>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>
#define CK(x) CHUNKPIPE_CUDA_TRY(x)
struct Fma { int iters; __host__ __device__ float operator()(float y) const {
#ifdef __CUDA_ARCH__
#pragma unroll 16
#endif
  for (int k = 0; k < iters; ++k) y = fmaf(y, 0.999f, 0.0625f); return y; } };
__global__ void kern(const float* in, float* out, size_t n, Fma f) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; if (i < n) out[i] = f(in[i]); }
__global__ void kern_gs(Fma f, size_t n, float* out, const float* in) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += stride) out[i] = f(in[i]); }

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device found; this probe needs a GPU\n");
    return 77;
  }
  const size_t total = (size_t(1) << 30) / 4;
  float *h_in, *h_out, *d;
  CK(cudaMallocHost(&h_in, total * 4)); CK(cudaMallocHost(&h_out, total * 4));
  CK(cudaMalloc(&d, 64 * 4 * 262144 * 4));
  for (size_t i = 0; i < total; ++i) h_in[i] = float(i % 4093) / 4093.f - 0.5f;
  cudaStream_t s[2]; for (auto& x : s) CK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
  cudaStream_t ts; CK(cudaStreamCreateWithFlags(&ts, cudaStreamNonBlocking));
  cudaEvent_t e0, e1, t0, t1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  CK(cudaEventCreateWithFlags(&t0, cudaEventDisableTiming)); CK(cudaEventCreateWithFlags(&t1, cudaEventDisableTiming));
  using Pipe = chunkpipe::ChunkedPipeline<chunkpipe::Map<Fma>>;
  auto in = chunkpipe::pinned(chunkpipe::host_span((const float*)h_in, total));
  auto out = chunkpipe::pinned(chunkpipe::host_span(h_out, total));
  struct V {
    V(std::string n, std::function<double()> fn) : name(std::move(n)), f(std::move(fn)) {}
    std::string name;
    std::function<double()> f;
    std::vector<double> t;
  };
  std::vector<V> vs;
  std::vector<std::unique_ptr<Pipe>> pipes;
  auto timed = [&](auto issue) {
    CK(cudaEventRecord(e0, ts)); issue();
    CK(cudaEventRecord(t0, s[0])); CK(cudaEventRecord(t1, s[1]));
    CK(cudaStreamWaitEvent(ts, t0, 0)); CK(cudaStreamWaitEvent(ts, t1, 0));
    CK(cudaEventRecord(e1, ts)); CK(cudaEventSynchronize(e1)); float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); return double(ms); };
  for (size_t mib : {1, 4}) for (int iters : {512, 2048, 4096}) {
    const size_t chunk = mib * 262144, chunks = total / chunk;
    char tag[48]; std::snprintf(tag, sizeof tag, "%zuMiB fma %4d ", mib, iters);
    for (int kind_default : {0, 1}) for (int gs : {0, 1}) {
      std::string name = std::string(tag) + (kind_default ? "Default " : "explicit") + (gs ? " gridstride" : " one-elem  ");
      vs.push_back({name, [=, &s, &timed] { return timed([&] {
        for (size_t k = 0; k < chunks; ++k) {
          const int p = int(k & 1); float* din = d + (2 * p) * chunk; float* dout = d + (2 * p + 1) * chunk;
          CK(cudaMemcpyAsync(din, h_in + k * chunk, chunk * 4, kind_default ? cudaMemcpyDefault : cudaMemcpyHostToDevice, s[p]));
          if (gs) kern_gs<<<unsigned(chunk / 256), 256, 0, s[p]>>>(Fma{iters}, chunk, dout, din);
          else kern<<<unsigned(chunk / 256), 256, 0, s[p]>>>(din, dout, chunk, Fma{iters});
          CK(cudaMemcpyAsync(h_out + k * chunk, dout, chunk * 4, kind_default ? cudaMemcpyDefault : cudaMemcpyDeviceToHost, s[p]));
        } }); }});
    }
    pipes.push_back(std::make_unique<Pipe>(chunkpipe::Options{.chunk_elems = chunk, .depth = 2, .policy = chunkpipe::Policy::slot_streams}, chunkpipe::Map<Fma>{Fma{iters}}));
    Pipe* pp = pipes.back().get();
    vs.push_back({std::string(tag) + "chunkpipe slot_streams d2", [=, &in, &out] {
      chunkpipe::RunTicket t; CK(cudaEventRecord(e0, ts)); t = pp->run_async(in, out); t.enqueue_wait(ts);
      CK(cudaEventRecord(e1, ts)); CK(cudaEventSynchronize(e1)); t.wait(); float ms; CK(cudaEventElapsedTime(&ms, e0, e1)); return double(ms); }});
  }
  for (auto& v : vs) v.f();
  for (int r = 0; r < 9; ++r) for (size_t i = 0; i < vs.size(); ++i) { V& v = vs[(i + r) % vs.size()]; v.t.push_back(v.f()); }
  for (auto& v : vs) { auto x = v.t; std::sort(x.begin(), x.end());
    std::printf("%-48s %8.3f ms (min %8.3f max %8.3f)\n", v.name.c_str(), x[x.size() / 2], x.front(), x.back()); }
}
