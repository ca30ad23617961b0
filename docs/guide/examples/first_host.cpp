// SPDX-License-Identifier: MIT
// The first program on the host backend: the same pipeline and the same
// check, run on the CPU. No GPU or driver needed; any C++17 compiler with
// the CUDA toolkit's headers (for CCCL) builds it:
//   g++ -std=c++17 -O2 -I chunkpipe/include -I /usr/local/cuda/include/cccl -I /usr/local/cuda/include first_host.cpp -pthread
#include <chunkpipe/host_backend.hpp>

#include <cmath>
#include <exception>
#include <iostream>
#include <vector>

struct Affine {
  float a, b;
  CHUNKPIPE_HOST_DEVICE float operator()(float x) const { return fmaf(a, x, b); }
};

int main() {
  try {
    const std::size_t n = std::size_t{4} << 20;
    std::vector<float> in(n), out(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<float>(i % 1000) * 0.001f;

    chunkpipe::Options options;
    options.chunk_elems = std::size_t{1} << 20;
    options.profile = true;  // time every op on the host clock, for report()
    const Affine f{2.0f, 1.0f};
    // The GPU pipeline's options, stages and ranges, and its schedule, run
    // on the CPU in a random order the schedule allows.
    auto pipe = chunkpipe::make_host_pipeline(options, chunkpipe::map(f));
    pipe.run(in, out);

    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += out[i] != f(in[i]);
    // last_run() is a RunSummary (elements, chunks); it and the Report print.
    std::cout << pipe.last_run() << " on the host, " << wrong << " wrong\n" << pipe.report();
    return wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << '\n';
    return 1;
  }
}
