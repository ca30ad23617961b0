// SPDX-License-Identifier: MIT
// The hand-written loop the benchmarks hold chunkpipe against: 4 slots on
// 4 streams, chunk k on stream k % 4 (copy in, the probes' kernel, copy
// out), issued op by op from the host. streams_bench times it on streams;
// graphs_bench also captures it into a CUDA graph. And the closed form
// both check every output against.
#pragma once

#include <chunkpipe/memory.cuh>

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "probes/probe.hpp"

namespace bench {

// y after `iters` steps of y = 0.999 y + 0.0625 is scale y + offset.
struct ClosedForm {
  double scale, offset;
  explicit ClosedForm(int iters) {
    const double a = static_cast<double>(0.999f);
    scale = std::pow(a, iters);
    offset = static_cast<double>(0.0625f) * (1.0 - scale) / (1.0 - a);
  }
  double operator()(float x) const { return scale * static_cast<double>(x) + offset; }
  // False for NaN (a poisoned element nobody wrote).
  bool matches(float x, float got) const {
    const double want = (*this)(x);
    return std::fabs(static_cast<double>(got) - want) <= 1e-4 * std::fabs(want) + 1e-6;
  }
};

// The hand-written loop: 4 slots on 4 streams, chunk k on stream k % 4.
struct HandLoop {
  std::size_t total, chunk;
  const float* in;
  float* out;
  probe::Fma f;
  chunkpipe::DeviceBuffer slots;
  chunkpipe::Stream s[4];
  chunkpipe::Event tail[4];

  HandLoop(std::size_t total_, std::size_t chunk_, const float* in_, float* out_, probe::Fma f_)
      : total(total_), chunk(chunk_), in(in_), out(out_), f(f_), slots(8 * chunk_ * sizeof(float)) {
    for (auto& st : s) st = chunkpipe::Stream::create();
    for (auto& e : tail) e = chunkpipe::Event::create();
  }
  float* d_in(int p) const { return reinterpret_cast<float*>(slots.data()) + (2 * p) * chunk; }
  float* d_out(int p) const { return reinterpret_cast<float*>(slots.data()) + (2 * p + 1) * chunk; }
  // Chunks [first, last) of the array.
  void issue(std::size_t first = 0, std::size_t last = static_cast<std::size_t>(-1)) {
    const std::size_t chunks = (total + chunk - 1) / chunk;
    for (std::size_t k = first; k < std::min(last, chunks); ++k) {
      const int p = static_cast<int>(k % 4);
      const std::size_t off = k * chunk, n = std::min(chunk, total - off);
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(d_in(p), in + off, n * sizeof(float), cudaMemcpyHostToDevice, s[p].get()));
      probe::kern<<<static_cast<unsigned>((n + 255) / 256), 256, 0, s[p].get()>>>(d_in(p), d_out(p), n, f);
      CHUNKPIPE_CUDA_TRY(cudaGetLastError());
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(out + off, d_out(p), n * sizeof(float), cudaMemcpyDeviceToHost, s[p].get()));
    }
  }
  void join(cudaStream_t waiter) {
    for (int q = 0; q < 4; ++q) {
      CHUNKPIPE_CUDA_TRY(cudaEventRecord(tail[q].get(), s[q].get()));
      CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(waiter, tail[q].get(), 0));
    }
  }
};

}  // namespace bench
