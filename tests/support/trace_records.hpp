// SPDX-License-Identifier: MIT
// An Accumulate whose merge depends on order and whose records on the
// context's offsets: the chunks' offsets as a polynomial hash. A test
// compares its result with the hash of the offsets in chunk order.
#pragma once

#include <cstdint>

namespace test_support {

struct Trace {
  std::uint64_t hash, chunks;
};
struct TraceChunk {
  template <class Ctx>
  void operator()(Ctx& ctx) const {
    ctx.template out<0>()[0] = Trace{ctx.offset + 1, 1};
  }
};
struct MergeTrace {
  void operator()(Trace& total, const Trace& chunk) const {
    total.hash = total.hash * 1000003u + chunk.hash;
    total.chunks += chunk.chunks;
  }
};

}  // namespace test_support
