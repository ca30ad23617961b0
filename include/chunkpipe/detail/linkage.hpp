// SPDX-License-Identifier: MIT
// How chunkpipe's non-template host code (plans, the hazard check, the
// simulator, reports, the decision, the host backend's op graph, and the
// GPU runtime's parts that do not depend on the stages: the detail/*.inl
// files) is linked into a program.
//
// Header-only, the default: each public header includes its .inl at its
// bottom and every function there is `inline`, so any file may include
// anything and nothing needs linking.
//
// Compiled: where CHUNKPIPE_COMPILED is defined (the CMake target
// chunkpipe::compiled defines it for what links it), the headers declare
// those functions only, and one translation unit of the program, the
// library that <chunkpipe/compiled.hpp> builds, defines them once. Each of
// the program's files then compiles only the templates it instantiates,
// not the same plan builder, simulator and report writer again.
// Template code stays in the headers either way.
#pragma once

#define CHUNKPIPE_LINKAGE_INCLUDED 1

#if defined(CHUNKPIPE_BUILDING_COMPILED)
// <chunkpipe/compiled.hpp>: the one file that defines them, not inline.
#define CHUNKPIPE_HEADER_ONLY 1
#define CHUNKPIPE_INLINE
#elif defined(CHUNKPIPE_COMPILED)
#define CHUNKPIPE_HEADER_ONLY 0
#define CHUNKPIPE_INLINE inline
#else
#define CHUNKPIPE_HEADER_ONLY 1
#define CHUNKPIPE_INLINE inline
#endif
