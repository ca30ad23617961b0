# SPDX-License-Identifier: MIT
# Checks the API reference after Doxygen has written it (the docs target
# runs this; the docs test builds that target). No compiler, a second or so.
#
#   cmake -D HEADER_DIR=<repo>/include/chunkpipe -D XML_DIR=<build>/docs/xml
#         -D WARNINGS=<build>/docs/doxygen-warnings.log -P check_reference.cmake
#
# Fails, listing every problem, when
#  1. Doxygen warned about anything but an undocumented data member: wrong
#     documentation (an unknown command, a \ref that does not resolve, bad
#     markup), or a public class, struct, enum, alias, variable, macro or
#     function (member functions included) without a doc block. Data members
#     of a documented struct may go without one: the struct's block and the
#     member's name often say it all.
#  2. A public header (HEADER_DIR/*.hpp, *.cuh) is not in the reference:
#     it has no \file block, so the reference has no page for it and its
#     macros. Or a file that is not a public header is in it (detail/ is
#     implementation and stays out).
#  3. A detail:: type shows in a public declaration of the reference: a
#     return or parameter type, a base class, an alias's target, an
#     initializer. A reader cannot look such a type up. Hide it (a \cond
#     block around what is internal, \hideinitializer, CHUNKPIPE_UNSPECIFIED
#     from stage.hpp) or list it below with the reason it stays. Or SFINAE
#     shows (enable_if, void_t): write the condition with CHUNKPIPE_WHEN
#     (stage.hpp), which the reference reads as nothing, and say in the doc
#     block when the overload exists.
#  4. A type of namespace chunkpipe (not detail) is defined in a header
#     under detail/, which the reference does not read: a public type the
#     reference cannot show. (A text scan for `class`, `struct`, `enum` and
#     `using` at the start of a line, outside `namespace detail { ... }
#     // namespace detail`, as the headers write them.)

cmake_minimum_required(VERSION 3.25)

# Declarations that still show a detail:: type, with the reason; each is
# reported as a note, not a failure. Keep this list short.
set(_known_detail_leaks "")

# Public types defined under detail/, with the reason; notes, not failures.
set(_known_public_in_detail "")

foreach(_var HEADER_DIR XML_DIR WARNINGS)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "check_reference.cmake: pass -D ${_var}=...")
  endif()
endforeach()

set(_problems "")
set(_notes "")

# --- 1. Doxygen's warnings --------------------------------------------------
if(NOT EXISTS "${WARNINGS}")
  message(FATAL_ERROR "check_reference.cmake: no ${WARNINGS}: did Doxygen run with WARN_LOGFILE set?")
endif()
file(READ "${WARNINGS}" _log)
# A ';' would split a CMake list, and an unbalanced '[' keep one from splitting.
string(REPLACE ";" "," _log "${_log}")
string(REPLACE "[" "(" _log "${_log}")
string(REPLACE "]" ")" _log "${_log}")
string(REPLACE "\n" ";" _lines "${_log}")
list(REMOVE_DUPLICATES _lines)  # Doxygen repeats some warnings
set(_undocumented_fields 0)
foreach(_line IN LISTS _lines)
  if(_line MATCHES "^[ \t]*$")
    continue()
  elseif(_line MATCHES "warning: Member [^ ].* \\(variable\\) of (struct|class) .* is not documented\\.$")
    math(EXPR _undocumented_fields "${_undocumented_fields} + 1")
  else()
    string(APPEND _problems "  ${_line}\n")
  endif()
endforeach()
if(_undocumented_fields GREATER 0)
  string(APPEND _notes "  ${_undocumented_fields} data members of documented structs have no doc block of their own\n")
endif()

# --- 2. every public header has a page, and nothing else does ---------------
file(GLOB _headers RELATIVE "${HEADER_DIR}" "${HEADER_DIR}/*.hpp" "${HEADER_DIR}/*.cuh")
list(SORT _headers)
file(READ "${XML_DIR}/index.xml" _index)
string(REGEX MATCHALL "<compound refid=\"[^\"]*\" kind=\"file\"><name>[^<]*</name>" _file_compounds "${_index}")
set(_in_reference "")
foreach(_c IN LISTS _file_compounds)
  string(REGEX REPLACE "^<compound refid=\"([^\"]*)\" kind=\"file\"><name>([^<]*)</name>$" "\\2" _name "${_c}")
  string(REGEX REPLACE "^<compound refid=\"([^\"]*)\".*$" "\\1" _refid "${_c}")
  set(_refid_${_name} "${_refid}")
  list(APPEND _in_reference "${_name}")
  if(NOT _name IN_LIST _headers AND NOT _name MATCHES "\\.(dox|md)$")
    string(APPEND _problems "  ${_name} is in the reference but is not a public header (include/chunkpipe/*.hpp, *.cuh)\n")
  endif()
endforeach()
foreach(_h IN LISTS _headers)
  if(NOT _h IN_LIST _in_reference)
    string(APPEND _problems "  include/chunkpipe/${_h} is not in the reference: is it in the Doxyfile's INPUT?\n")
    continue()
  endif()
  file(READ "${XML_DIR}/${_refid_${_h}}.xml" _xml)
  # The file's own description comes after its members' sections.
  string(FIND "${_xml}" "<briefdescription>" _at REVERSE)
  string(SUBSTRING "${_xml}" ${_at} 64 _brief)
  if(NOT _brief MATCHES "^<briefdescription>[ \t\r\n]*<para>")
    string(APPEND _problems
      "  include/chunkpipe/${_h} has no page in the reference: give it a /// \\file block with a one-line brief\n")
  endif()
endforeach()

# --- 3. no detail:: type in a public declaration ----------------------------
file(GLOB _compounds "${XML_DIR}/class*.xml" "${XML_DIR}/struct*.xml" "${XML_DIR}/union*.xml"
     "${XML_DIR}/namespace*.xml")
foreach(_f IN LISTS _compounds)
  file(READ "${_f}" _xml)
  # A private nested class, or a namespace of machinery, is not shown.
  if(_xml MATCHES "<compounddef [^>]*prot=\"(private|protected)\"" OR
     _xml MATCHES "<compoundname>[^<]*detail[^<]*</compoundname>")
    continue()
  endif()
  string(REGEX MATCH "<compoundname>[^<]*</compoundname>" _cname "${_xml}")
  string(REGEX REPLACE "</?compoundname>" "" _cname "${_cname}")
  # A ";" (XML writes "<" as "&lt;") would split a CMake list, and an
  # unbalanced "[" or "]" would keep one from splitting.
  string(REPLACE ";" "%3B" _xml "${_xml}")
  string(REPLACE "[" "%5B" _xml "${_xml}")
  string(REPLACE "]" "%5D" _xml "${_xml}")
  string(REGEX MATCHALL "<basecompoundref [^>]*prot=\"public\"[^>]*>[^<]*detail::[^<]*</basecompoundref>" _bases
         "${_xml}")
  foreach(_b IN LISTS _bases)
    string(REGEX REPLACE "<[^>]*>" "" _b "${_b}")
    string(APPEND _problems "  ${_cname}: public base ${_b}\n")
  endforeach()
  string(REPLACE "</memberdef>" ";" _members "${_xml}")
  list(POP_BACK _members)  # what follows the last member
  foreach(_m IN LISTS _members)
    string(FIND "${_m}" "<memberdef " _at REVERSE)
    string(SUBSTRING "${_m}" ${_at} -1 _m)
    if(NOT _m MATCHES "^<memberdef [^>]*prot=\"public\"")
      continue()
    endif()
    # The declaration: everything before the member's own documentation.
    string(FIND "${_m}" "<briefdescription>" _end)
    string(SUBSTRING "${_m}" 0 ${_end} _decl)
    if(NOT _decl MATCHES "detail::|enable_if|void_t")
      continue()
    endif()
    string(REGEX MATCH "<qualifiedname>[^<]*</qualifiedname>" _qname "${_decl}")
    string(REGEX REPLACE "</?qualifiedname>" "" _qname "${_qname}")
    if(_qname STREQUAL "")
      string(REGEX MATCH "<name>[^<]*</name>" _qname "${_decl}")
      string(REGEX REPLACE "</?name>" "" _qname "${_qname}")
      set(_qname "${_cname}::${_qname}")
    endif()
    string(REGEX MATCH "<definition>[^<]*</definition>" _def "${_decl}")
    string(REGEX MATCH "<argsstring>[^<]*</argsstring>" _args "${_decl}")
    string(REGEX MATCH "<initializer>.*</initializer>" _init "${_decl}")
    string(REGEX MATCHALL "<templateparamlist>.*</templateparamlist>" _tparams "${_decl}")
    set(_shown "${_def}${_args}")
    if(NOT _shown MATCHES "detail::|enable_if|void_t")
      set(_shown "${_tparams} ${_shown} ${_init}")
    endif()
    string(REPLACE "<defval>" "= " _shown "${_shown}")
    string(REPLACE "</templateparamlist>" "&gt%3B " _shown "${_shown}")
    string(REPLACE "<templateparamlist>" "template &lt%3B" _shown "${_shown}")
    string(REGEX REPLACE "</param>[ \t\r\n]*<param>" ", " _shown "${_shown}")
    string(REGEX REPLACE "<[^>]*>" "" _shown "${_shown}")
    string(REPLACE "&lt%3B" "<" _shown "${_shown}")
    string(REPLACE "&gt%3B" ">" _shown "${_shown}")
    string(REPLACE "&amp%3B" "&" _shown "${_shown}")
    string(REPLACE "%5B" "[" _shown "${_shown}")
    string(REPLACE "%5D" "]" _shown "${_shown}")
    string(REGEX REPLACE "[ \t\r\n]+" " " _shown "${_shown}")
    if(NOT _decl MATCHES "detail::")
      string(APPEND _problems "  SFINAE in the reference (use CHUNKPIPE_WHEN): ${_shown}\n")
    elseif(_qname IN_LIST _known_detail_leaks)
      string(APPEND _notes "  known, see check_reference.cmake: ${_shown}\n")
    else()
      string(APPEND _problems "  a detail:: type in the reference: ${_shown}\n")
    endif()
  endforeach()
endforeach()

# --- 4. no public type defined under detail/ ---------------------------------
file(GLOB _detail_files RELATIVE "${HEADER_DIR}/detail" "${HEADER_DIR}/detail/*")
foreach(_f IN LISTS _detail_files)
  file(READ "${HEADER_DIR}/detail/${_f}" _text)
  if(NOT _text MATCHES "\nnamespace chunkpipe {")  # all of it in chunkpipe::detail
    continue()
  endif()
  string(REPLACE ";" "%3B" _text "${_text}")
  string(REPLACE "[" "%5B" _text "${_text}")
  string(REPLACE "]" "%5D" _text "${_text}")
  string(REPLACE "\n" ";" _text "${_text}")
  set(_in_chunkpipe FALSE)
  set(_detail_depth 0)
  foreach(_line IN LISTS _text)
    if(_line MATCHES "^namespace chunkpipe {")
      set(_in_chunkpipe TRUE)
    elseif(_line MATCHES "^}  // namespace chunkpipe$")
      set(_in_chunkpipe FALSE)
    elseif(_line MATCHES "^namespace detail {")
      math(EXPR _detail_depth "${_detail_depth} + 1")
    elseif(_line MATCHES "^}  // namespace detail")
      math(EXPR _detail_depth "${_detail_depth} - 1")
    elseif(_in_chunkpipe AND _detail_depth EQUAL 0 AND _line MATCHES "^(class|struct|enum|using) [A-Za-z_]")
      string(REGEX REPLACE "^(class|struct|enum class|enum|using) ([A-Za-z_][A-Za-z0-9_]*).*$" "\\2" _type "${_line}")
      if(_line MATCHES "^(class|struct) [A-Za-z_0-9]+%3B")  # a declaration only
        continue()
      endif()
      if("${_f}: ${_type}" IN_LIST _known_public_in_detail)
        string(APPEND _notes "  known, see check_reference.cmake: chunkpipe::${_type} is defined in detail/${_f}\n")
      else()
        string(APPEND _problems
          "  chunkpipe::${_type} is defined in detail/${_f}, which the reference does not read: move it to a public header\n")
      endif()
    endif()
  endforeach()
endforeach()

if(NOT _notes STREQUAL "")
  message(STATUS "API reference notes:\n${_notes}")
endif()
if(NOT _problems STREQUAL "")
  message(FATAL_ERROR "The API reference is incomplete or wrong (docs/check_reference.cmake):\n${_problems}")
endif()
list(LENGTH _headers _n)
message(STATUS "API reference: ${_n} public headers, each with its page; no Doxygen warning; "
               "no detail:: type (but the known ones above) or SFINAE shown; data members without a doc block: ${_undocumented_fields} (allowed)")
