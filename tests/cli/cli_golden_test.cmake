# `strata generate` as a user runs it, checked against transformers' greedy generations, plus
# the CLI's error contract (one-line reason, non-zero exit) and every --help.
# Run by ctest: cmake -DSTRATA=<binary> -DSRC=<source dir> -DWORK=<scratch dir> -P this file.
cmake_minimum_required(VERSION 3.25)

function(expect_ok)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "expected success: ${ARGN}\nrc=${rc}\n${out}\n${err}")
  endif()
  set(LAST_OUT "${out}" PARENT_SCOPE)
endfunction()

# Fails unless the command exits with `code` and prints exactly one stderr line with `pattern`.
function(expect_error code pattern)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(STRIP "${err}" err)
  string(FIND "${err}" "\n" newline)
  if(NOT rc EQUAL ${code} OR NOT newline EQUAL -1 OR NOT err MATCHES "${pattern}")
    message(FATAL_ERROR "expected exit ${code} and one line matching '${pattern}': ${ARGN}\n"
                        "rc=${rc}\nstderr: ${err}")
  endif()
endfunction()

# 1. Greedy generations of every fixture model equal transformers', token for token.
foreach(model llama3 qwen2 qwen3 qwen3_moe mixtral
              llama3_trained qwen2_trained qwen3_trained qwen3_moe_trained mixtral_trained)
  set(dir ${SRC}/tests/fixtures/models/${model})
  file(READ ${dir}/reference.json ref)
  string(JSON ncases LENGTH "${ref}" cases)
  math(EXPR last "${ncases} - 1")
  foreach(i RANGE ${last})
    string(JSON prompt GET "${ref}" cases ${i} prompt)
    string(REPLACE ";" "\\;" prompt "${prompt}")  # one argument, semicolons and all
    string(JSON expected GET "${ref}" cases ${i} greedy_new_ids)
    string(JSON n LENGTH "${ref}" cases ${i} greedy_new_ids)
    expect_ok(${STRATA} generate --model ${dir} --prompt "${prompt}" --max-tokens ${n}
              --ignore-eos --json)
    string(JSON got GET "${LAST_OUT}" tokens)
    string(JSON same EQUAL "${got}" "${expected}")
    if(NOT same)
      message(FATAL_ERROR "${model} case ${i}: strata ${got}\ntransformers ${expected}")
    endif()
  endforeach()
  message(STATUS "${model}: ${ncases} greedy generations identical to transformers")
endforeach()

# 2. Bad input: one line naming what is wrong, non-zero exit.
file(REMOVE_RECURSE ${WORK})
file(COPY ${SRC}/tests/fixtures/models/llama3/ DESTINATION ${WORK}/corrupt)
# Overwrite the 8-byte header length with an absurd value.
execute_process(COMMAND printf "\\377\\377\\377\\377\\377\\377\\377\\177"
                OUTPUT_FILE ${WORK}/corrupt/header.bin)
execute_process(COMMAND sh -c "cat header.bin > model.safetensors && \
  tail -c +9 ${SRC}/tests/fixtures/models/llama3/model.safetensors >> model.safetensors"
                WORKING_DIRECTORY ${WORK}/corrupt)
expect_error(1 "model.safetensors: header length" ${STRATA} generate --model ${WORK}/corrupt
             --prompt hi)
expect_error(1 "model directory not found" ${STRATA} generate --model ${WORK}/missing --prompt hi)
expect_error(2 "--prompt is required" ${STRATA} generate --model ${WORK}/missing)
expect_error(2 "unknown flag --bogus" ${STRATA} generate --bogus)
expect_error(2 "max_tokens must be >= 0" ${STRATA} generate --prompt x --max-tokens -3)
expect_error(2 "unknown preset 'nope'" ${STRATA} model init --preset nope --out ${WORK}/x)
expect_error(2 "unknown command 'frobnicate'" ${STRATA} frobnicate)
expect_error(2 "restart.policy: must be on-failure, always or never, got 'sometimes'"
             ${STRATA} up --restart sometimes)
expect_error(2 "no case of sample has 'nope' in its name"
             ${STRATA} plugin-test --plugin cpu --op sample --case nope)
# The router's worker grace is a number of seconds >= 0.
expect_error(2 "--worker-grace must be a number of seconds >= 0"
             ${STRATA} router --worker-grace -1)
# The hang timeouts are numbers of seconds >= 0; the test-only stall fault is checked.
expect_error(2 "--worker-stream-idle-timeout-s must be a number of seconds >= 0"
             ${STRATA} router --worker-stream-idle-timeout-s -1)
expect_error(2 "--engine-stall-timeout-s must be a number of seconds >= 0"
             ${STRATA} worker --engine-stall-timeout-s -1)
expect_error(2 "STRATA_TEST_ENGINE_STALL \\(test fault injection\\) must be TOKEN:AFTER:SECONDS"
             ${CMAKE_COMMAND} -E env STRATA_TEST_ENGINE_STALL=5:x:1 ${STRATA} worker)

# G4's daemons come from a list or from the router, with a host tier under them.
expect_error(2 "--kv-remote-from-router and --kv-remote exclude each other"
             ${STRATA} worker --kv-host-mb 8 --kv-remote-from-router --kv-remote 127.0.0.1:1)
expect_error(2 "--kv-remote-from-router needs --router"
             ${STRATA} worker --kv-host-mb 8 --kv-remote-from-router)
expect_error(2 "need --kv-host-mb > 0" ${STRATA} worker --kv-remote-from-router)

# 3. Every --help works and says what it is for.
expect_ok(${STRATA} --help)
foreach(cmd generate plugin-test model)
  expect_ok(${STRATA} ${cmd} --help)
  if(NOT LAST_OUT MATCHES "usage: strata ${cmd}")
    message(FATAL_ERROR "strata ${cmd} --help lacks a usage line:\n${LAST_OUT}")
  endif()
endforeach()
expect_ok(${STRATA} model init --help)

# 4. model init writes a checkpoint the engine loads; a preset answers through generate.
expect_ok(${STRATA} model init --preset tiny-llama --out ${WORK}/tiny)
expect_ok(${STRATA} generate --model ${WORK}/tiny --prompt "Hello" --prompt "World"
          --max-tokens 4 --ignore-eos --json)
string(REGEX MATCHALL "\"finish_reason\":\"length\"" finished "${LAST_OUT}")
list(LENGTH finished nfinished)
if(NOT nfinished EQUAL 2)
  message(FATAL_ERROR "expected two finished completions:\n${LAST_OUT}")
endif()
file(REMOVE_RECURSE ${WORK})
