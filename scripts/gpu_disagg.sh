#!/usr/bin/env bash
# The GPU disaggregation run: the device-memory transport paths and the cluster on a GPU.
#
#   scripts/gpu_disagg.sh pack [build_dir]
#       Here: builds strata, both plugins, kv_handoff_bench, cuda_ipc_test and cuda_plugin_test
#       in build_dir (default build) and packs them with their libraries into
#       out/gpu-disagg/carry.tar.xz (out/ is git-ignored). The check's Python client (`openai`
#       and what it needs) travels as wheels in .whl/ (see the device tool's README).
#
#   scripts/gpu_disagg.sh device [--quick]
#       On the GPU machine, from the repository root, with out/gpu-disagg and .whl carried:
#         carry: ["out/gpu-disagg", ".whl"]
#         command: set -o pipefail; scripts/gpu_disagg.sh device 2>&1 | tee $OUT/disagg.log
#       1. cuda_ipc_test (an exported pool written and read by another process), cuda_plugin_test
#          and `strata plugin-test` (the conformance suite, CUDA against the CPU reference);
#       2. kv_handoff_bench on the ipc path (vs one device copy of the same bytes) and on the
#          staged path (vs one device-to-host plus one host-to-device copy through pinned
#          memory), Llama-3.1-8B KV shape, 1k / 8k / 32k tokens;
#       3. scripts/gpu_cluster_check.sh (`strata up` with the CUDA plugin: disaggregated over ipc
#          and staged, mixed, tiers, faults), printing "N passed, M failed".
#       --quick: the benchmark at 1k and 8k tokens only, 3 iterations.
#
#   scripts/gpu_disagg.sh device-check [FIXTURE ...]
#       Step 3 alone.
#
#   scripts/gpu_disagg.sh device-masks [decode_step_bench options]
#       Constrained decoding's cost on the served decode step (decode_step_bench --masks): the
#       sampled, graph-replayed step with a JSON schema's token mask on every row against the
#       same step without, e.g. device-masks --model llama3.1-8b --batches 64.
#
#   scripts/gpu_disagg.sh device-sanitize
#       The conformance suite and cuda_ipc_test under compute-sanitizer memcheck, the attention
#       ops under racecheck (scripts/compute_sanitize.sh): any error fails the run (exit 1).
#
#   scripts/gpu_disagg.sh device-bench [bench_disagg.py options]
#       TTFT of 8k prompts and decode inter-token latency under 32k prefills, disaggregated
#       (1 prefill + 1 decode on the GPU) vs mixed, alternating rounds (scripts/bench_disagg.py).
#
#   scripts/gpu_disagg.sh device-profile [gpu_profile.py options]
#       `strata profile` of a mixed CUDA worker (scripts/gpu_profile.py), e.g.
#       device-profile --model preset:llama-3.1-8b-shape --name NAME --out $OUT/NAME.json
#
#   scripts/gpu_disagg.sh device-replay [gpu_replay.py options]
#       Trace windows against `strata up` with the CUDA plugin (scripts/gpu_replay.py); carry the
#       traces in an ignored folder (e.g. out/traces, copied from ../shared/traces).
#
#   scripts/gpu_disagg.sh device-generate [strata generate options]
#       `strata generate --plugin cuda` with the carried build, timed.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CARRY=$ROOT/out/gpu-disagg

pack() {
  local build=${1:-$ROOT/build}
  ninja -C "$build" strata strata_cuda strata_cpu kv_handoff_bench cuda_ipc_test cuda_plugin_test \
    decode_step_bench
  "$ROOT/scripts/pack_carry.sh" "$CARRY/carry.tar.xz" "$build/bin/strata" \
    "$build/bin/libstrata_cuda.so" "$build/bin/libstrata_cpu.so" "$build/bin/kv_handoff_bench" \
    "$build/bin/cuda_ipc_test" "$build/bin/cuda_plugin_test" "$build/bin/decode_step_bench"
}

# Unpacks the carried build (once) and sets the library paths and the Python client.
device_env() {
  local work=/tmp/gpu-disagg
  [[ -x $work/bin/strata ]] && [[ -n ${UCX_MODULE_DIR:-} ]] && return 0
  mkdir -p "$work"
  tar -C "$work" -xJf "$CARRY/carry.tar.xz"
  local cublas
  cublas=$(dirname "$(find / -name 'libcublas.so.13*' -path '*cuda*' 2>/dev/null | head -1)")
  export LD_LIBRARY_PATH=$work/lib:$cublas:${LD_LIBRARY_PATH:-}
  export UCX_MODULE_DIR=$work/lib/ucx
  if compgen -G "$ROOT/.whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site "$ROOT"/.whl/*.whl
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  fi
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  uname -r
}

device() {
  local quick=0
  [[ ${1:-} == --quick ]] && quick=1
  device_env
  local bin=/tmp/gpu-disagg/bin rc=0
  echo "== cuda_ipc_test"
  timeout 120 "$bin/cuda_ipc_test" || rc=1
  echo "== cuda_plugin_test"
  timeout 300 "$bin/cuda_plugin_test" 2>&1 | tail -5 || rc=1
  echo "== strata plugin-test (cuda vs cpu reference)"
  (cd "$bin" && timeout 300 ./strata plugin-test --plugin ./libstrata_cuda.so --reference cpu \
    2>&1 | tail -8) || rc=1
  local tokens=1024,8192,32768 iters=10
  if ((quick)); then tokens=1024,8192; iters=3; fi
  for path in ipc staged; do
    echo "== kv_handoff_bench --path $path"
    timeout 240 "$bin/kv_handoff_bench" --plugin "$bin/libstrata_cuda.so" --path "$path" \
      --tokens "$tokens" --iters "$iters" || rc=1
  done
  echo "== kv_handoff_bench --path staged --piece-mib 16 --slots 4"
  timeout 240 "$bin/kv_handoff_bench" --plugin "$bin/libstrata_cuda.so" --path staged \
    --piece-mib 16 --slots 4 --tokens "$tokens" --iters "$iters" || rc=1
  echo "== gpu_cluster_check"
  PYTHONUNBUFFERED=1 timeout 420 "$ROOT/scripts/gpu_cluster_check.sh" "$bin" || rc=1
  return $rc
}

# compute-sanitizer over the GPU code the cluster runs: any error it reports fails the run.
sanitize() {
  device_env
  local bin=/tmp/gpu-disagg/bin rc=0
  echo "== compute-sanitizer memcheck: the conformance suite (CUDA against the CPU reference)"
  (cd "$bin" && TOOLS=memcheck timeout 300 "$ROOT/scripts/compute_sanitize.sh" ./strata \
    plugin-test --plugin ./libstrata_cuda.so --reference cpu) || rc=1
  echo "== compute-sanitizer memcheck: cuda_ipc_test (export, map, batched copy kernels)"
  TOOLS=memcheck timeout 150 "$ROOT/scripts/compute_sanitize.sh" "$bin/cuda_ipc_test" || rc=1
  local op
  for op in attention_decode attention_prefill; do
    echo "== compute-sanitizer racecheck: $op"
    (cd "$bin" && TOOLS=racecheck timeout 120 "$ROOT/scripts/compute_sanitize.sh" ./strata \
      plugin-test --plugin ./libstrata_cuda.so --op "$op") || rc=1
  done
  echo "compute-sanitizer: $([[ $rc == 0 ]] && echo clean || echo FAILED)"
  return $rc
}

# TTFT and inter-token latency, disaggregated vs mixed on the GPU (scripts/bench_disagg.py).
bench() {
  device_env
  PYTHONUNBUFFERED=1 python3 "$ROOT/scripts/bench_disagg.py" /tmp/gpu-disagg/bin "$@"
}

case ${1:-} in
  pack) shift; pack "$@" ;;
  device) shift; device "$@" ;;
  device-bench) shift; bench "$@" ;;
  device-sanitize) shift; sanitize ;;
  device-profile) shift; device_env; PYTHONUNBUFFERED=1 python3 "$ROOT/scripts/gpu_profile.py" \
    /tmp/gpu-disagg/bin "$@" ;;
  device-replay) shift; device_env; PYTHONUNBUFFERED=1 python3 "$ROOT/scripts/gpu_replay.py" \
    /tmp/gpu-disagg/bin "$@" ;;
  device-generate) shift; device_env; (cd /tmp/gpu-disagg/bin && time ./strata generate \
    --plugin ./libstrata_cuda.so "$@") ;;
  device-masks) shift; device_env; (cd /tmp/gpu-disagg/bin && ./decode_step_bench --masks \
    --no-prefill --plugin ./libstrata_cuda.so "$@") ;;
  device-check) shift; device_env; PYTHONUNBUFFERED=1 "$ROOT/scripts/gpu_cluster_check.sh" \
    /tmp/gpu-disagg/bin "$@" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
