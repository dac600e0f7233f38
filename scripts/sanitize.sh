#!/usr/bin/env bash
# Builds the tree with AddressSanitizer + UndefinedBehaviorSanitizer (Debug) and runs every
# test under them. Slower than scripts/test.sh (about 15 minutes on 2 cores); run before
# landing changes to memory-handling code.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BUILD_DIR="${BUILD_DIR:-build-asan}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSTRATA_SANITIZE=ON \
  -DSTRATA_BUILD_BENCHMARKS=OFF
cmake --build "$BUILD_DIR" -j"$(nproc)"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)"
