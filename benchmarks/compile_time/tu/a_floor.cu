// SPDX-License-Identifier: MIT
// Row (a), the floor of any .cu file: one kernel, two cudaMemcpy, nothing of
// chunkpipe, Thrust or CUB. Compiled, never run (compile_time.py).
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

__global__ void scale_kernel(float* v, std::size_t n, float factor) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) v[i] *= factor;
}

int main() {
  const std::size_t n = std::size_t{1} << 20;
  std::vector<float> x(n, 1.0f);
  float* d = nullptr;
  cudaMalloc(&d, n * sizeof(float));
  cudaMemcpy(d, x.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  scale_kernel<<<static_cast<unsigned>((n + 255) / 256), 256>>>(d, n, 0.5f);
  cudaMemcpy(x.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(d);
  return x[0] == 0.5f ? 0 : 1;
}
