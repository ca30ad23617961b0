// SPDX-License-Identifier: MIT
// Stages: two inputs into one Map, a Map that changes the element type, and
// a ChunkFn that launches a kernel of its own on each whole chunk.
#include <chunkpipe/pipeline.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

// Map stages take one element of each input and return the output element.
struct Saxpy {
  float a;
  CHUNKPIPE_HOST_DEVICE float operator()(float x, float y) const { return fmaf(a, x, y); }
};
struct Quantise {  // float in [-1, 1] -> int8_t: the element type changes here
  CHUNKPIPE_HOST_DEVICE std::int8_t operator()(float v) const {
    return static_cast<std::int8_t>(lrintf(fminf(fmaxf(v, -1.0f), 1.0f) * 127.0f));
  }
};

// A kernel of ours: reverses one chunk in place.
__global__ void reverse_kernel(std::int8_t* data, std::size_t count) {
  const std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x;
  if (i < count / 2) {
    const std::int8_t t = data[i];
    data[i] = data[count - 1 - i];
    data[count - 1 - i] = t;
  }
}

// A ChunkFn sees a whole chunk: device spans, its index, offset and count,
// and the stream to launch on. With no output types it works in place.
// It must not synchronise or use another stream.
struct ReverseChunk {
  template <class Ctx>
  void operator()(const Ctx& ctx) const {
    const auto blocks = static_cast<unsigned>(std::max<std::size_t>(1, (ctx.count / 2 + 255) / 256));
    reverse_kernel<<<blocks, 256, 0, ctx.stream.get()>>>(ctx.out().data(), ctx.count);
  }
};

int main() {
  try {
    const std::size_t n = (std::size_t{16} << 20) + 123;  // the last chunk is short
    std::vector<float> x(n), y(n);
    std::vector<std::int8_t> q(n);
    for (std::size_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>(i % 200) * 0.005f - 0.5f;
      y[i] = static_cast<float>(i % 7) * 0.01f;
    }

    chunkpipe::Options options;
    options.chunk_elems = std::size_t{1} << 20;  // what ReverseChunk sees at once
    const Saxpy saxpy{0.5f};
    // Element types flow from stage to stage: float, float -> float -> int8_t.
    auto pipe = chunkpipe::make_pipeline(options, chunkpipe::map(saxpy), chunkpipe::map(Quantise{}),
                                         chunkpipe::chunk_fn(ReverseChunk{}));
    // Several inputs go in inputs(...), several outputs in outputs(...).
    pipe.run(chunkpipe::inputs(x, y), chunkpipe::outputs(q));

    // Element j of a chunk holds what element count - 1 - j computed.
    std::size_t wrong = 0;
    for (std::size_t first = 0; first < n; first += options.chunk_elems) {
      const std::size_t count = std::min(options.chunk_elems, n - first);
      for (std::size_t j = 0; j < count; ++j) {
        const std::size_t k = first + count - 1 - j;
        wrong += q[first + j] != Quantise{}(saxpy(x[k], y[k]));
      }
    }
    std::printf("%zu elements, three stages, %zu wrong\n", n, wrong);
    return wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
