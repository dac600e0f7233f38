# ctest driver: builds examples/plugin_minimal out of tree the way a plugin author would and
# runs `strata plugin-test` on the result.
#   1. install strata's plugin ABI header (and the CPU plugin) to a temporary prefix with the
#      install rules of strata's plugins/ directory;
#   2. configure, build and install the example with its own CMake project against that prefix;
#   3. run the conformance suite on the built module against the naive and the CPU references,
#      and once more by name through $STRATA_PLUGIN_DIR.
# Inputs: STRATA_SOURCE_DIR, STRATA_BINARY_DIR, WORK_DIR, GENERATOR, C_COMPILER.
cmake_minimum_required(VERSION 3.16)

set(prefix ${WORK_DIR}/prefix)
set(build ${WORK_DIR}/build)
set(strata ${STRATA_BINARY_DIR}/bin/strata)
file(REMOVE_RECURSE ${WORK_DIR})

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

run("installing strata's plugin SDK"
  ${CMAKE_COMMAND} -DCMAKE_INSTALL_PREFIX=${prefix}
                   -P ${STRATA_BINARY_DIR}/plugins/cmake_install.cmake)
if(NOT EXISTS ${prefix}/include/strata/plugin/abi.h)
  message(FATAL_ERROR "the install did not produce ${prefix}/include/strata/plugin/abi.h")
endif()

run("configuring the example"
  ${CMAKE_COMMAND} -S ${STRATA_SOURCE_DIR}/examples/plugin_minimal -B ${build}
                   -G ${GENERATOR} -DCMAKE_C_COMPILER=${C_COMPILER}
                   -DCMAKE_BUILD_TYPE=Release -DSTRATA_INCLUDE_DIR=${prefix}/include)
run("building the example" ${CMAKE_COMMAND} --build ${build})
run("installing the example" ${CMAKE_COMMAND} --install ${build} --prefix ${prefix})

function(check_suite what)
  run("${what}" ${ARGN})
  if(NOT run_output MATCHES "\n[0-9]+ passed, 0 failed")
    message(FATAL_ERROR "${what}: no passing summary line in:\n${run_output}")
  endif()
  message(STATUS "${what}: ok")
endfunction()

check_suite("plugin-test against the naive reference"
  ${strata} plugin-test --plugin ${build}/libminimal_plugin.so --reference naive)
check_suite("plugin-test against the CPU reference"
  ${strata} plugin-test --plugin ${build}/libminimal_plugin.so --reference cpu)
check_suite("plugin-test by name from the installed prefix"
  ${CMAKE_COMMAND} -E env STRATA_PLUGIN_DIR=${prefix}/lib/strata
  ${strata} plugin-test --plugin minimal --reference naive --op attention_decode)
