// SPDX-License-Identifier: MIT
//
// Probe (2026-12-02, benchmarks/RESULTS.md "The automatic policy
// calibrates"): what CUDA events recorded around a few chunks' ops cost a
// copy-bound pipeline. The overlap guide's schedule (h2d, kernel, d2h of
// chunk k on three streams, the array resident), 8 MiB chunks over 1 GiB
// each way, 0 FMAs, with event pairs (start before, end after) around the
// ops of five chunks: none, every op (timing and non-timing events), only
// the copies, only the kernels, only h2d or d2h, at the run's start and in
// its middle, and one chunk only.
//   build-gpu/benchmarks/probe_timing_events
#include "probe.hpp"

#include <cstdio>
#include <vector>

int main() {
  if (const int status = probe::require_gpu()) return status;
  const probe::Host host;
  const std::size_t total = probe::Host::total;
  float* d = nullptr;
  CK(cudaMalloc(&d, total * sizeof(float)));
  std::vector<cudaStream_t> s = {probe::new_stream(), probe::new_stream(), probe::new_stream()};
  const std::size_t chunk = std::size_t{8} << 18, chunks = total / chunk;  // 8 MiB of float
  std::vector<cudaEvent_t> sync(2 * chunks);
  for (auto& e : sync) e = probe::new_event();
  std::vector<cudaEvent_t> timing(64), plain(64);
  for (auto& e : timing) e = probe::new_event(true);
  for (auto& e : plain) e = probe::new_event(false);
  const auto join = probe::join_streams(s);
  const float* h_in = host.in;
  float* h_out = host.out;

  struct Mark {
    const char* name;
    bool h2d, kernel, d2h;
    std::size_t first, count;
    bool timed = true;
  };
  const Mark marks[] = {{"none", false, false, false, 0, 0},
                        {"all ops, chunks 0-4", true, true, true, 0, 5},
                        {"all ops, chunks 0-4, no timing", true, true, true, 0, 5, false},
                        {"all ops, chunks 60-64", true, true, true, 60, 5},
                        {"copies, chunks 60-64", true, false, true, 60, 5},
                        {"kernels, chunks 60-64", false, true, false, 60, 5},
                        {"h2d, chunks 60-64", true, false, false, 60, 5},
                        {"d2h, chunks 60-64", false, false, true, 60, 5},
                        {"all ops, chunk 60", true, true, true, 60, 1},
                        {"all ops, chunks 60,70,80,90,100", true, true, true, 60, 5}};
  std::vector<probe::Variant> vs;
  for (std::size_t m = 0; m < sizeof marks / sizeof marks[0]; ++m) {
    const Mark mk = marks[m];
    const bool spaced = m == 9;
    vs.push_back({mk.name, [=, &s, &sync, &timing, &plain] {
                    std::vector<cudaEvent_t>& ev = mk.timed ? timing : plain;
                    std::size_t used = 0;
                    auto marked = [&](std::size_t k) {
                      if (spaced) return k >= mk.first && (k - mk.first) % 10 == 0 && (k - mk.first) / 10 < mk.count;
                      return k >= mk.first && k < mk.first + mk.count;
                    };
                    auto around = [&](bool on, std::size_t k, cudaStream_t st, auto&& body) {
                      const bool m2 = on && marked(k);
                      if (m2) CK(cudaEventRecord(ev[used++], st));
                      body();
                      if (m2) CK(cudaEventRecord(ev[used++], st));
                    };
                    for (std::size_t k = 0; k < chunks; ++k) {
                      const std::size_t off = k * chunk;
                      around(mk.h2d, k, s[0], [&] {
                        CK(cudaMemcpyAsync(d + off, h_in + off, chunk * 4, cudaMemcpyHostToDevice, s[0]));
                      });
                      CK(cudaEventRecord(sync[2 * k], s[0]));
                      CK(cudaStreamWaitEvent(s[1], sync[2 * k], 0));
                      around(mk.kernel, k, s[1], [&] {
                        probe::kern<<<unsigned(chunk / 256), 256, 0, s[1]>>>(d + off, d + off, chunk, probe::Fma{0});
                      });
                      CK(cudaEventRecord(sync[2 * k + 1], s[1]));
                      CK(cudaStreamWaitEvent(s[2], sync[2 * k + 1], 0));
                      around(mk.d2h, k, s[2], [&] {
                        CK(cudaMemcpyAsync(h_out + off, d + off, chunk * 4, cudaMemcpyDeviceToHost, s[2]));
                      });
                    }
                  }, join});
  }
  probe::run_rounds(vs, 15, 3);
  return 0;
}
