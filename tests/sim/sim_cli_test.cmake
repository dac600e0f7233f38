# `strata sim` and `strata plan` as a user runs them: a small Mooncake-format trace through the
# binary, the replay report and files, byte-identical reruns, and the usage-error contract
# (exit 2 with exactly one stderr line).
# Run by ctest: cmake -DSTRATA=<binary> -DDATA=<tests/sim/testdata> -DWORK=<scratch> -P this file.
cmake_minimum_required(VERSION 3.25)

set(TRACE ${DATA}/tiny_mooncake.jsonl)
set(PROFILE ${DATA}/synthetic_profile.json)
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(expect_ok)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "expected success: ${ARGN}\nrc=${rc}\n${out}\n${err}")
  endif()
  set(LAST_OUT "${out}" PARENT_SCOPE)
endfunction()

function(expect_error code pattern)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(STRIP "${err}" err)
  string(FIND "${err}" "\n" newline)
  if(NOT rc EQUAL ${code} OR NOT newline EQUAL -1 OR NOT err MATCHES "${pattern}")
    message(FATAL_ERROR "expected exit ${code} and one line matching '${pattern}': ${ARGN}\n"
                        "rc=${rc}\nstderr: ${err}")
  endif()
endfunction()

function(expect_match text pattern)
  if(NOT "${text}" MATCHES "${pattern}")
    message(FATAL_ERROR "output does not match '${pattern}':\n${text}")
  endif()
endfunction()

# 1. Disaggregated run with files: the replay report, then the sim line.
set(common --trace ${TRACE} --format mooncake --profile ${PROFILE} --slo-ttft 1 --slo-tpot 0.05
           --quiet)
expect_ok(${STRATA} sim ${common} --prefill 1 --decode 2 --policy kv-aware --out ${WORK}/a)
expect_match("${LAST_OUT}" "trace: 40 requests read")
expect_match("${LAST_OUT}" "requests 40  completed 40  errors 0")
expect_match("${LAST_OUT}" "SLO \\(TTFT <= 1 s, TPOT <= 0.05 s\\): attainment")
expect_match("${LAST_OUT}" "prefix-cached [1-9]")
expect_match("${LAST_OUT}" "sim: 1P:2D \\(3 GPUs\\), policy kv-aware, profile synthetic-test")
foreach(f summary.json requests.csv requests.jsonl ttft_cdf.svg tpot_cdf.svg attainment.svg)
  if(NOT EXISTS ${WORK}/a/${f})
    message(FATAL_ERROR "missing ${WORK}/a/${f}")
  endif()
endforeach()
file(READ ${WORK}/a/summary.json summary)
string(JSON n GET "${summary}" requests)
string(JSON hit GET "${summary}" prefix_cache_hit_rate)
if(NOT n EQUAL 40 OR hit EQUAL 0)
  message(FATAL_ERROR "summary.json: requests ${n}, hit rate ${hit}")
endif()

# 2. Deterministic: the same command writes the same bytes.
expect_ok(${STRATA} sim ${common} --prefill 1 --decode 2 --policy kv-aware --out ${WORK}/b)
file(SHA256 ${WORK}/a/summary.json ha)
file(SHA256 ${WORK}/b/summary.json hb)
file(SHA256 ${WORK}/a/requests.jsonl ja)
file(SHA256 ${WORK}/b/requests.jsonl jb)
if(NOT ha STREQUAL hb OR NOT ja STREQUAL jb)
  message(FATAL_ERROR "two identical sim runs wrote different files")
endif()

# 3. Aggregated, a window and a speedup; and the goodput search.
expect_ok(${STRATA} sim ${common} --aggregated --workers 2 --policy round-robin --speedup 2
          --max-requests 30)
expect_match("${LAST_OUT}" "simulating 30 over")
expect_match("${LAST_OUT}" "sim: 2 mixed \\(2 GPUs\\), policy round-robin")
expect_ok(${STRATA} sim ${common} --aggregated --workers 2 --find-goodput --max-evaluations 5
          --out ${WORK}/g)
expect_match("${LAST_OUT}" "speedup")
if(NOT EXISTS ${WORK}/g/goodput.svg)
  message(FATAL_ERROR "missing goodput.svg")
endif()

# 4. plan: a table, a recommendation and the replica counts.
expect_ok(${STRATA} plan ${common} --gpus 3 --policy kv-aware --max-evaluations 5)
expect_match("${LAST_OUT}" "plan for 3 GPUs")
expect_match("${LAST_OUT}" "recommended: ")
expect_match("${LAST_OUT}" "kubectl -n strata scale deployment/strata-prefill --replicas=[0-9]")
expect_match("${LAST_OUT}" "name: strata-decode")

# 5. Usage errors: exit 2, one line.
expect_error(2 "--aggregated takes --workers N"
             ${STRATA} sim ${common} --aggregated --prefill 1 --workers 2)
expect_error(2 "--aggregated needs --workers" ${STRATA} sim ${common} --aggregated)
expect_error(2 "--workers needs --aggregated" ${STRATA} sim ${common} --workers 3)
expect_error(2 "give --prefill P --decode D" ${STRATA} sim ${common} --prefill 2)
expect_error(2 "--trace is required" ${STRATA} sim --prefill 1 --decode 1)
expect_error(2 "--colocated pairs prefill and decode workers"
             ${STRATA} sim ${common} --prefill 1 --decode 2 --colocated)
expect_error(2 "unknown routing policy"
             ${STRATA} sim ${common} --prefill 1 --decode 1 --policy nope)
expect_error(2 "strata sim: .*" ${STRATA} sim ${common} --decode 1 --bogus)
expect_error(2 "--speedup must be > 0" ${STRATA} sim ${common} --decode 1 --speedup 0)
expect_error(2 "nonexistent" ${STRATA} sim ${common} --decode 1 --profile ${WORK}/nonexistent.json)
expect_error(2 "--gpus must be" ${STRATA} plan ${common})
expect_error(2 "chunk-budgets" ${STRATA} plan ${common} --gpus 4 --chunk-budgets 512,x)
message(STATUS "sim CLI: all checks passed")
