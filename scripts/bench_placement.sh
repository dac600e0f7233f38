#!/usr/bin/env bash
# The router's whole routing decision (KvIndex::MatchPrefix + Placer::Place) at 100 workers and
# ~1M indexed blocks, per policy, ROUNDS times: a markdown table per round (the goal:
# p99 < 50 us).
#
# usage: scripts/bench_placement.sh [BUILD_DIR] [DECISIONS] [ROUNDS]
#   env BASELINE_BIN: another placement_bench binary (e.g. built from an earlier tree) run right
#       after this one in every round, so both see the same machine load (side by side).
#   env POLICIES: comma-separated policies to run (default: all).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
DECISIONS=${2:-50000}
ROUNDS=${3:-3}
POLICIES=${POLICIES:-}
ninja -C "$BUILD" -j2 placement_bench >/dev/null
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r: this tree"
  (cd "$ROOT" && "$BUILD/bin/placement_bench" "$DECISIONS" $POLICIES)
  if [[ -n ${BASELINE_BIN:-} ]]; then
    echo "round $r: baseline $BASELINE_BIN"
    (cd "$ROOT" && "$BASELINE_BIN" "$DECISIONS" $POLICIES)
  fi
  echo
done
