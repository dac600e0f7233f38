#!/usr/bin/env bash
# How long a `strata kvstore` daemon takes to start: from exec to the line that says where its
# gRPC service listens, which it prints once its pool is mapped and faulted in. Each size is run
# with every binary in turn, `rounds` times, so that binaries built before and after a change
# are timed side by side.
#
#   scripts/bench_kvstore_daemon_start.sh "GiB ..." rounds strata_bin [strata_bin ...]
#   e.g. scripts/bench_kvstore_daemon_start.sh "1 2 4" 2 /tmp/old/strata build/bin/strata
# By default the pool's block size is given (--block-bytes 1048576). FIRST_CLIENT=path/to/
# kvstore_remote_bench starts the daemons without it (the first Hello fixes the block size) and
# adds, after the seconds to serve, the seconds from exec until a client has connected and moved
# blocks: the bench (1 MiB blocks, 0.05 s per phase) run again until it succeeds (a Hello that
# outlasts the client's RPC deadline fails it). Cells are "serve/first client (client runs)".
set -euo pipefail
SIZES=$1
ROUNDS=$2
shift 2
FIRST_CLIENT=${FIRST_CLIENT:-}
start_seconds() {  # binary GiB
  local out pid t0 t1 t2 address attempts block=(--block-bytes 1048576)
  out=$(mktemp /tmp/kvstore_start.XXXXXX)
  [[ -n $FIRST_CLIENT ]] && block=()
  t0=$(date +%s.%N)
  UCX_TLS=${UCX_TLS:-sm,self} "$1" kvstore --id "start$$" --host 127.0.0.1 --port 0 \
    --http-port -1 --capacity-bytes $(($2 << 30)) "${block[@]}" >"$out" 2>&1 &
  pid=$!
  # The daemon died: say why (its output) and give up on this point.
  exited() { echo "$1 exited: $(cat "$out")" >&2; rm -f "$out"; }
  while ! grep -q "grpc" "$out"; do
    kill -0 "$pid" 2>/dev/null || { exited "$1"; return 1; }
    sleep 0.01
  done
  t1=$(date +%s.%N)
  if [[ -n $FIRST_CLIENT ]]; then
    address=$(sed -n 's/.*: grpc \([^, ]*\).*/\1/p' "$out" | head -1)
    attempts=1
    until UCX_TLS=${UCX_TLS:-sm,self} "$FIRST_CLIENT" "$address" 1048576 0.05 >/dev/null 2>&1; do
      kill -0 "$pid" 2>/dev/null || { exited "$1"; return 1; }
      attempts=$((attempts + 1))
    done
    t2=$(date +%s.%N)
  fi
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  rm -f "$out"
  awk "BEGIN { printf \"%.2f\", $t1 - $t0 }"
  [[ -n $FIRST_CLIENT ]] && awk "BEGIN { printf \"/%.2f (%d)\", $t2 - $t0, $attempts }"
  return 0
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
