# SPDX-License-Identifier: MIT
# A compile-fail check, run by CTest:
#   cmake -D SOURCE=<tu> -P expect_compile_error.cmake -- <compiler> <args...>
# compiles SOURCE with the command after "--" (SOURCE goes last) and passes
# when the compiler fails with exactly the errors SOURCE announces: each of
# its lines that starts with "// expect-error: " gives a text that must be
# in exactly one error diagnostic, and there must be no other error. So a
# message that is missing, repeated or buried among others fails, and so
# does a right call beside the wrong ones that stopped compiling.
#
# An error diagnostic is a line that does not start with blanks (compilers
# indent the source lines and notes they quote) and has "error" after a
# file position: "f.cpp:3:2: error: ..." (GCC, Clang), "f.cu(3): error: ..."
# (nvcc's front end), "fatal error:" and "catastrophic error:" included.

if(NOT SOURCE)
  message(FATAL_ERROR "expect_compile_error.cmake: set SOURCE")
endif()
set(_cmd "")
set(_after_dashes FALSE)
math(EXPR _last "${CMAKE_ARGC} - 1")
foreach(_i RANGE 1 ${_last})
  if(_after_dashes)
    list(APPEND _cmd "${CMAKE_ARGV${_i}}")
  elseif(CMAKE_ARGV${_i} STREQUAL "--")
    set(_after_dashes TRUE)
  endif()
endforeach()
if(NOT _cmd)
  message(FATAL_ERROR "expect_compile_error.cmake: give the compile command after --")
endif()

# Semicolons separate CMake's list items, and brackets stop them from
# separating; C++ is full of both: every text is compared with them
# replaced, and shown with them put back.
macro(_escape var)
  string(REPLACE ";" "<CP_SEMI>" ${var} "${${var}}")
  string(REPLACE "[" "<CP_LB>" ${var} "${${var}}")
  string(REPLACE "]" "<CP_RB>" ${var} "${${var}}")
endmacro()
macro(_unescape var)
  string(REPLACE "<CP_SEMI>" ";" ${var} "${${var}}")
  string(REPLACE "<CP_LB>" "[" ${var} "${${var}}")
  string(REPLACE "<CP_RB>" "]" ${var} "${${var}}")
endmacro()
file(STRINGS "${SOURCE}" _expect_lines REGEX "^// expect-error: ")
set(_expected "")
foreach(_line IN LISTS _expect_lines)
  string(REGEX REPLACE "^// expect-error: " "" _text "${_line}")
  _escape(_text)
  list(APPEND _expected "${_text}")
endforeach()
if(NOT _expected)
  message(FATAL_ERROR "${SOURCE} has no \"// expect-error: \" line")
endif()

execute_process(COMMAND ${_cmd} "${SOURCE}" RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
set(_flat "${_out}")
_escape(_flat)
string(REPLACE "\n" ";" _lines "${_flat}")
set(_errors "")
foreach(_line IN LISTS _lines)
  if(_line MATCHES "^[^ \t].*[:)] ((fatal|catastrophic) )?error[^:]*:")
    list(APPEND _errors "${_line}")
  endif()
endforeach()

set(_problems "")
if(_rc EQUAL 0)
  string(APPEND _problems "  the compiler succeeded; it should have failed\n")
endif()
foreach(_text IN LISTS _expected)
  set(_hits 0)
  foreach(_e IN LISTS _errors)
    string(FIND "${_e}" "${_text}" _at)
    if(NOT _at EQUAL -1)
      math(EXPR _hits "${_hits} + 1")
    endif()
  endforeach()
  if(NOT _hits EQUAL 1)
    set(_shown "${_text}")
    _unescape(_shown)
    string(APPEND _problems "  ${_hits} error diagnostics (not 1) contain: ${_shown}\n")
  endif()
endforeach()
# Texts of one diagnostic (two expect-error lines for one #error) count once.
set(_matched 0)
foreach(_e IN LISTS _errors)
  set(_any FALSE)
  foreach(_text IN LISTS _expected)
    string(FIND "${_e}" "${_text}" _at)
    if(NOT _at EQUAL -1)
      set(_any TRUE)
    endif()
  endforeach()
  if(_any)
    math(EXPR _matched "${_matched} + 1")
  else()
    set(_shown "${_e}")
    _unescape(_shown)
    string(APPEND _problems "  an error that was not expected: ${_shown}\n")
  endif()
endforeach()

if(_problems)
  string(LENGTH "${_out}" _len)
  if(_len GREATER 20000)
    string(SUBSTRING "${_out}" 0 20000 _out)
    string(APPEND _out "\n[... cut at 20000 characters]")
  endif()
  message(FATAL_ERROR "compile-fail check of ${SOURCE}:\n${_problems}compiler output:\n${_out}")
endif()
message(STATUS "${SOURCE}: failed to compile as expected, with ${_matched} error(s), each expected")
