"""Sim-to-real on the GPU: `strata sim` with a GPU profile against the replays of
scripts/gpu_replay.py (same trace windows, same cluster shapes, same policy), TTFT and TPOT
p50/p90 side by side with the ratio sim / real and the 20% tolerance.

Usage: gpu_sim_vs_real.py STRATA --replays DIR --profile FILE --trace FILE [--trace FILE]
         [--start 600] [--duration 30] [--speedup 0.5,1] [--max-output-tokens 256]
         [--max-batch-tokens 8192] [--policy kv-aware] [--slo-ttft 2] [--slo-tpot 0.1]
DIR holds the replays as gpu_replay.py writes them (TRACE-MODE/summary.json and row.json, whose
kv_blocks sizes the simulated pools). --speedup takes one value per --trace. The 1P+1D replays
ran both workers on one GPU, so they are simulated --colocated (time-sliced); --apart simulates
them as two devices instead.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

KEYS = [("ttft_p50_s", "TTFT p50"), ("ttft_p90_s", "TTFT p90"), ("tpot_p50_s", "TPOT p50"),
        ("tpot_p90_s", "TPOT p90")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("strata")
    ap.add_argument("--replays", required=True)
    ap.add_argument("--profile", required=True)
    ap.add_argument("--trace", action="append", required=True)
    ap.add_argument("--start", type=float, default=600)
    ap.add_argument("--duration", type=float, default=30)
    ap.add_argument("--speedup", default="1")
    ap.add_argument("--max-output-tokens", type=int, default=256)
    ap.add_argument("--max-batch-tokens", type=int, default=8192)
    ap.add_argument("--policy", default="kv-aware")
    ap.add_argument("--slo-ttft", type=float, default=2)
    ap.add_argument("--slo-tpot", type=float, default=0.1)
    ap.add_argument("--apart", action="store_true",
                    help="simulate 1P+1D as two devices rather than colocated on one")
    args = ap.parse_args()
    speedups = [float(x) for x in args.speedup.split(",")]
    if len(speedups) == 1:
        speedups *= len(args.trace)
    tmp = tempfile.mkdtemp(prefix="strata_gpu_sim_")
    rows = []
    for trace, speedup in zip(args.trace, speedups):
        tname = os.path.splitext(os.path.basename(trace))[0]
        for mode, shape in (("mixed", ["--aggregated", "--workers", "1"]),
                            ("disagg", ["--prefill", "1", "--decode", "1"] +
                             ([] if args.apart else ["--colocated"]))):
            run = os.path.join(args.replays, f"{tname}-{mode}")
            if not os.path.exists(os.path.join(run, "summary.json")):
                continue
            with open(os.path.join(run, "summary.json")) as f:
                real = json.load(f)
            blocks = 0
            if os.path.exists(os.path.join(run, "row.json")):
                with open(os.path.join(run, "row.json")) as f:
                    blocks = json.load(f).get("kv_blocks", 0)
            out = os.path.join(tmp, f"{tname}-{mode}")
            cmd = [args.strata, "sim", "--trace", trace, "--profile", args.profile,
                   "--policy", args.policy, "--start", str(args.start), "--duration",
                   str(args.duration), "--speedup", str(speedup), "--max-output-tokens",
                   str(args.max_output_tokens), "--clip", "truncate", "--max-batch-tokens",
                   str(args.max_batch_tokens), "--slo-ttft", str(args.slo_ttft), "--slo-tpot",
                   str(args.slo_tpot), "--out", out, "--quiet", *shape]
            if blocks > 0:
                cmd += ["--kv-blocks", str(blocks)]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                print(f"{tname} {mode}: sim exited {done.returncode}: {done.stderr[-800:]}")
                continue
            with open(os.path.join(out, "summary.json")) as f:
                sim = json.load(f)
            rows.append((tname, mode, real, sim))
    print(f"profile {os.path.basename(args.profile)}, policy {args.policy}, window "
          f"{args.start:g}+{args.duration:g} s, 1P+1D {'apart' if args.apart else 'colocated'}; "
          f"ratio = sim / real, tolerance 20%")
    print("| trace | cluster | measure | real | sim | sim / real | within 20% |")
    print("|---|---|---|---:|---:|---:|---|")
    within = total = 0
    for tname, mode, real, sim in rows:
        for key, label in KEYS:
            r, s = real.get(key), sim.get(key)
            if not r or s is None:
                continue
            ratio = s / r
            ok = abs(ratio - 1) <= 0.2
            within += ok
            total += 1
            print(f"| {tname} | {mode} | {label} | {r * 1e3:.1f} ms | {s * 1e3:.1f} ms | "
                  f"{ratio:.3f} | {'yes' if ok else 'no'} |")
    print(f"\n{within} of {total} figures within 20%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
