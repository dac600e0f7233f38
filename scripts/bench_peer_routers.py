#!/usr/bin/env python3
"""strata's router, vllm-router and sglang-router side by side in front of the same two strata
mixed workers, on one multi-turn chat workload.

For each router in turn: two fresh `strata worker --role mixed` processes (empty prefix caches),
registered with a strata router (which the strata run uses; the peer routers get the workers'
HTTP URLs with their default cache-aware policy), then S sessions of T chat turns each (a system
prompt shared by all sessions, or with --distinct-system one per session; every turn appends the
answer and a new user message, so a session's next prompt extends its previous one), C sessions
at a time, streaming, greedy, fixed output length.
Reported per router: wall time, requests/s, TTFT p50/p90/p99 as the client sees it, the share of
prompt tokens served from the workers' prefix caches (the usage each answer reports), and how the
prompt tokens the workers computed split over the two (their own counters).

Usage: scripts/bench_peer_routers.py [--strata build/bin/strata] [--sessions 32] [--turns 4]
           [--concurrency 8] [--max-tokens 16] [--routers strata,vllm-router,sglang-router]
           [--pin] [--distinct-system] [--json FILE]
Run it with the test venv's python (build/pyenv), which has vllm-router and sglang-router.
Loopback only; every process it starts is stopped at the end.
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))
import cluster_util as cu  # noqa: E402

MODEL = "tiny-llama"
SYSTEM = ("You are the operations assistant of a serving cluster. Answer briefly, name the "
          "component involved, and never invent metrics. ") * 4


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_peer(name, workers, log_dir):
    bin_dir = os.path.dirname(sys.executable)
    port = free_port()
    args = ["--host", "127.0.0.1", "--port", str(port), "--worker-urls",
            *[f"http://127.0.0.1:{w}" for w in workers], "--prometheus-host", "127.0.0.1",
            "--prometheus-port", str(free_port())]
    argv = ([os.path.join(bin_dir, "vllm-router"), *args] if name == "vllm-router"
            else [os.path.join(bin_dir, "sglang-router"), "launch", *args])
    log = open(os.path.join(log_dir, name + ".log"), "wb")
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    def ready():
        if p.poll() is not None:
            raise RuntimeError(f"{name} exited {p.returncode}")
        try:
            status, body = cu.request(port, "GET", "/v1/models", timeout=5)
        except OSError:
            return False
        return status == 200 and MODEL in [m.get("id") for m in body.get("data", [])]

    if not cu.wait_until(ready, timeout=60):
        raise RuntimeError(f"{name} did not become ready")
    return p, log, port


def stream_chat(port, messages, max_tokens):
    """One streamed chat turn: (TTFT seconds, answer text, usage)."""
    conn = cu.http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    body = {"model": MODEL, "messages": messages, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"status {resp.status}: {resp.read()[:300]}")
    ttft, text, buf, usage = None, [], b"", None
    while True:
        chunk = resp.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            event, buf = buf.split(b"\n\n", 1)
            payload = event.decode().strip()[len("data: "):]
            if payload == "[DONE]":
                continue
            data = json.loads(payload)
            usage = data.get("usage") or usage
            for choice in data.get("choices", []):
                content = choice.get("delta", {}).get("content")
                if content:
                    if ttft is None:
                        ttft = time.perf_counter() - start
                    text.append(content)
    conn.close()
    if usage is None:
        raise RuntimeError("the stream ended without usage")
    return ttft, "".join(text), usage


def session(port, sid, turns, max_tokens, distinct_system):
    system = f"Tenant {sid}. " + SYSTEM if distinct_system else SYSTEM
    messages = [{"role": "system", "content": system}]
    ttfts, texts, usages = [], [], []
    for t in range(turns):
        messages.append({"role": "user",
                         "content": f"Session {sid}, question {t}: why did worker {sid % 5} "
                                    f"restart at step {t * 7 + sid}?"})
        ttft, text, usage = stream_chat(port, messages, max_tokens)
        ttfts.append(ttft)
        texts.append(text)
        usages.append(usage)
        messages.append({"role": "assistant", "content": text})
    return ttfts, texts, usages


def computed_tokens(ports):
    return [cu.metric(p, "strata_worker_prompt_tokens_computed_total") or 0.0 for p in ports]


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def start_worker(args, model_dir, log_dir, i, grpc):
    """Mixed worker i, registered with the strata router at `grpc`; with --pin on core i with one
    engine thread (otherwise both workers' engines use every core)."""
    wid = f"mixed-{i}"
    argv = [args.strata, "worker", "--role", "mixed", "--id", wid, "--http-port", "0",
            "--grpc-port", "0", "--model", model_dir, "--served-model-name", MODEL,
            "--num-kv-blocks", "1024", "--block-size", "16", "--router", f"127.0.0.1:{grpc}"]
    if args.pin:
        argv = ["taskset", "-c", str(i % os.cpu_count()), *argv,
                "--plugin-config", '{"threads": 1}']
    return cu.Proc(argv, os.path.join(log_dir, wid + ".log"), r"http 127\.0\.0\.1:(\d+), grpc")


def run_one(name, args, model_dir, tmp):
    log_dir = os.path.join(tmp, name)
    os.makedirs(log_dir)
    procs = []
    name_flag = ["--served-model-name", MODEL]
    router = cu.start_router(args.strata, model_dir, log_dir, name_flag)
    procs.append(router)
    http, grpc = int(router.match.group(1)), router.match.group(2)
    workers = [start_worker(args, model_dir, log_dir, i, grpc) for i in range(2)]
    procs.extend(workers)
    ports = [int(w.match.group(1)) for w in workers]
    assert cu.wait_until(lambda: cu.request(http, "GET", "/ready")[0] == 200, timeout=30)
    peer = None
    try:
        port = http
        if name != "strata":
            peer = start_peer(name, ports, log_dir)
            port = peer[2]
        before = computed_tokens(ports)
        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
            results = list(pool.map(
                lambda s: session(port, s, args.turns, args.max_tokens, args.distinct_system),
                range(args.sessions)))
        wall = time.perf_counter() - start
        after = computed_tokens(ports)
    finally:
        if peer is not None:
            peer[0].terminate()
            peer[0].wait(15)
            peer[1].close()
        for p in reversed(procs):
            p.stop()
    ttfts = [t for r in results for t in r[0]]
    texts = [x for r in results for x in r[1]]
    usages = [u for r in results for u in r[2]]
    prompt = sum(u["prompt_tokens"] for u in usages)
    cached = sum((u.get("prompt_tokens_details") or {}).get("cached_tokens", 0) for u in usages)
    split = [a - b for a, b in zip(after, before)]
    return {"router": name, "requests": len(ttfts), "wall_s": wall,
            "req_per_s": len(ttfts) / wall, "ttft_p50_ms": 1e3 * pct(ttfts, 0.5),
            "ttft_p90_ms": 1e3 * pct(ttfts, 0.9), "ttft_p99_ms": 1e3 * pct(ttfts, 0.99),
            "ttft_mean_ms": 1e3 * statistics.mean(ttfts), "prefix_hit": cached / prompt,
            "prompt_tokens": prompt, "split": split, "texts": texts}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", default=os.path.join(ROOT, "build", "bin", "strata"))
    ap.add_argument("--sessions", type=int, default=32)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--routers", default="strata,vllm-router,sglang-router")
    ap.add_argument("--distinct-system", action="store_true",
                    help="each session's system prompt starts with its own tenant line (no "
                         "prefix shared across sessions)")
    ap.add_argument("--pin", action="store_true",
                    help="each worker on its own core (taskset) with one engine thread")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="strata_peer_bench_")
    try:
        model_dir = os.path.join(tmp, "model")
        subprocess.run([args.strata, "model", "init", "--preset", "tiny-llama", "--out",
                        model_dir], check=True, stdout=subprocess.DEVNULL)
        rows = [run_one(name, args, model_dir, tmp) for name in args.routers.split(",")]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    same = all(r["texts"] == rows[0]["texts"] for r in rows)
    print(f"{args.sessions} sessions x {args.turns} turns, {args.concurrency} at a time, "
          f"{args.max_tokens} tokens each; greedy texts identical across routers: {same}")
    print("| router | req/s | vs strata | TTFT p50 / p90 / p99 ms | prefix-cache hit | "
          "prompt tokens computed per worker |")
    print("|---|---:|---:|---|---:|---|")
    base = rows[0]["req_per_s"]
    for r in rows:
        print(f"| {r['router']} | {r['req_per_s']:.1f} | {r['req_per_s'] / base:.2f} | "
              f"{r['ttft_p50_ms']:.1f} / {r['ttft_p90_ms']:.1f} / {r['ttft_p99_ms']:.1f} | "
              f"{r['prefix_hit']:.3f} | {' / '.join(str(int(s)) for s in r['split'])} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{k: v for k, v in r.items() if k != "texts"} for r in rows], f, indent=1)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
