# SPDX-License-Identifier: MIT
# Runs each of PROGRAMS (built in the current directory) and fails on the
# first that fails: the consumer's test command.
foreach(_p IN LISTS PROGRAMS)
  execute_process(COMMAND ./${_p} RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${_p} failed: ${_rc}")
  endif()
endforeach()
