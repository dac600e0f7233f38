#!/usr/bin/env bash
# The router's own overhead: requests/s and latency through a real in-process router against a
# fake worker that answers at once, side by side with the same load sent straight to the worker
# over gRPC, at 1, 64 and 1,000 concurrent streams. Prints a markdown table.
#
#   scripts/bench_router.sh [router_bench flags...]   e.g. --seconds=10 --concurrency=1,64,1000
# Builds router_bench with cmake/ninja into build/ (or $BUILD_DIR) first.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD_DIR:-$ROOT/build}
JOBS=${JOBS:-2}
if [[ ! -f $BUILD/build.ninja ]]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DSTRATA_BUILD_CUDA=OFF -DSTRATA_BUILD_BENCHMARKS=ON \
      >/dev/null
fi
ninja -C "$BUILD" -j "$JOBS" router_bench >/dev/null
# The whole run: 1,000 client sockets plus the router's side of each need the file limit raised
# (router_bench raises its soft limit to the hard one itself).
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
echo "# load average before the run: $(cut -d" " -f1-3 /proc/loadavg)"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs: $(lscpu | sed -n 's/^Model name: *//p')"
echo "# $BUILD/bin/router_bench $*"
"$BUILD/bin/router_bench" "$@"
