// SPDX-License-Identifier: MIT
// Definitions for cuda_error.cuh. Included at its bottom where chunkpipe is
// header-only, or once by <chunkpipe/compiled.hpp> (detail/linkage.hpp); do
// not include directly.
#pragma once

namespace chunkpipe {

CHUNKPIPE_INLINE std::string cuda_error::message(cudaError_t code, const char* call, const char* file, int line) {
  return std::string("chunkpipe: CUDA error ") + cudaGetErrorName(code) + " (" + cudaGetErrorString(code) +
         ") in " + call + " at " + file + ':' + std::to_string(line);
}

namespace detail {

CHUNKPIPE_INLINE std::string no_device_message(cudaError_t code, int count) {
  (void)cudaGetLastError();
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;  // 0: no driver installed
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  (void)cudaGetLastError();
  auto version = [](int v) { return std::to_string(v / 1000) + '.' + std::to_string(v % 1000 / 10); };
  const std::string cuda_said =
      code == cudaSuccess ? std::string("cudaGetDeviceCount found ") + std::to_string(count) + " devices"
                          : std::string("cudaGetDeviceCount: ") + cudaGetErrorName(code);
  std::string why;
  if (driver == 0) {
    why = "this machine has no NVIDIA driver";
  } else if (code == cudaSuccess) {
    why = "the NVIDIA driver reports none (CUDA_VISIBLE_DEVICES may hide them)";
  } else if (code == cudaErrorInsufficientDriver) {
    why = "the NVIDIA driver supports CUDA " + version(driver) + ", older than this program's CUDA runtime " +
          version(runtime) + "; update the driver";
  } else {
    why = cudaGetErrorString(code);
  }
  return "chunkpipe: no CUDA device to run on: " + why + " (" + cuda_said +
         "). ChunkedPipeline needs one; chunkpipe::HostPipeline (<chunkpipe/host_backend.hpp>) runs the same "
         "stages and ranges on the CPU";
}

}  // namespace detail
}  // namespace chunkpipe
