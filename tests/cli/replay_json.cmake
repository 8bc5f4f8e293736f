# `tessera replay --json --html`: the JSON has one result per allocator with the documented fields, the HTML
# one chart per trace.
#   -DTESSERA=<binary> -DTRACE=<trace> -DWORK_DIR=<scratch directory>
cmake_minimum_required(VERSION 3.25)

file(MAKE_DIRECTORY "${WORK_DIR}")
set(json "${WORK_DIR}/replay.json")
set(html "${WORK_DIR}/replay.html")
file(REMOVE "${json}" "${html}")
execute_process(COMMAND "${TESSERA}" replay "${TRACE}" --allocators tessera,ideal --min-capacity --capacity 1GiB
                        --json "${json}" --html "${html}"
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "${out}${err}")
if(NOT status EQUAL 0)
  message(FATAL_ERROR "replay failed (${status})")
endif()
if(NOT out MATCHES "tessera" OR NOT out MATCHES "ideal")
  message(FATAL_ERROR "the table lacks a row per allocator")
endif()

file(READ "${json}" document)
string(JSON count LENGTH "${document}" results)
if(NOT count EQUAL 2)
  message(FATAL_ERROR "expected 2 results, got ${count}")
endif()
foreach(index RANGE 1)
  foreach(field trace allocator driver capacity peak_allocated reserved_at_peak_allocated peak_reserved frag_at_peak
                avg_frag min_capacity overhead oom driver_calls driver_time_us syncs host_ns_per_op events
                calls_per_iteration)
    string(JSON type ERROR_VARIABLE missing TYPE "${document}" results ${index} ${field})
    if(missing)
      message(FATAL_ERROR "result ${index} lacks '${field}': ${missing}")
    endif()
  endforeach()
endforeach()
string(JSON allocator GET "${document}" results 0 allocator)
string(JSON capacity GET "${document}" results 0 capacity)
string(JSON min_capacity TYPE "${document}" results 0 min_capacity)
string(JSON iterations LENGTH "${document}" results 0 calls_per_iteration)
string(JSON ideal_calls TYPE "${document}" results 1 driver_calls)
if(NOT allocator STREQUAL "tessera" OR NOT capacity EQUAL 1073741824 OR NOT min_capacity STREQUAL "NUMBER"
   OR NOT iterations EQUAL 3 OR NOT ideal_calls STREQUAL "NULL")
  message(FATAL_ERROR "unexpected values: allocator ${allocator}, capacity ${capacity}, min_capacity ${min_capacity}, "
                      "calls_per_iteration length ${iterations}, ideal driver_calls ${ideal_calls}")
endif()

file(READ "${html}" page)
string(REGEX MATCHALL "<svg" charts "${page}")
list(LENGTH charts chart_count)
if(chart_count LESS 2)  # the overhead bar chart and the trace's line chart
  message(FATAL_ERROR "expected at least 2 charts in the HTML report, found ${chart_count}")
endif()
