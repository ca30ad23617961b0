# SPDX-License-Identifier: MIT
# Settings for chunkpipe's own tests, examples and benchmarks. Never
# included for consumers, so none of this leaks into their builds.

# Warnings for our own code; an interface target so each program opts in.
add_library(chunkpipe_dev_flags INTERFACE)
target_compile_options(chunkpipe_dev_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra>
  $<$<COMPILE_LANGUAGE:CUDA>:--extended-lambda -Xcompiler=-Wall,-Wextra -lineinfo>)
target_link_libraries(chunkpipe_dev_flags INTERFACE chunkpipe::chunkpipe)

# chunkpipe_program(name source... [LABEL l]): an example or benchmark.
# examples/ is on its include path for "support.hpp", the helpers they share.
function(chunkpipe_program name)
  cmake_parse_arguments(P "" "" "SOURCES" ${ARGN})
  add_executable(${name} ${P_SOURCES} ${P_UNPARSED_ARGUMENTS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/examples)
  target_link_libraries(${name} PRIVATE chunkpipe_dev_flags)
endfunction()
