// SPDX-License-Identifier: MIT
// The GPU tests' gate (main.cpp calls it before Catch2): where no CUDA
// device can be used it says so and exits with 77, which CTest reports as
// "Skipped", never as a pass. Listing (--list-tests, --list-test-names-only,
// ...) and --help work everywhere, without touching CUDA, so that
// catch_discover_tests can register every GPU test case on a machine with
// no GPU. Linked into each GPU test program as an object file
// (chunkpipe_gpu_test_main, an object library), so that it overrides the
// weak declaration in main.cpp; Catch2 itself comes from chunkpipe_test_main.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>

namespace {

// True when the command line only asks Catch2 to describe the program.
bool lists_only(int argc, char* argv[]) {
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (std::strncmp(a, "--list", 6) == 0 || std::strcmp(a, "-l") == 0 || std::strcmp(a, "-t") == 0 ||
        std::strcmp(a, "--help") == 0 || std::strcmp(a, "-h") == 0 || std::strcmp(a, "-?") == 0) {
      return true;
    }
  }
  return false;
}

}  // namespace

// 77 where the tests cannot run here; -1 to run them.
extern "C" int chunkpipe_test_gate(int argc, char* argv[]) {
  if (lists_only(argc, argv)) return -1;
  int devices = 0;
  const cudaError_t err = cudaGetDeviceCount(&devices);
  if (err != cudaSuccess || devices == 0) {
    std::printf("SKIPPED: no usable CUDA device (%s); this GPU test did not run\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "device count is 0");
    return 77;
  }
  return -1;
}
