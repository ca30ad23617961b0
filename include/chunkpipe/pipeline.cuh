// SPDX-License-Identifier: MIT
/// \file
/// The umbrella header: everything chunkpipe has for the GPU, in one
/// include. It only includes:
///
/// - chunked_pipeline.cuh: ChunkedPipeline, make_pipeline, tune, and what
///   their runs take and give: stages (stage.hpp), ranges, sources and
///   sinks (io.hpp), options (options.hpp, memory_resource.hpp), plans
///   (plan.hpp), reports (report.hpp), folding runs' results (result.hpp),
///   run tickets and after() (run_ticket.cuh), the decision (decide.hpp),
///   errors (errors.hpp, cuda_error.cuh) and the CUDA resources
///   (memory.cuh);
/// - filter.cuh: a Filter stage's device side (CUB's DeviceSelect);
/// - scan.hpp: the Scan stage (a running prefix over a whole run);
/// - spread.hpp: SpreadPipeline, a run spread over several GPUs;
/// - the hazard check (hazards.hpp), the simulator (simulate.hpp),
///   measurements of the link and of a stage (measure.cuh) and the version
///   (version.hpp).
///
/// A file that needs less compiles faster with less: a pipeline without a
/// Filter stage needs only <chunkpipe/chunked_pipeline.cuh>, and a spread
/// that as well as <chunkpipe/spread.hpp>.
/// Included separately: files and generators (files.hpp), shares of a
/// range (shard.hpp), storage rates (storage.hpp), Thrust in a ChunkFn
/// (thrust.cuh), and the host backend (host_backend.hpp), which needs no
/// CUDA.
#pragma once

// A host compiler gets one #error here, and nothing below it.
#include <chunkpipe/detail/needs_nvcc.hpp>
#if defined(__CUDACC__)

#include <chunkpipe/chunked_pipeline.cuh>
#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/decide.hpp>
#include <chunkpipe/errors.hpp>
#include <chunkpipe/filter.cuh>
#include <chunkpipe/hazards.hpp>
#include <chunkpipe/host_copy.hpp>
#include <chunkpipe/io.hpp>
#include <chunkpipe/measure.cuh>
#include <chunkpipe/memory.cuh>
#include <chunkpipe/options.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/result.hpp>
#include <chunkpipe/run_ticket.cuh>
#include <chunkpipe/scan.hpp>
#include <chunkpipe/simulate.hpp>
#include <chunkpipe/spread.hpp>
#include <chunkpipe/stage.hpp>
#include <chunkpipe/version.hpp>

#endif  // defined(__CUDACC__)
