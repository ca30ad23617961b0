// SPDX-License-Identifier: MIT
// Row (e): a host-only file, compiled by the C++ compiler (no nvcc): the
// same Map pipeline as row (c) on the host backend.
#include <chunkpipe/host_backend.hpp>

#include <cstddef>
#include <vector>

struct Scale {
  float factor = 1.0f;
  CHUNKPIPE_HOST_DEVICE float operator()(float v) const { return factor * v; }
};

int main() {
  std::vector<float> x(std::size_t{1} << 20, 1.0f), y(x.size());
  chunkpipe::HostPipeline<chunkpipe::Map<Scale>> pipe({.chunk_elems = 1 << 18}, chunkpipe::Map<Scale>{{0.5f}});
  pipe.run(x, y);  // blocks until y is written
  return y[0] == 0.5f ? 0 : 1;
}
