// SPDX-License-Identifier: MIT
/// \file
/// CUDA errors: chunkpipe::cuda_error, and CHUNKPIPE_CUDA_TRY, the one macro
/// that checks every CUDA call. Needs the CUDA runtime's headers.
#pragma once

#include <chunkpipe/detail/linkage.hpp>

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
  /// The error and its what() message, from the code, the call as written
  /// and its file:line. `call` and `file` are kept as pointers, not copied:
  /// pass strings that outlive the error (CHUNKPIPE_CUDA_TRY passes string
  /// literals). Throws only std::bad_alloc.
  cuda_error(cudaError_t code, const char* call, const char* file, int line)
      : std::runtime_error(message(code, call, file, line)), code_(code), call_(call), file_(file), line_(line) {}

  /// The error code the call returned.
  cudaError_t code() const noexcept { return code_; }
  /// The call that failed, as written in the source.
  const char* call() const noexcept { return call_; }
  /// The source file the call is in.
  const char* file() const noexcept { return file_; }
  /// The line of the call in that file.
  int line() const noexcept { return line_; }

 private:
  static std::string message(cudaError_t code, const char* call, const char* file, int line);
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

/// True for what cudaGetDeviceCount returns where CUDA has no device to
/// give rather than a failure to report: no driver, or one older than this
/// runtime (both cudaErrorInsufficientDriver), a stub libcuda, a driver
/// that does not match its kernel module, no device, devices that are all
/// taken (exclusive mode), not ready or not supported, a driver that could
/// not start. A pipeline then throws no_device_error (errors.hpp).
inline bool means_no_device(cudaError_t code) noexcept {
  switch (code) {
    case cudaErrorInsufficientDriver:
    case cudaErrorNoDevice:
    case cudaErrorStubLibrary:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemNotReady:
    case cudaErrorNotSupported:
    case cudaErrorInitializationError:
      return true;
    default:
      return false;
  }
}

/// Why there is no device to run on, in plain words, naming the backend
/// that needs none: no_device_error's message. `code` and `count` are what
/// cudaGetDeviceCount gave. Clears CUDA's last error. Throws only
/// std::bad_alloc.
std::string no_device_message(cudaError_t code, int count);

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

#if CHUNKPIPE_HEADER_ONLY
#include <chunkpipe/detail/cuda_error.inl>
#endif
