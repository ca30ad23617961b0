# SPDX-License-Identifier: MIT
# Settings for chunkpipe's own tests, examples and benchmarks. Never
# included for consumers, so none of this leaks into their builds.

# ccache, where it is installed (never required): a build folder built
# again, or a second folder of the same sources, compiles only what
# changed. CHUNKPIPE_CCACHE=OFF, or a launcher of one's own in
# CMAKE_<LANG>_COMPILER_LAUNCHER, leaves it out. Set before any target of
# ours is made, since a target takes the launcher it sees then.
option(CHUNKPIPE_CCACHE "Compile chunkpipe's tests, examples and benchmarks through ccache where it is installed" ON)
if(CHUNKPIPE_CCACHE)
  find_program(CHUNKPIPE_CCACHE_PROGRAM ccache)
  mark_as_advanced(CHUNKPIPE_CCACHE_PROGRAM)
  if(CHUNKPIPE_CCACHE_PROGRAM)
    foreach(_lang CXX CUDA)
      if(NOT CMAKE_${_lang}_COMPILER_LAUNCHER)
        set(CMAKE_${_lang}_COMPILER_LAUNCHER ${CHUNKPIPE_CCACHE_PROGRAM})
      endif()
    endforeach()
  endif()
endif()

# Warnings for our own code; an interface target so each program opts in.
add_library(chunkpipe_dev_flags INTERFACE)
target_compile_options(chunkpipe_dev_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>
  $<$<COMPILE_LANGUAGE:CUDA>:--extended-lambda -Xcompiler=-Wall,-Wextra -lineinfo>)
target_link_libraries(chunkpipe_dev_flags INTERFACE chunkpipe::chunkpipe)
# chunkpipe's own library of its non-template host code (chunkpipe::compiled)
# builds with these warnings too.
target_link_libraries(chunkpipe_compiled PRIVATE chunkpipe_dev_flags)

# CHUNKPIPE_COMPILE_ONLY: what this build compiles but never runs is
# compiled only as far as the check needs:
#   OFF         (default) every program built with the build type's flags;
#   BENCHMARKS  the benchmarks and probes are not built as programs: the
#               test compile_benchmarks compiles each for its diagnostics
#               (benchmarks/CMakeLists.txt); plot_sweep, which the suite
#               runs, is built as before;
#   GPU         also the GPU tests and the GPU examples are built (and
#               listed, and report Skipped) with their host code at -O0:
#               for a machine without a GPU. -O0 roughly halves nvcc's host
#               pass and checks the same thing, that they compile and link
#               (optimising finds no error that -O0 misses; warnings are not
#               errors here); device code and every other flag stay as they
#               are.
# scripts/test.sh sets it (GPU where it finds no GPU, BENCHMARKS where it
# does). Figures come from a build with it OFF (scripts/gpu-check.sh
# configures its folder so; gpu-prebuilt.sh pack refuses anything else).
# Programs that run in the suite (unit tests, no_device_test, the TSan
# builds, predict, mpi_convert, the guide's host programs, plot_sweep)
# always keep the build type's flags.
set(CHUNKPIPE_COMPILE_ONLY OFF CACHE STRING
  "What this build does not run, compiled only to check it: OFF, BENCHMARKS or GPU (see cmake/chunkpipe-dev.cmake)")
set_property(CACHE CHUNKPIPE_COMPILE_ONLY PROPERTY STRINGS OFF BENCHMARKS GPU)
string(TOUPPER "${CHUNKPIPE_COMPILE_ONLY}" _compile_only)
if(_compile_only MATCHES "^(0|FALSE|NO|N|IGNORE|NOTFOUND|)$")
  set(_compile_only OFF)
endif()
if(NOT _compile_only MATCHES "^(OFF|BENCHMARKS|GPU)$")
  message(FATAL_ERROR "CHUNKPIPE_COMPILE_ONLY must be OFF, BENCHMARKS or GPU (got '${CHUNKPIPE_COMPILE_ONLY}')")
endif()
set(CHUNKPIPE_COMPILE_ONLY_MODE ${_compile_only})
if(_compile_only STREQUAL "GPU")
  # nvcc takes one -O (a second one draws a warning, and -Xcompiler=-O0
  # comes before nvcc's own -O on the host compiler's line), so the -O of
  # each build type moves from CMAKE_CUDA_FLAGS_<CONFIG> (in this directory
  # and the ones below: ours only) to chunkpipe_dev_flags, which gives it
  # back to every target but those marked CHUNKPIPE_COMPILE_ONLY.
  foreach(_cfg DEBUG RELEASE RELWITHDEBINFO MINSIZEREL)
    set(_opt "")
    if(CMAKE_CUDA_FLAGS_${_cfg} MATCHES "(^| )(-O[0-9sgz]*)( |$)")
      set(_opt ${CMAKE_MATCH_2})
      string(REGEX REPLACE "(^| )-O[0-9sgz]*( |$)" " " CMAKE_CUDA_FLAGS_${_cfg} "${CMAKE_CUDA_FLAGS_${_cfg}}")
    endif()
    target_compile_options(chunkpipe_dev_flags INTERFACE
      "$<$<AND:$<COMPILE_LANGUAGE:CUDA>,$<CONFIG:${_cfg}>>:$<IF:$<BOOL:$<TARGET_PROPERTY:CHUNKPIPE_COMPILE_ONLY>>,-O0,${_opt}>>")
  endforeach()
endif()
message(STATUS "chunkpipe: CHUNKPIPE_COMPILE_ONLY=${_compile_only} (what this build does not run, compiled only to check it: OFF, BENCHMARKS or GPU)")

# chunkpipe_gpu_program_compile_only(target...): marks programs that need a
# GPU to run: with CHUNKPIPE_COMPILE_ONLY=GPU their host code is at -O0.
function(chunkpipe_gpu_program_compile_only)
  if(CHUNKPIPE_COMPILE_ONLY_MODE STREQUAL "GPU")
    set_target_properties(${ARGN} PROPERTIES CHUNKPIPE_COMPILE_ONLY ON)
  endif()
endfunction()

# chunkpipe_program(name source... [LABEL l]): an example or benchmark.
# examples/ is on its include path for "support.hpp", the helpers they share.
function(chunkpipe_program name)
  cmake_parse_arguments(P "" "" "SOURCES" ${ARGN})
  add_executable(${name} ${P_SOURCES} ${P_UNPARSED_ARGUMENTS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/examples)
  # Built against chunkpipe::compiled: the non-template host code once, not
  # in every program (users copying an example get it header-only, which the
  # README's blocks, the guide's programs and the package tests build).
  target_link_libraries(${name} PRIVATE chunkpipe_dev_flags chunkpipe::compiled)
endfunction()
