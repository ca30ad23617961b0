// SPDX-License-Identifier: MIT
// The program of rows (d) and (i): the README's reduce and filter
// pipelines, each run once. Each row's file includes its chunkpipe headers,
// then this, so that the two rows compile the same code and differ only in
// what they include and how (compile_time.py).
#pragma once

#include <cstddef>
#include <vector>

struct Scale {
  float factor = 1.0f;
  CHUNKPIPE_HOST_DEVICE float operator()(float v) const { return factor * v; }
};
struct Plus {
  CHUNKPIPE_HOST_DEVICE float operator()(float a, float b) const { return a + b; }
};
struct Big {
  CHUNKPIPE_HOST_DEVICE bool operator()(float v) const { return v > 0.5f; }
};

int main() {
  std::vector<float> x(std::size_t{1} << 20, 1.0f), z(x.size());
  auto sum = chunkpipe::make_pipeline({}, chunkpipe::map(Scale{2.0f}), chunkpipe::reduce(0.0f, Plus{}));
  const float total = sum.run(x);  // blocks; the partials are folded here
  auto keep = chunkpipe::make_pipeline({}, chunkpipe::filter(Big{}));
  const std::size_t kept = keep.run(x, z);  // z[0, kept) holds them, in order
  return total > 0.0f && kept == x.size() ? 0 : 1;
}
