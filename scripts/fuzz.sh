#!/usr/bin/env bash
# Runs one libFuzzer target of tests/fuzz for a while: scripts/fuzz.sh TARGET [SECONDS]
# (TARGET: one of tests/fuzz/*_fuzz.cc without the suffix, e.g. grammar, grpc_services;
# SECONDS default 60).
# Configures and builds build-fuzz/ with clang (STRATA_FUZZ=ON, ASan+UBSan, no CUDA), fuzzes
# from a copy of the seed corpus (new inputs land in build-fuzz/corpus/TARGET, not in the
# tree) and writes crash / timeout / leak reproducers to tests/fuzz/crashes/TARGET/new/.
# Environment: CC/CXX (default clang/clang++), JOBS (build parallelism, default 2),
# FUZZ_ARGS (extra libFuzzer flags), SKIP_BUILD=1 (use the fuzzer already built, e.g. while
# another target builds in build-fuzz/).
set -euo pipefail
target=${1:?usage: scripts/fuzz.sh TARGET [SECONDS]}
seconds=${2:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${root}/build-fuzz
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  if [[ ! -f ${build}/CMakeCache.txt ]]; then
    CC=${CC:-clang} CXX=${CXX:-clang++} cmake -S "${root}" -B "${build}" -G Ninja \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_FUZZ=ON -DSTRATA_BUILD_CUDA=OFF \
      -DSTRATA_BUILD_TESTS=ON -DSTRATA_BUILD_BENCHMARKS=OFF "${launcher[@]}"
  fi
  cmake --build "${build}" -j"${JOBS:-2}" --target "fuzz_${target}"
fi

corpus=${build}/corpus/${target}
crashes=${root}/tests/fuzz/crashes/${target}/new
mkdir -p "${corpus}" "${crashes}"
cp -n "${root}/tests/fuzz/corpus/${target}/"* "${corpus}/" 2>/dev/null || true
dict=()
if [[ -f ${root}/tests/fuzz/${target}.dict ]]; then dict=(-dict="${root}/tests/fuzz/${target}.dict"); fi
# -rss_limit_mb: ASan's shadow memory counts; -timeout: an input slower than this is a hang.
rc=0
"${build}/bin/fuzz_${target}" "${corpus}" "${dict[@]}" -max_total_time="${seconds}" \
  -timeout=10 -rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 \
  -artifact_prefix="${crashes}/" ${FUZZ_ARGS:-} || rc=$?
rmdir "${crashes}" "$(dirname "${crashes}")" 2>/dev/null || true  # nothing found: no folders
exit "${rc}"
