# Checks that every layer of libqkv includes only the layers below it (issue 17):
#
#   core     src/tensor, src/kernels  (the base: tensors, the runtime, the kernels)
#            src/ops                  (the ops API: qkv/attention.h, functional.h, ...)
#   nn       src/nn, src/optim
#   models   src/models, src/text, src/io
#   viz      src/viz                  (the top: may use every layer)
#
# Scans every #include "..." line of src/<layer>/** and of the public headers
# include/qkv/**, and fails naming the file and line of each include of a
# header of a layer the file may not use. Public headers belong to a layer:
# qkv/<dir>/*.h to <dir>, the top-level ones to the list below; an unlisted
# one fails too, so that a new public header is given a layer.
#
#   cmake -DSRC=<checkout> -P cmake/check_layers.cmake
if(NOT SRC)
  message(FATAL_ERROR "usage: cmake -DSRC=<source dir> -P check_layers.cmake")
endif()

# The layers each layer may include (its own and those below).
set(base tensor kernels)
set(allowed_tensor ${base})
set(allowed_kernels ${base})
set(allowed_ops ${base} ops)
set(allowed_nn ${base} ops nn optim)
set(allowed_optim ${allowed_nn})
set(allowed_models ${allowed_nn} models text io)
set(allowed_text ${allowed_models})
set(allowed_io ${allowed_models})
set(allowed_viz ${allowed_models} viz)
set(allowed_umbrella tensor kernels ops nn optim models text io viz umbrella)
set(layers tensor kernels ops nn optim models text io viz)

# The top-level public headers: the base's, the ops API's, the umbrella.
set(public_tensor tensor.h dims.h error.h generator.h runtime.h causal_mask.h precision.h
                  quant_format.h)
set(public_ops attention.h functional.h gradients.h linear.h loss.h masks.h
               quantized_linear.h sampling.h softmax.h)
set(public_umbrella qkv.h)

# Known upward includes, to be removed (file|header). Anything else fails.
set(known_exceptions)

# The layer of header `inc` (as written between the quotes) included by a file
# of directory `dir` (relative to SRC), or "" when it is not one of qkv's.
function(layer_of_header inc dir out)
  set(layer "")
  if(inc MATCHES "^qkv/([a-z_]+)/")
    set(layer ${CMAKE_MATCH_1})
    if(NOT layer IN_LIST layers)
      set(layer "?")
    endif()
  elseif(inc MATCHES "^qkv/([^/]+)$")
    set(name ${CMAKE_MATCH_1})
    set(layer "?")
    foreach(l tensor ops umbrella)
      if(name IN_LIST public_${l})
        set(layer ${l})
      endif()
    endforeach()
  elseif(inc MATCHES "^([a-z_]+)/" AND CMAKE_MATCH_1 IN_LIST layers)
    set(layer ${CMAKE_MATCH_1})
  elseif(EXISTS "${SRC}/${dir}/${inc}")
    set(layer "self")  # next to the including file
  endif()
  set(${out} "${layer}" PARENT_SCOPE)
endfunction()

# The layer a file (relative to SRC) belongs to.
function(layer_of_file rel out)
  if(rel MATCHES "^src/([a-z_]+)/")
    set(${out} ${CMAKE_MATCH_1} PARENT_SCOPE)
  elseif(rel MATCHES "^include/qkv/")
    string(REGEX REPLACE "^include/" "" inc "${rel}")
    layer_of_header("${inc}" "include/qkv" layer)
    set(${out} ${layer} PARENT_SCOPE)
  endif()
endfunction()

set(files)
foreach(layer ${layers})
  file(GLOB_RECURSE found RELATIVE ${SRC} ${SRC}/src/${layer}/*)
  list(APPEND files ${found})
endforeach()
file(GLOB_RECURSE found RELATIVE ${SRC} ${SRC}/include/qkv/*.h)
list(APPEND files ${found})
list(FILTER files INCLUDE REGEX "\\.(h|hpp|cc|cpp|inc)$")
list(SORT files)

set(errors 0)
set(checked 0)
foreach(rel ${files})
  layer_of_file("${rel}" own)
  get_filename_component(dir "${rel}" DIRECTORY)
  if(own STREQUAL "?" OR own STREQUAL "")
    message(SEND_ERROR "${rel}: a public header of no layer: add it to public_* in "
                       "cmake/check_layers.cmake")
    math(EXPR errors "${errors} + 1")
    continue()
  endif()
  file(READ "${SRC}/${rel}" text)
  # One list element per line: characters that mean something in a CMake list
  # are replaced first.
  string(REPLACE "\\" "<bs>" text "${text}")
  string(REPLACE ";" "<sc>" text "${text}")
  string(REPLACE "[" "<lb>" text "${text}")
  string(REPLACE "]" "<rb>" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  set(line_no 0)
  foreach(line IN LISTS lines)
    math(EXPR line_no "${line_no} + 1")
    if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\"")
      continue()
    endif()
    set(inc "${CMAKE_MATCH_1}")
    math(EXPR checked "${checked} + 1")
    layer_of_header("${inc}" "${dir}" target)
    if(target STREQUAL "" OR target STREQUAL "self")
      continue()
    endif()
    if(target STREQUAL "?")
      message(SEND_ERROR "${rel}:${line_no}: includes \"${inc}\", a public header of no layer: "
                         "add it to public_* in cmake/check_layers.cmake")
      math(EXPR errors "${errors} + 1")
    elseif(NOT target IN_LIST allowed_${own})
      if("${rel}|${inc}" IN_LIST known_exceptions)
        message(STATUS "${rel}:${line_no}: known upward include \"${inc}\" "
                       "(layer ${own} -> ${target}), to be removed")
      else()
        message(SEND_ERROR "${rel}:${line_no}: layer '${own}' includes \"${inc}\" of layer "
                           "'${target}' above it (${own} may include: ${allowed_${own}})")
        math(EXPR errors "${errors} + 1")
      endif()
    endif()
  endforeach()
endforeach()

list(LENGTH files nfiles)
if(errors GREATER 0)
  message(FATAL_ERROR "${errors} include(s) against the layers in ${nfiles} files")
endif()
message(STATUS "layers: ${checked} #include lines in ${nfiles} files include only downward")
