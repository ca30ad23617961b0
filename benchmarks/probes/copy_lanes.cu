// SPDX-License-Identifier: MIT
//
// Probe (2026-11-29, benchmarks/RESULTS.md "Probes"): do more streams per
// copy direction hide the ~3 us each copy costs at small chunks? Times
// 1 GiB of 1, 4 and 16 MiB copies in, and in both directions at once, on 1
// to 4 streams per direction, and the overlap guide's three-stream pipeline
// with 1 to 3 lanes of streams. Interleaved rounds, CUDA events.
//   build-gpu/benchmarks/probe_copy_lanes
// Answer on the H200: no; extra copy streams cost 0.5 to 2%.
#include "probe.hpp"

#include <string>
#include <vector>

int main() {
  if (const int status = probe::require_gpu()) return status;
  const probe::Host host;
  const std::size_t total = probe::Host::total;
  float *d_in = nullptr, *d_out = nullptr;
  CK(cudaMalloc(&d_in, total * sizeof(float)));
  CK(cudaMalloc(&d_out, total * sizeof(float)));
  std::vector<cudaStream_t> s(12);  // [0,4): copies in / h2d, [4,8): copies out / kernels, [8,12): d2h
  for (auto& x : s) x = probe::new_stream();
  std::vector<cudaEvent_t> ev(2 * 1024);
  for (auto& e : ev) e = probe::new_event();
  const auto join = probe::join_streams(s);
  const float* h_in = host.in;
  float* h_out = host.out;

  std::vector<probe::Variant> vs;
  for (std::size_t mib : {1, 4, 16}) {
    const std::size_t chunk = mib * 262144, chunks = total / chunk;
    for (std::size_t lanes : {1, 2, 3, 4}) {
      const std::string tag = std::to_string(mib) + "MiB lanes " + std::to_string(lanes);
      vs.push_back({"h2d " + tag, [=, &s] {
                      for (std::size_t k = 0; k < chunks; ++k)
                        CK(cudaMemcpyAsync(d_in + k * chunk, h_in + k * chunk, chunk * 4, cudaMemcpyHostToDevice,
                                           s[k % lanes]));
                    }, join});
      vs.push_back({"both " + tag, [=, &s] {
                      for (std::size_t k = 0; k < chunks; ++k) {
                        CK(cudaMemcpyAsync(d_in + k * chunk, h_in + k * chunk, chunk * 4, cudaMemcpyHostToDevice,
                                           s[k % lanes]));
                        CK(cudaMemcpyAsync(h_out + k * chunk, d_out + k * chunk, chunk * 4, cudaMemcpyDeviceToHost,
                                           s[4 + k % lanes]));
                      }
                    }, join});
    }
    for (int iters : {0, 2048, 4096}) {
      for (std::size_t lanes : {1, 2, 3}) {
        vs.push_back({"guide " + std::to_string(mib) + "MiB fma " + std::to_string(iters) + " lanes " +
                          std::to_string(lanes),
                      [=, &s, &ev] {
                        for (std::size_t k = 0; k < chunks; ++k) {
                          const std::size_t off = k * chunk, l = k % lanes;
                          cudaStream_t a = s[l], b = s[4 + l], c = s[8 + l];
                          CK(cudaMemcpyAsync(d_in + off, h_in + off, chunk * 4, cudaMemcpyHostToDevice, a));
                          CK(cudaEventRecord(ev[2 * k], a));
                          CK(cudaStreamWaitEvent(b, ev[2 * k], 0));
                          probe::kern<<<unsigned(chunk / 256), 256, 0, b>>>(d_in + off, d_in + off, chunk,
                                                                            probe::Fma{iters});
                          CK(cudaEventRecord(ev[2 * k + 1], b));
                          CK(cudaStreamWaitEvent(c, ev[2 * k + 1], 0));
                          CK(cudaMemcpyAsync(h_out + off, d_in + off, chunk * 4, cudaMemcpyDeviceToHost, c));
                        }
                      }, join});
      }
    }
  }
  probe::run_rounds(vs, 7, 7);
}
