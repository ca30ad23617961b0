# SPDX-License-Identifier: MIT
# Test discovery for Catch2 2.x, in place of the CatchAddTests.cmake that
# Catch2 2.x installs (tests/CMakeLists.txt points Catch.cmake's
# catch_discover_tests here). Same inputs, same output (a CTest script with
# one add_test per test case), one difference: a ';' in a test case name
# stays in the name. The installed 2.x script turns every ';' of the listing
# into a list separator, which registers the halves of such a name as two
# tests that match nothing, and the test case itself never runs. (Catch2
# 3.x's own script escapes the ';' and is used unchanged.)
#
# Run by catch_discover_tests after each build of a test program, as
#   cmake -D TEST_EXECUTABLE=... -D CTEST_FILE=... [-D ...] -P CatchAddTests2.cmake
# with the variables Catch2 2.x's Catch.cmake passes.

if(NOT EXISTS "${TEST_EXECUTABLE}")
  message(FATAL_ERROR "Specified test executable '${TEST_EXECUTABLE}' does not exist")
endif()

# Catch2 2.x exits with the number of test cases it listed.
execute_process(
  COMMAND ${TEST_EXECUTOR} "${TEST_EXECUTABLE}" ${TEST_SPEC} --list-test-names-only
  OUTPUT_VARIABLE output
  RESULT_VARIABLE result
  WORKING_DIRECTORY "${TEST_WORKING_DIR}")
if(NOT result MATCHES "^[0-9]+$")
  message(FATAL_ERROR "Error running test executable '${TEST_EXECUTABLE}':\n  Result: ${result}\n  Output: ${output}\n")
endif()

set(reporter_arg "")
if(TEST_REPORTER)
  set(reporter_arg "--reporter" "${TEST_REPORTER}")
endif()
set(output_dir "${TEST_OUTPUT_DIR}")
if(output_dir AND NOT IS_ABSOLUTE "${output_dir}")
  set(output_dir "${TEST_WORKING_DIR}/${output_dir}")
  file(MAKE_DIRECTORY "${output_dir}")
endif()

# One bracket argument per value, so no character in a name is interpreted.
function(_quote out value)
  set(${out} "[==[${value}]==]" PARENT_SCOPE)
endfunction()

set(script "")
set(names "")
# Split the listing at newlines only: ';' are escaped first.
string(REPLACE ";" "\\;" output "${output}")
string(REPLACE "\n" ";" output "${output}")
foreach(line IN LISTS output)
  if(line STREQUAL "")
    continue()
  endif()
  # A name that starts with '#' is listed in quotes.
  if(line MATCHES "^\"(.*)\"$")
    set(line "${CMAKE_MATCH_1}")
  endif()
  set(name "${TEST_PREFIX}${line}${TEST_SUFFIX}")
  # The test spec: ',' '[' ']' mean something to Catch2 2.x and are escaped.
  set(spec "${line}")
  foreach(char , [ ])
    string(REPLACE "${char}" "\\${char}" spec "${spec}")
  endforeach()
  set(args "")
  foreach(arg IN ITEMS ${TEST_EXECUTOR} "${TEST_EXECUTABLE}" "${spec}" ${TEST_EXTRA_ARGS} ${reporter_arg})
    _quote(q "${arg}")
    string(APPEND args " ${q}")
  endforeach()
  if(output_dir)
    string(REGEX REPLACE "[^A-Za-z0-9_]" "_" clean "${spec}")
    _quote(q "--out")
    _quote(q2 "${output_dir}/${TEST_OUTPUT_PREFIX}${clean}${TEST_OUTPUT_SUFFIX}")
    string(APPEND args " ${q} ${q2}")
  endif()
  _quote(qname "${name}")
  _quote(qdir "${TEST_WORKING_DIR}")
  set(props "")
  foreach(p IN LISTS TEST_PROPERTIES)
    _quote(q "${p}")
    string(APPEND props " ${q}")
  endforeach()
  string(APPEND script "add_test(${qname}${args})\n")
  string(APPEND script "set_tests_properties(${qname} PROPERTIES WORKING_DIRECTORY ${qdir}${props})\n")
  string(APPEND names " ${qname}")
endforeach()

if(TEST_LIST)
  string(APPEND script "set(${TEST_LIST}${names})\n")
endif()
file(WRITE "${CTEST_FILE}" "${script}")
