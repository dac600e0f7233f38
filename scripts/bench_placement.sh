#!/usr/bin/env bash
# The router's whole routing decision (KvIndex::MatchPrefix + Placer::Place) at 100 workers and
# ~1M indexed blocks, per policy, ROUNDS times: a markdown table per round (issue 7's goal:
# p99 < 50 us). usage: scripts/bench_placement.sh [BUILD_DIR] [DECISIONS] [ROUNDS]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
DECISIONS=${2:-50000}
ROUNDS=${3:-3}
ninja -C "$BUILD" -j2 placement_bench >/dev/null
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r"
  (cd "$ROOT" && "$BUILD/bin/placement_bench" "$DECISIONS")
  echo
done
