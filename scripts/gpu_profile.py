"""Profiles a mixed worker with the CUDA plugin on a GPU: starts `strata up` (one mixed worker,
GPU 0) with MODEL, runs `strata profile` against the worker with a grid sized for the GPU
(prompts up to --max-batch-tokens, decode batches up to 64), and writes the profile JSON.

Usage: gpu_profile.py BIN_DIR --model preset:llama-3.1-8b-shape --name NAME --out FILE
       [--hardware TEXT] [--plugin PATH] [--max-batch-tokens 8192] [--quick]
         [-- extra strata profile flags]
BIN_DIR holds `strata` and libstrata_cuda.so (scripts/gpu_disagg.sh device-profile runs it).
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))
import cluster_util as cu  # noqa: E402
from gpu_common import kv_block_capacity, one_gpu_cluster  # noqa: E402


def worker_url(text):
    """The mixed worker's HTTP URL, from the lines `strata up` prints when it serves."""
    m = re.search(r"mixed-0: http://127\.0\.0\.1:(\d+)/metrics", text)
    if m is None:
        raise RuntimeError("no mixed-0 HTTP port in strata up's output:\n" + text[-2000:])
    return f"http://127.0.0.1:{m.group(1)}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir")
    ap.add_argument("--model", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--hardware", default="")
    ap.add_argument("--plugin", default="")
    ap.add_argument("--max-batch-tokens", type=int, default=8192)
    ap.add_argument("--quick", action="store_true", help="a smaller grid, one repeat")
    ap.add_argument("extra", nargs="*")
    args = ap.parse_args()
    strata = os.path.join(os.path.abspath(args.bin_dir), "strata")
    plugin = args.plugin or os.path.join(os.path.abspath(args.bin_dir), "libstrata_cuda.so")
    if not args.hardware:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip().splitlines()
        args.hardware = (f"{gpu[0] if gpu else 'GPU'}, CUDA plugin, bf16, strata worker --role "
                         f"mixed, max_num_batched_tokens {args.max_batch_tokens}")
    tmp = tempfile.mkdtemp(prefix="strata_gpu_profile_")
    config = one_gpu_cluster(args.model, plugin, args.max_batch_tokens, "mixed")
    t0 = time.time()
    up = cu.start_up(strata, tmp, config, timeout=300)
    print(f"strata up serving after {time.time() - t0:.1f} s", flush=True)
    try:
        url = worker_url(up.output)
        with urllib.request.urlopen(url + "/v1/models", timeout=30) as r:
            served = json.load(r)["data"][0]["id"]
        mbt = args.max_batch_tokens
        # The worker's KV pool, recorded in the profile (the simulator sizes its pools by it).
        metrics = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
        capacity = kv_block_capacity(metrics)
        blocks = ["--num-kv-blocks", str(capacity)] if capacity else []
        lens = [n for n in (128, 512, 1024, 2048, 4096, 8192, 16384) if n <= mbt]
        grid = ["--prefill-lens", ",".join(map(str, lens)), "--prefill-batches", "1,2",
                "--decode-batches", "1,4,16,32,64", "--decode-lens", "512,2048",
                "--decode-tokens", "48", "--prefill-contexts", "2048,8192",
                "--prefill-context-lens", "512,2048", "--repeats", "3"]
        if args.quick:
            grid = ["--prefill-lens", ",".join(map(str, lens)), "--prefill-batches", "1",
                    "--decode-batches", "1,16,64", "--decode-lens", "512,2048",
                    "--decode-tokens", "32", "--prefill-contexts", "2048",
                    "--prefill-context-lens", "512", "--repeats", "1"]
        cmd = [strata, "profile", "--url", url, "--model", args.model, "--name", args.name,
               "--hardware", args.hardware, "--served-model-name", served,
               "--max-batch-tokens", str(mbt), "--max-running", "64", "--out", args.out, *blocks,
               *grid, *args.extra]
        print(" ".join(cmd), flush=True)
        t1 = time.time()
        done = subprocess.run(cmd, text=True, timeout=540)
        print(f"strata profile exited {done.returncode} after {time.time() - t1:.1f} s",
              flush=True)
        return done.returncode
    finally:
        up.stop(signal.SIGTERM, timeout=60)


if __name__ == "__main__":
    sys.exit(main())
