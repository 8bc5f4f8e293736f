# How a GoogleTest binary becomes CTest tests.
#
# By default each gtest test is its own CTest test (gtest_discover_tests): a failure names the test, and CTest
# spreads the long ones over the cores. With TESSERA_TEST_SHARDS=N (the asan preset sets it) the binary
# becomes N tests instead, `<target>.shard_<i>`, each running every N-th gtest test in one process through
# gtest's GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX: an instrumented process of this size takes about half a
# second to start and exit, and a thousand of those were half of the ASan run. A failure is then named in the
# shard's output.
set(TESSERA_TEST_SHARDS 0 CACHE STRING "Run each GoogleTest binary as this many CTest tests (0: one per gtest test)")
# Flags for the test binaries' own sources, after the build type's. The asan preset gives -O0: instrumented
# test code took half of that build at -O1 and compiles nearly four times faster at -O0, while the library
# it tests, where the tests spend their time, keeps -O1.
set(TESSERA_TEST_CXX_FLAGS "" CACHE STRING "Extra compile flags for the GoogleTest binaries' sources")
# The test binaries' sources carry line tables only (-g1, after the build type's -g: a failure's stack
# still names files and lines), and a binary of many sources shares one precompiled header of GoogleTest,
# fmt and the standard headers they use most: together about a third less time compiling them
# (docs/reliability.md, "CI time").
option(TESSERA_TEST_FAST_BUILD "Build the GoogleTest binaries with -g1 and a precompiled header" ON)

#   tessera_add_gtests(TARGET [LABEL label])   the binary's tests, and TESSERA_TEST_CXX_FLAGS on its sources;
#                                              LABEL: a CTest label on every test made (ctest -L label)
function(tessera_add_gtests target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "LABEL" "")
  if(TESSERA_TEST_FAST_BUILD)
    target_compile_options(${target} PRIVATE -g1)
    # The header pays for itself only over many sources: building it costs about one test source.
    get_target_property(sources ${target} SOURCES)
    list(LENGTH sources source_count)
    if(source_count GREATER_EQUAL 8)
      target_precompile_headers(${target} PRIVATE <gtest/gtest.h> <fmt/format.h> <algorithm> <cstdint>
                                <functional> <map> <memory> <optional> <string> <vector>)
    endif()
  endif()
  if(TESSERA_TEST_CXX_FLAGS)
    separate_arguments(flags UNIX_COMMAND "${TESSERA_TEST_CXX_FLAGS}")
    target_compile_options(${target} PRIVATE ${flags})
  endif()
  if(TESSERA_TEST_SHARDS GREATER 0)
    math(EXPR last "${TESSERA_TEST_SHARDS} - 1")
    foreach(index RANGE ${last})
      add_test(NAME ${target}.shard_${index} COMMAND ${target} --gtest_brief=1)
      set_tests_properties(${target}.shard_${index} PROPERTIES
        ENVIRONMENT "GTEST_TOTAL_SHARDS=${TESSERA_TEST_SHARDS};GTEST_SHARD_INDEX=${index}")
      if(arg_LABEL)
        set_tests_properties(${target}.shard_${index} PROPERTIES LABELS ${arg_LABEL})
      endif()
    endforeach()
  elseif(arg_LABEL)
    gtest_discover_tests(${target} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS ${arg_LABEL})
  else()
    gtest_discover_tests(${target} DISCOVERY_TIMEOUT 60)
  endif()
endfunction()
