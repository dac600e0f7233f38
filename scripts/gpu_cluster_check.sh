#!/usr/bin/env bash
# The GPU cluster check (on a machine with an NVIDIA GPU): `strata up` with the CUDA plugin,
# disaggregated (1 prefill + 2 decode workers on GPU 0) and mixed, on the trained golden
# fixtures: greedy outputs identical to `strata generate --plugin cuda` and the references, KV
# over CUDA IPC, prefix-cache hits, a G2 fetch, the openai client's streaming chat, GPU memory
# back to baseline after cancels, a decode worker SIGKILLed mid-stream; then (first fixture) 1
# prefill + 1 decode on the staged path (pinned host + UCX) with G3 and G4 tiers: same text, a
# prompt pushed down to G3/G4 served back. scripts/gpu_disagg.sh runs it on the device. Prints one line per
# check and "N passed, M failed"; exits 1 on any failure.
#
#   scripts/gpu_cluster_check.sh [BIN_DIR] [FIXTURE ...]
#
# BIN_DIR (default build/bin) holds strata and libstrata_cuda.so. Needs python3 with the
# `openai` package (PYTHONPATH may point at a pip --target directory).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../build/bin}
shift || true
exec python3 "$here/gpu_cluster_check.py" "$bin" "$@"
