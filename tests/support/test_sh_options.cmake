# SPDX-License-Identifier: MIT
# CTest test test_sh_turns_every_part_on: scripts/test.sh configures its
# build folder with tests, examples, benchmarks, install rules and docs on
# even where the folder's cache has them off, as scripts/demo.sh leaves its
# own. Without that, running the README's two commands in order found no
# tests and passed.
#   cmake -D SOURCE_DIR=... -D WORK_DIR=... -D CUDA_COMPILER=... -P test_sh_options.cmake
set(_options CHUNKPIPE_BUILD_TESTS CHUNKPIPE_BUILD_EXAMPLES CHUNKPIPE_BUILD_BENCHMARKS CHUNKPIPE_INSTALL
    CHUNKPIPE_BUILD_DOCS)
file(REMOVE_RECURSE "${WORK_DIR}")

function(_expect value)
  file(STRINGS "${WORK_DIR}/CMakeCache.txt" _cache REGEX "^CHUNKPIPE_[A-Z_]+:BOOL=")
  foreach(_o IN LISTS _options)
    if(NOT "${_cache}" MATCHES "(^|;)${_o}:BOOL=${value}(;|$)")
      message(FATAL_ERROR "${_o} is not ${value} in ${WORK_DIR}/CMakeCache.txt: ${_cache}")
    endif()
  endforeach()
endfunction()

# A folder configured the way demo.sh configures one, everything off.
set(_off "")
foreach(_o IN LISTS _options)
  list(APPEND _off -D${_o}=OFF)
endforeach()
execute_process(
  COMMAND ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR} -DCMAKE_BUILD_TYPE=Release
          -DCMAKE_CUDA_COMPILER=${CUDA_COMPILER} ${_off}
  OUTPUT_QUIET RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "configuring ${WORK_DIR} with everything off failed (${_rc})")
endif()
_expect(OFF)

# test.sh's configure step over it.
execute_process(COMMAND bash ${SOURCE_DIR}/scripts/test.sh --configure-only ${WORK_DIR}
  OUTPUT_VARIABLE _out ERROR_VARIABLE _out RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "scripts/test.sh --configure-only ${WORK_DIR} failed (${_rc}):\n${_out}")
endif()
_expect(ON)
file(REMOVE_RECURSE "${WORK_DIR}")
message(STATUS "scripts/test.sh turned every part on over a cache that had them off")
