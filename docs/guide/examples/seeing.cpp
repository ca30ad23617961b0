// SPDX-License-Identifier: MIT
// A schedule as data: printed, proved free of hazards, and simulated on a
// model H200 into a report and its timelines. Host-only: no GPU needed.
#include <chunkpipe/hazards.hpp>
#include <chunkpipe/host_backend.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/simulate.hpp>

#include <cstdio>
#include <iostream>
#include <vector>

struct Twice {
  CHUNKPIPE_HOST_DEVICE float operator()(float v) const { return 2.0f * v; }
};

int main() {
  // The double buffer: two slots, one stream each.
  chunkpipe::Options options;
  options.chunk_elems = std::size_t{1} << 20;
  options.policy = chunkpipe::Policy::slot_streams;
  options.depth = 2;
  auto pipe = chunkpipe::make_host_pipeline(options, chunkpipe::map(Twice{}));

  // The plan of one run of four chunks: every op, its queue, what it waits for.
  const chunkpipe::Plan small = pipe.plan_for(4 * options.chunk_elems);
  std::cout << small << '\n';

  // The hazard check proves from the plan's own edges that no slot is read
  // before it is written or overwritten while still in use.
  const chunkpipe::HazardReport good = chunkpipe::check_hazards(small);
  std::cout << "as planned: " << good << '\n';
  // slot_streams needs no waits: each slot's ops share a stream. Move the
  // last op to the other stream and nothing orders it after its kernel.
  chunkpipe::Plan broken = small;
  broken.ops.back().queue = 0;
  const chunkpipe::HazardReport bad = chunkpipe::check_hazards(broken);
  std::cout << "broken: " << bad << '\n';

  // The simulator predicts a run on a model machine from the kernel's time
  // over the whole run. Here that is the double-buffering lesson's kernel
  // (512 FMAs an element), which took 5.287 ms for 256 Mi floats on the H200
  // (benchmarks/results/2026-12-03-double-buffer-2.txt, "kernel only").
  const std::size_t n = std::size_t{64} << 20;
  const double kernel_ms = 5.287 * static_cast<double>(n) / static_cast<double>(std::size_t{256} << 20);
  const chunkpipe::Report predicted =
      chunkpipe::simulate(pipe.plan_for(n), chunkpipe::map_workload(n, options.chunk_elems, kernel_ms),
                          chunkpipe::machines::h200_pcie5());
  std::cout << predicted << '\n' << chunkpipe::ascii_timeline(predicted, 80) << '\n';
  chunkpipe::write_svg(predicted, "double_buffer.svg");            // a picture
  chunkpipe::write_chrome_trace(predicted, "double_buffer.json");  // open in ui.perfetto.dev

  // Run it on the host and check what was really issued, over every run.
  std::vector<float> x(n / 16, 0.5f), y(n / 16);
  pipe.run(x, y);
  const chunkpipe::HazardReport issued = chunkpipe::check_hazards(pipe.issued_plan());
  std::cout << "as issued: " << issued << '\n';
  return good.ok() && !bad.ok() && issued.ok() && y[0] == 1.0f ? 0 : 1;
}
