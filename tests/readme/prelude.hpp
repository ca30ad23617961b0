// SPDX-License-Identifier: MIT
// What a README snippet may use without declaring it: the names the README's
// prose gives meaning to. Included by every generated snippet TU after the
// snippet's own #include lines (tests/readme/CMakeLists.txt).
//
// Of chunkpipe it brings in only pipeline.cuh, the umbrella header the
// README's first block includes, which later fragments take for granted
// (and, for blocks compiled as C++, stage.hpp, for CHUNKPIPE_HOST_DEVICE).
// A snippet that uses files.hpp, host_backend.hpp or thrust.cuh must
// include it, as a reader copying the snippet would have to.
//
// Each snippet's declarations live in a namespace of their own inside
// which these names are visible through a using-directive, so a snippet
// may declare its own Scale or Fma: its own then hides the prelude's.
#pragma once

#if defined(__CUDACC__)
#include <chunkpipe/pipeline.cuh>
#endif
#include <chunkpipe/stage.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace chunkpipe_readme {

/// x -> factor * x
struct Scale {
  float factor = 1.0f;
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return factor * x; }
};

/// a * x + y, from two inputs
struct Saxpy {
  float a = 1.0f;
  CHUNKPIPE_HOST_DEVICE float operator()(float x, float y) const { return a * x + y; }
};

/// float in [-1, 1] -> int8_t
struct Quantise {
  CHUNKPIPE_HOST_DEVICE std::int8_t operator()(float x) const { return static_cast<std::int8_t>(x * 127.0f); }
};

/// A chunk-level stage working in place (what it does does not matter here).
struct SortChunk {
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    (void)ctx.in();
  }
};

/// The ranges the README's snippets run over: `in`, `out`, `x`, `y`, `z`
/// (float) and `q` (int8_t), all `n` long.
struct Ranges {
  std::size_t n = std::size_t{1} << 20;
  std::vector<float> in = std::vector<float>(n), out = std::vector<float>(n);
  std::vector<float> x = std::vector<float>(n), y = std::vector<float>(n), z = std::vector<float>(n);
  std::vector<std::int8_t> q = std::vector<std::int8_t>(n);
};

}  // namespace chunkpipe_readme
