// SPDX-License-Identifier: MIT
// The one error a public header that launches kernels (pipeline.cuh,
// chunked_pipeline.cuh, filter.cuh, measure.cuh) gives when a host compiler reads it. Without it g++ reports
// every blockIdx and <<<...>>> it meets in detail/ (276 errors for
// pipeline.cuh). Each such header includes this first and keeps the rest
// of its text under `#if defined(__CUDACC__)`, so this line is all that a
// .cpp file that includes it sees (once, however many of them it includes).
// The other .cuh headers (cuda_error.cuh, memory.cuh, run_ticket.cuh,
// thrust.cuh) only call the CUDA runtime and compile as host C++.
#pragma once

#if !defined(__CUDACC__)
#error "chunkpipe: <chunkpipe/pipeline.cuh>, <chunkpipe/chunked_pipeline.cuh>, <chunkpipe/filter.cuh> and <chunkpipe/measure.cuh> launch CUDA kernels and must be compiled by nvcc: put this code in a .cu file (CMake: project(... LANGUAGES CXX CUDA)); host-only code can include <chunkpipe/host_backend.hpp> and use chunkpipe::HostPipeline, which needs no CUDA compiler"
#endif
