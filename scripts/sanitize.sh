#!/usr/bin/env bash
# The test suite under the sanitizers: a Debug build instrumented with AddressSanitizer +
# UndefinedBehaviorSanitizer (asan) or ThreadSanitizer (tsan), then ctest in it.
#
#   scripts/sanitize.sh [asan|tsan] [--ci]
#     asan (default): build-asan/, every test; about 15 minutes on 2 idle cores.
#     tsan: build-tsan/, every test. Debian's abseil and gRPC are not instrumented: abseil's locks
#       are annotated for TSan by common/src/absl_tsan_annotations.cc (linked into every
#       executable of the build), and what happens inside gRPC and the other uninstrumented
#       libraries is suppressed (scripts/tsan.supp).
#     --ci: only the subset CI runs (scripts/test.sh), built alone: with asan, the fuzz corpus
#       replays of every parser of outside input, the HTTP server, the OpenAI front end, the
#       control-plane stubs and the router's registry and admission paths; with tsan, the HTTP
#       server's tests and the control-plane stubs (a reactor that drops the last reference to
#       its channel).
# Prints the ctest summary; exits non-zero when a test fails or a sanitizer reports.
set -euo pipefail
cd "$(dirname "$0")/.."
kind=asan ci=0
for a in "$@"; do
  case $a in
    asan|tsan) kind=$a ;;
    --ci) ci=1 ;;
    *) echo "usage: scripts/sanitize.sh [asan|tsan] [--ci]" >&2; exit 2 ;;
  esac
done
[[ ${STRATA_SKIP_SETUP:-0} == 1 ]] || scripts/setup.sh
if [[ $kind == asan ]]; then
  BUILD_DIR="${BUILD_DIR:-build-asan}"
  flags=(-DSTRATA_SANITIZE=ON)
  ci_targets=(fuzz_openai_request fuzz_http_request fuzz_trace fuzz_chat_template fuzz_tokenizer
              fuzz_safetensors fuzz_cluster_config fuzz_tool_calls fuzz_grammar fuzz_model_config
              fuzz_worker_profile http_server_test http_tls_test openai_test proto_test multi_router_test
              router_admission_test)
else
  BUILD_DIR="${BUILD_DIR:-build-tsan}"
  flags=(-DSTRATA_SANITIZE_THREAD=ON)
  ci_targets=(http_server_test http_tls_test proto_test)
fi
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Debug "${flags[@]}" \
  -DSTRATA_BUILD_BENCHMARKS=OFF -DSTRATA_BUILD_CUDA=OFF >/dev/null
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan.supp"
if ((ci)); then
  cmake --build "$BUILD_DIR" -j"$(nproc)" --target "${ci_targets[@]}"
  # The subset's ctest names: every test suite of its gtest binaries, and its fuzz targets'
  # replays (fuzz_grpc_services, which builds both services, replays in the main suite only).
  suites=() replays=()
  for t in "${ci_targets[@]}"; do
    if [[ $t == fuzz_* ]]; then
      replays+=("${t}_replay")
      continue
    fi
    while read -r line; do
      [[ $line =~ ^([A-Za-z0-9_/]+)\.$ ]] && suites+=("${BASH_REMATCH[1]}")
    done < <("$BUILD_DIR/bin/$t" --gtest_list_tests)
  done
  ci_tests="^($(IFS='|'; echo "${suites[*]}"))\\."
  if ((${#replays[@]})); then ci_tests="$ci_tests|^($(IFS='|'; echo "${replays[*]}"))\$"; fi
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)" -R "$ci_tests"
else
  cmake --build "$BUILD_DIR" -j"$(nproc)"
  ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)"
fi
