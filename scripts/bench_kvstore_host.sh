#!/usr/bin/env bash
# G2 host tier Put/Get bandwidth vs memcpy on the same buffers (the pool's slots), one run,
# block sizes 64 KiB .. 4 MiB. Prints a markdown table of GB/s (1e9 B/s, from CPU time, which
# is steadier than wall time on a shared machine) and the ratios (goal: >= 0.80).
#
#   scripts/bench_kvstore_host.sh [build_dir] [repetitions]
# Builds build_dir's kvstore_host_tier_bench (configure build_dir first) and runs it; the best
# of `repetitions` runs of each point is reported.
set -euo pipefail
BUILD=${1:-build}
REPS=${2:-3}
ninja -C "$BUILD" -j2 kvstore_host_tier_bench >/dev/null
OUT=$(mktemp /tmp/kvstore_host_bench.XXXXXX.json)
trap 'rm -f "$OUT"' EXIT
"$BUILD/bin/kvstore_host_tier_bench" --benchmark_repetitions="$REPS" \
    --benchmark_out="$OUT" --benchmark_out_format=json >/dev/null 2>&1
python3 - "$OUT" <<'PY'
import json, sys
runs = [b for b in json.load(open(sys.argv[1]))["benchmarks"] if b.get("run_type") == "iteration"]
best = {}  # (kind, size) -> GB/s
for b in runs:
    parts = b["run_name"].split("/")
    kind, size = parts[0], int(parts[1])
    if kind == "BM_Memcpy":
        kind = "memcpy_in" if parts[2] == "1" else "memcpy_out"
    gbps = b["bytes_per_second"] / 1e9
    best[(kind, size)] = max(best.get((kind, size), 0), gbps)
print("| block | memcpy into pool | Put | Put / memcpy | memcpy out of pool | Get | Get / memcpy |")
print("|---|---|---|---|---|---|---|")
for size in sorted({s for _, s in best}):
    mi, put = best[("memcpy_in", size)], best[("BM_HostPut", size)]
    mo, get = best[("memcpy_out", size)], best[("BM_HostGet", size)]
    print(f"| {size >> 10} KiB | {mi:.2f} | {put:.2f} | {put / mi:.2f} | {mo:.2f} | {get:.2f} | {get / mo:.2f} |")
PY
