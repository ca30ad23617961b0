// SPDX-License-Identifier: MIT
/// \file
/// The compiled part of chunkpipe, for programs built with CHUNKPIPE_COMPILED
/// (detail/linkage.hpp): the definitions of its non-template host code
/// (plans, the hazard check, the simulator, reports, the decision, the host
/// backend's op graph, and the GPU runtime's parts that do not depend on
/// the stages: the stream executor, slots, run state, coalescing,
/// calibration, copy teams), once, not inline.
///
/// Include it in exactly one C++ file of such a program, before any other
/// chunkpipe header, and compile the rest of the program with
/// CHUNKPIPE_COMPILED defined. The CMake target chunkpipe::compiled does
/// both (a static library of this file; it defines CHUNKPIPE_COMPILED for
/// what links it). Host C++ (g++ or nvcc) with the CUDA runtime's headers:
/// it holds no kernel, and links the CUDA runtime as chunkpipe::chunkpipe
/// does. Without CHUNKPIPE_COMPILED (the default) chunkpipe is header-only
/// and this file is not needed.
#pragma once

#ifdef CHUNKPIPE_LINKAGE_INCLUDED
#error "chunkpipe: include <chunkpipe/compiled.hpp> before any other chunkpipe header, in one file only"
#endif
/// Set by this file: the chunkpipe headers it includes define their
/// non-template host code here, not inline (detail/linkage.hpp).
#define CHUNKPIPE_BUILDING_COMPILED 1

#include <chunkpipe/cuda_error.cuh>
#include <chunkpipe/decide.hpp>
#include <chunkpipe/hazards.hpp>
#include <chunkpipe/host_copy.hpp>
#include <chunkpipe/memory.cuh>
#include <chunkpipe/options.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/run_ticket.cuh>
#include <chunkpipe/simulate.hpp>
#include <chunkpipe/detail/calibration.cuh>
#include <chunkpipe/detail/calibration_state.hpp>
#include <chunkpipe/detail/coalescer.hpp>
#include <chunkpipe/detail/completion.hpp>
#include <chunkpipe/detail/copy_team.hpp>
#include <chunkpipe/detail/dispatcher.hpp>
#include <chunkpipe/detail/endpoints.hpp>
#include <chunkpipe/detail/graph_builder.hpp>
#include <chunkpipe/detail/graph_ops.hpp>
#include <chunkpipe/detail/host_lanes.hpp>
#include <chunkpipe/detail/host_op_graph.hpp>
#include <chunkpipe/detail/issue_worker.hpp>
#include <chunkpipe/detail/lane_tuner.cuh>
#include <chunkpipe/detail/op_records.hpp>
#include <chunkpipe/detail/op_timing.hpp>
#include <chunkpipe/detail/resource_buffer.hpp>
#include <chunkpipe/detail/run_setup.hpp>
#include <chunkpipe/detail/run_state.hpp>
#include <chunkpipe/detail/run_timeline.hpp>
#include <chunkpipe/detail/slot_arena.cuh>
#include <chunkpipe/detail/slots.hpp>
#include <chunkpipe/detail/stream_ops.hpp>

namespace chunkpipe::detail {
// The templates the runtime instantiates with one argument only, once here
// (their headers' users see `extern template`: detail/issue_route.cuh,
// detail/cuda_runner.cuh, detail/host_engine.hpp).
template class Coalescer<RunState>;
template class InFlightRanges<RunState>;
template class InFlightRanges<HostRun>;
}  // namespace chunkpipe::detail
