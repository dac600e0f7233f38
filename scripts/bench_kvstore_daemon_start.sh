#!/usr/bin/env bash
# How long a `strata kvstore` daemon takes to start with its pool created at start
# (--block-bytes given): from exec to the line that says where its gRPC service listens, which
# it prints once the pool is mapped and faulted in. Each size is run with every binary in turn,
# `rounds` times, so that binaries built before and after a change are timed side by side.
#
#   scripts/bench_kvstore_daemon_start.sh "GiB ..." rounds strata_bin [strata_bin ...]
#   e.g. scripts/bench_kvstore_daemon_start.sh "1 2 4" 2 /tmp/old/strata build/bin/strata
set -euo pipefail
SIZES=$1
ROUNDS=$2
shift 2
start_seconds() {  # binary GiB
  local out pid t0 t1
  out=$(mktemp /tmp/kvstore_start.XXXXXX)
  t0=$(date +%s.%N)
  UCX_TLS=${UCX_TLS:-sm,self} "$1" kvstore --id "start$$" --host 127.0.0.1 --port 0 \
    --http-port -1 --capacity-bytes $(($2 << 30)) --block-bytes 1048576 >"$out" 2>&1 &
  pid=$!
  while ! grep -q "grpc" "$out"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "$1 exited: $(cat "$out")" >&2
      rm -f "$out"
      return 1
    fi
    sleep 0.01
  done
  t1=$(date +%s.%N)
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  rm -f "$out"
  awk "BEGIN { printf \"%.2f\", $t1 - $t0 }"
}
echo "| pool GiB | binary | seconds to serve, each round |"
echo "|---:|---|---|"
for gib in $SIZES; do
  declare -A times=()
  for ((r = 0; r < ROUNDS; ++r)); do  # the binaries alternate within a round
    for bin in "$@"; do times[$bin]+="$(start_seconds "$bin" "$gib") "; done
  done
  for bin in "$@"; do echo "| $gib | $bin | ${times[$bin]}|"; done
  unset times
done
