// SPDX-License-Identifier: MIT
// What chunkpipe throws, and when, shown on the host backend (the GPU
// pipeline throws the same for the same mistakes). Exits 0 when every
// mistake was caught as described.
#include <chunkpipe/host_backend.hpp>

#include <cstdio>
#include <stdexcept>
#include <vector>

struct Twice {
  CHUNKPIPE_HOST_DEVICE float operator()(float v) const { return 2.0f * v; }
};

// A stage that fails on the third chunk of a run.
struct FailOnChunk2 {
  template <class Ctx>
  void operator()(const Ctx& ctx) const {
    if (ctx.chunk == 2) throw std::runtime_error("chunk 2 is bad");
  }
};

int main() {
  int caught = 0;
  std::vector<float> x(4096, 1.0f), y(4096), z(4096), short_out(100);
  chunkpipe::Options options;
  options.chunk_elems = 1024;

  // Bad options: config_error from the constructor, before anything runs.
  try {
    chunkpipe::Options bad = options;
    bad.chunk_elems = 0;
    auto pipe = chunkpipe::make_host_pipeline(bad, chunkpipe::map(Twice{}));
  } catch (const chunkpipe::config_error& e) {
    std::printf("config_error: %s\n", e.what());
    ++caught;
  }

  // Bad ranges: config_error from run(), before anything is queued.
  auto pipe = chunkpipe::make_host_pipeline(options, chunkpipe::map(Twice{}));
  try {
    pipe.run(x, short_out);
  } catch (const chunkpipe::config_error& e) {
    std::printf("config_error: %s\n", e.what());
    ++caught;
  }

  // Two runs in flight that would race (the second reads what the first
  // writes) are refused unless ordered: run_async(y, z, after(first)).
  chunkpipe::HostTicket first = pipe.run_async(x, y);
  try {
    chunkpipe::HostTicket second = pipe.run_async(y, z);
    second.wait();
  } catch (const chunkpipe::config_error& e) {
    std::printf("config_error: %s\n", e.what());
    ++caught;
  }
  first.wait();

  // A stage that throws stops its run; the error reaches whoever waits for
  // it (run() here), after every op of the run has stopped. The pipeline
  // stays usable.
  auto failing = chunkpipe::make_host_pipeline(options, chunkpipe::chunk_fn(FailOnChunk2{}));
  try {
    failing.run(x, y);
  } catch (const std::runtime_error& e) {
    std::printf("the stage's own error: %s\n", e.what());
    ++caught;
  }
  failing.run(chunkpipe::host_span(x.data(), 2048), chunkpipe::host_span(y.data(), 2048));  // two chunks: no chunk 2
  std::printf("a later run succeeded; %d of 4 mistakes caught\n", caught);
  return caught == 4 && y[0] == 1.0f ? 0 : 1;
}
