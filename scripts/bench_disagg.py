"""Disaggregated vs mixed serving on one GPU, side by side in one run, same load:

  ttft  TTFT of an 8,192-token prompt (one at a time, 2 s apart, 4 output tokens);
  itl   inter-token latency of 24 decode streams (512-token prompts, 768 output tokens) while
        32,768-token prompts (1 output token) arrive every 2 s: what disaggregation is for.

Each round starts `strata up` mixed (1 mixed worker) and disaggregated (1 prefill + 1 decode on
GPU 0, each its own share of the memory), replays both loads with `strata replay` against it,
and reads the summaries; rounds alternate the order. Prints one table (medians over rounds).

Usage: bench_disagg.py BIN_DIR [--model preset:tiny-llama-32k] [--rounds 2] [--out DIR]
       [--plugin PATH] [--max-num-batched-tokens 2048]
BIN_DIR holds `strata` and libstrata_cuda.so (scripts/gpu_disagg.sh device runs this).
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))
import cluster_util as cu  # noqa: E402
from gpu_common import one_gpu_cluster  # noqa: E402


def write_traces(tmp):
    ttft = os.path.join(tmp, "ttft.jsonl")
    with open(ttft, "w") as f:
        for i in range(8):
            f.write(json.dumps({"arrival_s": 2.0 * i, "input_tokens": 8192,
                                "output_tokens": 4}) + "\n")
    itl = os.path.join(tmp, "itl.jsonl")
    rows = [{"arrival_s": 0.04 * i, "input_tokens": 512, "output_tokens": 768}
            for i in range(24)]
    rows += [{"arrival_s": 1.0 + 2.0 * k, "input_tokens": 32768 - 64, "output_tokens": 1}
             for k in range(6)]
    rows.sort(key=lambda r: r["arrival_s"])
    with open(itl, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return ttft, itl


def replay(strata, port, trace, out):
    cmd = [strata, "replay", "--trace", trace, "--format", "strata", "--url",
           f"http://127.0.0.1:{port}/v1", "--out", out, "--quiet", "--timeout", "300"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"replay exited {done.returncode}: {done.stderr[-800:]}")
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bin_dir")
    ap.add_argument("--model", default="preset:tiny-llama-32k")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--plugin", default="")
    ap.add_argument("--max-num-batched-tokens", type=int, default=2048)
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    strata = os.path.join(os.path.abspath(args.bin_dir), "strata")
    args.plugin = args.plugin or os.path.join(os.path.abspath(args.bin_dir), "libstrata_cuda.so")
    tmp = tempfile.mkdtemp(prefix="strata_bench_disagg_")
    ttft_trace, itl_trace = write_traces(tmp)
    got = {"mixed": [], "disagg": []}
    try:
        for r in range(args.rounds):
            order = ["mixed", "disagg"] if r % 2 == 0 else ["disagg", "mixed"]
            for mode in order:
                run = os.path.join(tmp, f"{mode}-{r}")
                os.makedirs(run)
                up = cu.start_up(strata, run, one_gpu_cluster(args.model, args.plugin, args.max_num_batched_tokens, mode), timeout=300)
                try:
                    t = replay(strata, up.http, ttft_trace, os.path.join(run, "ttft"))
                    i = replay(strata, up.http, itl_trace, os.path.join(run, "itl"))
                finally:
                    rc = up.stop(signal.SIGTERM, timeout=60)
                row = {"ttft_p50": t["ttft_p50_s"], "ttft_p90": t["ttft_p90_s"],
                       "itl_p50": i["itl_p50_s"], "itl_p99": i["itl_p99_s"],
                       "completed": t["completed"] + i["completed"],
                       "failed": t["errors"] + i["errors"]}
                got[mode].append(row)
                print(f"round {r} {mode}: TTFT 8k p50 {row['ttft_p50'] * 1e3:.1f} ms, ITL p50 "
                      f"{row['itl_p50'] * 1e3:.2f} ms p99 {row['itl_p99'] * 1e3:.2f} ms, "
                      f"{row['completed']} completed, {row['failed']} failed (up exit {rc})",
                      flush=True)
                if args.out:
                    shutil.copytree(run, os.path.join(args.out, f"{mode}-{r}"),
                                    ignore=shutil.ignore_patterns("*.log", "logs", "*.jsonl"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def med(mode, key):
        return statistics.median(x[key] for x in got[mode])
    print(f"\n{args.model}, {args.rounds} rounds (medians), max_num_batched_tokens "
          f"{args.max_num_batched_tokens}")
    print("| measure | mixed | disaggregated (1P+1D, one GPU) | disagg / mixed |")
    print("| --- | --- | --- | --- |")
    for key, label in [("ttft_p50", "TTFT p50, 8k prompt"), ("ttft_p90", "TTFT p90, 8k prompt"),
                       ("itl_p50", "ITL p50 under 32k prefills"),
                       ("itl_p99", "ITL p99 under 32k prefills")]:
        m, d = med("mixed", key), med("disagg", key)
        print(f"| {label} | {m * 1e3:.2f} ms | {d * 1e3:.2f} ms | {d / m:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
