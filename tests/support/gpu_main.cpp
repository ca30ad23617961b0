// SPDX-License-Identifier: MIT
// Catch2 main for GPU tests: where no CUDA device can be used it says so
// and exits with 77, which CTest reports as "Skipped", never as a pass.
#if __has_include(<catch2/catch_session.hpp>)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

#include <cuda_runtime_api.h>

#include <cstdio>

int main(int argc, char* argv[]) {
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf("SKIPPED: no usable CUDA device (%s); this GPU test did not run\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "device count is 0");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
