"""Replays windows of real traces against `strata up` with the CUDA plugin, mixed (1 mixed
worker) and disaggregated (1 prefill + 1 decode on GPU 0), and compares output tokens/s with the
decode-step roofline at the batch the run really had.

For each trace and mode: starts `strata up`, runs `strata replay --out` over the window, stops
the cluster, and keeps summary.json, requests.jsonl and the plots under OUT/TRACE-MODE/.
Roofline: a decode step must read the weights it uses (all but the embedding table; the experts
a batch of B routes to, expected) and the KV cache of the batch, at --hbm-gbps. The batch is
the mean number of requests decoding during the run (sum of their decode times / run time),
with their mean context; roofline tokens/s = batch / step seconds.

Usage: gpu_replay.py BIN_DIR --model preset:llama-3.1-8b-shape --trace FILE [--trace FILE]
         [--modes mixed,disagg] [--start 0] [--duration 60] [--speedup 1]
         [--max-output-tokens 512] [--max-num-batched-tokens 8192] [--hbm-gbps auto]
         [--out DIR] [--plugin PATH] [--slo-ttft S] [--slo-tpot S]
"""
import argparse
import json
import math
import os
import re
import shutil
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

# HBM bandwidth by GPU name (vendor data sheets, SXM parts), GB/s.
HBM_GBPS = {"H200": 4800.0, "H100": 3350.0, "A100": 2039.0}


def gpu_name():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout
        return out.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return ""


def step_bytes(cfg, batch, context):
    """Bytes one decode step of `batch` sequences with `context` tokens each must read (bf16)."""
    h, layers, vocab = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim") or h // heads
    attn = h * heads * d * 2 + h * kv_heads * d * 2
    experts = cfg.get("num_experts") or cfg.get("num_local_experts") or 0
    if experts:
        inter = cfg.get("moe_intermediate_size") or cfg["intermediate_size"]
        k = cfg["num_experts_per_tok"]
        used = experts * (1.0 - (1.0 - k / experts) ** max(batch, 1e-9))
        mlp = 3 * h * inter * used + experts * h
    else:
        mlp = 3 * h * cfg["intermediate_size"]
    weights = 2.0 * (layers * (attn + mlp + 2 * h) + h + vocab * h)  # lm_head, not the embedding
    kv = 2.0 * layers * 2 * kv_heads * d * batch * context
    return weights + kv


def decode_batch(requests_path):
    """(mean decoding requests, their mean context, output tokens) over the run."""
    rows = [json.loads(line) for line in open(requests_path)]
    rows = [r for r in rows if r.get("e2e_s") is not None and r.get("ttft_s") is not None
            and r.get("send_s") is not None]
    if not rows:
        return 0.0, 0.0, 0
    begin = min(r["send_s"] for r in rows)
    end = max(r["send_s"] + r["e2e_s"] for r in rows)
    busy = sum(r["e2e_s"] - r["ttft_s"] for r in rows)
    weighted_ctx = sum((r["e2e_s"] - r["ttft_s"]) * (r["prompt_tokens"] + r["completion_tokens"] / 2)
                       for r in rows)
    batch = busy / max(end - begin, 1e-9)
    ctx = weighted_ctx / busy if busy > 0 else 0.0
    return batch, ctx, sum(r["completion_tokens"] for r in rows)


def kv_blocks(metrics_urls):
    """Total KV blocks of the decode-capable workers, from their /metrics."""
    total = 0
    for name, url in metrics_urls:
        if not (name.startswith("mixed") or name.startswith("decode")):
            continue
        try:
            text = urllib.request.urlopen(url, timeout=10).read().decode()
        except OSError:
            continue
        total += kv_block_capacity(text) or 0
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir")
    ap.add_argument("--model", required=True)
    ap.add_argument("--trace", action="append", required=True)
    ap.add_argument("--modes", default="mixed,disagg")
    ap.add_argument("--start", type=float, default=0)
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--speedup", type=float, default=1)
    ap.add_argument("--max-output-tokens", type=int, default=512)
    ap.add_argument("--max-num-batched-tokens", type=int, default=8192)
    ap.add_argument("--hbm-gbps", default="auto")
    ap.add_argument("--slo-ttft", type=float, default=0)
    ap.add_argument("--slo-tpot", type=float, default=0)
    ap.add_argument("--plugin", default="")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    strata = os.path.join(os.path.abspath(args.bin_dir), "strata")
    args.plugin = args.plugin or os.path.join(os.path.abspath(args.bin_dir), "libstrata_cuda.so")
    gpu = gpu_name()
    if args.hbm_gbps == "auto":
        hbm = next((v for k, v in HBM_GBPS.items() if k in gpu), 0.0)
    else:
        hbm = float(args.hbm_gbps)
    out_root = args.out or tempfile.mkdtemp(prefix="strata_gpu_replay_")
    os.makedirs(out_root, exist_ok=True)
    rows = []
    for trace in args.trace:
        tname = os.path.splitext(os.path.basename(trace))[0]
        for mode in args.modes.split(","):
            tmp = tempfile.mkdtemp(prefix=f"strata_gpu_replay_{mode}_")
            t0 = time.time()
            up = cu.start_up(strata, tmp, one_gpu_cluster(args.model, args.plugin, args.max_num_batched_tokens, mode), timeout=300)
            model_dir = re.search(r"^model: (.*)$", up.output, re.M).group(1).strip()
            metrics = re.findall(r"^  (\S+): (http://\S+/metrics)$", up.output, re.M)
            print(f"{tname} {mode}: serving after {time.time() - t0:.1f} s", flush=True)
            run_out = os.path.join(out_root, f"{tname}-{mode}")
            cmd = [strata, "replay", "--trace", trace, "--url", f"http://127.0.0.1:{up.http}/v1",
                   "--start", str(args.start), "--duration", str(args.duration),
                   "--speedup", str(args.speedup), "--max-output-tokens",
                   str(args.max_output_tokens), "--clip", "truncate", "--out", run_out,
                   "--timeout", "600", "--quiet"]
            if args.slo_ttft > 0:
                cmd += ["--slo-ttft", str(args.slo_ttft)]
            if args.slo_tpot > 0:
                cmd += ["--slo-tpot", str(args.slo_tpot)]
            try:
                blocks = kv_blocks(metrics)
                t1 = time.time()
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
                wall = time.time() - t1
            finally:
                rc = up.stop(signal.SIGTERM, timeout=60)
                for name in os.listdir(os.path.join(tmp, "logs")) if os.path.isdir(
                        os.path.join(tmp, "logs")) else []:
                    if name.endswith(".log"):
                        os.makedirs(os.path.join(run_out, "logs"), exist_ok=True)
                        with open(os.path.join(tmp, "logs", name), "rb") as f:
                            tail = f.read()[-20000:]
                        with open(os.path.join(run_out, "logs", name), "wb") as f:
                            f.write(tail)
                shutil.rmtree(tmp, ignore_errors=True)
            if done.returncode != 0:
                print(f"{tname} {mode}: replay exited {done.returncode}: {done.stderr[-1500:]}",
                      flush=True)
                continue
            with open(os.path.join(run_out, "summary.json")) as f:
                s = json.load(f)
            with open(os.path.join(model_dir, "config.json")) as f:
                cfg = json.load(f)
            batch, ctx, out_tokens = decode_batch(os.path.join(run_out, "requests.jsonl"))
            roof = 0.0
            if hbm > 0 and batch > 0:
                roof = batch / (step_bytes(cfg, batch, ctx) / (hbm * 1e9))
            row = {"trace": tname, "mode": mode, "requests": s["requests"],
                   "completed": s["completed"], "errors": s["errors"],
                   "ttft_p50_s": s["ttft_p50_s"], "ttft_p90_s": s["ttft_p90_s"],
                   "tpot_p50_s": s["tpot_p50_s"], "tpot_p90_s": s["tpot_p90_s"],
                   "slo_attainment": s["slo_attainment"], "goodput_rps": s["goodput_rps"],
                   "output_tokens_per_s": s["output_tokens_per_s"],
                   "prefix_cache_hit_rate": s["prefix_cache_hit_rate"],
                   "mean_decode_batch": batch, "mean_decode_context": ctx,
                   "roofline_tokens_per_s": roof, "kv_blocks": blocks, "replay_wall_s": wall,
                   "up_exit": rc, "gpu": gpu, "hbm_gbps": hbm}
            rows.append(row)
            with open(os.path.join(run_out, "row.json"), "w") as f:
                json.dump(row, f, indent=2)
            print(json.dumps(row), flush=True)
    print(f"\n{args.model} on {gpu or 'unknown GPU'}, window {args.start:g}+{args.duration:g} s, "
          f"speedup {args.speedup:g}, outputs clipped to {args.max_output_tokens}")
    print("| trace | mode | done/sent | TTFT p50 / p90 | TPOT p50 / p90 | out tok/s | "
          "mean decode batch (ctx) | roofline tok/s | of roofline |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        ratio = r["output_tokens_per_s"] / r["roofline_tokens_per_s"] if r[
            "roofline_tokens_per_s"] > 0 else math.nan
        print(f"| {r['trace']} | {r['mode']} | {r['completed']}/{r['requests']} | "
              f"{r['ttft_p50_s'] * 1e3:.0f} / {r['ttft_p90_s'] * 1e3:.0f} ms | "
              f"{r['tpot_p50_s'] * 1e3:.1f} / {r['tpot_p90_s'] * 1e3:.1f} ms | "
              f"{r['output_tokens_per_s']:.0f} | {r['mean_decode_batch']:.1f} "
              f"({r['mean_decode_context']:.0f}) | {r['roofline_tokens_per_s']:.0f} | "
              f"{ratio:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
