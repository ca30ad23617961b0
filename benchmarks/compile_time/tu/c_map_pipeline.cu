// SPDX-License-Identifier: MIT
// Row (c), the README's first program: one Map stage and one run(x, y),
// from the header the README includes (a pipeline without a Filter needs
// no more, so its file does not parse CUB).
#include <chunkpipe/chunked_pipeline.cuh>

#include <cstddef>
#include <vector>

struct Scale {
  float factor = 1.0f;
  CHUNKPIPE_HOST_DEVICE float operator()(float v) const { return factor * v; }
};

int main() {
  std::vector<float> x(std::size_t{1} << 20, 1.0f), y(x.size());
  chunkpipe::ChunkedPipeline<chunkpipe::Map<Scale>> pipe({.chunk_elems = 1 << 18}, chunkpipe::Map<Scale>{{0.5f}});
  pipe.run(x, y);  // blocks until y is written
  return y[0] == 0.5f ? 0 : 1;
}
