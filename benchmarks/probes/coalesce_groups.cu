// SPDX-License-Identifier: MIT
//
// Probe (2026-12-02, benchmarks/RESULTS.md "A pipeline as a stream of
// runs"): how Options::coalesce groups 1024 back-to-back runs of 1 MiB, and
// where their time goes against one run of the same GiB. Per pass: the
// time (events), the host's time to queue the runs, and, from the ops as
// issued (record_issued), how many runs the GPU got and of what sizes.
//   build-gpu/benchmarks/probe_coalesce_groups
#include <chunkpipe/pipeline.cuh>

#include "probe.hpp"

#include <map>

int main() {
  if (const int status = probe::require_gpu()) return status;
  const probe::Host host;
  const std::size_t total = probe::Host::total, run = (std::size_t{1} << 20) / sizeof(float);
  using Pipe = chunkpipe::ChunkedPipeline<chunkpipe::Map<probe::Fma>>;
  chunkpipe::Stream timing = chunkpipe::Stream::create();
  chunkpipe::Event t0 = chunkpipe::Event::create(true), t1 = chunkpipe::Event::create(true);
  for (bool logged : {false, true}) {
    for (std::size_t run_elems : {total, run}) {
      Pipe pipe(chunkpipe::Options{.record_issued = logged}, chunkpipe::Map<probe::Fma>{{512}});
      for (int pass = 0; pass < 3; ++pass) {
        std::vector<chunkpipe::RunTicket> tickets;
        const std::size_t before = pipe.issued_plan().runs.size();
        CK(cudaEventRecord(t0.get(), timing.get()));
        const auto h0 = std::chrono::steady_clock::now();
        for (std::size_t off = 0; off < total; off += run_elems) {
          tickets.push_back(pipe.run_async(chunkpipe::pinned(chunkpipe::host_span(host.in + off, run_elems)),
                                           chunkpipe::pinned(chunkpipe::host_span(host.out + off, run_elems))));
        }
        const double queued_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - h0).count();
        for (auto& t : tickets) t.enqueue_wait(::cuda::stream_ref(timing.get()));
        CK(cudaEventRecord(t1.get(), timing.get()));
        for (auto& t : tickets) t.wait();
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, t0.get(), t1.get()));
        std::printf("%s runs of %5zu KiB, pass %d: %8.3f ms, queued in %7.3f ms, %zu runs issued together so far",
                    logged ? "logged" : "      ", run_elems * sizeof(float) / 1024, pass, ms, queued_ms,
                    pipe.runs_coalesced());
        if (logged) {
          const chunkpipe::Plan plan = pipe.issued_plan();
          std::map<std::size_t, int> sizes;  // KiB -> runs the GPU got
          for (std::size_t r = before; r < plan.runs.size(); ++r) ++sizes[plan.runs[r].elems * sizeof(float) / 1024];
          std::printf("; GPU runs by size (KiB x count):");
          for (const auto& [kib, count] : sizes) std::printf(" %zux%d", kib, count);
        }
        std::printf("\n");
      }
    }
  }
  return 0;
}
