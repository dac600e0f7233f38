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

With --traces (replay mode) it instead replays a window of each shared production trace with
`strata replay --find-goodput` through each router of --routers (ROUTER:POLICY, e.g.
strata:goodput, vllm-router:power_of_two) over each worker count of --workers, all in one run:
  - one cell = (trace, worker count, router): a fresh strata router (the registry the workers
    join, and the router under test for strata:*), N fresh mixed workers (each pinned to a core
    with one engine thread), the peer router if any; stopped when the cell ends. Fresh
    processes give every cell empty prefix caches, an empty KV index or cache tree, and no
    leftover queue; each cell's prompts also come from its own seed (and each goodput probe gets
    its own first line, --reseed-probes), so no cell or probe could hit another's prompts even
    in a cache that survived.
  - prompts are text (the window rewritten as a strata-format trace in a temporary directory):
    Mooncake block ids become fixed 512-word blocks of single-token words, Azure prompts a shared
    --system-prompt-tokens prefix and words of their own; inputs cut to the context.
  - the routers' order alternates: forward in even (trace, workers) groups, reversed in odd ones,
    so no router always runs first or last on the shared, loaded machine.
  - per cell: TTFT/TPOT p50/p90, SLO attainment and prefix-cached share of the first probe (the
    same offered rate, --speedup, for every router of a trace); goodput = the offered rate of the
    fastest probe with >= 90% attainment; the cached share over all probes; the router process's
    CPU seconds (utime + stime of /proc/PID/stat, the Python process hosting the Rust router for
    the peers) over the whole search, per 1,000 requests sent.
Writes DIR/results.csv, DIR/results.md (one table per measure), DIR/goodput_<trace>.svg, and
each cell's replay output under DIR/cells/.

    scripts/bench_peer_routers.py --traces mooncake,azure --workers 2,4 --out out/peer-replay
"""
import argparse
import concurrent.futures
import csv
import json
import os
import random
import re
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
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import svg_lines  # noqa: E402

MODEL = "tiny-llama"
SYSTEM = ("You are the operations assistant of a serving cluster. Answer briefly, name the "
          "component involved, and never invent metrics. ") * 4


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_peer(name, workers, log_dir, policy=None):
    """vllm-router or sglang-router in front of the workers' HTTP ports, with `policy` (their
    default, cache_aware, when None); returns (Popen, log, port)."""
    bin_dir = os.path.dirname(sys.executable)
    port = free_port()
    args = ["--host", "127.0.0.1", "--port", str(port), "--worker-urls",
            *[f"http://127.0.0.1:{w}" for w in workers], "--prometheus-host", "127.0.0.1",
            "--prometheus-port", str(free_port())]
    if policy:
        args += ["--policy", policy]
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


# ---- Replay mode: windows of the shared traces, strata replay --find-goodput per cell. ----

TRACES = {
    "mooncake": ("mooncake_conversation.jsonl", "mooncake"),
    "azure": ("azure_conv_2023.csv", "azure"),
}
PEER_GET_LOAD = {"vllm-router": "vllm-router", "sglang-router": "sglang"}


def parse_router(spec):
    """'strata:goodput' -> ('strata', 'goodput'); a bare name keeps the router's default."""
    name, _, policy = spec.partition(":")
    if name not in ("strata", "vllm-router", "sglang-router"):
        raise SystemExit(f"unknown router {name!r} in {spec!r}")
    return name, (policy or ("kv-aware" if name == "strata" else None))


def cpu_seconds(pid):
    """utime + stime of a process, seconds (fields 14 and 15 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def start_cell_cluster(args, model_dir, log_dir, nworkers, router, policy):
    """The strata router (the registry; the router under test when `router` is strata) and
    `nworkers` mixed workers, all registered; returns (router Proc, [worker Proc], [HTTP port])."""
    # --resume-settle-s 0: strata replay sends an Idempotency-Key with every request, which a
    # router holds until the settle time after its start (to find generations held over a
    # restart); the window starts right after the router, and no router restarts here.
    flags = ["--served-model-name", MODEL, "--max-model-len", str(args.max_model_len),
             "--slo-ttft", str(args.slo_ttft), "--slo-tpot", str(args.slo_tpot),
             "--resume-settle-s", "0"]
    if router == "strata":
        flags += ["--policy", policy]
        if policy == "goodput":
            flags += ["--profile", args.profile]
    registry = cu.start_router(args.strata, model_dir, log_dir, flags)
    grpc = registry.match.group(2)
    load_format = PEER_GET_LOAD.get(router, "sglang")
    workers = []
    for i in range(nworkers):
        argv = [args.strata, "worker", "--role", "mixed", "--id", f"mixed-{i}", "--http-port", "0",
                "--grpc-port", "0", "--model", model_dir, "--served-model-name", MODEL,
                "--num-kv-blocks", str(args.kv_blocks), "--block-size", "16",
                "--max-model-len", str(args.max_model_len), "--get-load-format", load_format,
                "--plugin-config", '{"threads": 1}', "--router", f"127.0.0.1:{grpc}"]
        workers.append(cu.Proc(["taskset", "-c", str(i % os.cpu_count()), *argv],
                               os.path.join(log_dir, f"mixed-{i}.log"),
                               r"http 127\.0\.0\.1:(\d+), grpc"))
    http = int(registry.match.group(1))
    if not cu.wait_until(lambda: (cu.metric(http, "strata_router_workers") or 0) >= nworkers,
                         timeout=60):
        raise RuntimeError("the workers did not all register")
    return registry, workers, [int(w.match.group(1)) for w in workers]


def vocabulary_words(model_dir):
    """The tokenizer's single-token words (vocabulary entries " word", letters only), sorted: a
    prompt of such words separated by spaces is one token per word (the pre-tokenizer splits at
    each space, and each piece is a whole vocabulary entry)."""
    with open(os.path.join(model_dir, "tokenizer.json")) as f:
        vocab = json.load(f)["model"]["vocab"]
    return sorted(k[1:] for k in vocab if k.startswith("\u0120") and k[1:].isascii()
                  and k[1:].isalpha())


def words_text(words, seed, kind, key, count):
    """`count` words drawn deterministically from (seed, kind, key), each after a space."""
    rng = random.Random(f"{seed}/{kind}/{key}")
    return "".join(" " + rng.choice(words) for _ in range(count))


def window_trace(args, trace, words, seed, path):
    """Writes the trace's window (--requests requests from --start) as a strata-format trace
    with prompt text: Mooncake block ids become fixed 512-word blocks (shared ids, shared text),
    Azure prompts are one shared system prompt and then words of their own. Text, because both
    peer routers route on it (sglang-router also refuses token-id prompts), and strata's router
    tokenizes it, so every router gets the same requests. Inputs are cut to fit the context."""
    name, fmt = TRACES[trace]
    limit = args.max_model_len - args.max_output_tokens - 16  # BOS and replay's probe line.
    rows = []
    with open(os.path.join(args.trace_dir, name)) as f:
        if fmt == "mooncake":
            for line in f:
                r = json.loads(line)
                if r["timestamp"] >= 1000 * args.start[trace]:
                    rows.append((r["timestamp"] / 1000, r["input_length"], r["output_length"],
                                 r["hash_ids"]))
                if len(rows) == args.requests:
                    break
        else:
            t0 = None
            for r in csv.DictReader(f):
                t = time.mktime(time.strptime(r["TIMESTAMP"][:19], "%Y-%m-%d %H:%M:%S")) + \
                    float("0." + r["TIMESTAMP"][20:] if len(r["TIMESTAMP"]) > 20 else 0)
                t0 = t if t0 is None else t0
                if t - t0 >= args.start[trace]:
                    rows.append((t - t0, int(r["ContextTokens"]), int(r["GeneratedTokens"]), None))
                if len(rows) == args.requests:
                    break
    with open(path, "w") as out:
        for i, (t, n_in, n_out, blocks) in enumerate(rows):
            n = max(1, min(n_in, limit))
            if blocks is not None:
                text = "".join(words_text(words, seed, "block", b, min(512, n - 512 * j))
                               for j, b in enumerate(blocks) if n > 512 * j)
            else:
                system = min(n, args.system_prompt_tokens)
                text = (words_text(words, seed, "system", 0, system) +
                        words_text(words, seed, "request", i, n - system))
            out.write(json.dumps({"arrival_s": round(t - rows[0][0], 6), "input_tokens": n + 1,
                                  "output_tokens": max(1, min(n_out, args.max_output_tokens)),
                                  "prompt": text}) + "\n")


def replay_argv(args, trace, port, seed, window, out):
    return [args.strata, "replay", "--trace", window, "--format", "strata",
            "--prompt-source", "text", "--url", f"http://127.0.0.1:{port}", "--model", MODEL,
            "--max-model-len", str(args.max_model_len), "--slo-ttft", str(args.slo_ttft),
            "--slo-tpot", str(args.slo_tpot), "--seed", str(seed), "--timeout", "120",
            "--speedup", str(args.speedup[trace]), "--find-goodput", "--reseed-probes",
            "--max-evaluations", str(args.max_evaluations), "--quiet", "--out", out]


def read_probes(out):
    """Each probe's summary.json, by speedup."""
    probes = {}
    for d in os.listdir(out):
        if d.startswith("speedup_"):
            with open(os.path.join(out, d, "summary.json")) as f:
                probes[float(d[len("speedup_"):])] = json.load(f)
    return probes


def run_cell(args, model_dir, words, tmp, trace, nworkers, spec, seed):
    router, policy = parse_router(spec)
    name = f"{trace}-{nworkers}w-{router}-{policy}"
    log_dir = os.path.join(tmp, name)
    out = os.path.join(args.out, "cells", name)
    os.makedirs(log_dir)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    window = os.path.join(out, "window.jsonl")
    window_trace(args, trace, words, seed, window)
    load_before = loadavg()
    registry, workers, ports = start_cell_cluster(args, model_dir, log_dir, nworkers, router,
                                                  policy)
    peer = None
    try:
        if router == "strata":
            port, pid = int(registry.match.group(1)), registry.p.pid
        else:
            peer = start_peer(router, ports, log_dir, policy)
            port, pid = peer[2], peer[0].pid
        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        run = subprocess.run(replay_argv(args, trace, port, seed, window, out),
                             capture_output=True, text=True)
        cpu1, wall = cpu_seconds(pid), time.perf_counter() - t0
    finally:
        if peer is not None:
            peer[0].terminate()
            peer[0].wait(15)
            peer[1].close()
        for w in reversed(workers):
            w.stop()
        registry.stop()
    with open(os.path.join(out, "replay.out"), "w") as f:
        f.write(run.stdout + run.stderr)
    if run.returncode != 0:
        raise RuntimeError(f"{name}: strata replay exited {run.returncode}: {run.stderr[-1500:]}")
    probes = read_probes(out)
    first = probes[min(probes, key=lambda s: abs(s - args.speedup[trace]))]
    best = re.search(r"speedup ([\d.e+-]+), ([\d.]+) req/s offered, goodput ([\d.]+) req/s",
                     run.stdout)
    requests = sum(p["requests"] for p in probes.values())
    prompt = sum(p["prompt_tokens"] for p in probes.values())
    cached = sum(p["prefix_cached_tokens"] for p in probes.values())

    def ms(key):
        return None if first.get(key) is None else 1e3 * first[key]

    row = {"trace": trace, "workers": nworkers, "router": f"{router}:{policy}", "seed": seed,
           "speedup": args.speedup[trace], "requests": first["requests"],
           "errors": first["errors"], "ttft_p50_ms": ms("ttft_p50_s"),
           "ttft_p90_ms": ms("ttft_p90_s"), "tpot_p50_ms": ms("tpot_p50_s"),
           "tpot_p90_ms": ms("tpot_p90_s"), "slo_attainment": first["slo_attainment"],
           "cached_share": first["prefix_cache_hit_rate"],
           "goodput_speedup": float(best.group(1)) if best else 0.0,
           "goodput_rps": float(best.group(2)) if best else 0.0,
           "probes": len(probes), "probe_requests": requests,
           "cached_share_all_probes": cached / prompt if prompt else 0.0,
           "router_cpu_s": cpu1 - cpu0,
           "router_cpu_s_per_1k": 1e3 * (cpu1 - cpu0) / requests if requests else None,
           "wall_s": wall, "load_before": load_before, "load_after": loadavg()}
    print(f"[{time.strftime('%H:%M:%S')}] {name}: goodput {row['goodput_rps']:.3f} req/s, "
          f"attainment {row['slo_attainment']:.3f}, cached {row['cached_share']:.3f}, "
          f"router CPU {row['router_cpu_s_per_1k']:.2f} s/1k, {wall:.0f} s, "
          f"load {load_before:.2f}", flush=True)
    return row


MEASURES = [  # (column, heading, format)
    ("goodput_rps", "goodput (req/s at >= 90% attainment)", "{:.3f}"),
    ("slo_attainment", "SLO attainment at the common rate", "{:.3f}"),
    ("ttft_p50_ms", "TTFT p50 (ms) at the common rate", "{:.0f}"),
    ("ttft_p90_ms", "TTFT p90 (ms) at the common rate", "{:.0f}"),
    ("tpot_p50_ms", "TPOT p50 (ms) at the common rate", "{:.1f}"),
    ("tpot_p90_ms", "TPOT p90 (ms) at the common rate", "{:.1f}"),
    ("cached_share", "prefix-cached share of prompt tokens at the common rate", "{:.3f}"),
    ("cached_share_all_probes", "prefix-cached share over all probes", "{:.3f}"),
    ("router_cpu_s_per_1k", "router CPU seconds per 1,000 requests", "{:.2f}"),
]


def markdown_tables(rows, routers):
    """One table per measure: a row per (trace, workers), a column per router."""
    groups = sorted({(r["trace"], r["workers"]) for r in rows}, key=lambda g: (g[0], g[1]))
    cell = {(r["trace"], r["workers"], r["router"]): r for r in rows}
    out = []
    for key, heading, fmt in MEASURES:
        out += [f"**{heading}**", "", "| trace | workers | " + " | ".join(routers) + " |",
                "|---|---:|" + "---:|" * len(routers)]
        for trace, n in groups:
            vals = []
            for router in routers:
                v = cell.get((trace, n, router), {}).get(key)
                vals.append("-" if v is None else fmt.format(v))
            out.append(f"| {trace} | {n} | " + " | ".join(vals) + " |")
        out.append("")
    return "\n".join(out)


def write_outputs(args, rows, routers):
    with open(os.path.join(args.out, "results.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(markdown_tables(rows, routers))
    for trace in sorted({r["trace"] for r in rows}):
        series = {router: [(r["workers"], r["goodput_rps"]) for r in rows
                           if r["trace"] == trace and r["router"] == router]
                  for router in routers}
        svg = svg_lines.line_chart(f"Goodput by router, {trace} window", "mixed workers",
                                   "goodput (req/s, >= 90% SLO attainment)",
                                   {k: sorted(v) for k, v in series.items()})
        with open(os.path.join(args.out, f"goodput_{trace}.svg"), "w") as f:
            f.write(svg)


def replay_main(args):
    routers = [f"{n}:{p}" for n, p in map(parse_router, args.routers.split(","))]
    args.start = dict(zip(TRACES, map(float, args.start.split(","))))
    args.speedup = dict(zip(TRACES, map(float, args.speedup.split(","))))
    traces = args.traces.split(",")
    for t in traces:
        if t not in TRACES:
            raise SystemExit(f"unknown trace {t!r}: one of {', '.join(TRACES)}")
    os.makedirs(args.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="strata_peer_replay_")
    rows, started = [], time.time()
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, nproc {os.cpu_count()}, "
          f"load average {loadavg():.2f}", flush=True)
    try:
        model_dir = os.path.join(tmp, "model")
        subprocess.run([args.strata, "model", "init", "--preset", "tiny-llama", "--out",
                        model_dir], check=True, stdout=subprocess.DEVNULL)
        words = vocabulary_words(model_dir)
        group = 0
        for trace in traces:
            for n in map(int, args.workers.split(",")):
                order = routers if group % 2 == 0 else routers[::-1]
                for spec in order:
                    seed = args.seed + 1000 * len(rows)  # Probes use seed .. seed + probes - 1.
                    rows.append(run_cell(args, model_dir, words, tmp, trace, n, spec, seed))
                group += 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows.sort(key=lambda r: (r["trace"], r["workers"], routers.index(r["router"])))
    write_outputs(args, rows, routers)
    print(f"{len(rows)} cells in {time.time() - started:.0f} s, load average now {loadavg():.2f}")
    print(markdown_tables(rows, routers))
    return 0


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
    rp = ap.add_argument_group("replay mode (--traces)")
    rp.add_argument("--traces", help="replay windows of these shared traces instead: "
                    "mooncake,azure")
    rp.add_argument("--trace-dir", default=os.path.join(os.path.dirname(ROOT), "shared", "traces"))
    rp.add_argument("--workers", default="2,4", help="mixed worker counts")
    rp.add_argument("--start", default="600,600",
                    help="window start in trace seconds, mooncake,azure")
    rp.add_argument("--requests", type=int, default=40, help="requests per window")
    rp.add_argument("--speedup", default="2,2",
                    help="first probe's speedup (the common rate), mooncake,azure")
    rp.add_argument("--max-evaluations", type=int, default=6, help="probes per goodput search")
    rp.add_argument("--max-output-tokens", type=int, default=16)
    rp.add_argument("--max-model-len", type=int, default=1024,
                    help="workers' context; longer trace prompts are truncated to it")
    rp.add_argument("--kv-blocks", type=int, default=2048, help="KV blocks of 16 tokens per worker")
    rp.add_argument("--system-prompt-tokens", type=int, default=256,
                    help="the Azure window's shared system prompt")
    rp.add_argument("--slo-ttft", type=float, default=2.0)
    rp.add_argument("--slo-tpot", type=float, default=0.2)
    rp.add_argument("--seed", type=int, default=1)
    rp.add_argument("--profile", default=os.path.join(ROOT, "deploy", "profiles", "pinned",
                                                      "tiny-llama-cpu-1core.json"),
                    help="the goodput policy's latency profile (workers run one thread each)")
    rp.add_argument("--out", default=os.path.join(ROOT, "out", "peer-replay"))
    args = ap.parse_args()
    if args.traces:
        if args.routers == ap.get_default("routers"):
            args.routers = ("strata:kv-aware,strata:goodput,vllm-router:cache_aware,"
                            "vllm-router:power_of_two,sglang-router:cache_aware")
        return replay_main(args)
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
