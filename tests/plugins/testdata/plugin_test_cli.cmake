# ctest driver for `strata plugin-test`'s contract: exit 2 with one line on bad flags, exit 1
# with one line naming the file when a plugin cannot be loaded, exit 1 when a case fails, and
# exit 0 with a "N passed, 0 failed" summary when every case passes.
# Input: STRATA_BINARY_DIR.
cmake_minimum_required(VERSION 3.16)

set(strata ${STRATA_BINARY_DIR}/bin/strata)
set(bin ${STRATA_BINARY_DIR}/bin)
set(work ${STRATA_BINARY_DIR}/tests/plugin_test_cli)
file(REMOVE_RECURSE ${work})
file(WRITE ${work}/libnot_elf.so "this is not a shared library\n")

# Runs plugin-test with ARGN; checks the exit code and that the output matches `pattern`
# (stderr for failures, which must be a single line; stdout otherwise).
function(expect code pattern)
  execute_process(COMMAND ${strata} plugin-test ${ARGN}
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(where "strata plugin-test ${ARGN}")
  if(NOT rc EQUAL code)
    message(FATAL_ERROR "${where}: exit ${rc}, expected ${code}\n${out}\n${err}")
  endif()
  set(text "${out}")
  if(code EQUAL 2 OR (code EQUAL 1 AND out STREQUAL ""))
    string(REGEX REPLACE "\n$" "" text "${err}")
    if(text MATCHES "\n" OR NOT text MATCHES "^strata plugin-test: ")
      message(FATAL_ERROR "${where}: expected one 'strata plugin-test: ...' line, got:\n${err}")
    endif()
  endif()
  if(NOT text MATCHES "${pattern}")
    message(FATAL_ERROR "${where}: output does not match '${pattern}':\n${out}\n${err}")
  endif()
endfunction()

# Bad flags: exit 2.
expect(2 "--plugin is required")
expect(2 "unknown flag --frobnicate" --plugin naive --frobnicate)
expect(2 "--seed expects an integer" --plugin naive --seed many)
expect(2 "unknown --op 'convolution'" --plugin naive --op convolution)
expect(2 "--plugin needs a value" --plugin)

# Plugins that cannot be loaded: exit 1, naming the file.
expect(1 "/nonexistent/libnothing.so: plugin file not found" --plugin /nonexistent/libnothing.so)
expect(1 "libnot_elf.so: cannot load plugin" --plugin ${work}/libnot_elf.so)
expect(1 "libloader_test_bad_version.so: plugin API version 2"
       --plugin ${bin}/libloader_test_bad_version.so)
expect(1 "libloader_test_missing_entry.so: .*gemm" --plugin ${bin}/libloader_test_missing_entry.so)
expect(1 "libloader_test_no_entry.so: not a strata plugin"
       --plugin ${bin}/libloader_test_no_entry.so)
expect(1 "libstrata_absent.so" --plugin absent)
expect(1 "reference: /nonexistent/ref.so" --plugin naive --reference /nonexistent/ref.so)

# A run where cases fail: exit 1, FAIL rows, the summary counts them.
expect(1 "gemm .* FAIL\n.*\n[0-9]+ passed, [1-9][0-9]* failed"
       --plugin naive --config "{\"dtype\":\"bf16\"}" --reference naive --op gemm
       --half-tolerance 1e-9)

# Passing runs: exit 0; the default reference is the CPU plugin next to the binary.
expect(0 "rope .* PASS\n.*\n7 passed, 0 failed\n$" --plugin naive --reference naive --op rope)
expect(0 "reference: cpu .*silu_mul .* PASS.*[0-9]+ passed, 0 failed" --plugin naive --op silu_mul)
expect(0 "candidate: cpu .*0 failed" --plugin cpu --reference naive --op kv_append --seed 7)
