# SPDX-License-Identifier: MIT
# Configures the CMake page's project (examples/cmake/CMakeLists.txt, with
# examples/first.cu beside it) against the chunkpipe installed into PREFIX,
# as a user would: find_package must find it, and the CUDA language and
# architecture must be accepted. Configure only: first.cu is compiled by the
# README's test (tests/readme), so building here would compile it twice.
#   cmake -DGUIDE=<docs/guide> -DWORK=<dir> -DPREFIX=<install prefix> -DCUDA_COMPILER=<nvcc> -P configure_project.cmake
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/src)
file(COPY ${GUIDE}/examples/cmake/CMakeLists.txt ${GUIDE}/examples/first.cu DESTINATION ${WORK}/src)
execute_process(
  COMMAND ${CMAKE_COMMAND} -S ${WORK}/src -B ${WORK}/build -DCMAKE_PREFIX_PATH=${PREFIX}
          -DCMAKE_CUDA_COMPILER=${CUDA_COMPILER}
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the CMake page's project did not configure against ${PREFIX} (exit ${rc})")
endif()
