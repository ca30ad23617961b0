// SPDX-License-Identifier: MIT
// One pipeline over the same data held three ways: pinned, pageable
// (staged by chunkpipe's threads) and pageable registered in place.
#include <chunkpipe/pipeline.cuh>

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

struct Square {
  CHUNKPIPE_HOST_DEVICE float operator()(float v) const { return v * v; }
};

// Milliseconds one call of fn takes, wall clock (run() blocks until done).
template <class F>
double time_ms(F&& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

template <class R>
std::size_t count_wrong(const std::vector<float>& x, const R& y) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < x.size(); ++i) wrong += y[i] != Square{}(x[i]);
  return wrong;
}

int main() {
  try {
    const std::size_t n = std::size_t{64} << 20;  // 256 MiB each way
    std::vector<float> x(n), y(n);
    for (std::size_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 4096) * 0.25f;

    // Pinned (page-locked) memory is copied directly, at the link's speed.
    // PinnedArray allocates it; pinned(r) says a range you allocated
    // yourself (cudaMallocHost) is pinned, so chunkpipe need not ask.
    chunkpipe::PinnedArray<float> px(n), py(n);
    for (std::size_t i = 0; i < n; ++i) px[i] = x[i];

    chunkpipe::ChunkedPipeline<chunkpipe::Map<Square>> pipe;  // Options{}: every default
    // The first run allocates the device slots (and, when it stages, the
    // pinned ones); later runs reuse them. Time the second of each.
    auto pinned_run = [&] { pipe.run(chunkpipe::pinned(px), chunkpipe::pinned(py)); };
    pinned_run();
    const double pinned_ms = time_ms(pinned_run);
    const std::size_t pinned_wrong = count_wrong(x, py);

    // Pageable memory (a std::vector) is staged: host threads copy each
    // chunk into a pinned slot while the GPU works on other chunks.
    // Options::host_threads sets how many share each copy.
    auto staged_run = [&] { pipe.run(x, y); };
    staged_run();
    const double staged_ms = time_ms(staged_run);
    const std::size_t staged_wrong = count_wrong(x, y);

    // Staging::registered pins the caller's memory in place on its first
    // run (slow, once) and copies directly from then on. The ranges must
    // stay allocated until release_registrations() or the pipeline's end.
    chunkpipe::Options registered;
    registered.staging = chunkpipe::Staging::registered;
    chunkpipe::ChunkedPipeline<chunkpipe::Map<Square>> in_place(registered);
    auto registered_run = [&] { in_place.run(x, y); };
    const double first_ms = time_ms(registered_run);
    const double registered_ms = time_ms(registered_run);
    const std::size_t registered_wrong = count_wrong(x, y);
    in_place.release_registrations();

    const chunkpipe::Geometry& g = pipe.geometry();
    std::printf("schedule: %s, %d slots of %zu elements\n", std::string(chunkpipe::to_string(g.policy)).c_str(),
                g.depth, g.chunk_elems);
    std::printf("pinned      %8.2f ms, %zu wrong\n", pinned_ms, pinned_wrong);
    std::printf("staged      %8.2f ms, %zu wrong\n", staged_ms, staged_wrong);
    std::printf("registered  %8.2f ms (first run, which pins: %.2f ms), %zu wrong\n", registered_ms, first_ms,
                registered_wrong);
    return pinned_wrong + staged_wrong + registered_wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
