// SPDX-License-Identifier: MIT
// Compile-fail check (tests/headers/CMakeLists.txt): a .cpp that includes
// the headers that launch kernels, read by the host compiler, gets one
// #error that says what to do, and nothing else: no error from detail/
// (g++ gave 276 before the check), and one line for two such headers.
// The lines below that start with "expect-error:" are what the check
// requires, each in exactly one diagnostic.
//
// expect-error: chunkpipe: <chunkpipe/pipeline.cuh>, <chunkpipe/chunked_pipeline.cuh>, <chunkpipe/filter.cuh> and <chunkpipe/measure.cuh> launch CUDA kernels and must be compiled by nvcc
// expect-error: host-only code can include <chunkpipe/host_backend.hpp> and use chunkpipe::HostPipeline
#include <chunkpipe/host_backend.hpp>  // host-only: fine before and after
#include <chunkpipe/pipeline.cuh>
#include <chunkpipe/measure.cuh>
#include <chunkpipe/chunked_pipeline.cuh>
#include <chunkpipe/filter.cuh>

int main() { return 0; }
