// SPDX-License-Identifier: MIT
// A CUDA consumer: the umbrella header compiles and links in a user's
// project. It runs only where there is a GPU.
#include <chunkpipe/pipeline.cuh>

#include <cstdio>
#include <vector>

struct Twice {
  __device__ float operator()(float x) const { return 2.f * x; }
};

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("no CUDA device: built, not run\n");
    return 0;
  }
  chunkpipe::ChunkedPipeline<chunkpipe::Map<Twice>> pipe({.chunk_elems = 1 << 10});
  std::vector<float> x(5000, 1.5f), y(5000);
  pipe.run(x, y);
  return y[4999] == 3.f ? 0 : 1;
}
