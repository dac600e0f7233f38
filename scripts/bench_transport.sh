#!/usr/bin/env bash
# Put bandwidth of strata::transport vs ucx_perftest (ucp_put_bw), two processes on this host,
# same run sizes, same UCX_TLS, one run. Prints a markdown table of MB/s (2^20 B/s) and ratios.
#
#   scripts/bench_transport.sh [build_dir] [seconds_per_point]
# Needs build_dir/bin/transport_bench (ninja transport_bench) and ucx_perftest (libucx-dev).
set -euo pipefail
BUILD=${1:-build}
SECONDS_PER_POINT=${2:-0.5}
BENCH=$BUILD/bin/transport_bench
MIN=$((64 << 10))
MAX=$((64 << 20))
PORT=${PERFTEST_PORT:-13337}
[[ -x $BENCH ]] || { echo "missing $BENCH (ninja -C $BUILD transport_bench)" >&2; exit 1; }
command -v ucx_perftest >/dev/null || { echo "missing ucx_perftest" >&2; exit 1; }

# ucx_perftest put_bw MB/s for one size: server and client on localhost, same UCX_TLS.
perftest() {
  local tls=$1 size=$2 iters
  # ~512 MiB (sm) / ~128 MiB (tcp) per point, at least 20 iterations.
  if [[ $tls == tcp ]]; then iters=$(( (128 << 20) / size )); else iters=$(( (512 << 20) / size )); fi
  (( iters < 20 )) && iters=20
  UCX_TLS=$tls ucx_perftest -p "$PORT" >/dev/null 2>&1 &
  local server=$!
  sleep 0.3
  UCX_TLS=$tls ucx_perftest 127.0.0.1 -p "$PORT" -t ucp_put_bw -s "$size" -n "$iters" \
      -w $(( iters / 10 + 1 )) 2>/dev/null | awk '/^Final:/ {print $(NF-2)}'
  wait "$server" 2>/dev/null || true
}

echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs: $(lscpu | sed -n 's/^Model name: *//p')"
echo "# UCX $(ucx_info -v | sed -n 's/^# Version //p'); MB/s = 2^20 B/s; ratio = ours (same) / ucx_perftest"
for tls in sm tcp; do
  echo
  echo "UCX_TLS=$tls"
  echo
  echo "| run size | ucx_perftest put_bw | strata (same buffer) | ratio | strata (distinct blocks) | ratio |"
  echo "|---:|---:|---:|---:|---:|---:|"
  size=$MIN
  while (( size <= MAX )); do
    ref=$(perftest "$tls" "$size")
    # UCX prints its warnings on stdout: keep only the result line.
    read -r _ same distinct < <(UCX_TLS=$tls "$BENCH" "$size" "$size" "$SECONDS_PER_POINT" \
        2>/dev/null | grep -E "^[0-9]")
    awk -v s="$size" -v r="$ref" -v a="$same" -v b="$distinct" 'BEGIN {
      unit = (s >= 1048576) ? sprintf("%d MiB", s / 1048576) : sprintf("%d KiB", s / 1024);
      printf "| %s | %.0f | %.0f | %.2f | %.0f | %.2f |\n", unit, r, a, (r > 0 ? a / r : 0), b, (r > 0 ? b / r : 0) }'
    size=$(( size * 2 ))
  done
done
