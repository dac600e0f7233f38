#!/usr/bin/env bash
# G4 (remote kvstore tier) put/get bandwidth vs ucx_perftest ucp_put_bw / ucp_get, two processes
# on this host, same block sizes, same UCX_TLS, one run; plus the mean latency of one block
# put/get next to ucx_perftest's ucp_put_lat / ucp_get latency. The daemon is a real `strata kvstore`;
# the client is bench/kvstore/remote_bench.cc (RemoteTier: one RPC + one UCX transfer per ~16 MiB
# run + a checksum on the writer and on the reader), run twice against the same daemon: through the tier's staging lanes (plain
# heap buffers) and with its buffers registered once (--registered: no staging copy). Prints a
# markdown table of MB/s (2^20 B/s) and ratios; "staged / registered" in each G4 cell.
#
#   scripts/bench_kvstore_remote.sh [build_dir] [seconds_per_point] [tls...]
# Needs build_dir/bin/{strata,kvstore_remote_bench} (ninja strata kvstore_remote_bench) and
# ucx_perftest (libucx-dev). BASELINE_BENCH=/path/to/an/older/kvstore_remote_bench adds its
# staged and registered numbers first in each G4 cell ("base staged / base registered / staged
# / registered"), measured in the same run, for before/after comparisons; against the same
# daemon, or, with BASELINE_STRATA=/path/to/the/older/strata (needed when the protocol
# changed), against a daemon of that binary started with the same flags. BENCH_FLAGS="--pieces 4"
# (passed to every bench run, the baseline's too) moves each staged run in 4 pieces over two
# lanes instead of one piece, so a put pipelines them (kvstore_remote_bench's usage).
set -euo pipefail
BUILD=${1:-build}
SECONDS_PER_POINT=${2:-1}
shift $(( $# > 2 ? 2 : $# ))
TLS_LIST=${*:-sm tcp}
STRATA=$BUILD/bin/strata
BENCH=$BUILD/bin/kvstore_remote_bench
PORT=${PERFTEST_PORT:-13338}
[[ -x $STRATA && -x $BENCH ]] || { echo "missing $STRATA or $BENCH" >&2; exit 1; }
command -v ucx_perftest >/dev/null || { echo "missing ucx_perftest" >&2; exit 1; }

# ucx_perftest's final line for one test and size, as "MBPS AVG_LATENCY_US": server and client
# on localhost, same UCX_TLS. (put_lat reports one-way latency: half a ping-pong.)
perftest() {
  local tls=$1 test=$2 size=$3 iters
  if [[ $tls == tcp ]]; then iters=$(( (128 << 20) / size )); else iters=$(( (512 << 20) / size )); fi
  [[ $test == *lat* ]] && iters=$(( iters / 4 ))
  (( iters < 20 )) && iters=20
  UCX_TLS=$tls ucx_perftest -p "$PORT" >/dev/null 2>&1 &
  local server=$!
  sleep 0.3
  UCX_TLS=$tls ucx_perftest 127.0.0.1 -p "$PORT" -t "$test" -s "$size" -n "$iters" \
      -w $(( iters / 10 + 1 )) 2>/dev/null | awk '/^Final:/ {print $(NF-2), $4}'
  wait "$server" 2>/dev/null || true
}

DAEMON=
cleanup() { [[ -n $DAEMON ]] && kill "$DAEMON" 2>/dev/null; wait 2>/dev/null; true; }
trap cleanup EXIT

# Starts a daemon of binary $3 (default $STRATA) for one block size (256 MiB of blocks); sets
# DAEMON (its pid) and ADDRESS. Called directly, not in $(...): a subshell would lose DAEMON.
start_daemon() {
  local tls=$1 size=$2 binary=${3:-$STRATA} out
  out=$(mktemp)
  UCX_TLS=$tls "$binary" kvstore --id kvbench --port 0 --http-port -1 \
      --capacity-bytes $(( 256 << 20 )) --block-bytes "$size" >"$out" 2>/dev/null &
  DAEMON=$!
  for _ in $(seq 100); do
    grep -q ": grpc " "$out" && break
    sleep 0.05
  done
  ADDRESS=$(sed -n 's/.*: grpc \([^, ]*\).*/\1/p' "$out" | head -1)
  rm -f "$out"
}

# One bench run against the running daemon: "BLOCK PUT_MBPS GET_MBPS PUT_US GET_US" (zeros if
# it failed, so a broken point shows as 0 instead of ending the table).
run_bench() {
  local bench=$1 tls=$2 size=$3 line
  shift 3
  # shellcheck disable=SC2086  # BENCH_FLAGS is a list of flags
  line=$(UCX_TLS=$tls "$bench" "$ADDRESS" "$size" "$SECONDS_PER_POINT" "$@" ${BENCH_FLAGS:-} \
         2>/dev/null |
         grep -E "^[0-9]" || true)
  echo "${line:-$size 0 0 0 0}"
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs: $(lscpu | sed -n 's/^Model name: *//p')"
echo "# UCX $(ucx_info -v | sed -n 's/^# Version //p'); MB/s = 2^20 B/s; ratio = G4 / ucx_perftest"
echo "# G4 cells: ${BASELINE_BENCH:+base staged / base registered / }staged / registered" \
     "${BENCH_FLAGS:+(bench flags: $BENCH_FLAGS)}"
for tls in $TLS_LIST; do
  echo
  echo "UCX_TLS=$tls: bandwidth (MB/s, ~16 MiB runs) and mean latency of one block (us)"
  echo
  echo "| block | perftest put_bw | G4 put | ratio | perftest get | G4 get | ratio |" \
       "perftest put_lat | G4 put | perftest get | G4 get |"
  echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
  for size in $((64 << 10)) $((256 << 10)) $((1 << 20)) $((4 << 20)); do
    read -r ref_put _ < <(perftest "$tls" ucp_put_bw "$size")
    read -r ref_get ref_get_us < <(perftest "$tls" ucp_get "$size")
    read -r _ ref_put_us < <(perftest "$tls" ucp_put_lat "$size")
    cols=()
    if [[ -n ${BASELINE_BENCH:-} ]]; then
      if [[ -n ${BASELINE_STRATA:-} ]]; then
        start_daemon "$tls" "$size" "$BASELINE_STRATA"
      else
        start_daemon "$tls" "$size"
      fi
      cols+=("$(run_bench "$BASELINE_BENCH" "$tls" "$size")")
      cols+=("$(run_bench "$BASELINE_BENCH" "$tls" "$size" --registered)")
      kill "$DAEMON" 2>/dev/null || true; wait "$DAEMON" 2>/dev/null || true; DAEMON=
    fi
    start_daemon "$tls" "$size"
    cols+=("$(run_bench "$BENCH" "$tls" "$size")")
    cols+=("$(run_bench "$BENCH" "$tls" "$size" --registered)")
    kill "$DAEMON" 2>/dev/null || true; wait "$DAEMON" 2>/dev/null || true; DAEMON=
    printf '%s\n' "${cols[@]}" | awk -v s="$size" -v rp="$ref_put" -v rg="$ref_get" \
        -v rpl="$ref_put_us" -v rgl="$ref_get_us" '
      function cell(col, fmt,   i, out) {  # "a / b / c" over the bench runs
        for (i = 1; i <= n; ++i) out = out (i > 1 ? " / " : "") sprintf(fmt, v[i, col])
        return out }
      function ratio(col, ref,   i, out) {
        for (i = 1; i <= n; ++i)
          out = out (i > 1 ? " / " : "") sprintf("%.2f", ref > 0 ? v[i, col] / ref : 0)
        return out }
      { ++n; for (c = 2; c <= 5; ++c) v[n, c] = $c }
      END {
        unit = (s >= 1048576) ? sprintf("%d MiB", s / 1048576) : sprintf("%d KiB", s / 1024);
        printf "| %s | %.0f | %s | %s | %.0f | %s | %s | %.1f | %s | %.1f | %s |\n", unit,
               rp, cell(2, "%.0f"), ratio(2, rp), rg, cell(3, "%.0f"), ratio(3, rg),
               rpl, cell(4, "%.0f"), rgl, cell(5, "%.0f") }'
  done
done
