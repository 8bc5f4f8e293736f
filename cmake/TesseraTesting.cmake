# How a GoogleTest binary becomes CTest tests.
#
# By default each gtest test is its own CTest test (gtest_discover_tests): a failure names the test, and CTest
# spreads the long ones over the cores. With TESSERA_TEST_SHARDS=N (the sanitizer presets set it) the binary
# becomes N tests instead, `<target>.shard_<i>`, each running every N-th gtest test in one process through
# gtest's GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX: an instrumented process of this size takes about half a
# second to start and exit, and a thousand of those were half of the ASan run. A failure is then named in the
# shard's output.
set(TESSERA_TEST_SHARDS 0 CACHE STRING "Run each GoogleTest binary as this many CTest tests (0: one per gtest test)")

#
#   tessera_add_gtests(TARGET [LABEL label])   LABEL: a CTest label on every test made (ctest -L label)
function(tessera_add_gtests target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "LABEL" "")
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
