// SPDX-License-Identifier: MIT
//
// Probe (2026-12-02, benchmarks/RESULTS.md "The automatic policy
// calibrates"): where the untuned default loses to fixed schedules of the
// same unit at link-bound work. Per intensity, the default Options{} (it
// calibrates: lanes vary, checks every 128 units) against the automatic
// policy with its lanes fixed (1 and 2: no calibration), and stage_streams,
// at the default 8 MiB unit and at 16 MiB; each pass one run of 1 GiB each
// way, every variant's passes listed for the default so that a slow run
// every so often (a check) shows.
//   build-gpu/benchmarks/probe_default_gap
#include <chunkpipe/pipeline.cuh>

#include "pipeline_variant.hpp"
#include "probe.hpp"

#include <memory>
#include <optional>

int main() {
  if (const int status = probe::require_gpu()) return status;
  const probe::Host host;
  using Pipe = chunkpipe::ChunkedPipeline<chunkpipe::Map<probe::Fma>>;
  std::vector<std::unique_ptr<Pipe>> pipes;
  std::vector<probe::Variant> vs;
  struct Cfg {
    const char* name;
    chunkpipe::Options o;
  };
  const std::size_t u16 = 2 * chunkpipe::default_chunk_elems;  // 16 MiB of float
  for (int iters : {0, 512, 2048, 4096}) {
    const Cfg cfgs[] = {
        {"default", chunkpipe::Options{}},
        {"default streams", chunkpipe::Options{.executor = chunkpipe::Executor::streams}},
        {"auto lanes 1", chunkpipe::Options{.kernel_lanes = 1}},
        {"auto lanes 2", chunkpipe::Options{.kernel_lanes = 2}},
        {"stage_streams", chunkpipe::Options{.policy = chunkpipe::Policy::stage_streams}},
        {"16MiB default", chunkpipe::Options{.chunk_elems = u16}},
        {"16MiB auto lanes 1", chunkpipe::Options{.chunk_elems = u16, .kernel_lanes = 1}},
        {"16MiB auto lanes 2", chunkpipe::Options{.chunk_elems = u16, .kernel_lanes = 2}},
        {"16MiB stage_streams", chunkpipe::Options{.chunk_elems = u16, .policy = chunkpipe::Policy::stage_streams}},
    };
    for (const Cfg& c : cfgs) {
      pipes.push_back(std::make_unique<Pipe>(c.o, chunkpipe::Map<probe::Fma>{{iters}}));
      char name[96];
      std::snprintf(name, sizeof name, "fma %4d %-22s unit %2zu MiB", iters, c.name,
                    pipes.back()->geometry().chunk_elems * sizeof(float) >> 20);
      vs.push_back(probe::pipeline_variant(name, *pipes.back(), host));
    }
  }
  probe::run_rounds(vs, 9, 5);
  for (std::size_t i = 0; i < vs.size(); ++i) {
    if (vs[i].name.find(" default ") == std::string::npos && vs[i].name.find("default streams") == std::string::npos)
      continue;
    std::printf("%s passes:", vs[i].name.c_str());
    for (double ms : vs[i].event_ms) std::printf(" %.2f", ms);
    const std::optional<chunkpipe::Decision> d = pipes[i]->decision();
    std::printf("\n   decision: %s\n", d ? d->why.c_str() : "none");
  }
  return 0;
}
