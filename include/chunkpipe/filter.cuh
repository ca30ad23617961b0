// SPDX-License-Identifier: MIT
/// \file
/// A Filter stage's device side: cub::DeviceSelect::If over each chunk.
/// <chunkpipe/pipeline.cuh> includes it; a file that includes only
/// <chunkpipe/chunked_pipeline.cuh> includes it too when one of its
/// pipelines has a Filter stage (chunkpipe::filter). CUB's headers are
/// most of what this costs a compile, which is why a file that never
/// filters does not pay for them. The host backend (host_backend.hpp)
/// needs no such header: it filters on the CPU.
///
/// \code
/// #include <chunkpipe/chunked_pipeline.cuh>
/// #include <chunkpipe/filter.cuh>
///
/// auto keep = chunkpipe::make_pipeline({}, chunkpipe::filter(Big{}));
/// const std::size_t kept = keep.run(x, z);  // z[0, kept) holds them, in order
/// \endcode
#pragma once

// A host compiler gets one #error here, and nothing below it.
#include <chunkpipe/detail/needs_nvcc.hpp>
#if defined(__CUDACC__)

#include <chunkpipe/detail/filter_kernel.cuh>

#endif  // defined(__CUDACC__)
