// SPDX-License-Identifier: MIT
// chunkpipe::cuda_error and the one macro that checks every CUDA call.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace chunkpipe {

/// A CUDA runtime call failed. Carries the code, the call as written and
/// where it was made. Errors that poison the context (an illegal address in
/// a kernel, say) leave the device unusable for the rest of the process;
/// ChunkedPipeline::healthy() says whether that happened.
class cuda_error : public std::runtime_error {
 public:
  cuda_error(cudaError_t code, const char* call, const char* file, int line)
      : std::runtime_error(message(code, call, file, line)), code_(code), call_(call), file_(file), line_(line) {}

  cudaError_t code() const noexcept { return code_; }
  const char* call() const noexcept { return call_; }
  const char* file() const noexcept { return file_; }
  int line() const noexcept { return line_; }

 private:
  static std::string message(cudaError_t code, const char* call, const char* file, int line) {
    return std::string("chunkpipe: CUDA error ") + cudaGetErrorName(code) + " (" + cudaGetErrorString(code) +
           ") in " + call + " at " + file + ':' + std::to_string(line);
  }
  cudaError_t code_;
  const char* call_;
  const char* file_;
  int line_;
};

namespace detail {

// Out of line and cold so the message is built only on failure.
[[noreturn]] __attribute__((noinline, cold)) inline void throw_cuda_error(cudaError_t code, const char* call,
                                                                          const char* file, int line) {
  // Clear the per-thread last error so a later unrelated check does not
  // report this one again (sticky errors stay, as they must).
  (void)cudaGetLastError();
  throw cuda_error(code, call, file, line);
}

/// True for errors after which the context cannot be used again.
inline bool is_sticky(cudaError_t code) noexcept {
  switch (code) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorContextIsDestroyed:
      return true;
    default:
      return false;
  }
}

}  // namespace detail
}  // namespace chunkpipe

/// Evaluates a CUDA runtime call once; on failure throws chunkpipe::cuda_error
/// with the code, the call and file:line.
#define CHUNKPIPE_CUDA_TRY(call)                                                     \
  do {                                                                               \
    const cudaError_t chunkpipe_status_ = (call);                                    \
    if (chunkpipe_status_ != cudaSuccess) {                                          \
      ::chunkpipe::detail::throw_cuda_error(chunkpipe_status_, #call, __FILE__, __LINE__); \
    }                                                                                \
  } while (0)
