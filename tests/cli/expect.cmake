# Runs the built `tessera` with arguments and checks its exit status and output.
#   -DTESSERA=<binary> -DARGS=<arguments separated by |> -DEXPECT_RC=<status>
#   [-DEXPECT_OUTPUT=<regex that stdout+stderr must match>] [-DREJECT_OUTPUT=<regex they must not match>]
#   [-DWORK_DIR=<directory to run in, created first>]
cmake_minimum_required(VERSION 3.25)

string(REPLACE "|" ";" arguments "${ARGS}")
if(NOT WORK_DIR)
  set(WORK_DIR "${CMAKE_CURRENT_BINARY_DIR}")
endif()
file(MAKE_DIRECTORY "${WORK_DIR}")
execute_process(COMMAND "${TESSERA}" ${arguments} WORKING_DIRECTORY "${WORK_DIR}"
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(output "${out}${err}")
message(STATUS "tessera ${arguments}\n--- exit status ${status}; output:\n${output}---")
if(NOT "${status}" STREQUAL "${EXPECT_RC}")
  message(FATAL_ERROR "expected exit status ${EXPECT_RC}, got ${status}")
endif()
if(DEFINED EXPECT_OUTPUT AND NOT output MATCHES "${EXPECT_OUTPUT}")
  message(FATAL_ERROR "the output does not match '${EXPECT_OUTPUT}'")
endif()
if(DEFINED REJECT_OUTPUT AND output MATCHES "${REJECT_OUTPUT}")
  message(FATAL_ERROR "the output matches '${REJECT_OUTPUT}', which it must not")
endif()
