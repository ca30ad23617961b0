// SPDX-License-Identifier: MIT
// A host-only consumer: plans, the hazard check and the host backend, with
// no GPU and no nvcc.
#include <chunkpipe/hazards.hpp>
#include <chunkpipe/host_backend.hpp>
#include <chunkpipe/version.hpp>

#include <cstdio>
#include <vector>

struct AddOne {
  CHUNKPIPE_HOST_DEVICE int operator()(int x) const { return x + 1; }
};

int main() {
  static_assert(CHUNKPIPE_VERSION >= 100, "version header");
  chunkpipe::HostPipeline<chunkpipe::Map<AddOne>> pipe({.chunk_elems = 10, .depth = 3});
  std::vector<int> in(95), out(95, -1);
  for (int i = 0; i < 95; ++i) in[static_cast<std::size_t>(i)] = 3 * i;
  pipe.run(in, out);
  for (int i = 0; i < 95; ++i) {
    if (out[static_cast<std::size_t>(i)] != 3 * i + 1) {
      std::printf("wrong at %d\n", i);
      return 1;
    }
  }
  if (!chunkpipe::check_hazards(pipe.plan_for(95)).ok()) return 1;
  std::printf("consumer: host backend ok, %zu ops\n", pipe.plan_for(95).ops.size());
  return 0;
}
