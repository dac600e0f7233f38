"""End-to-end: `strata up` a small local cluster, replay the first 40 requests of the Mooncake
conversation trace against it open-loop, and check summary.json: requests completed and the
trace's shared prefixes became real prefix-cache hits; then a two-probe --find-goodput with
--reseed-probes, whose probes must not hit each other's prompts.

Usage: replay_e2e_test.py STRATA REPLAY_BINARY TRACE   (exit 77 = skipped: no trace file)
REPLAY_BINARY is `strata_replay_cli` (or `strata` once it has the `replay` subcommand; the
script then passes `replay` first when the binary's name is `strata`).
"""
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time


def wait_for_line(proc, pattern, timeout):
    regex, buf, deadline = re.compile(pattern), b"", time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"strata up exited {proc.returncode}")
        r, _, _ = select.select([proc.stdout], [], [], 0.2)
        if r:
            buf += os.read(proc.stdout.fileno(), 4096)
            m = regex.search(buf.decode(errors="replace"))
            if m:
                return m
    raise RuntimeError(f"timed out waiting for {pattern}: {buf[-2000:]!r}")


def check_reseeded_probes(replay, url, trace, tmp):
    """--find-goodput --reseed-probes: two probes of 10 requests (~10k prompt tokens, which the
    workers' 1,024 blocks of 16 tokens hold), each with its own seed, so the second probe hits
    only the prefixes its own window shares (~45% of its tokens), never the first probe's
    prompts (which, with one seed for both, would be nearly all of them)."""
    out = os.path.join(tmp, "probes")
    argv = [replay] + (["replay"] if os.path.basename(replay) == "strata" else []) + [
        "--trace", trace, "--format", "mooncake", "--url", url, "--max-requests", "10",
        "--speedup", "10", "--max-output-tokens", "4", "--max-model-len", "1024",
        "--slo-ttft", "30", "--slo-tpot", "5", "--timeout", "60", "--seed", "7",
        "--find-goodput", "--reseed-probes", "--max-evaluations", "2", "--quiet", "--out", out]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=90)
    print(run.stdout)
    assert run.returncode == 0, f"find-goodput exited {run.returncode}: {run.stderr[-2000:]}"
    probes = sorted(d for d in os.listdir(out) if d.startswith("speedup_"))
    assert len(probes) == 2, probes
    for probe in probes:
        with open(os.path.join(out, probe, "summary.json")) as f:
            summary = json.load(f)
        print(probe, "prefix-cache hit rate", summary["prefix_cache_hit_rate"])
        assert summary["completed"] > 0, summary
        assert 0 < summary["prefix_cache_hit_rate"] < 0.75, (probe, summary)


def main():
    strata, replay, trace = sys.argv[1:4]
    if not os.path.exists(trace):
        print(f"SKIP: trace {trace} not found")
        return 77
    tmp = tempfile.mkdtemp(prefix="strata_replay_e2e_")
    up = None
    try:
        config = os.path.join(tmp, "cluster.yaml")
        # A 1024-token context (the router reports the model's own limit, so the replay is told
        # with --max-model-len): the replay truncates each ~7k-token Mooncake prompt to its first
        # 1020 tokens (2 blocks of 512), keeping the shared first block of the conversation.
        with open(config, "w") as f:
            f.write(f"prefill: {{count: 1}}\ndecode: {{count: 1}}\nrouter: {{http_port: 0}}\n"
                    f"engine: {{num_kv_blocks: 1024, max_model_len: 1024}}\n"
                    f"log_dir: {tmp}/logs\n")
        up = subprocess.Popen([strata, "up", "--config", config], stdout=subprocess.PIPE,
                              stderr=open(os.path.join(tmp, "up.err"), "wb"))
        m = wait_for_line(up, r"strata is serving at (http://127\.0\.0\.1:\d+/v1)", 90)
        out = os.path.join(tmp, "out")
        argv = [replay] + (["replay"] if os.path.basename(replay) == "strata" else []) + [
            "--trace", trace, "--format", "mooncake", "--url", m.group(1),
            "--max-requests", "40", "--speedup", "10", "--max-output-tokens", "4",
            "--max-model-len", "1024",
            "--slo-ttft", "30", "--slo-tpot", "5", "--timeout", "60", "--out", out]
        t0 = time.time()
        run = subprocess.run(argv, capture_output=True, text=True, timeout=90)
        print(run.stdout)
        print(run.stderr[-2000:], file=sys.stderr)
        print(f"replay took {time.time() - t0:.1f} s")
        assert run.returncode == 0, f"replay exited {run.returncode}"
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
        assert summary["requests"] == 40, summary
        assert summary["completed"] > 0, summary
        assert summary["prefix_cached_tokens"] > 0, summary
        assert 0 <= summary["slo_attainment"] <= 1, summary
        for name in ("requests.csv", "requests.jsonl", "ttft_cdf.svg", "tpot_cdf.svg",
                     "attainment.svg"):
            assert os.path.getsize(os.path.join(out, name)) > 0, name
        check_reseeded_probes(replay, m.group(1), trace, tmp)
        print("OK")
        return 0
    finally:
        if up is not None and up.poll() is None:
            up.send_signal(signal.SIGTERM)
            try:
                up.wait(60)
            except subprocess.TimeoutExpired:
                up.kill()
                up.wait()
        if os.environ.get("KEEP") is None: shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
