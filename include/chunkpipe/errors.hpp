// SPDX-License-Identifier: MIT
/// \file
/// The errors chunkpipe throws that do not need CUDA to describe them.
/// cuda_error, which carries a cudaError_t, lives in cuda_error.cuh.
#pragma once

#include <stdexcept>
#include <string>

namespace chunkpipe {

/// Bad configuration or bad arguments: zero chunk size, depth 0, inputs of
/// different lengths, an output shorter than its input, a null pointer with
/// a non-zero length, slots that do not fit in device memory. Always thrown
/// before any work is queued, so nothing needs cleaning up.
class config_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// A run failed for a reason that is not a CUDA error code: a source or sink
/// failed, a file could not be read or written, the pipeline was left
/// unusable by an earlier sticky device error, or there is no device to run
/// on (no_device_error).
class pipeline_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A ChunkedPipeline has no CUDA device to run on: the machine has no NVIDIA
/// driver, one older than the program's CUDA runtime, or no device the
/// driver lets it use. The pipeline is still built (so code that builds one
/// and then picks a backend needs no GPU), and each of its runs throws this
/// once its ranges have passed their checks (which throw config_error
/// first). The message says which of those it is and names HostPipeline
/// (host_backend.hpp), which runs the same stages and ranges on the CPU.
class no_device_error : public pipeline_error {
 public:
  using pipeline_error::pipeline_error;
};

}  // namespace chunkpipe
