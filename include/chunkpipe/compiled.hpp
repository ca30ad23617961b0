// SPDX-License-Identifier: MIT
/// \file
/// The compiled part of chunkpipe, for programs built with CHUNKPIPE_COMPILED
/// (detail/linkage.hpp): the definitions of its non-template host code
/// (plans, the hazard check, the simulator, reports, the decision, the host
/// backend's op graph), once, not inline.
///
/// Include it in exactly one C++ file of such a program, before any other
/// chunkpipe header, and compile the rest of the program with
/// CHUNKPIPE_COMPILED defined. The CMake target chunkpipe::compiled does
/// both (a static library of this file; it defines CHUNKPIPE_COMPILED for
/// what links it). Host-only C++: g++ or nvcc. Without CHUNKPIPE_COMPILED
/// (the default) chunkpipe is header-only and this file is not needed.
#pragma once

#ifdef CHUNKPIPE_LINKAGE_INCLUDED
#error "chunkpipe: include <chunkpipe/compiled.hpp> before any other chunkpipe header, in one file only"
#endif
/// Set by this file: the chunkpipe headers it includes define their
/// non-template host code here, not inline (detail/linkage.hpp).
#define CHUNKPIPE_BUILDING_COMPILED 1

#include <chunkpipe/decide.hpp>
#include <chunkpipe/hazards.hpp>
#include <chunkpipe/plan.hpp>
#include <chunkpipe/report.hpp>
#include <chunkpipe/simulate.hpp>
#include <chunkpipe/detail/host_op_graph.hpp>
