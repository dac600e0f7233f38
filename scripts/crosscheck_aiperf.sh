#!/usr/bin/env bash
# Cross-checks `strata replay` against NVIDIA's aiperf (PyPI) on the same Mooncake trace window
# against the same server. For each round it starts a fresh `strata up` cluster, replays
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
#                 one fresh cluster per round, both clients at once (same server noise; with
#                 PROMPTS=text each client gets its own block texts, and SPACING_S=2*OFFSET_S
#                 interleaves the two clients' one-at-a-time requests) |
#                 alternate (needs PROMPTS=text): one warm cluster, the clients one after the
#                 other, each run with its own block texts (see run_alternate) [sequential]
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
#   PROMPTS       ids: strata replay sends its token-id blocks, aiperf its own text per hash id
#                 (each client's normal mode) | text: both send the SAME text, built here once per
#                 hash id (a deterministic word sequence cut at 512 tokens of the served model's
#                 tokenizer, a request = its blocks' texts joined by spaces): aiperf as the
#                 Mooncake `text_input` field, strata replay as a `strata`-format trace with
#                 `prompt` and --prompt-source text, so the server does identical work for both
#                 and only the clients' measurement differs [ids]
#
# What is the same for both clients: the window file (timestamps already divided by SPEEDUP, so
# both replay at speedup 1), input/output lengths, hash_ids (one 512-token block per id, so prefix
# sharing is preserved), open-loop fixed schedule, streaming /v1/completions, temperature 0,
# ignore_eos, max_tokens = output length, TPOT from the server's usage.completion_tokens.
# What differs (PROMPTS=ids): strata replay sends token-id arrays (PromptSynthesizer blocks);
# aiperf sends text it synthesizes per hash id from its Shakespeare corpus with TOKENIZER, which
# the server re-tokenizes (so prompt token counts may differ by a few tokens at block joins, plus BOS).
set -euo pipefail

if [[ $# -lt 2 ]]; then
  sed -n "2,50p" "$0" | sed 's/^# \{0,1\}//'
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
PROMPTS=${PROMPTS:-ids}
OFFSET_S=${OFFSET_S:-6}
URL="http://127.0.0.1:${PORT}"

[[ -x "$STRATA_BIN" ]] || { echo "not executable: $STRATA_BIN" >&2; exit 2; }
[[ -r "$TRACE" ]] || { echo "cannot read trace: $TRACE" >&2; exit 2; }
[[ -x "$AIPERF" ]] || { echo "aiperf not found at $AIPERF (set AIPERF=...)" >&2; exit 2; }
[[ "$PROMPTS" == ids || "$PROMPTS" == text ]] || { echo "PROMPTS must be ids or text" >&2; exit 2; }
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

# PROMPTS=text: text windows built with the served model's tokenizer (needs MODEL_DIR, so after
# the first cluster start). make_text_windows K writes the pair for block-text variant K (K > 0
# gives every hash id a different text, so MODE=alternate runs never hit each other's cache).
AIPERF_WINDOW="$WINDOW"
STRATA_WINDOW="$WINDOW"
make_text_windows() {
  [[ "$PROMPTS" == text ]] || return 0
  local k=${1:-0}
  AIPERF_WINDOW="$OUT_DIR/window_text${k}_aiperf.jsonl"
  STRATA_WINDOW="$OUT_DIR/window_text${k}_strata.jsonl"
  [[ -f "$STRATA_WINDOW" ]] && return 0
  "$(dirname "$AIPERF")/python" - "$WINDOW" "${TOKENIZER:-$MODEL_DIR}/tokenizer.json" \
      "$AIPERF_WINDOW" "$STRATA_WINDOW" "$k" <<'EOF'
import json, random, sys
from tokenizers import Tokenizer
window, tok_path, aiperf_out, strata_out, variant = sys.argv[1:6]
tok = Tokenizer.from_file(tok_path)
WORDS = ("time person year way day thing man world life hand part child eye woman place work "
         "week case point government company number group problem fact be have do say get make "
         "go know take see come think look want give use find tell ask seem feel try leave call "
         "good new first last long great little own other old right big high different small "
         "large next early young important few public bad same able to of in for on with at by "
         "from up about into over after river stone garden window market letter winter silver "
         "engine harbor lantern meadow orchard valley thunder candle mirror").split()
def count(text):
    return len(tok.encode(text, add_special_tokens=False).ids)
cache = {}
def block_text(block_id, tokens):
    # The first words of block `block_id`'s fixed word sequence that reach `tokens` tokens, so a
    # partial last block is a prefix of the full block.
    key = (block_id, tokens)
    if key not in cache:
        rng, words = random.Random(f"{variant}:{block_id}"), []
        while count(" ".join(words)) < tokens:
            words.append(rng.choice(WORDS))
        cache[key] = " ".join(words)
    return cache[key]
with open(window) as f, open(aiperf_out, "w") as fa, open(strata_out, "w") as fs:
    for line in f:
        r = json.loads(line)
        n, ids = r["input_length"], r["hash_ids"]
        text = " ".join(block_text(b, min(512, n - 512 * i)) for i, b in enumerate(ids))
        fa.write(json.dumps({"timestamp": r["timestamp"], "text_input": text,
                             "output_length": r["output_length"]}) + "\n")
        fs.write(json.dumps({"arrival_s": r["timestamp"] / 1000.0, "input_tokens": count(text),
                             "output_tokens": r["output_length"], "prompt": text}) + "\n")
EOF
}

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
      make_text_windows
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
    --input-file "$AIPERF_WINDOW" --custom-dataset-type mooncake_trace --fixed-schedule \
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
  mkdir -p "$dir"
  local fmt=(--format mooncake)
  [[ "$PROMPTS" == text ]] && fmt=(--format strata --prompt-source text)
  "$STRATA_BIN" replay --trace "$STRATA_WINDOW" "${fmt[@]}" --url "$URL" --speedup 1 \
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
  # PROMPTS=text: each client its own block texts, so neither hits the other's cached prefixes.
  make_text_windows $((2 * round))
  launch_aiperf "$dir/aiperf"
  make_text_windows $((2 * round - 1))
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

# MODE=alternate (PROMPTS=text): ONE cluster for the whole run, warmed up by one discarded
# strata replay; then per round both clients replay the window one after the other (strata
# first in odd rounds, aiperf first in even ones, so drift cancels), each with its own block-text
# variant: the same prefix-sharing structure, but no run can hit another run's cached blocks.
# Every run thus meets the same warm server doing the same work; fresh-cluster start-up variance
# (page faults, allocator and cache warm-up) is gone.
run_alternate() {
  start_cluster "$OUT_DIR/cluster"
  echo "== warm-up (discarded)"
  make_text_windows 1000
  replay_strata "$OUT_DIR/warmup" >/dev/null
  local r k order client
  for r in $(seq 1 "$ROUNDS"); do
    order="strata aiperf"; (( r % 2 == 0 )) && order="aiperf strata"
    k=$((2 * r - 1))
    for client in $order; do
      echo "== round $r: $client (text variant $k)"
      make_text_windows "$k"
      mkdir -p "$OUT_DIR/round$r/$client"
      if [[ $client == strata ]]; then
        replay_strata "$OUT_DIR/round$r/strata"
      else
        launch_aiperf "$OUT_DIR/round$r/aiperf"
        wait_aiperf "$OUT_DIR/round$r/aiperf"
      fi
      k=$((k + 1))
    done
  done
  stop_cluster
}

if [[ "$MODE" == alternate ]]; then
  [[ "$PROMPTS" == text ]] || { echo "MODE=alternate needs PROMPTS=text" >&2; exit 2; }
  run_alternate
fi
for round in $(seq 1 "$ROUNDS"); do
  if [[ "$MODE" == alternate ]]; then
    break
  elif [[ "$MODE" == concurrent ]]; then
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
def paired_ttft(round_dir):
    # Request i of both clients is trace line i (same length, same output; in PROMPTS=text mode
    # with its own block texts): per-request TTFT ratios, sorted.
    import csv
    strata = {}
    with open(os.path.join(round_dir, "strata", "result", "requests.csv")) as f:
        for row in csv.DictReader(f):
            if row["error"] == "none":
                strata[int(row["index"])] = float(row["ttft_s"])
    path = glob.glob(os.path.join(round_dir, "aiperf", "result", "**", "profile_export.jsonl"),
                     recursive=True)
    ratios = []
    for line in open(path[0]) if path else []:
        rec = json.loads(line)
        i = rec["metadata"].get("session_num")
        ttft = rec.get("metrics", {}).get("time_to_first_token", {}).get("value")
        if i in strata and ttft and strata[i] > 0:
            ratios.append(ttft / 1000.0 / strata[i])
    return sorted(ratios)
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
    paired = paired_ttft(os.path.join(out_dir, f"round{r}"))
    if paired:
        q = lambda p: paired[min(len(paired) - 1, int(p * len(paired)))]
        print(f"{r:>5} paired TTFT ratio aiperf/strata, request by request ({len(paired)} pairs): "
              f"median {q(0.5):.3f}, p10 {q(0.1):.3f}, p90 {q(0.9):.3f}")
    print(f"{r:>5} requests: strata {s['completed']}/{s['requests']} completed, mean prompt "
          f"{s['prompt_tokens'] / max(1, s['completed']):.0f} tok (server), prefix-cached "
          f"{s['prefix_cache_hit_rate']:.1%}; aiperf {a['count']} completed, {a['errors']} errors, "
          f"mean ISL {a['isl']} tok (server)")
EOF
echo "results under $OUT_DIR"
