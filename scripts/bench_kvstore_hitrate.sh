#!/usr/bin/env bash
# Prefix-cache hit rate of the eviction policies (lru, s3-fifo, arc, w-tinylfu, prefix-tinylfu,
# adaptive-tinylfu, ghost-lru) against Belady's offline optimum on a Mooncake trace, one
# 512-token block per hash id, for several cache sizes, plus a two-level G1 (LRU) + G2 run.
# Prints markdown tables (see bench/kvstore/hit_rate.cc).
#
#   scripts/bench_kvstore_hitrate.sh [build_dir] [trace.jsonl] [sizes in blocks...]
set -euo pipefail
BUILD=${1:-build}
TRACE=${2:-../shared/traces/mooncake_conversation.jsonl}
shift $(( $# > 2 ? 2 : $# ))
ninja -C "$BUILD" -j2 kvstore_hit_rate >/dev/null
"$BUILD/bin/kvstore_hit_rate" "$TRACE" "$@"
