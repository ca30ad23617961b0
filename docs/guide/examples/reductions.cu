// SPDX-License-Identifier: MIT
// Stages whose output is smaller than their input, so that little crosses
// back: a Reduce (one value), a Filter (what it keeps) and an Accumulate
// (one record per chunk, merged on the host); and a Scan, a running total
// whose carry passes from chunk to chunk.
#include <chunkpipe/pipeline.cuh>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

struct Square {
  CHUNKPIPE_HOST_DEVICE long long operator()(int v) const { return static_cast<long long>(v) * v; }
};
// A Reduce's operator must be associative and callable on both sides.
struct Plus {
  CHUNKPIPE_HOST_DEVICE long long operator()(long long a, long long b) const { return a + b; }
};
struct MultipleOf3 {
  CHUNKPIPE_HOST_DEVICE bool operator()(int v) const { return v % 3 == 0; }
};

// An Accumulate's record: the smallest and largest value of a chunk.
struct Range {
  int lo, hi;
};
__global__ void range_kernel(const int* data, std::size_t count, Range* r) {
  int lo = INT_MAX, hi = INT_MIN;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < count;
       i += std::size_t{gridDim.x} * blockDim.x) {
    lo = min(lo, data[i]);
    hi = max(hi, data[i]);
  }
  atomicMin(&r->lo, lo);
  atomicMax(&r->hi, hi);
}
// Called like a ChunkFn, once per chunk: ctx.out() is one Range in device
// memory, already holding the identity; the kernel folds the chunk into it.
struct ChunkRange {
  template <class Ctx>
  void operator()(const Ctx& ctx) const {
    range_kernel<<<256, 256, 0, ctx.stream.get()>>>(ctx.in().data(), ctx.count, ctx.out().data());
  }
};
// On the host, in chunk order.
struct MergeRange {
  void operator()(Range& total, const Range& chunk) const {
    total.lo = std::min(total.lo, chunk.lo);
    total.hi = std::max(total.hi, chunk.hi);
  }
};

int main() {
  try {
    const std::size_t n = (std::size_t{32} << 20) + 5;
    std::vector<int> data(n);
    for (std::size_t i = 0; i < n; ++i) {
      data[i] = static_cast<int>((static_cast<std::uint32_t>(i) * 2654435761u) >> 8) % 20001 - 10000;
    }

    // A Map, then a Reduce: only one partial per 16384 elements crosses
    // back, and the host folds them in a fixed order, so every schedule
    // gives the same bits. run(in) blocks and returns the value.
    auto sum_of_squares = chunkpipe::make_pipeline(chunkpipe::Options{}, chunkpipe::map(Square{}),
                                                   chunkpipe::reduce(0LL, Plus{}));
    const long long total = sum_of_squares.run(data);

    // A Filter keeps, in order, what its predicate keeps, and run(in, out)
    // returns how many it wrote. Only those cross back.
    auto keep = chunkpipe::make_pipeline(chunkpipe::Options{}, chunkpipe::filter(MultipleOf3{}));
    std::vector<int> kept(n);
    const std::size_t kept_count = keep.run(data, kept);

    // An Accumulate: one Range per chunk, merged on the host in chunk order.
    auto range = chunkpipe::make_pipeline(chunkpipe::Options{},
                                          chunkpipe::accumulate(Range{INT_MAX, INT_MIN}, ChunkRange{}, MergeRange{}));
    const Range r = range.run(data);

    // A Scan: out[i] = 0 + data[0] + ... + data[i], over the whole run; each
    // chunk's kernels start from the chunk before's total.
    auto running = chunkpipe::make_pipeline(chunkpipe::Options{}, chunkpipe::scan(0LL, Plus{}));
    std::vector<long long> totals(n);
    running.run(data, totals);

    // The same on the host.
    long long want_total = 0, running_total = 0;
    std::size_t wrong_totals = 0;
    std::vector<int> want_kept;
    for (std::size_t i = 0; i < n; ++i) {
      const int v = data[i];
      want_total += Square{}(v);
      if (MultipleOf3{}(v)) want_kept.push_back(v);
      running_total += v;
      wrong_totals += totals[i] == running_total ? 0 : 1;
    }
    const auto [lo, hi] = std::minmax_element(data.begin(), data.end());
    const bool ok = total == want_total && kept_count == want_kept.size() &&
                    std::equal(want_kept.begin(), want_kept.end(), kept.begin()) && r.lo == *lo && r.hi == *hi &&
                    wrong_totals == 0;
    std::printf("sum of squares %lld, kept %zu of %zu, range [%d, %d], last running total %lld: %s\n", total,
                kept_count, n, r.lo, r.hi, totals[n - 1], ok ? "as on the host" : "WRONG");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
