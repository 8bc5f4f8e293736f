# `tessera convert` then `tessera info`: the converted trace has the same counts as the original. With
# -DVIA=snapshot, the trace goes through `tessera replay --snapshot` (a PyTorch snapshot of the replay)
# instead.
#   -DTESSERA=<binary> -DINPUT=<trace> -DWORK_DIR=<scratch directory> [-DVIA=snapshot]
cmake_minimum_required(VERSION 3.25)

file(MAKE_DIRECTORY "${WORK_DIR}")
get_filename_component(stem "${INPUT}" NAME_WE)
set(converted "${WORK_DIR}/${stem}.trace.gz")
if(VIA STREQUAL "snapshot")
  set(converted "${WORK_DIR}/${stem}.pickle")
endif()

function(run_tessera output_variable)
  execute_process(COMMAND "${TESSERA}" ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "tessera ${ARGN} failed (${status}):\n${out}${err}")
  endif()
  set(${output_variable} "${out}" PARENT_SCOPE)
endfunction()

# The lines of `info` that describe the content, not the file.
function(content_lines info output_variable)
  string(REPLACE "\n" ";" lines "${info}")
  list(FILTER lines EXCLUDE REGEX "^file ")
  # What the recorded allocator reserved is the recording's, not the trace's: the written snapshot's
  # segments are the replaying allocator's.
  list(FILTER lines EXCLUDE REGEX "^real (allocated|reserved) ")
  if(VIA STREQUAL "snapshot")
    # A snapshot has no iteration markers (nor their times, nor the samples after them that the floors
    # average over) and takes its name from the file: compare the rest.
    list(FILTER lines EXCLUDE REGEX "^(trace|events|iterations|time span|avg_frag floor) ")
    list(TRANSFORM lines REPLACE ", after event [0-9]+" "")
  endif()
  set(${output_variable} "${lines}" PARENT_SCOPE)
endfunction()

if(VIA STREQUAL "snapshot")
  run_tessera(converting replay "${INPUT}" --allocators tessera --snapshot "${converted}")
else()
  run_tessera(converting convert "${INPUT}" "${converted}")
endif()
message(STATUS "${converting}")
run_tessera(before info "${INPUT}")
run_tessera(after info "${converted}")
content_lines("${before}" before_lines)
content_lines("${after}" after_lines)
list(LENGTH before_lines count)
set(expected_lines 10)
if(VIA STREQUAL "snapshot")
  set(expected_lines 7)
endif()
if(count LESS expected_lines)
  message(FATAL_ERROR "info printed too little:\n${before}")
endif()
if(NOT before_lines STREQUAL after_lines)
  message(FATAL_ERROR "info differs after convert.\nbefore:\n${before}\nafter:\n${after}")
endif()
message(STATUS "same summary after convert:\n${after}")
