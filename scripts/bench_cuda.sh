#!/usr/bin/env bash
# The CUDA plugin's benchmarks and GPU checks, each side by side with its peer in the
# same run: decode attention (vs device-copy bandwidth and PyTorch SDPA), prefill attention (vs
# SDPA and our mma.sync kernel), MoE (vs torch._grouped_mm and our mma.sync kernels), the
# end-to-end engine step (vs its roofline), sampling, GEMM algorithms, the golden fixtures; plus
# the conformance suite on that GPU.
#
# Two steps, because the GPU machine has no toolchain for this project's dependencies:
#
#   scripts/bench_cuda.sh pack [build_dir] [strata_build_dir]
#       Here (x86-64, nvcc 13.0): builds strata_cuda, cuda_plugin_test and
#       decode_attention_bench in build_dir (default build-cuda), then packs them with
#       `strata` and libstrata_cpu.so (from strata_build_dir, default build_dir) and every
#       non-glibc library they load into out/cuda-bench/carry.tar.xz (~20 MB; out/ is
#       git-ignored).
#
#   scripts/bench_cuda.sh device [--quick]
#       On the GPU machine, from the repository root, with out/cuda-bench carried. The exact
#       device-tool call (run, kind nvidia-h200):
#         carry: ["out/cuda-bench"]
#         command: set -o pipefail; scripts/bench_cuda.sh device 2>&1 | tee $OUT/bench.log
#       Runs `strata plugin-test` (cuda vs cpu), cuda_plugin_test, decode_attention_bench and
#       bench/cuda/torch_sdpa_decode.py, then prints one markdown table; then the prefill part.
#
#   scripts/bench_cuda.sh device-prefill [--quick]
#       The prefill part alone (same call, `device-prefill` for `device`): plugin-test (all
#       ops, then attention_prefill with more seeds and compute-sanitizer memcheck),
#       prefill_attention_bench (--dump: outputs checked by torch_sdpa_prefill.py --check
#       against fp32 and SDPA), the same with --kernel mma (the mma.sync kernel) and --kernel
#       wgmma-cp (the wgmma kernel with cp.async loads) and torch_sdpa_prefill.py (SDPA flash
#       backend), then a TFLOP/s table with ours/SDPA, ours/mma and ours/cp.async ratios.
#
#   scripts/bench_cuda.sh device-step [decode_step_bench options: --quick, --batches 1,8,
#                                      --no-prefill, --chain-costs, ...]
#       (pack with BASELINE_PLUGIN=<an older libstrata_cuda.so> to time it too, same run)
#       The end-to-end engine step alone (same call, `device-step`; the log is step.log):
#       decode_step_bench runs strata's ModelRunner over libstrata_cuda.so with random weights
#       at Llama-3.1-8B and Qwen3-30B-A3B shapes: decode step time at batch 1, 8, 64 x 2k context
#       against the roofline (weights read + KV read over the measured device-copy bandwidth),
#       the host's logits copy and sampling time, a per-op profile (synchronized after each
#       op) and prefill tokens/s (2k and 8k prompts), printed as three markdown tables; with the
#       plugin's `sample` entry also the step as the engine runs it (ids back, not logits); with
#       --chain-costs, what each op's calls cost the graph-replayed step (a fourth table).
#
#   scripts/bench_cuda.sh device-sample [--quick]
#       On-device sampling alone: the `sample` conformance cases (seeds 1, 7, 99) with
#       compute-sanitizer memcheck and racecheck, then sample_bench (the kernel, its one-block
#       predecessor, and copying the logits back and sampling on the host, batch 1-64, vocab
#       128,256 and 151,936), bench/cuda/torch_sample.py (PyTorch's sort-based sampling, same
#       shapes) and a table of the two side by side.
#
#   scripts/bench_cuda.sh device-gemm [--quick]
#       Decode-shaped dense GEMMs (Llama-3.1-8B and Qwen3-30B-A3B projections at M = 1, 8, 64):
#       the plugin's cublasGemmEx call vs every cuBLASLt heuristic candidate, as GB/s over the
#       device-copy bandwidth.
#
#   scripts/bench_cuda.sh device-golden
#       Greedy generations of every golden fixture (tests/fixtures/models) with the CUDA plugin
#       vs transformers in bf16 on the same GPU and vs the fixtures' fp32 CPU references
#       (bench/cuda/golden_generate.py), with the fp32 top-2 logit margin where they part.
#
#   scripts/bench_cuda.sh device-moe [--quick]
#       The MoE part alone (same call, `device-moe`): plugin-test (all ops, then moe_experts,
#       moe_route and moe_route_experts with more seeds, compute-sanitizer memcheck and
#       racecheck), cuda_plugin_test,
#       moe_bench, moe_bench --kernel mma (the mma.sync GEMMs) and bench/cuda/torch_moe.py
#       (torch._grouped_mm, or a per-expert loop), a table of layer times with ours/torch and
#       mma/ours ratios and, for decode-sized shapes, the GB/s of expert weights touched over
#       the measured device-copy bandwidth.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CARRY=$ROOT/out/cuda-bench

pack() {
  local build=${1:-$ROOT/build-cuda} strata_build=${2:-${1:-$ROOT/build-cuda}}
  ninja -C "$build" -j${JOBS:-2} strata_cuda cuda_plugin_test decode_attention_bench \
    prefill_attention_bench moe_bench decode_step_bench sample_bench gemm_bench
  local files=("$build/bin/libstrata_cuda.so" "$build/bin/cuda_plugin_test"
               "$build/bin/decode_attention_bench" "$build/bin/prefill_attention_bench"
               "$build/bin/moe_bench" "$build/bin/decode_step_bench" "$build/bin/sample_bench"
               "$build/bin/gemm_bench"
               "$strata_build/bin/strata" "$strata_build/bin/libstrata_cpu.so")
  # Optional baseline: BASELINE_BENCH=<an older decode_attention_bench> is timed in the same
  # device run, and an old-vs-new table is printed.
  # BASELINE_PLUGIN=<an older libstrata_cuda.so> makes device-step run decode_step_bench over it
  # too, in the same run, and print an old-vs-new table of the served decode step.
  local base_dir=""
  if [[ -n ${BASELINE_BENCH:-} || -n ${BASELINE_PLUGIN:-} ]]; then base_dir=$(mktemp -d); fi
  if [[ -n ${BASELINE_BENCH:-} ]]; then
    cp "$BASELINE_BENCH" "$base_dir/decode_attention_bench_base"
    files+=("$base_dir/decode_attention_bench_base")
  fi
  if [[ -n ${BASELINE_PLUGIN:-} ]]; then
    cp "$BASELINE_PLUGIN" "$base_dir/libstrata_cuda_base.so"
    files+=("$base_dir/libstrata_cuda_base.so")
  fi
  # Optional tile-shape variants: PREFILL_VARIANTS="<prefill_attention_bench_NAME ...>" (built
  # by hand with -DSTRATA_PREFILL_*) are run with --quick after the main prefill bench.
  # Optional MoE variants: MOE_VARIANTS="<moe_bench_NAME ...>" (built by hand, e.g. with
  # -DSTRATA_MOE_PDL=0) are run with --quick after the main MoE bench.
  # EXTRA_FILES="<more binaries>" are carried too (e.g. engine_test, kv_offload_bench).
  for f in ${PREFILL_VARIANTS:-} ${MOE_VARIANTS:-} ${EXTRA_FILES:-}; do files+=("$f"); done
  # The binaries and every non-glibc library they load, OpenBLAS included.
  "$ROOT/scripts/pack_carry.sh" "$CARRY/carry.tar.xz" "${files[@]}"
  [[ -n $base_dir ]] && rm -rf "$base_dir"
  ls -la "$CARRY"
}

# Unpacks the carried build into /tmp/cuda-bench (once) and sets LD_LIBRARY_PATH.
unpack() {
  work=/tmp/cuda-bench
  if [[ ! -x $work/bin/strata ]]; then
    mkdir -p "$work"
    tar -C "$work" -xJf "$CARRY/carry.tar.xz"
  fi
  local cublas
  cublas=$(dirname "$(find / -name 'libcublas.so.13*' -path '*cuda*' 2>/dev/null | head -1)")
  export LD_LIBRARY_PATH=$work/lib:$cublas:${LD_LIBRARY_PATH:-}
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
}

device() {
  local quick=${1:-}
  local work
  unpack
  echo "== strata plugin-test (cuda vs cpu reference)"
  "$work/bin/strata" plugin-test --plugin "$work/bin/libstrata_cuda.so" --reference cpu 2>&1 |
    tail -n 15
  echo "== attention_decode: more seeds, verbose; compute-sanitizer memcheck and racecheck"
  local test=("$work/bin/strata" plugin-test --plugin "$work/bin/libstrata_cuda.so" --op attention_decode)
  "${test[@]}" --seed 7 --verbose 2>&1 | tail -n 8
  "${test[@]}" --seed 99 2>&1 | tail -n 1
  "$ROOT/scripts/compute_sanitize.sh" "${test[@]}"
  echo "== cuda_plugin_test"
  "$work/bin/cuda_plugin_test" 2>&1 | tail -n 4
  echo "== decode_attention_bench"
  "$work/bin/decode_attention_bench" $quick | tee "$work/ours.txt"
  if [[ -x $work/bin/decode_attention_bench_base ]]; then
    echo "== decode_attention_bench_base (baseline build)"
    "$work/bin/decode_attention_bench_base" $quick > "$work/base.txt"
  fi
  echo "== torch_sdpa_decode.py"
  PYTHONUNBUFFERED=1 python3 "$ROOT/bench/cuda/torch_sdpa_decode.py" $quick | tee "$work/torch.txt"
  echo
  table "$work/ours.txt" "$work/torch.txt"
  if [[ -f $work/base.txt ]]; then
    echo
    compare "$work/base.txt" "$work/ours.txt"
  fi
  echo
  prefill "$quick"
}

# Prefill attention: conformance focused on attention_prefill, then ours vs SDPA.
prefill() {
  local quick=${1:-}
  local work
  unpack
  echo "== strata plugin-test (cuda vs cpu reference)"
  "$work/bin/strata" plugin-test --plugin "$work/bin/libstrata_cuda.so" --reference cpu 2>&1 |
    tail -n 15
  echo "== attention_prefill: more seeds, verbose; compute-sanitizer memcheck and racecheck"
  local test=("$work/bin/strata" plugin-test --plugin "$work/bin/libstrata_cuda.so" --op attention_prefill)
  "${test[@]}" --seed 7 --verbose 2>&1 | tail -n 8
  "${test[@]}" --seed 99 2>&1 | tail -n 1
  "$ROOT/scripts/compute_sanitize.sh" "${test[@]}"
  echo "== prefill_attention_bench"
  mkdir -p "$work/dump"
  "$work/bin/prefill_attention_bench" $quick --dump "$work/dump" | tee "$work/prefill_ours.txt"
  echo "== prefill_attention_bench --kernel mma (the mma.sync kernel, same-run comparison)"
  "$work/bin/prefill_attention_bench" $quick --kernel mma | tee "$work/prefill_mma.txt"
  echo "== prefill_attention_bench --kernel wgmma-cp (wgmma with cp.async loads, same-run comparison)"
  "$work/bin/prefill_attention_bench" $quick --kernel wgmma-cp | tee "$work/prefill_cp.txt"
  echo "== torch_sdpa_prefill.py"
  PYTHONUNBUFFERED=1 python3 "$ROOT/bench/cuda/torch_sdpa_prefill.py" $quick --check "$work/dump" |
    tee "$work/prefill_torch.txt"
  local variant
  for variant in "$work"/bin/prefill_attention_bench_*; do
    [[ -x $variant ]] || continue
    echo "== variant ${variant##*/prefill_attention_bench_} (--quick)"
    "$variant" --quick | grep -v '^CSV'
  done
  echo
  prefill_table "$work/prefill_ours.txt" "$work/prefill_torch.txt" "$work/prefill_mma.txt" \
    "$work/prefill_cp.txt"
}

# Greedy generations of the golden fixtures: strata with the CUDA plugin vs transformers (bf16)
# on the same GPU and vs the fixtures' fp32 CPU references.
golden() {
  local work
  unpack
  echo "== golden_generate.py"
  PYTHONUNBUFFERED=1 python3 "$ROOT/bench/cuda/golden_generate.py" --strata "$work/bin/strata" \
    --plugin "$work/bin/libstrata_cuda.so" "$@" 2>&1 | grep -v -e Warning -e forward_call \
    -e 'output = func' -e 'Loading weights' -e deprecated
}

# Decode-shaped GEMMs: the plugin's cublasGemmEx call vs cuBLASLt's heuristic candidates.
gemm() {
  local work
  unpack
  echo "== gemm_bench"
  "$work/bin/gemm_bench" "$@"
}

# MoE layer: conformance focused on the MoE ops, then ours vs PyTorch.
moe() {
  local quick=${1:-}
  local work
  unpack
  echo "== strata plugin-test (cuda vs cpu reference)"
  "$work/bin/strata" plugin-test --plugin "$work/bin/libstrata_cuda.so" --reference cpu 2>&1 |
    tail -n 15
  echo "== moe_experts / moe_route / moe_route_experts: more seeds, verbose; compute-sanitizer"
  local op
  for op in moe_experts moe_route moe_route_experts; do
    local test=("$work/bin/strata" plugin-test --plugin "$work/bin/libstrata_cuda.so" --op $op)
    "${test[@]}" --seed 7 --verbose 2>&1 | tail -n 9
    "${test[@]}" --seed 99 2>&1 | tail -n 1
    if command -v compute-sanitizer >/dev/null; then
      compute-sanitizer --tool memcheck --print-limit 2 "${test[@]}" 2>&1 | grep -v PASS |
        head -n 40 || true
      compute-sanitizer --tool racecheck "${test[@]}" 2>&1 | tail -n 3 || true
    fi
  done
  echo "== cuda_plugin_test"
  "$work/bin/cuda_plugin_test" 2>&1 | tail -n 4
  echo "== moe_bench"
  "$work/bin/moe_bench" $quick | tee "$work/moe_ours.txt"
  echo "== moe_bench --kernel mma (the mma.sync kernels, for the same-run comparison)"
  "$work/bin/moe_bench" $quick --kernel mma | tee "$work/moe_mma.txt"
  echo "== torch_moe.py"
  PYTHONUNBUFFERED=1 python3 "$ROOT/bench/cuda/torch_moe.py" $quick | tee "$work/moe_torch.txt"
  local variant
  for variant in "$work"/bin/moe_bench_*; do
    [[ -x $variant ]] || continue
    echo "== variant ${variant##*/moe_bench_} (--quick)"
    "$variant" --quick | grep -v '^CSV'
  done
  echo
  moe_table "$work/moe_ours.txt" "$work/moe_torch.txt" "$work/moe_mma.txt"
}

# End-to-end engine step: decode vs its roofline, and prefill tokens/s.
step() {
  local work
  unpack
  echo "== decode_step_bench $*"
  "$work/bin/decode_step_bench" "$@" | tee "$work/step.txt"
  echo
  step_table "$work/step.txt"
  if [[ -f $work/bin/libstrata_cuda_base.so ]]; then
    echo "== decode_step_bench --plugin libstrata_cuda_base.so (the baseline, same run)"
    "$work/bin/decode_step_bench" "$@" --plugin "$work/bin/libstrata_cuda_base.so" |
      tee "$work/step_base.txt"
    echo
    step_compare "$work/step_base.txt" "$work/step.txt"
  fi
}

# The served decode step (graph replay, on-device greedy sampling) of a baseline run ($1) and
# this build's run ($2), side by side: ms and x roofline per model and batch.
step_compare() {
  awk '
    FNR == 1 { file++ }
    /sampled, graph replay: greedy step/ {
      k = $1 "|" $4
      match($0, /greedy step +[0-9.]+ ms \(ratio +[0-9.]+\)/)
      split(substr($0, RSTART, RLENGTH), f, /[ ()]+/)
      if (file == 1) { bms[k] = f[3]; br[k] = f[6] } else { nms[k] = f[3]; nr[k] = f[6]; order[n++] = k }
    }
    END {
      print "| model | batch | baseline ms (x roofline) | this build ms (x roofline) | baseline / this |"
      print "|---|---:|---:|---:|---:|"
      for (i = 0; i < n; ++i) {
        k = order[i]; split(k, m, "|")
        printf "| %s | %s | %s | %.2f (%.2f) | %s |\n", m[1], m[2],
          (k in bms) ? sprintf("%.2f (%.2f)", bms[k], br[k]) : "-", nms[k], nr[k],
          (k in bms) ? sprintf("%.3f", bms[k] / nms[k]) : "-"
      }
    }' "$1" "$2"
}

# On-device sampling: the plugin's sample entry (conformance, sanitizers) and sample_bench.
sample() {
  local quick=${1:-}
  local work
  unpack
  echo "== sample: conformance against the CPU plugin, several seeds; compute-sanitizer"
  local test=("$work/bin/strata" plugin-test --plugin "$work/bin/libstrata_cuda.so" --reference cpu --op sample)
  for seed in 1 7 99; do "${test[@]}" --seed "$seed" 2>&1 | tail -n 1; done
  if command -v compute-sanitizer >/dev/null; then
    compute-sanitizer --tool memcheck "${test[@]}" 2>&1 | tail -n 1 || true
    compute-sanitizer --tool racecheck "${test[@]}" 2>&1 | tail -n 1 || true
  fi
  echo "== sample_bench"
  "$work/bin/sample_bench" $quick | tee "$work/sample.txt" | grep -v '^CSV'
  echo "== torch_sample.py"
  PYTHONUNBUFFERED=1 python3 "$ROOT/bench/cuda/torch_sample.py" $quick | tee "$work/sample_torch.txt" |
    grep -v '^CSV'
  echo "== the sample kernel against PyTorch's sort-based sampling (same shapes, same call)"
  awk -F, '
    FNR == NR && /^CSV,/ { torch[$2 "," $3 "," $4] = $5; next }
    /^CSV,/ {
      if (!header++) {
        print "| batch | vocab | mode | cluster us | one-block us | torch us | torch / cluster |"
        print "|---:|---:|---|---:|---:|---:|---:|"
      }
      k = $2 "," $3 "," $4
      printf "| %s | %s | %s | %.1f | %.1f | %s | %s |\n", $2, $3, $4, $5, $6,
        (k in torch) ? sprintf("%.1f", torch[k]) : "-",
        (k in torch) ? sprintf("%.2f", torch[k] / $5) : "-"
    }' "$work/sample_torch.txt" "$work/sample.txt"
}

# Decode step vs roofline (one row per model x batch), then prefill tokens/s.
step_table() {
  awk -F, '
    $1 == "CSV" && $2 == "copy" { copy = $3 }
    $1 == "CSV" && $2 == "step" { steps[ns++] = $0 }
    $1 == "CSV" && $2 == "prefill" { prefills[np++] = $0 }
    $1 == "CSV" && $2 == "op" { k = $3 "|" $4; if (!(k in seen)) { seen[k] = 1; points[npt++] = k }
                                if (!($5 in isop)) { isop[$5] = 1; ops[nop++] = $5 }
                                opms[k "|" $5] = $7; opcalls[k "|" $5] = $6 }
    $1 == "CSV" && $2 == "opsum" { k = $3 "|" $4; opsum[k] = $5; opstep[k] = $6; gemmbw[k] = $7 }
    $1 == "CSV" && $2 == "sampled" { sampled[nsm++] = $0 }
    $1 == "CSV" && $2 == "chain" { chain[nch++] = $0 }
    END {
      printf "device copy bandwidth (D2D, read+write): %.0f GB/s\n\n", copy
      print "| model | batch | ctx | step ms (median) | p90 ms | roofline ms | step/roofline | (step - logits D2H)/roofline | weights read GB | KV read GB | experts/layer counted | uniform-routing experts | step/uniform roofline | logits D2H+fp32 ms | host sample greedy ms | host sample top-p ms |"
      print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
      for (i = 0; i < ns; ++i) {
        split(steps[i], f, ",")
        moe = f[13] > 0
        printf "| %s | %d | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %s | %s | %s | %.2f | %.2f | %.1f |\n",
          f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[17], f[10], f[11],
          (moe ? sprintf("%.1f", f[12]) : "-"), (moe ? sprintf("%.1f", f[13]) : "-"),
          (moe ? sprintf("%.2f", f[15]) : "-"), f[16], f[18], f[19]
      }
      if (nsm) {
        print ""
        print "The step as the engine runs it with the plugin sample entry (ids back instead of logits):"
        print ""
        print "| model | batch | greedy step ms | step/roofline | top-p 0.9 step ms | step/roofline |"
        print "|---|---:|---:|---:|---:|---:|"
        for (i = 0; i < nsm; ++i) {
          split(sampled[i], f, ",")
          printf "| %s | %d | %.2f | %.2f | %.2f | %.2f |\n", f[3], f[4], f[5], f[6], f[7], f[8]
        }
      }
      if (npt) {
        print ""
        print "Per-op wall time of a decode step, ms/step (calls/step), with a stream synchronize after every op:"
        print ""
        hdr = "| model | batch |"; sep = "|---|---:|"
        for (j = 0; j < nop; ++j) { hdr = hdr " " ops[j] " |"; sep = sep "---:|" }
        print hdr " sum (synced) | step (unsynced) | gemm weights GB/s |"
        print sep "---:|---:|---:|"
        for (i = 0; i < npt; ++i) {
          k = points[i]; split(k, f, "|"); row = "| " f[1] " | " f[2] " |"
          for (j = 0; j < nop; ++j) {
            kk = k "|" ops[j]
            row = row ((kk in opms) ? sprintf(" %.2f (%d) |", opms[kk], opcalls[kk]) : " - |")
          }
          printf "%s %.2f | %.2f | %.0f |\n", row, opsum[k], opstep[k], gemmbw[k]
        }
      }
      if (nch) {
        print ""
        print "What each op costs the graph-replayed step where it sits in the kernel chain (--chain-costs: the step recorded again without those calls):"
        print ""
        print "| model | batch | op | calls left out | step without them ms | whole step ms | us per call |"
        print "|---|---:|---|---|---:|---:|---:|"
        for (i = 0; i < nch; ++i) {
          split(chain[i], f, ",")
          if (f[6] == "layer") which = sprintf("call %d of %d per layer (%d)", f[8], f[9], f[7])
          else if (f[6] == "after") which = sprintf("the %d after the layers", f[7])
          else which = sprintf("all %d of the step", f[7])
          printf "| %s | %d | %s | %s | %.3f | %.3f | %.2f |\n", f[3], f[4], f[5], which, f[10], f[11], f[12]
        }
      }
      if (np) {
        print ""
        print "| model | prompt tokens | prefill ms | tokens/s |"
        print "|---|---:|---:|---:|"
      }
      for (i = 0; i < np; ++i) {
        split(prefills[i], f, ",")
        printf "| %s | %d | %.1f | %.0f |\n", f[3], f[4], f[5], f[6]
      }
    }' "$1"
}

# MoE layer time, ours and PyTorch side by side; weights GB/s over copy for <= 64 tokens.
moe_table() {
  awk -F, '
    FNR == 1 { file++ }
    $1 == "CSV" && $2 == "copy" && file == 1 { copy = $3 }
    $1 == "CSV" && $2 == "ours" && file == 1 { k = $3 "|" $4; us[k] = $5; tf[k] = $6; ex[k] = $7;
                                               gbs[k] = $8; err[k] = $9; sep[k] = $10; order[n++] = k }
    $1 == "CSV" && $2 == "ours" && file == 3 { mus[$3 "|" $4] = $5 }
    $1 == "CSV" && $2 == "torch" { k = $3 "|" $4; tus[k] = $5; ttf[k] = $6; mode = $7 }
    END {
      printf "device copy bandwidth (D2D, read+write): %.0f GB/s; torch mode: %s\n\n", copy, mode
      print "| model | tokens | ours us | ours TFLOP/s | experts touched | weights GB/s | of copy | route kernel + experts us | that/ours | torch us | torch TFLOP/s | torch/ours | mma.sync us | mma/ours | ours vs mma |"
      print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
      for (i = 0; i < n; ++i) {
        k = order[i]; split(k, f, "|")
        t = (k in tus) ? tus[k] : 0
        mm = (k in mus) ? mus[k] : 0
        dec = f[2] <= 64
        printf "| %s | %d | %.1f | %.1f | %.1f | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", f[1], f[2],
          us[k], tf[k], ex[k], (dec ? sprintf("%.0f", gbs[k]) : "-"),
          (dec ? sprintf("%.2f", gbs[k] / copy) : "-"),
          (sep[k] != "" ? sprintf("%.1f", sep[k]) : "-"),
          (sep[k] != "" ? sprintf("%.2f", sep[k] / us[k]) : "-"), (t ? sprintf("%.1f", t) : "-"),
          (t ? sprintf("%.1f", ttf[k]) : "-"), (t ? sprintf("%.2f", t / us[k]) : "-"),
          (mm ? sprintf("%.1f", mm) : "-"), (mm ? sprintf("%.2f", mm / us[k]) : "-"),
          (err[k] != "" && err[k] >= 0 ? sprintf("%.1e", err[k]) : "-")
      }
    }' "$1" "$2" "${3:-/dev/null}"
}

# Prefill TFLOP/s, ours and SDPA side by side, plus the correctness columns; with a third file
# (the mma.sync kernel's run) and a fourth (the wgmma kernel with cp.async loads), their
# TFLOP/s too.
prefill_table() {
  awk -F, '
    FNR == 1 { file++ }
    $1 == "CSV" && $2 == "ours" && file == 3 { v1[$3 "|" $4] = $6 }
    $1 == "CSV" && $2 == "ours" && file == 4 { cp[$3 "|" $4] = $6 }
    $1 == "CSV" && $2 == "ours" && file == 1 { k = $3 "|" $4; us[k] = $5; tf[k] = $6; err[k] = $7;
                                               kernel = $9; order[n++] = k }
    $1 == "CSV" && $2 == "torch" { k = $3 "|" $4; tus[k] = $5; ttf[k] = $6 }
    $1 == "CSV" && $2 == "check" { checks[nc++] = $0 }
    END {
      print "kernel: " kernel
      print "| model | tokens | ours us | ours TFLOP/s | err vs general | SDPA us | SDPA TFLOP/s | ours/SDPA | mma TFLOP/s | ours/mma | cp.async loads TFLOP/s | ours/cp |"
      print "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
      for (i = 0; i < n; ++i) {
        k = order[i]; split(k, f, "|")
        t = (k in ttf) ? ttf[k] : 0
        o = (k in v1) ? v1[k] : 0
        w = (k in cp) ? cp[k] : 0
        printf "| %s | %s | %.1f | %.1f | %s | %s | %s | %s | %s | %s | %s | %s |\n", f[1], f[2], us[k], tf[k],
          (err[k] < 0 ? "-" : sprintf("%.1e", err[k])), (t ? sprintf("%.1f", tus[k]) : "-"),
          (t ? sprintf("%.1f", t) : "-"), (t ? sprintf("%.2f", tf[k] / t) : "-"),
          (o ? sprintf("%.1f", o) : "-"), (o ? sprintf("%.2f", tf[k] / o) : "-"),
          (w ? sprintf("%.1f", w) : "-"), (w ? sprintf("%.2f", tf[k] / w) : "-")
      }
      if (nc) {
        print ""
        print "| model | tokens | ours vs fp32 | SDPA vs fp32 | ours vs SDPA |"
        print "|---|---:|---:|---:|---:|"
        for (i = 0; i < nc; ++i) {
          split(checks[i], c, ",")
          printf "| %s | %s | %s | %s | %s |\n", c[3], c[4], c[5], c[6], c[7]
        }
      }
    }' "$1" "$2" "${3:-/dev/null}" "${4:-/dev/null}"
}

# Old (baseline build) vs new, same run: time per call and fraction of copy bandwidth.
compare() {
  awk -F, '
    FNR == 1 { file++ }
    $1 == "CSV" && $2 == "copy" { copy = $3 }
    $1 == "CSV" && $2 == "ours" && file == 1 { k = $3 "|" $4 "|" $5; old[k] = $6; osp[k] = $8 }
    $1 == "CSV" && $2 == "ours" && file == 2 { k = $3 "|" $4 "|" $5; new[k] = $6; nsp[k] = $8;
                                               gbs[k] = $7; order[n++] = k }
    END {
      print "| model | batch | ctx | old us | new us | old/new | old/copy | new/copy | splits |"
      print "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
      for (i = 0; i < n; ++i) {
        k = order[i]; split(k, f, "|")
        if (!(k in old)) continue
        ob = gbs[k] * new[k] / old[k]
        printf "| %s | %d | %d | %.1f | %.1f | %.2f | %.2f | %.2f | %d |\n", f[1], f[2], f[3],
          old[k], new[k], old[k] / new[k], ob / copy, gbs[k] / copy, nsp[k]
      }
    }' "$1" "$2"
}

# One markdown table from the two CSV streams.
table() {
  cat "$1" "$2" | awk -F, '
    $1 == "CSV" && $2 == "copy" { copy = $3 }
    $1 == "CSV" && $2 == "ours" { k = $3 "|" $4 "|" $5; ours[k] = $7; us[k] = $6; sp[k] = $8;
                                  err[k] = $9; order[n++] = k }
    $1 == "CSV" && $2 == "torch" { k = $3 "|" $4 "|" $5; torch[k] = $7; tus[k] = $6; mode = $8 }
    END {
      printf "device copy bandwidth (D2D, read+write): %.0f GB/s; torch SDPA mode: %s\n\n", copy, mode
      print "| model | batch | ctx | ours us | ours GB/s | ours/copy | splits | err vs general | torch us | torch GB/s | ours/torch |"
      print "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
      for (i = 0; i < n; ++i) {
        k = order[i]; split(k, f, "|")
        t = (k in torch) ? torch[k] : 0
        printf "| %s | %d | %d | %.1f | %.0f | %.2f | %d | %.1e | %s | %s | %s |\n", f[1], f[2], f[3],
          us[k], ours[k], ours[k] / copy, sp[k], err[k], (t ? sprintf("%.1f", tus[k]) : "-"),
          (t ? sprintf("%.0f", t) : "-"), (t ? sprintf("%.2f", ours[k] / t) : "-")
      }
    }'
}

case ${1:-} in
  pack) shift; pack "$@" ;;
  device) shift; device "$@" ;;
  device-prefill) shift; prefill "$@" ;;
  device-moe) shift; moe "$@" ;;
  device-step) shift; step "$@" ;;
  device-sample) shift; sample "$@" ;;
  device-gemm) shift; gemm "$@" ;;
  device-golden) shift; golden "$@" ;;
  step-table) shift; step_table "$@" ;;
  moe-table) shift; moe_table "$@" ;;
  prefill-table) shift; prefill_table "$@" ;;
  table) shift; table "$@" ;;
  compare) shift; compare "$@" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 2 ;;
esac
