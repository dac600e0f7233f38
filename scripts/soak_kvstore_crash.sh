#!/usr/bin/env bash
# Crash soak of the G3 disk tier: N iterations of "SIGKILL a writer mid-write, reopen, verify,
# corrupt a value on disk, verify it is never served, keep writing" (tests/kvstore/
# disk_crash_test.cc; CI runs 3). Modes rotate wal / none / wal-sync; kill times are drawn from
# a seeded generator, so a failing seed can be replayed.
#
#   scripts/soak_kvstore_crash.sh [iterations=100] [build_dir=build] [seed=20261130]
# Needs build_dir/bin/kvstore_disk_crash_test and disk_crash_writer
# (ninja kvstore_disk_crash_test disk_crash_writer).
set -euo pipefail
ITERATIONS=${1:-100}
BUILD=${2:-build}
SEED=${3:-20261130}
TEST=$BUILD/bin/kvstore_disk_crash_test
[[ -x $TEST ]] || { echo "missing $TEST (ninja -C $BUILD kvstore_disk_crash_test)" >&2; exit 1; }

LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
start=$(date +%s)
set +e
STRATA_CRASH_ITERATIONS=$ITERATIONS STRATA_CRASH_SEED=$SEED "$TEST" >"$LOG" 2>&1
rc=$?
set -e
elapsed=$(( $(date +%s) - start ))

echo "# G3 crash soak: $(date -u '+%Y-%m-%d %H:%M UTC'), seed $SEED, ${elapsed}s"
awk '
  /^crash [0-9]+ / {
    n++
    for (i = 3; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
    m = f["mode"]; runs[m]++; acked[m] += f["acked"]; dropped += f["corrupt_dropped"]
    lost = f["acked"] - f["newest"]; if (lost < 0) lost = 0
    if (lost > maxlost[m]) maxlost[m] = lost
    if (!(m in minacked) || f["acked"] < minacked[m]) minacked[m] = f["acked"]
    if (f["acked"] > maxacked[m]) maxacked[m] = f["acked"]
  }
  END {
    printf "| mode | iterations | acked blocks at kill (min / mean / max) | most acked blocks lost |\n"
    printf "|---|---:|---:|---:|\n"
    for (m in runs)
      printf "| %s | %d | %d / %d / %d | %d |\n", m, runs[m], minacked[m], acked[m] / runs[m],
             maxacked[m], maxlost[m]
    printf "\niterations passed: %d; corrupted values planted and never served: %d\n", n, dropped
  }' "$LOG"
if [[ $rc -ne 0 ]]; then
  echo "FAILED (exit $rc); failing iteration's output:"
  grep -v '^crash [0-9]' "$LOG" | tail -40
  exit "$rc"
fi
grep '^crash summary' "$LOG"
