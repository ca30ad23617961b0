// SPDX-License-Identifier: MIT
//
// Probe (2026-12-03, benchmarks/RESULTS.md "The automatic policy
// calibrates"): where a calibrating pipeline's first run loses 1.5 to 2%
// against a fresh one fixed at one lane (pipeline_bench's "calibration
// cost"). Event pairs around five chunks cost 0.08 ms (probe_timing_events)
// and both plans are the same op for op, so what is left is host work done
// before the first op is issued, while the GPU waits: the calibration's
// event pairs created there, the second lane's stream. Per round, fresh
// pipelines of each kind (made outside the timed span), each's first run
// timed as pipeline_bench times it, in an order rotated each round; and the
// host cost of the CUDA calls in question, alone.
//   build-gpu/benchmarks/probe_first_run
#include <chunkpipe/pipeline.cuh>

#include "probe.hpp"

#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

namespace {

double us_since(std::chrono::steady_clock::time_point t0) { return 1e3 * probe::ms_since(t0); }

}  // namespace

int main() {
  if (const int status = probe::require_gpu()) return status;
  const probe::Host host;
  using Pipe = chunkpipe::ChunkedPipeline<chunkpipe::Map<probe::Fma>>;
  const auto in = chunkpipe::pinned(chunkpipe::host_span(host.in, probe::Host::total));
  const auto out = chunkpipe::pinned(chunkpipe::host_span(host.out, probe::Host::total));

  // The calls alone: what creating the calibration's 30 timing events and
  // one more stream costs the issuing thread.
  {
    std::vector<double> ev_t, ev_p, st;
    for (int r = 0; r < 9; ++r) {
      std::vector<cudaEvent_t> e(30);
      auto t0 = std::chrono::steady_clock::now();
      for (auto& x : e) x = probe::new_event(true);
      ev_t.push_back(us_since(t0));
      for (auto& x : e) CK(cudaEventDestroy(x));
      t0 = std::chrono::steady_clock::now();
      for (auto& x : e) x = probe::new_event(false);
      ev_p.push_back(us_since(t0));
      for (auto& x : e) CK(cudaEventDestroy(x));
      t0 = std::chrono::steady_clock::now();
      cudaStream_t s = probe::new_stream();
      st.push_back(us_since(t0));
      CK(cudaStreamDestroy(s));
    }
    std::printf("host: 30 timing events %.1f us, 30 events without timing %.1f us, one stream %.1f us (medians of 9)\n",
                probe::median(ev_t), probe::median(ev_p), probe::median(st));
  }

  const cudaStream_t ts = probe::new_stream();
  const cudaEvent_t e0 = probe::new_event(true), e1 = probe::new_event(true);
  struct Kind {
    const char* name;
    chunkpipe::Options o;
    std::vector<double> ms, issue_us, make_us, second_ms, second_issue_us;
  };
  for (int iters : {0, 512}) {
    std::vector<Kind> kinds = {{"calibrating (Options{})", chunkpipe::Options{}, {}, {}, {}, {}, {}},
                               {"fixed, 1 lane", chunkpipe::Options{.kernel_lanes = 1}, {}, {}, {}, {}, {}},
                               {"fixed, 2 lanes", chunkpipe::Options{.kernel_lanes = 2}, {}, {}, {}, {}, {}},
                               {"fixed, executor streams, 1 lane",
                                chunkpipe::Options{.executor = chunkpipe::Executor::streams, .kernel_lanes = 1},
                                {}, {}, {}, {}, {}}};
    const int rounds = 15;
    for (int r = 0; r < rounds + 1; ++r) {  // round 0 warms up
      for (std::size_t i = 0; i < kinds.size(); ++i) {
        Kind& k = kinds[(i + static_cast<std::size_t>(r)) % kinds.size()];
        auto t0 = std::chrono::steady_clock::now();
        auto pipe = std::make_unique<Pipe>(k.o, chunkpipe::Map<probe::Fma>{probe::Fma{iters}});
        const double make = us_since(t0);
        double first = 0, second = 0, issue = 0, issue2 = 0;
        for (int run = 0; run < 2; ++run) {
          CK(cudaEventRecord(e0, ts));
          t0 = std::chrono::steady_clock::now();
          chunkpipe::RunTicket t = pipe->run_async(in, out);
          (run == 0 ? issue : issue2) = us_since(t0);
          t.enqueue_wait(::cuda::stream_ref(ts));
          CK(cudaEventRecord(e1, ts));
          CK(cudaEventSynchronize(e1));
          t.wait();
          float ms = 0.f;
          CK(cudaEventElapsedTime(&ms, e0, e1));
          (run == 0 ? first : second) = ms;
        }
        if (r == 0) continue;
        k.ms.push_back(first);
        k.second_ms.push_back(second);
        k.issue_us.push_back(issue);
        k.make_us.push_back(make);
        k.second_issue_us.push_back(issue2);
      }
    }
    std::printf("\n%d FMAs: fresh pipelines, %d rounds; medians (first run's event time, its run_async call on the host, "
                "the constructor, the second run and its run_async call)\n",
                iters, rounds);
    for (const Kind& k : kinds) {
      std::vector<double> ratio;
      for (std::size_t r = 0; r < k.ms.size(); ++r) ratio.push_back(k.ms[r] / kinds[1].ms[r]);
      using probe::median;
      std::printf("  %-34s first %8.3f ms (/1 lane %.4f)  issue %8.1f us  make %7.1f us  second %8.3f ms (issue %7.1f us)\n",
                  k.name, median(k.ms), median(ratio), median(k.issue_us), median(k.make_us), median(k.second_ms),
                  median(k.second_issue_us));
    }
  }
  return 0;
}
