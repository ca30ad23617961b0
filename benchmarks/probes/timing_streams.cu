// SPDX-License-Identifier: MIT
//
// Probe (2026-12-03, benchmarks/RESULTS.md "The automatic policy
// calibrates"): probe_first_run found a calibrating pipeline 1.2 to 1.7%
// slower than one fixed at one lane, in its first run and in its second,
// which records no event at all; without the calibration's timing events
// (cudaEventDefault, recorded around five chunks' ops of the first run) the
// difference is gone. Is it the streams the events were recorded on? The
// schedule is stage_streams d3 written by hand (copies in, kernels, copies
// out on three streams, events between them), 8 MiB chunks, 1 GiB each
// way, 0 FMAs, on three streams made afresh for each round, run twice in a
// row, as:
//   plain           no timing event anywhere
//   bracketed       timing events around chunks 0-4's ops on their own
//                   streams in the first pass (what the calibration does)
//   recorded once   one timing event recorded on each stream, once, before
//                   the first pass, and nothing in the passes
//   twins           chunks 0-4's ops issued on twin streams, in order with
//                   the schedule's (an event each way), with the timing
//                   events there: the schedule's streams never see one
// Event medians of 15 rounds of the two passes, in an order rotated each
// round.
//   build-gpu/benchmarks/probe_timing_streams
#include "probe.hpp"

#include <cstdio>
#include <vector>

namespace {

enum class Mode { plain, bracketed, recorded_once, twins };

struct Ring {
  static constexpr std::size_t slots = 3, chunk = std::size_t{2} << 20;  // 8 MiB of float
  float* dev = nullptr;
  float* in(std::size_t k) const { return dev + 2 * (k % slots) * chunk; }
  float* out(std::size_t k) const { return in(k) + chunk; }
};

struct Lane {
  cudaStream_t s[3];       // copies in, kernels, copies out
  cudaStream_t twin[3];    // for twins
  std::vector<cudaEvent_t> done[3];  // per chunk, per queue (sync only)
  cudaEvent_t hand[2];     // twins: schedule stream -> twin -> schedule stream
  std::vector<cudaEvent_t> timing;   // 2 per timed op
};

void issue_pass(const Ring& r, Lane& l, std::size_t chunks, const float* h_in, float* h_out, Mode mode, bool time_it) {
  const std::size_t bytes = Ring::chunk * sizeof(float);
  std::size_t t = 0;
  for (std::size_t k = 0; k < chunks; ++k) {
    const bool timed = time_it && k < 5 && mode != Mode::plain && mode != Mode::recorded_once;
    for (int q = 0; q < 3; ++q) {
      cudaStream_t s = l.s[q];
      // The schedule's waits, on the queue's own stream.
      if (q == 0 && k >= Ring::slots) CK(cudaStreamWaitEvent(s, l.done[2][k - Ring::slots], 0));
      if (q == 1) {
        CK(cudaStreamWaitEvent(s, l.done[0][k], 0));
        if (k >= Ring::slots) CK(cudaStreamWaitEvent(s, l.done[2][k - Ring::slots], 0));
      }
      if (q == 2) CK(cudaStreamWaitEvent(s, l.done[1][k], 0));
      cudaStream_t on = s;
      if (timed && mode == Mode::twins) {
        CK(cudaEventRecord(l.hand[0], s));
        CK(cudaStreamWaitEvent(l.twin[q], l.hand[0], 0));
        on = l.twin[q];
      }
      if (timed) CK(cudaEventRecord(l.timing[t++], on));
      if (q == 0) CK(cudaMemcpyAsync(r.in(k), h_in + k * Ring::chunk, bytes, cudaMemcpyHostToDevice, on));
      if (q == 1) {
        probe::kern<<<static_cast<unsigned>(Ring::chunk / 256), 256, 0, on>>>(r.in(k), r.out(k), Ring::chunk,
                                                                           probe::Fma{0});
        CK(cudaGetLastError());
      }
      if (q == 2) CK(cudaMemcpyAsync(h_out + k * Ring::chunk, r.out(k), bytes, cudaMemcpyDeviceToHost, on));
      if (timed) CK(cudaEventRecord(l.timing[t++], on));
      CK(cudaEventRecord(l.done[q][k], on));
      if (on != s) {
        CK(cudaEventRecord(l.hand[1], on));
        CK(cudaStreamWaitEvent(s, l.hand[1], 0));
      }
    }
  }
}

}  // namespace

int main() {
  if (const int status = probe::require_gpu()) return status;
  const probe::Host host;
  const std::size_t chunks = probe::Host::total / Ring::chunk;
  Ring r;
  CK(cudaMalloc(&r.dev, 2 * Ring::slots * Ring::chunk * sizeof(float)));
  const cudaStream_t ts = probe::new_stream();
  const cudaEvent_t e0 = probe::new_event(true), e1 = probe::new_event(true);
  struct Variant {
    const char* name;
    Mode mode;
    std::vector<double> first, second;
  };
  std::vector<Variant> vs = {{"plain", Mode::plain, {}, {}},
                             {"bracketed (as the calibration)", Mode::bracketed, {}, {}},
                             {"recorded once before", Mode::recorded_once, {}, {}},
                             {"twins", Mode::twins, {}, {}}};
  const int rounds = 15;
  for (int round = 0; round < rounds + 1; ++round) {  // round 0 warms up
    for (std::size_t i = 0; i < vs.size(); ++i) {
      Variant& v = vs[(i + static_cast<std::size_t>(round)) % vs.size()];
      Lane l;
      for (int q = 0; q < 3; ++q) {
        l.s[q] = probe::new_stream();
        l.twin[q] = probe::new_stream();
        l.done[q].resize(chunks);
        for (auto& e : l.done[q]) e = probe::new_event();
      }
      l.hand[0] = probe::new_event();
      l.hand[1] = probe::new_event();
      l.timing.resize(30);
      for (auto& e : l.timing) e = probe::new_event(true);
      if (v.mode == Mode::recorded_once) {
        for (int q = 0; q < 3; ++q) CK(cudaEventRecord(l.timing[q], l.s[q]));
        CK(cudaDeviceSynchronize());
      }
      double ms[2] = {0, 0};
      for (int pass = 0; pass < 2; ++pass) {
        CK(cudaEventRecord(e0, ts));
        issue_pass(r, l, chunks, host.in, host.out, v.mode, pass == 0);
        for (int q = 0; q < 3; ++q) {
          CK(cudaEventRecord(l.hand[0], l.s[q]));
          CK(cudaStreamWaitEvent(ts, l.hand[0], 0));
        }
        CK(cudaEventRecord(e1, ts));
        CK(cudaEventSynchronize(e1));
        float f = 0.f;
        CK(cudaEventElapsedTime(&f, e0, e1));
        ms[pass] = f;
      }
      for (std::size_t k = 0; k < probe::Host::total; k += 4099) {
        if (host.out[k] != host.in[k]) {
          std::fprintf(stderr, "FAIL: %s element %zu\n", v.name, k);
          return 1;
        }
      }
      if (round > 0) {
        v.first.push_back(ms[0]);
        v.second.push_back(ms[1]);
      }
      CK(cudaDeviceSynchronize());
      for (int q = 0; q < 3; ++q) {
        CK(cudaStreamDestroy(l.s[q]));
        CK(cudaStreamDestroy(l.twin[q]));
        for (auto e : l.done[q]) CK(cudaEventDestroy(e));
      }
      for (auto e : l.hand) CK(cudaEventDestroy(e));
      for (auto e : l.timing) CK(cudaEventDestroy(e));
    }
  }
  std::printf("stage_streams d3 by hand, 8 MiB chunks, 1 GiB each way, 0 FMAs, fresh streams each round; %d rounds\n",
              rounds);
  for (const Variant& v : vs) {
    std::vector<double> r1, r2;
    for (std::size_t i = 0; i < v.first.size(); ++i) {
      r1.push_back(v.first[i] / vs[0].first[i]);
      r2.push_back(v.second[i] / vs[0].second[i]);
    }
    std::printf("  %-32s first pass %8.3f ms (/plain %.4f)  second pass %8.3f ms (/plain %.4f)\n", v.name,
                probe::median(v.first), probe::median(r1), probe::median(v.second), probe::median(r2));
  }
  return 0;
}
