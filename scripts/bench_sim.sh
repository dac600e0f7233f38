#!/usr/bin/env bash
# Cluster goodput of every routing policy in `strata sim`, on the Mooncake conversation trace,
# at 16 and 64 simulated GPUs: a markdown table of goodput (req/s at >= 90% SLO attainment, from
# --find-goodput) with ratios vs aggregated round-robin and vs kv-cost.
#
# Rows per GPU count: round-robin over N aggregated (mixed) workers (the baseline); kv-cost
# (Dynamo-style) aggregated and disaggregated; kv-aware, least-loaded and goodput disaggregated;
# goodput aggregated. The disaggregated split is the one `strata plan --policy goodput`
# recommends (searched on the first $PLAN_REQUESTS requests to bound its cost). Every goodput row
# is run twice, side by side: without the router's admission queue (--admission-queue 0, the
# default: 429 at once) and with it (queue by slack, --admission-queue $QUEUE).
# POLICIES limits the rows printed (round-robin and kv-cost still run: the ratios need them).
#
# SLOs: TTFT 2 s and TPOT 100 ms for an H200-class Llama-3.1-8B worker, scaled to the profile:
#   ttft = 2 s   x (profile prefill seconds of one 12,000-token prompt) / 0.7444 s
#   tpot = 0.1 s x (profile decode step seconds, batch 1, 12,000 context tokens) / 0.0127 s
# (0.7444 s and 12.7 ms are those two times in the H200-class reference profile of
# docs/sim.md; the trace's mean prompt is 12k tokens). Both factors are printed; set SLO_TTFT / SLO_TPOT to override.
#
# Usage: scripts/bench_sim.sh [BUILD_DIR]
#   env: PROFILE, TRACE, FORMAT (default auto), GPUS, PLAN_REQUESTS, EVALS, QUEUE (default 256),
#        SPLITS (e.g. "16=6:10 64=24:40": use these prefill:decode splits instead of planning),
#        POLICIES (default "round-robin kv-cost kv-aware least-loaded goodput")
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build}
STRATA=$BUILD/bin/strata
PROFILE=${PROFILE:-$ROOT/deploy/profiles/tiny-llama-cpu.json}
TRACE=${TRACE:-$ROOT/../shared/traces/mooncake_conversation.jsonl}
FORMAT=${FORMAT:-auto}
GPUS=${GPUS:-"16 64"}
PLAN_REQUESTS=${PLAN_REQUESTS:-3000}
EVALS=${EVALS:-8}
QUEUE=${QUEUE:-256}
POLICIES=${POLICIES:-round-robin kv-cost kv-aware least-loaded goodput}
wanted() { [[ " $POLICIES " == *" $1 "* ]]; }

for f in "$STRATA" "$PROFILE" "$TRACE"; do
  [[ -e $f ]] || { echo "bench_sim.sh: missing $f" >&2; exit 2; }
done

read -r SCALE_TTFT SCALE_TPOT < <(python3 - "$PROFILE" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
pf, dc = p["prefill"], p["decode"]
prefill = pf["a"] + pf["b"] * 12000 + pf["c"] * 12000 ** 2
decode = dc["a"] + dc["b"] * 12000 + dc["c"] * 1
print(prefill / 0.7444, decode / 0.0127)
PY
)
SLO_TTFT=${SLO_TTFT:-$(python3 -c "print(round(2.0 * $SCALE_TTFT, 4))")}
SLO_TPOT=${SLO_TPOT:-$(python3 -c "print(round(0.1 * $SCALE_TPOT, 5))")}
COMMON=(--trace "$TRACE" --format "$FORMAT" --profile "$PROFILE" --slo-ttft "$SLO_TTFT"
        --slo-tpot "$SLO_TPOT" --quiet)

# goodput GPUS POLICY SHAPE... -> prints the goodput (0 when no probed rate met the target).
goodput() {
  local policy=$1; shift
  "$STRATA" sim "${COMMON[@]}" --policy "$policy" "$@" --find-goodput \
      --max-evaluations "$EVALS" 2>/dev/null |
    sed -n 's/.*goodput \([0-9.]*\) req\/s$/\1/p' | tail -1 | { read -r g || true; echo "${g:-0}"; }
}

start=$(date +%s)
echo "strata sim goodput, $(date -u +%Y-%m-%d), $(nproc) cores, profile $(basename "$PROFILE"),"
echo "SLO TTFT <= $SLO_TTFT s, TPOT <= $SLO_TPOT s (scale x$SCALE_TTFT / x$SCALE_TPOT), >= 90% attainment"
echo
echo "| GPUs | policy | cluster | goodput req/s | vs aggregated round-robin | vs kv-cost (same cluster) |"
echo "|---:|---|---|---:|---:|---:|"
for n in $GPUS; do
  given=$(tr ' ' '\n' <<<"${SPLITS:-}" | sed -n "s/^$n=\([0-9]*\):\([0-9]*\)$/\1 \2/p")
  if [[ -n $given ]]; then
    rec=$given
  else
    rec=$("$STRATA" plan "${COMMON[@]}" --gpus "$n" --policy goodput --no-aggregated \
          --max-requests "$PLAN_REQUESTS" --max-splits 3 --max-evaluations 6 2>/dev/null |
          sed -n 's/^recommended: \([0-9]*\) prefill + \([0-9]*\) decode.*/\1 \2/p')
  fi
  read -r P D <<<"${rec:-$((n / 4)) $((n - n / 4))}"
  base=$(goodput round-robin --aggregated --workers "$n")
  kv_agg=$(goodput kv-cost --aggregated --workers "$n")
  kv_dis=$(goodput kv-cost --prefill "$P" --decode "$D")
  row() {  # policy cluster goodput kv-cost-of-that-cluster
    python3 -c "
b, g, k = float('$base'), float('$3'), float('$4')
r = lambda x, y: f'{x / y:.2f}x' if y > 0 else '-'
print(f'| $n | $1 | $2 | {g:.3f} | {r(g, b)} | {r(g, k)} |')"
  }
  # goodput as the router runs it by default (no admission queue: 429 at once), then with the
  # admission queue (queue by slack, --admission-queue $QUEUE), side by side.
  goodput_rows() {  # cluster kv-cost-of-that-cluster shape...
    local cluster=$1 kv=$2; shift 2
    row "goodput" "$cluster" "$(goodput goodput "$@" --admission-queue 0)" "$kv"
    row "goodput + admission queue $QUEUE" "$cluster" \
        "$(goodput goodput "$@" --admission-queue "$QUEUE")" "$kv"
  }
  if wanted round-robin; then row round-robin "$n mixed" "$base" "$kv_agg"; fi
  if wanted kv-cost; then row kv-cost "$n mixed" "$kv_agg" "$kv_agg"; fi
  if wanted goodput; then goodput_rows "$n mixed" "$kv_agg" --aggregated --workers "$n"; fi
  if wanted kv-cost; then row kv-cost "${P}P:${D}D" "$kv_dis" "$kv_dis"; fi
  for policy in kv-aware least-loaded; do
    if wanted "$policy"; then
      row "$policy" "${P}P:${D}D" "$(goodput "$policy" --prefill "$P" --decode "$D")" "$kv_dis"
    fi
  done
  if wanted goodput; then goodput_rows "${P}P:${D}D" "$kv_dis" --prefill "$P" --decode "$D"; fi
done
echo
echo "wall time $(( $(date +%s) - start )) s"
