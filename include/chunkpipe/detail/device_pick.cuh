// SPDX-License-Identifier: MIT
// Which device a GPU pipeline runs on, chosen once when it is built. Where
// CUDA has no device to give (no driver, none present) the pipeline is
// built all the same, so that each run can check its ranges before it is
// refused (no_device_error) with the reason kept here.
#pragma once

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/errors.hpp>
#include <chunkpipe/options.hpp>

#include <cuda_runtime_api.h>

#include <string>

namespace chunkpipe::detail {

/// A GPU pipeline's device: Options::device, or the device current when it
/// was built; -1 where there is none.
struct DevicePick {
  int id = -1;
  std::string why;  ///< why id is -1: no_device_error's message

  /// Picks it. Throws config_error for a device that does not exist,
  /// cuda_error for CUDA failures other than having no device.
  static DevicePick of(const Options& options) {
    int count = 0;
    const cudaError_t counted = cudaGetDeviceCount(&count);
    if (counted != cudaSuccess && !::chunkpipe::detail::means_no_device(counted)) {
      ::chunkpipe::detail::throw_cuda_error(counted, "cudaGetDeviceCount(&count)", __FILE__, __LINE__);
    }
    if (counted != cudaSuccess || count == 0)
      return DevicePick{-1, ::chunkpipe::detail::no_device_message(counted, count)};
    if (options.device >= count) {
      throw config_error("chunkpipe: device " + std::to_string(options.device) + " does not exist (" +
                         std::to_string(count) + " CUDA devices)");
    }
    if (options.device >= 0) return DevicePick{options.device, {}};
    int d = 0;
    CHUNKPIPE_CUDA_TRY(cudaGetDevice(&d));
    return DevicePick{d, {}};
  }
};

}  // namespace chunkpipe::detail
