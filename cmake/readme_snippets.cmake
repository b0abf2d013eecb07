# The README's ```cpp blocks, each compiled and run as a test (issue 22): a
# snippet that stops compiling or throws fails the suite. Each block is a whole
# program. A block that names a file under models/ which is not there is built
# but skipped (scripts/fetch_model.sh fetches the models).
#
# Included from tests/CMakeLists.txt; READMEs are read with string(FIND), not
# regexes, so that the semicolons of C++ do not split anything into lists.
set(QKV_README ${PROJECT_SOURCE_DIR}/README.md)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${QKV_README})
file(READ ${QKV_README} qkv_readme_text)

set(qkv_open "```cpp\n")
set(qkv_close "\n```")
string(LENGTH "${qkv_open}" qkv_open_length)
set(qkv_index 0)
while(TRUE)
  string(FIND "${qkv_readme_text}" "${qkv_open}" qkv_start)
  if(qkv_start EQUAL -1)
    break()
  endif()
  math(EXPR qkv_start "${qkv_start} + ${qkv_open_length}")
  string(SUBSTRING "${qkv_readme_text}" ${qkv_start} -1 qkv_readme_text)
  string(FIND "${qkv_readme_text}" "${qkv_close}" qkv_end)
  if(qkv_end EQUAL -1)
    message(FATAL_ERROR "README.md: a ```cpp block is not closed")
  endif()
  string(SUBSTRING "${qkv_readme_text}" 0 ${qkv_end} qkv_snippet)
  string(SUBSTRING "${qkv_readme_text}" ${qkv_end} -1 qkv_readme_text)

  set(qkv_name readme_cpp_snippet_${qkv_index})
  set(qkv_source ${CMAKE_CURRENT_BINARY_DIR}/readme/${qkv_name}.cc)
  # file(CONFIGURE) rewrites the file only when the snippet changed.
  file(CONFIGURE OUTPUT ${qkv_source} CONTENT "// Block ${qkv_index} of README.md, extracted by cmake/readme_snippets.cmake.\n${qkv_snippet}\n" @ONLY)
  add_executable(${qkv_name} ${qkv_source})
  target_link_libraries(${qkv_name} PRIVATE qkv::qkv)

  # Files of models/ the snippet opens: skip the run when one is missing.
  set(qkv_missing "")
  string(REGEX MATCHALL "\"models/[^\"]+\"" qkv_paths "${qkv_snippet}")
  foreach(qkv_path ${qkv_paths})
    string(REPLACE "\"" "" qkv_path "${qkv_path}")
    if(NOT EXISTS ${PROJECT_SOURCE_DIR}/${qkv_path})
      set(qkv_missing ${qkv_path})
    endif()
  endforeach()
  if(qkv_missing)
    add_test(NAME ${qkv_name}
             COMMAND ${CMAKE_COMMAND} -E echo
                     "SKIPPED: ${qkv_missing} is missing; scripts/fetch_model.sh fetches it")
    set_tests_properties(${qkv_name} PROPERTIES SKIP_REGULAR_EXPRESSION "SKIPPED:")
  else()
    # In the checkout, where the README's relative paths (models/...) point.
    add_test(NAME ${qkv_name} COMMAND ${qkv_name} WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  endif()
  math(EXPR qkv_index "${qkv_index} + 1")
endwhile()
