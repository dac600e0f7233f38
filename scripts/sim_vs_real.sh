#!/usr/bin/env bash
# Sim-to-real check: the same Mooncake trace window is replayed against a real
# local cluster (`strata up`: router + 1 prefill + 1 decode CPU worker, tiny-llama) with
# `strata replay`, and simulated with `strata sim` (1 prefill + 1 decode, the router's policy)
# using a latency profile measured on this machine; TTFT and TPOT p50/p90 are printed side by
# side with the ratio sim / real and checked against the 20% tolerance.
#
# usage: scripts/sim_vs_real.sh STRATA_BIN TRACE [OUT_DIR]
#
# environment (defaults in brackets):
#   N            first N requests of the trace [60]
#   SPEEDUP      arrival-rate scale, applied to the window file's timestamps [0.25]
#   MAX_INPUT    clip input lengths to this many tokens (hash_ids cut to match) [2048]
#   MAX_OUTPUT   clip output lengths to this many tokens [64]
#   ROUNDS       real replays (each on a fresh cluster); the table shows each and their mean [2]
#   POLICY       routing policy of both the cluster's router and the simulation [kv-aware]
#   PROFILE      a profile JSON to simulate with, or `measure`: run `strata profile` against a
#                standalone mixed worker first (same machine, same moment) [measure]
#   PROFILE_ARGS extra `strata profile` flags; the default samples decode where this window runs
#                (batches of 1-4 streams, contexts up to 2k tokens), so the linear decode model is
#                fitted in the regime it is used in ["--decode-batches 1,2,4
#                --decode-lens 256,1024,2048"]
#   PORT         router HTTP port [18941]; the profiled worker uses PORT+1
#   ISOLATE      1: every worker runs its CPU plugin with one thread, pinned to its own CPUs
#                (prefill: PREFILL_CPUS, decode and the profiled worker: DECODE_CPUS), so the
#                two workers behave like two separate devices as the simulator assumes; 0:
#                defaults (the workers then share every core and slow each other down) [1]
#   PREFILL_CPUS, DECODE_CPUS  taskset CPU lists of the two workers [0 / 1]. With more than
#                one CPU each, the engine thread still computes on one (threads: 1) and the
#                worker's gRPC, KV-transfer and UCX threads get the other instead of taking
#                turns with it: on a machine with 6+ CPUs use e.g. 0-1 / 2-3
#   CLIENT_CPUS  taskset CPU list for the router (`strata up` itself) and `strata replay`;
#                empty: not pinned [empty]
#
# Both sides get the same window file (timestamps already divided by SPEEDUP; replayed and
# simulated at speedup 1), the same output lengths (max_tokens + ignore_eos), the same
# hash-id blocks (512 tokens each, so the same prefix sharing) and the same SLOs (loose: the
# comparison is about latency, not attainment).
set -euo pipefail

if [[ $# -lt 2 ]]; then
  sed -n "2,38p" "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
STRATA_BIN=$(realpath "$1")
TRACE=$(realpath "$2")
OUT_DIR=${3:-/tmp/strata-sim-vs-real-$(date +%Y%m%d-%H%M%S)}
N=${N:-60}
SPEEDUP=${SPEEDUP:-0.25}
MAX_INPUT=${MAX_INPUT:-2048}
MAX_OUTPUT=${MAX_OUTPUT:-64}
ROUNDS=${ROUNDS:-2}
POLICY=${POLICY:-kv-aware}
PROFILE=${PROFILE:-measure}
PORT=${PORT:-18941}
PROFILE_ARGS=${PROFILE_ARGS:---decode-batches 1,2,4 --decode-lens 256,1024,2048}
ISOLATE=${ISOLATE:-1}
PREFILL_CPUS=${PREFILL_CPUS:-0}
DECODE_CPUS=${DECODE_CPUS:-1}
CLIENT_CPUS=${CLIENT_CPUS:-}
CLIENT=()
[[ -n "$CLIENT_CPUS" ]] && CLIENT=(taskset -c "$CLIENT_CPUS")
PLUGIN_ARGS=()
[[ "$ISOLATE" == 1 ]] && PLUGIN_ARGS=(--plugin-config '{"threads": 1}')
URL="http://127.0.0.1:${PORT}"

[[ -x "$STRATA_BIN" ]] || { echo "not executable: $STRATA_BIN" >&2; exit 2; }
[[ -r "$TRACE" ]] || { echo "cannot read trace: $TRACE" >&2; exit 2; }
[[ "$PROFILE" == measure || -r "$PROFILE" ]] || { echo "cannot read profile: $PROFILE" >&2; exit 2; }
mkdir -p "$OUT_DIR"
WINDOW="$OUT_DIR/window.jsonl"

python3 - "$TRACE" "$WINDOW" "$N" "$SPEEDUP" "$MAX_INPUT" "$MAX_OUTPUT" <<'EOF'
import json, math, sys
src, dst, n, speedup, max_in, max_out = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
    float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
with open(src) as f, open(dst, "w") as out:
    for i, line in enumerate(f):
        if i >= n:
            break
        r = json.loads(line)
        inp = min(r["input_length"], max_in)
        row = {"timestamp": int(round(r["timestamp"] / speedup)), "input_length": inp,
               "output_length": max(1, min(r["output_length"], max_out)),
               "hash_ids": r["hash_ids"][:math.ceil(inp / 512)]}
        out.write(json.dumps(row) + "\n")
EOF

PID=""
stop_pid() {
  if [[ -n "$PID" ]]; then
    kill -TERM "$PID" 2>/dev/null || true
    wait "$PID" 2>/dev/null || true
    PID=""
  fi
}
trap stop_pid EXIT

# wait_line FILE REGEX: waits (up to 120 s) for a line in FILE while $PID lives.
wait_line() {
  for _ in $(seq 1 240); do
    grep -qsE "$2" "$1" && return 0
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.5
  done
  echo "no '$2' in $1:" >&2; tail -20 "$1" >&2; exit 1
}

if [[ "$PROFILE" == measure ]]; then
  echo "== profiling a standalone mixed worker (strata profile)"
  "$STRATA_BIN" worker --role mixed --id profiled --http-port $((PORT + 1)) --grpc-port 0 \
    "${PLUGIN_ARGS[@]}" >"$OUT_DIR/profiled_worker.log" 2>&1 &
  PID=$!
  [[ "$ISOLATE" == 1 ]] && taskset -a -p -c "$DECODE_CPUS" "$PID" >/dev/null
  wait_line "$OUT_DIR/profiled_worker.log" "http 127\.0\.0\.1:[0-9]+, grpc"
  "${CLIENT[@]}" "$STRATA_BIN" profile --url "http://127.0.0.1:$((PORT + 1))" --name sim-vs-real \
    --hardware "$(nproc) vCPU, $(uname -m), measured by scripts/sim_vs_real.sh" \
    --model preset:tiny-llama $PROFILE_ARGS --out "$OUT_DIR/profile.json" | tail -5
  stop_pid
  PROFILE="$OUT_DIR/profile.json"
fi

CONFIG="$OUT_DIR/cluster.yaml"
printf 'policy: %s\n' "$POLICY" >"$CONFIG"
[[ "$ISOLATE" == 1 ]] && printf 'engine:\n  plugin_config: %s\n' "'{\"threads\": 1}'" >>"$CONFIG"

# pin_workers: prefill worker(s) to PREFILL_CPUS, decode worker(s) to DECODE_CPUS (all their
# threads).
pin_workers() {
  local child args
  for child in $(pgrep -P "$PID"); do
    args=$(tr '\0' ' ' <"/proc/$child/cmdline")
    case "$args" in
      *"--role prefill"*) taskset -a -p -c "$PREFILL_CPUS" "$child" >/dev/null ;;
      *"--role decode"*) taskset -a -p -c "$DECODE_CPUS" "$child" >/dev/null ;;
    esac
  done
}

for round in $(seq 1 "$ROUNDS"); do
  echo "== round $round: strata replay against strata up (policy $POLICY)"
  dir="$OUT_DIR/real$round"
  mkdir -p "$dir"
  "${CLIENT[@]}" "$STRATA_BIN" up --config "$CONFIG" --port "$PORT" --log-dir "$dir/logs" >"$dir/up.out" 2>&1 &
  PID=$!
  wait_line "$dir/up.out" "strata is serving at"
  [[ "$ISOLATE" == 1 ]] && pin_workers
  "${CLIENT[@]}" "$STRATA_BIN" replay --trace "$WINDOW" --format mooncake --url "$URL" --speedup 1 \
    --slo-ttft 1000 --slo-tpot 1000 --quiet --out "$dir/result" | tee "$dir/replay.out"
  stop_pid
done

echo "== strata sim (1 prefill + 1 decode, policy $POLICY, profile $PROFILE)"
"$STRATA_BIN" sim --trace "$WINDOW" --format mooncake --prefill 1 --decode 1 --policy "$POLICY" \
  --profile "$PROFILE" --speedup 1 --slo-ttft 1000 --slo-tpot 1000 --quiet \
  --out "$OUT_DIR/sim" | tee "$OUT_DIR/sim.out"

python3 - "$OUT_DIR" "$ROUNDS" <<'EOF'
import json, os, sys
out_dir, rounds = sys.argv[1], int(sys.argv[2])
real = [json.load(open(os.path.join(out_dir, f"real{r}", "result", "summary.json")))
        for r in range(1, rounds + 1)]
sim = json.load(open(os.path.join(out_dir, "sim", "summary.json")))
keys = [f"{m}_{p}_s" for m in ("ttft", "tpot") for p in ("p50", "p90")]
print(f"\nsim vs real, seconds; ratio = sim / mean(real); tolerance 20%")
head = "".join(f"{'real' + str(r + 1):>10}" for r in range(rounds))
print(f"{'metric':>10}{head}{'real mean':>11}{'sim':>10}{'ratio':>8}  within 20%")
ok = True
for k in keys:
    vals = [s[k] for s in real]
    mean = sum(vals) / len(vals)
    ratio = sim[k] / mean if mean > 0 else float("inf")
    good = abs(ratio - 1) <= 0.2
    ok &= good
    print(f"{k[:-2]:>10}" + "".join(f"{v:>10.4f}" for v in vals) +
          f"{mean:>11.4f}{sim[k]:>10.4f}{ratio:>8.3f}  {'yes' if good else 'NO'}")
print(f"prefix-cached tokens: real " + ", ".join(str(s["prefix_cached_tokens"]) for s in real) +
      f"; sim {sim['prefix_cached_tokens']}")
print("all within 20%" if ok else "NOT all within 20%")
EOF
echo "results under $OUT_DIR"
