#!/usr/bin/env bash
# Cross-checks `strata replay` against NVIDIA's aiperf (PyPI) on the same Mooncake trace window
# against the same server (issue 6). For each round it starts a fresh `strata up` cluster, replays
# the window with `strata replay`, stops the cluster, starts another fresh one (so both clients see
# a cold prefix cache), replays the same window with `aiperf profile`, and prints TTFT/TPOT
# p50/p90/p99 of both clients side by side with the ratio aiperf / strata.
#
# usage: scripts/crosscheck_aiperf.sh STRATA_BIN TRACE [OUT_DIR]
#
# environment (defaults in brackets):
#   AIPERF        aiperf executable [/tmp/aiperf-venv/bin/aiperf]; install it into a venv outside
#                 the repo: python3 -m venv /tmp/aiperf-venv && /tmp/aiperf-venv/bin/pip install aiperf
#   N             first N requests of the trace [40]
#   SPEEDUP       arrival-rate scale, applied to the window file's timestamps [0.25]
#   MAX_INPUT     clip input lengths to this many tokens [1024]
#   MAX_OUTPUT    clip output lengths to this many tokens [32]
#   ROUNDS        strata/aiperf pairs to run [1]
#   MODE          sequential: a fresh cluster per client run (cold caches for both) | concurrent:
#                 one fresh cluster per round, both clients at once (same server noise) [sequential]
#   OFFSET_S      concurrent mode: strata replay starts this long after aiperf's first send [6];
#                 the default window's arrivals come in bursts 12 s apart (3 s trace granularity /
#                 0.25), so 6 s interleaves the two clients' bursts instead of queueing one
#                 client's burst behind the other's (at 0 s strata's requests queue behind
#                 aiperf's identical-time requests and its TTFT is biased up)
#   PORT          router HTTP port [18931]
#   SPACING_S     if set (> 0): re-time the window so request i arrives at i * SPACING_S seconds
#                 (same requests and prompts, one at a time instead of the trace's bursts), so
#                 each request's TTFT/TPOT is the server's unloaded latency and run-to-run
#                 batching noise cannot hide a measurement difference between the clients [unset]
#   TOKENIZER     HF tokenizer dir for aiperf's prompt synthesis; default: the served model's dir
#                 (the `model:` line `strata up` prints), so aiperf counts tokens as the server does
#
# What is the same for both clients: the window file (timestamps already divided by SPEEDUP, so
# both replay at speedup 1), input/output lengths, hash_ids (one 512-token block per id, so prefix
# sharing is preserved), open-loop fixed schedule, streaming /v1/completions, temperature 0,
# ignore_eos, max_tokens = output length, TPOT from the server's usage.completion_tokens.
# What differs: strata replay sends token-id arrays (PromptSynthesizer blocks); aiperf sends text
# it synthesizes per hash id from its Shakespeare corpus with TOKENIZER, which the server
# re-tokenizes (so prompt token counts may differ by a few tokens at block joins, plus BOS).
set -euo pipefail

if [[ $# -lt 2 ]]; then
  sed -n "2,40p" "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
STRATA_BIN=$(realpath "$1")
TRACE=$(realpath "$2")
OUT_DIR=${3:-/tmp/strata-crosscheck-$(date +%Y%m%d-%H%M%S)}
AIPERF=${AIPERF:-/tmp/aiperf-venv/bin/aiperf}
N=${N:-40}
SPEEDUP=${SPEEDUP:-0.25}
MAX_INPUT=${MAX_INPUT:-1024}
MAX_OUTPUT=${MAX_OUTPUT:-32}
ROUNDS=${ROUNDS:-1}
PORT=${PORT:-18931}
MODE=${MODE:-sequential}
OFFSET_S=${OFFSET_S:-6}
URL="http://127.0.0.1:${PORT}"

[[ -x "$STRATA_BIN" ]] || { echo "not executable: $STRATA_BIN" >&2; exit 2; }
[[ -r "$TRACE" ]] || { echo "cannot read trace: $TRACE" >&2; exit 2; }
[[ -x "$AIPERF" ]] || { echo "aiperf not found at $AIPERF (set AIPERF=...)" >&2; exit 2; }
mkdir -p "$OUT_DIR"
WINDOW="$OUT_DIR/window.jsonl"

# The window both clients replay: first N requests, lengths clipped, hash_ids cut to
# ceil(input/512) so they stay consistent with the clipped input, timestamps / SPEEDUP.
python3 - "$TRACE" "$WINDOW" "$N" "$SPEEDUP" "$MAX_INPUT" "$MAX_OUTPUT" "${SPACING_S:-0}" <<'EOF'
import json, math, sys
src, dst, n, speedup, max_in, max_out = sys.argv[1], sys.argv[2], int(sys.argv[3]), \
    float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
spacing = float(sys.argv[7])
with open(src) as f, open(dst, "w") as out:
    for i, line in enumerate(f):
        if i >= n:
            break
        r = json.loads(line)
        inp = min(r["input_length"], max_in)
        ts = i * spacing * 1000 if spacing > 0 else r["timestamp"] / speedup
        row = {"timestamp": int(round(ts)), "input_length": inp,
               "output_length": max(1, min(r["output_length"], max_out)),
               "hash_ids": r["hash_ids"][:math.ceil(inp / 512)]}
        out.write(json.dumps(row) + "\n")
EOF

CLUSTER_PID=""
AIPERF_PID=""
cleanup() {
  if [[ -n "$AIPERF_PID" ]]; then kill -INT "$AIPERF_PID" 2>/dev/null || true; fi
  stop_cluster
}
stop_cluster() {
  if [[ -n "$CLUSTER_PID" ]]; then
    kill -TERM "$CLUSTER_PID" 2>/dev/null || true
    wait "$CLUSTER_PID" 2>/dev/null || true
    CLUSTER_PID=""
  fi
}
trap cleanup EXIT

# start_cluster LOGDIR: starts `strata up` and waits for its ready line.
start_cluster() {
  local dir=$1
  mkdir -p "$dir"
  "$STRATA_BIN" up --port "$PORT" --log-dir "$dir/logs" >"$dir/up.out" 2>&1 &
  CLUSTER_PID=$!
  for _ in $(seq 1 240); do
    if grep -qs "strata is serving at" "$dir/up.out"; then
      MODEL_DIR=$(sed -n 's/^model: //p' "$dir/up.out" | head -1)
      return 0
    fi
    kill -0 "$CLUSTER_PID" 2>/dev/null || break
    sleep 0.5
  done
  echo "strata up did not become ready; see $dir/up.out" >&2
  cat "$dir/up.out" >&2
  exit 1
}

run_strata() {
  local dir=$1
  start_cluster "$dir"
  "$STRATA_BIN" replay --trace "$WINDOW" --format mooncake --url "$URL" --speedup 1 \
    --slo-ttft 1000 --slo-tpot 1000 --quiet --out "$dir/result" | tee "$dir/replay.out"
  stop_cluster
}

# aiperf 0.13.0 decodes hash-id blocks in worker processes that force HF offline mode, and in
# offline mode a local tokenizer directory is looked up as a hub repo id and fails
# ("HFValidationError: Repo id must be in the form 'repo_name' or 'namespace/repo_name'").
# Workaround: publish the tokenizer files as repo `strata/tokenizer` in a private offline HF cache.
hf_cache_tokenizer() {
  local src=$1 snap="$OUT_DIR/hf/hub/models--strata--tokenizer/snapshots/${ZERO_REV}"
  mkdir -p "$snap" "$OUT_DIR/hf/hub/models--strata--tokenizer/refs"
  printf '%s' "$ZERO_REV" >"$OUT_DIR/hf/hub/models--strata--tokenizer/refs/main"
  for f in tokenizer.json tokenizer_config.json config.json special_tokens_map.json; do
    [[ -f "$src/$f" ]] && cp "$src/$f" "$snap/"
  done
  return 0
}
ZERO_REV=0000000000000000000000000000000000000000

# launch_aiperf DIR: starts `aiperf profile` in the background against the running cluster.
launch_aiperf() {
  local dir=$1
  hf_cache_tokenizer "${TOKENIZER:-$MODEL_DIR}"
  HF_HOME="$OUT_DIR/hf" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$AIPERF" profile \
    --model tiny-llama --url "$URL" --endpoint-type completions --streaming \
    --input-file "$WINDOW" --custom-dataset-type mooncake_trace --fixed-schedule \
    --tokenizer strata/tokenizer --use-server-token-count --use-legacy-max-tokens \
    --extra-inputs ignore_eos:true --extra-inputs temperature:0 \
    --random-seed 0 --ui-type none --no-server-metrics --no-gpu-telemetry \
    --artifact-dir "$dir/result" >"$dir/aiperf.out" 2>&1 &
  AIPERF_PID=$!
}

wait_aiperf() {
  local dir=$1
  local rc=0
  wait "$AIPERF_PID" || rc=$?
  AIPERF_PID=""
  if [[ $rc -ne 0 ]]; then
    echo "aiperf failed; tail of $dir/aiperf.out:" >&2; tail -30 "$dir/aiperf.out" >&2; exit 1
  fi
}

replay_strata() {
  local dir=$1
  "$STRATA_BIN" replay --trace "$WINDOW" --format mooncake --url "$URL" --speedup 1 \
    --slo-ttft 1000 --slo-tpot 1000 --quiet --out "$dir/result" | tee "$dir/replay.out"
}

run_strata() {
  local dir=$1
  start_cluster "$dir"
  replay_strata "$dir"
  stop_cluster
}

run_aiperf() {
  local dir=$1
  start_cluster "$dir"
  launch_aiperf "$dir"
  wait_aiperf "$dir"
  stop_cluster
}

# MODE=concurrent: one cluster, both clients replay the window at the same time (each its own
# copy, so the server sees twice the load); strata replay starts when aiperf logs that its
# profiling phase started, plus OFFSET_S.
# Both clients then measure the same server under the same background noise.
run_concurrent() {
  local dir=$1
  mkdir -p "$dir/strata" "$dir/aiperf"
  start_cluster "$dir"
  launch_aiperf "$dir/aiperf"
  for _ in $(seq 1 600); do
    grep -qs "Phase profiling (profiling) started" "$dir/aiperf/result/logs/aiperf.log" && break
    kill -0 "$AIPERF_PID" 2>/dev/null || break
    sleep 0.1
  done
  sleep "$OFFSET_S"
  replay_strata "$dir/strata"
  wait_aiperf "$dir/aiperf"
  stop_cluster
}

for round in $(seq 1 "$ROUNDS"); do
  if [[ "$MODE" == concurrent ]]; then
    echo "== round $round: strata replay and aiperf at the same time"
    run_concurrent "$OUT_DIR/round$round"
  else
    echo "== round $round: strata replay"
    run_strata "$OUT_DIR/round$round/strata"
    echo "== round $round: aiperf"
    run_aiperf "$OUT_DIR/round$round/aiperf"
  fi
done

# Side-by-side table. aiperf's inter_token_latency is (request_latency - TTFT) /
# (output_tokens - 1) per request, the same definition as strata's TPOT.
python3 - "$OUT_DIR" "$ROUNDS" <<'EOF'
import glob, json, os, sys
out_dir, rounds = sys.argv[1], int(sys.argv[2])
def aiperf_metrics(d):
    path = glob.glob(os.path.join(d, "**", "profile_export_aiperf.json"), recursive=True)[0]
    m = json.load(open(path))
    m = m.get("records", m)
    def get(tag, p):
        v = m[tag]
        scale = 1e-3 if v.get("unit", "ms") == "ms" else 1.0
        return v[p] * scale
    res = {f"{k}_{p}": get(tag, p) for k, tag in (("ttft", "time_to_first_token"),
           ("tpot", "inter_token_latency")) for p in ("p50", "p90", "p99")}
    res["count"] = m.get("request_count", {}).get("avg")
    errs = m.get("error_summary") or []
    res["errors"] = sum(e.get("count", 1) for e in errs) if isinstance(errs, list) else errs
    res["isl"] = m.get("input_sequence_length", {}).get("avg")
    return res
print()
print(f"TTFT/TPOT, seconds; ratio = aiperf / strata; window {os.path.join(out_dir, 'window.jsonl')}")
print(f"{'round':>5} {'metric':>9} {'strata':>10} {'aiperf':>10} {'ratio':>7}")
for r in range(1, rounds + 1):
    s = json.load(open(os.path.join(out_dir, f"round{r}", "strata", "result", "summary.json")))
    a = aiperf_metrics(os.path.join(out_dir, f"round{r}", "aiperf", "result"))
    for k in ("ttft", "tpot"):
        for p in ("p50", "p90", "p99"):
            sv, av = s[f"{k}_{p}_s"], a[f"{k}_{p}"]
            print(f"{r:>5} {k + '_' + p:>9} {sv:>10.4f} {av:>10.4f} {av / sv:>7.3f}")
    print(f"{r:>5} requests: strata {s['completed']}/{s['requests']} completed, mean prompt "
          f"{s['prompt_tokens'] / max(1, s['completed']):.0f} tok (server), prefix-cached "
          f"{s['prefix_cache_hit_rate']:.1%}; aiperf {a['count']} completed, {a['errors']} errors, "
          f"mean ISL {a['isl']} tok (server)")
EOF
echo "results under $OUT_DIR"
