// SPDX-License-Identifier: MIT
//
// What the probes share: the lesson's kernel, 1 GiB of pinned input and
// output, and the timing harness. Each variant is timed as pipeline_bench
// times: an event on a timing stream before it is issued, the timing stream
// joined to everything it issued, an event after; the host clock around the
// same span beside it. Variants run in interleaved rounds (every variant
// once per round, starting `step` places later each round) after a warm-up
// pass each; medians, min and max over the rounds are printed.
#pragma once

#include <chunkpipe/cuda_error.cuh>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#define CK(x) CHUNKPIPE_CUDA_TRY(x)

namespace probe {

struct Fma {
  int iters;
  __host__ __device__ float operator()(float y) const {
#ifdef __CUDA_ARCH__
#pragma unroll 16
#endif
    for (int k = 0; k < iters; ++k) y = fmaf(y, 0.999f, 0.0625f);
    return y;
  }
};

// The lesson's kernel shape: one thread per element.
__global__ void kern(const float* in, float* out, std::size_t n, Fma f) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = f(in[i]);
}

/// The median of `v` (the upper one of an even count).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Host time since `t0`, in ms.
inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// Exit status 77 (CTest's "skipped") with a line saying why, or 0.
inline int require_gpu() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device found; this probe needs a GPU\n");
    return 77;
  }
  return 0;
}

/// 1 GiB of float in pinned memory each way; the input never zeros.
struct Host {
  static constexpr std::size_t total = (std::size_t{1} << 30) / sizeof(float);
  float* in = nullptr;
  float* out = nullptr;
  Host() {
    CK(cudaMallocHost(&in, total * sizeof(float)));
    CK(cudaMallocHost(&out, total * sizeof(float)));
    for (std::size_t i = 0; i < total; ++i) in[i] = static_cast<float>(i % 4093) / 4093.f - 0.5f;
  }
  ~Host() {
    (void)cudaFreeHost(in);
    (void)cudaFreeHost(out);
  }
  Host(const Host&) = delete;
  Host& operator=(const Host&) = delete;
};

inline cudaStream_t new_stream() {
  cudaStream_t s = nullptr;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

inline cudaEvent_t new_event(bool timing = false) {
  cudaEvent_t e = nullptr;
  CK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}

/// A join that makes the timing stream wait for each of `streams`.
inline std::function<void(cudaStream_t)> join_streams(std::vector<cudaStream_t> streams) {
  std::vector<cudaEvent_t> tails;
  for (std::size_t i = 0; i < streams.size(); ++i) tails.push_back(new_event());
  return [streams = std::move(streams), tails = std::move(tails)](cudaStream_t waiter) {
    for (std::size_t i = 0; i < streams.size(); ++i) {
      CK(cudaEventRecord(tails[i], streams[i]));
      CK(cudaStreamWaitEvent(waiter, tails[i], 0));
    }
  };
}

struct Variant {
  std::string name;
  std::function<void()> issue;                // queues one pass
  std::function<void(cudaStream_t)> join;     // makes a stream wait for all of it
  std::function<void()> after = [] {};        // once the pass is done (a ticket's wait())
  std::vector<double> event_ms{}, wall_ms{};
};

/// Times every variant in `rounds` interleaved rounds and prints a line each.
inline void run_rounds(std::vector<Variant>& vs, int rounds, std::size_t step) {
  const cudaStream_t ts = new_stream();
  const cudaEvent_t e0 = new_event(true), e1 = new_event(true);
  auto pass = [&](Variant& v) {
    const auto t0 = std::chrono::steady_clock::now();
    CK(cudaEventRecord(e0, ts));
    v.issue();
    v.join(ts);
    CK(cudaEventRecord(e1, ts));
    CK(cudaEventSynchronize(e1));
    v.after();
    float ms = 0.f;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    v.event_ms.push_back(ms);
    v.wall_ms.push_back(ms_since(t0));
  };
  for (Variant& v : vs) pass(v);  // warm-up
  for (Variant& v : vs) v.event_ms.clear(), v.wall_ms.clear();
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t i = 0; i < vs.size(); ++i) pass(vs[(i + static_cast<std::size_t>(r) * step) % vs.size()]);
  }
  for (const Variant& v : vs) {
    const auto [lo, hi] = std::minmax_element(v.event_ms.begin(), v.event_ms.end());
    std::printf("%-48s event %8.3f ms (min %8.3f max %8.3f)  wall %8.3f\n", v.name.c_str(), median(v.event_ms), *lo,
                *hi, median(v.wall_ms));
  }
}

}  // namespace probe
