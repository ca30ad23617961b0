// SPDX-License-Identifier: MIT
//
// Probe (2026-12-03, benchmarks/RESULTS.md "Ramped chunks"): does a run
// that starts and ends with small chunks beat uniform chunks at link-bound
// work? With uniform chunks of c bytes, nothing overlaps the first chunk's
// copy in and the last chunk's kernel and copy out, a cost that grows with
// c, while every copy also costs a few microseconds, a cost that shrinks
// with c; at 8 MiB the two together put a 1 GiB run about 3% over the
// two-way copy floor. A ramp (c/8, c/4, c/2, then c, and the same mirrored
// at the end) should keep the per-copy cost of c and the fill of c/8.
// The schedule is chunkpipe's stage_streams ring written by hand: one
// stream per direction and one for kernels, `depth` slots of the largest
// chunk, a chunk's copy in waiting for the copy out of the chunk that last
// used its slot. Also the default Options{} pipeline, for the same-process
// reference. Interleaved rounds, CUDA events.
//   build-gpu/benchmarks/probe_chunk_ramp
// Answer on the H200: no. Ramped and uniform runs are within 0.1 ms of
// each other at 0, 512 and 2048 FMAs, either sign; the default pipeline
// beat the hand-written ring of its own unit at every point.
#include <chunkpipe/pipeline.cuh>

#include "pipeline_variant.hpp"
#include "probe.hpp"

#include <memory>
#include <optional>

namespace {

/// Chunk lengths, in elements, covering `total`: ramp levels 0 = uniform.
std::vector<std::size_t> layout(std::size_t total, std::size_t unit, int levels) {
  std::vector<std::size_t> head;
  for (int l = levels; l >= 1; --l) head.push_back(unit >> l);
  std::size_t ends = 0;
  for (std::size_t h : head) ends += 2 * h;
  std::vector<std::size_t> out(head.begin(), head.end());
  std::size_t body = total - ends;
  while (body > 0) {
    out.push_back(std::min(unit, body));
    body -= out.back();
  }
  out.insert(out.end(), head.rbegin(), head.rend());
  return out;
}

}  // namespace

int main() {
  if (const int status = probe::require_gpu()) return status;
  const probe::Host host;
  const std::size_t total = probe::Host::total;
  const std::size_t mib = 262144;  // floats per MiB
  constexpr int max_depth = 6;
  float* slots = nullptr;
  CK(cudaMalloc(&slots, max_depth * 16 * mib * sizeof(float)));
  cudaStream_t s[3] = {probe::new_stream(), probe::new_stream(), probe::new_stream()};
  std::vector<cudaEvent_t> loaded(1024), computed(1024), drained(1024);
  for (auto* v : {&loaded, &computed, &drained})
    for (auto& e : *v) e = probe::new_event();
  const auto join = probe::join_streams({s[0], s[1], s[2]});
  const float* h_in = host.in;
  float* h_out = host.out;

  using Pipe = chunkpipe::ChunkedPipeline<chunkpipe::Map<probe::Fma>>;
  std::vector<std::unique_ptr<Pipe>> pipes;
  std::vector<probe::Variant> vs;
  for (int iters : {0, 512, 2048}) {
    pipes.push_back(std::make_unique<Pipe>(chunkpipe::Options{}, chunkpipe::Map<probe::Fma>{{iters}}));
    char name[96];
    std::snprintf(name, sizeof name, "fma %4d chunkpipe default", iters);
    vs.push_back(probe::pipeline_variant(name, *pipes.back(), host));
    struct Cfg {
      std::size_t unit_mib;
      int levels, depth;
    };
    for (Cfg c : {Cfg{8, 0, 3}, Cfg{8, 3, 3}, Cfg{8, 3, 6}, Cfg{16, 0, 3}, Cfg{16, 4, 3}, Cfg{16, 4, 6}, Cfg{8, 4, 3}}) {
      const std::vector<std::size_t> lens = layout(total, c.unit_mib * mib, c.levels);
      std::snprintf(name, sizeof name, "fma %4d unit %2zu MiB ramp %d depth %d (%zu chunks)", iters, c.unit_mib,
                    c.levels, c.depth, lens.size());
      const std::size_t slot_elems = c.unit_mib * mib;
      vs.push_back({name,
                    [=, &s, &loaded, &computed, &drained] {
                      std::size_t off = 0;
                      for (std::size_t k = 0; k < lens.size(); ++k) {
                        const std::size_t n = lens[k];
                        float* d = slots + (k % static_cast<std::size_t>(c.depth)) * slot_elems;
                        if (k >= static_cast<std::size_t>(c.depth))
                          CK(cudaStreamWaitEvent(s[0], drained[k - static_cast<std::size_t>(c.depth)], 0));
                        CK(cudaMemcpyAsync(d, h_in + off, n * 4, cudaMemcpyHostToDevice, s[0]));
                        CK(cudaEventRecord(loaded[k], s[0]));
                        CK(cudaStreamWaitEvent(s[1], loaded[k], 0));
                        probe::kern<<<unsigned((n + 255) / 256), 256, 0, s[1]>>>(d, d, n, probe::Fma{iters});
                        CK(cudaEventRecord(computed[k], s[1]));
                        CK(cudaStreamWaitEvent(s[2], computed[k], 0));
                        CK(cudaMemcpyAsync(h_out + off, d, n * 4, cudaMemcpyDeviceToHost, s[2]));
                        CK(cudaEventRecord(drained[k], s[2]));
                        off += n;
                      }
                    },
                    join});
    }
  }
  probe::run_rounds(vs, 9, 3);
  return 0;
}
