// SPDX-License-Identifier: MIT
/// \file
/// Measuring the machine: the link's bandwidths and per-copy latency, and a
/// Map stage's time per element, so the floor and the simulator use this
/// machine's numbers rather than a datasheet's.
#pragma once

// A host compiler gets one #error here, and nothing below it.
#include <chunkpipe/detail/needs_nvcc.hpp>
#if defined(__CUDACC__)

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/memory.cuh>
#include <chunkpipe/report.hpp>
#include <chunkpipe/detail/map_kernel.cuh>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

namespace chunkpipe {

namespace detail {

/// Median over `repeats` of the ms between events around `work`, after one
/// warm-up; `work` records nothing itself and leaves `streams` busy.
inline double median_event_ms(int repeats, cudaStream_t first, const std::vector<cudaStream_t>& streams,
                              const std::function<void()>& work) {
  Event start = Event::create(true);
  std::vector<Event> ends;
  for (std::size_t i = 0; i < streams.size(); ++i) ends.push_back(Event::create(true));
  std::vector<double> t;
  for (int r = 0; r <= repeats; ++r) {
    CHUNKPIPE_CUDA_TRY(cudaEventRecord(start.get(), first));
    for (cudaStream_t s : streams) {
      if (s != first) CHUNKPIPE_CUDA_TRY(cudaStreamWaitEvent(s, start.get(), 0));
    }
    work();
    for (std::size_t i = 0; i < streams.size(); ++i) CHUNKPIPE_CUDA_TRY(cudaEventRecord(ends[i].get(), streams[i]));
    double longest = 0;
    for (Event& e : ends) {
      CHUNKPIPE_CUDA_TRY(cudaEventSynchronize(e.get()));
      float ms = 0;
      CHUNKPIPE_CUDA_TRY(cudaEventElapsedTime(&ms, start.get(), e.get()));
      longest = std::max(longest, static_cast<double>(ms));
    }
    if (r > 0) t.push_back(longest);  // the first pass is the warm-up
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace detail

/// Measures the host<->device link of `device` (-1: the current one) with
/// pinned memory: H2D and D2H alone and both at once, `bytes` each way in
/// copies of `copy_bytes`, median of `repeats`; and the latency of one
/// small copy. Fills copy_engines from asyncEngineCount. Blocks for a few
/// hundred ms and allocates 2 x `bytes` of pinned and of device memory for
/// that time. Throws cuda_error if CUDA fails, config_error for a size of 0.
inline LinkModel measure_link(int device = -1, std::size_t bytes = std::size_t{512} << 20,
                              std::size_t copy_bytes = std::size_t{64} << 20, int repeats = 3) {
  if (bytes == 0 || copy_bytes == 0) throw config_error("chunkpipe: measure_link needs sizes above 0");
  if (device < 0) CHUNKPIPE_CUDA_TRY(cudaGetDevice(&device));
  DeviceGuard guard(device);
  copy_bytes = std::min(copy_bytes, bytes);
  PinnedBuffer host(2 * bytes);
  DeviceBuffer dev(2 * bytes);
  // Not zeros: the link does not care, but a reader of this code should
  // not have to wonder.
  for (std::size_t i = 0; i < 2 * bytes; i += 4096) host.data()[i] = static_cast<std::byte>(i / 4096);
  Stream a = Stream::create(), b = Stream::create();
  auto h2d = [&](cudaStream_t s) {
    for (std::size_t off = 0; off < bytes; off += copy_bytes) {
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(dev.data() + off, host.data() + off, std::min(copy_bytes, bytes - off),
                                         cudaMemcpyHostToDevice, s));
    }
  };
  auto d2h = [&](cudaStream_t s) {
    for (std::size_t off = 0; off < bytes; off += copy_bytes) {
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(host.data() + bytes + off, dev.data() + bytes + off,
                                         std::min(copy_bytes, bytes - off), cudaMemcpyDeviceToHost, s));
    }
  };
  const double gb = static_cast<double>(bytes) / 1e9;
  LinkModel link;
  cudaDeviceProp prop{};
  CHUNKPIPE_CUDA_TRY(cudaGetDeviceProperties(&prop, device));
  link.name = std::string(prop.name) + " (measured)";
  link.copy_engines = prop.asyncEngineCount;
  link.h2d_gbps = gb / (detail::median_event_ms(repeats, a.get(), {a.get()}, [&] { h2d(a.get()); }) / 1e3);
  link.d2h_gbps = gb / (detail::median_event_ms(repeats, a.get(), {a.get()}, [&] { d2h(a.get()); }) / 1e3);
  link.both_gbps = 2 * gb / (detail::median_event_ms(repeats, a.get(), {a.get(), b.get()}, [&] {
                               h2d(a.get());
                               d2h(b.get());
                             }) / 1e3);
  // Latency: many 4 KiB copies back to back, where bandwidth is negligible.
  constexpr int small = 256;
  const double ms = detail::median_event_ms(repeats, a.get(), {a.get()}, [&] {
    for (int i = 0; i < small; ++i) {
      CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(dev.data(), host.data(), 4096, cudaMemcpyHostToDevice, a.get()));
    }
  });
  link.latency_us = ms * 1e3 / small;
  return link;
}

/// Measures a Map functor's kernel time per element in ns on `device`
/// (-1: current), over `elems` elements of type T, median of `repeats`
/// launches. The elements are varied values in [-0.5, 0.5) where T can be
/// made from a double, T{} otherwise. Blocks; throws cuda_error if CUDA
/// fails, config_error for 0 elements.
template <class T, class F>
double measure_map_ns_per_elem(const F& fn, std::size_t elems = std::size_t{1} << 24, int device = -1,
                               int repeats = 3) {
  if (elems == 0) throw config_error("chunkpipe: measure_map_ns_per_elem needs elements");
  if (device < 0) CHUNKPIPE_CUDA_TRY(cudaGetDevice(&device));
  DeviceGuard guard(device);
  using R = decltype(fn(std::declval<const T&>()));
  std::vector<T> pattern(elems);  // T{} where T is not made from a number
  if constexpr (std::is_constructible_v<T, double>) {
    for (std::size_t i = 0; i < elems; ++i) pattern[i] = static_cast<T>(static_cast<double>(i % 4093) / 4093.0 - 0.5);
  }
  DeviceBuffer in(elems * sizeof(T)), out(elems * sizeof(R));
  Stream s = Stream::create();
  CHUNKPIPE_CUDA_TRY(cudaMemcpyAsync(in.data(), pattern.data(), elems * sizeof(T), cudaMemcpyHostToDevice, s.get()));
  const ::cuda::std::tuple<const T*> ins(reinterpret_cast<const T*>(in.data()));
  const ::cuda::std::tuple<R*> outs(reinterpret_cast<R*>(out.data()));
  const double ms = detail::median_event_ms(repeats, s.get(), {s.get()},
                                            [&] { detail::launch_map(fn, elems, outs, ins, s.get()); });
  return ms * 1e6 / static_cast<double>(elems);
}

}  // namespace chunkpipe

#endif  // defined(__CUDACC__)
