// SPDX-License-Identifier: MIT
//
// Probe (2026-11-29, benchmarks/RESULTS.md "Probes"): the overlap guide's
// pipeline with h2d, kernel and d2h spread over 1 to 3 streams each (chunk
// k on lane k % lanes), at 1, 4 and 16 MiB chunks and 0 to 4096 FMAs.
// Interleaved rounds, CUDA events.
//   build-gpu/benchmarks/probe_guide_lanes
// Answer on the H200: two kernel streams win 7 to 14% at 4096 FMAs and small
// chunks (kernels of two chunks fill each other's last wave) and lose about
// 1% at 0 to 2048 FMAs; more copy streams never win.
#include "probe.hpp"

#include <cstdio>
#include <vector>

int main() {
  if (const int status = probe::require_gpu()) return status;
  const probe::Host host;
  const std::size_t total = probe::Host::total;
  float* d = nullptr;
  CK(cudaMalloc(&d, total * sizeof(float)));  // the guide's: the whole array resident
  std::vector<cudaStream_t> s(12);  // [0,4): h2d lanes, [4,8): kernel lanes, [8,12): d2h lanes
  for (auto& x : s) x = probe::new_stream();
  std::vector<cudaEvent_t> ev(2 * 1024);
  for (auto& e : ev) e = probe::new_event();
  const auto join = probe::join_streams(s);
  const float* h_in = host.in;
  float* h_out = host.out;

  struct Lanes {
    std::size_t h, k, d;
  };
  std::vector<probe::Variant> vs;
  for (std::size_t mib : {1, 4, 16}) {
    const std::size_t chunk = mib * 262144, chunks = total / chunk;
    for (int iters : {0, 512, 2048, 4096}) {
      for (Lanes L : {Lanes{1, 1, 1}, Lanes{1, 2, 1}, Lanes{1, 1, 2}, Lanes{1, 2, 2}, Lanes{2, 2, 2}, Lanes{1, 3, 1},
                      Lanes{1, 3, 3}}) {
        char name[96];
        std::snprintf(name, sizeof name, "guide %2zuMiB fma %4d lanes h%zu k%zu d%zu", mib, iters, L.h, L.k, L.d);
        vs.push_back({name, [=, &s, &ev] {
                        for (std::size_t k = 0; k < chunks; ++k) {
                          const std::size_t off = k * chunk;
                          cudaStream_t a = s[k % L.h], b = s[4 + k % L.k], c = s[8 + k % L.d];
                          CK(cudaMemcpyAsync(d + off, h_in + off, chunk * 4, cudaMemcpyHostToDevice, a));
                          CK(cudaEventRecord(ev[2 * k], a));
                          CK(cudaStreamWaitEvent(b, ev[2 * k], 0));
                          probe::kern<<<unsigned(chunk / 256), 256, 0, b>>>(d + off, d + off, chunk, probe::Fma{iters});
                          CK(cudaEventRecord(ev[2 * k + 1], b));
                          CK(cudaStreamWaitEvent(c, ev[2 * k + 1], 0));
                          CK(cudaMemcpyAsync(h_out + off, d + off, chunk * 4, cudaMemcpyDeviceToHost, c));
                        }
                      }, join});
      }
    }
  }
  probe::run_rounds(vs, 7, 7);
}
