# strata_cc_library / strata_cc_test: one place that says how a component is built.
#
#   strata_cc_library(NAME engine SRCS a.cc b.cc DEPS strata::common [PUBLIC_INCLUDE dir])
#     -> target strata_engine, alias strata::engine; headers under <component>/include.
#   strata_cc_test(NAME tokenizer_test SRCS tokenizer_test.cc DEPS strata::engine)
#     -> gtest executable registered with ctest (discovered per test case).
include_guard(GLOBAL)

function(strata_cc_library)
  cmake_parse_arguments(ARG "" "NAME;TYPE" "SRCS;DEPS;PRIVATE_DEPS;INCLUDE_DIRS" ${ARGN})
  set(_target strata_${ARG_NAME})
  if(NOT ARG_TYPE)
    set(ARG_TYPE STATIC)
  endif()
  add_library(${_target} ${ARG_TYPE} ${ARG_SRCS})
  add_library(strata::${ARG_NAME} ALIAS ${_target})
  if(NOT ARG_INCLUDE_DIRS)
    set(ARG_INCLUDE_DIRS ${CMAKE_CURRENT_SOURCE_DIR}/include)
  endif()
  target_include_directories(${_target} PUBLIC ${ARG_INCLUDE_DIRS})
  target_link_libraries(${_target} PUBLIC strata::build_flags ${ARG_DEPS})
  if(ARG_PRIVATE_DEPS)
    target_link_libraries(${_target} PRIVATE ${ARG_PRIVATE_DEPS})
  endif()
  set_target_properties(${_target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
endfunction()

function(strata_cc_test)
  cmake_parse_arguments(ARG "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_link_libraries(${ARG_NAME} PRIVATE strata::build_flags ${ARG_DEPS} GTest::gmock GTest::gtest_main)
  target_compile_definitions(${ARG_NAME} PRIVATE
    STRATA_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    STRATA_BINARY_DIR="${PROJECT_BINARY_DIR}")
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  gtest_discover_tests(${ARG_NAME}
    DISCOVERY_TIMEOUT 60
    PROPERTIES TIMEOUT ${ARG_TIMEOUT} LABELS "${ARG_LABELS}")
endfunction()
