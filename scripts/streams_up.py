#!/usr/bin/env python3
"""Many concurrent streams through `strata up`'s router: --streams streaming completions open at
once (asyncio, raw sockets), each checked to end with [DONE] and exactly --max-tokens tokens, and
the router's memory and file descriptors before, at the peak and after.

Starts `strata up` (one router, --decode decode workers on the tiny-llama preset, the router's
per-worker in-flight limit raised to hold every stream), warms it up with a few requests, reads
the router's VmRSS and open fds, then runs --rounds rounds of the streams. A round first opens
every connection, each from one of --sources local addresses in turn (the router's HTTP server
admits at most 4,096 connections per client address; 127.0.0.2.. are all loopback), at most
--connecting being set up at a time (the listen backlog is finite), and only then sends every
request, so that all of them are in flight together rather than the first finishing while the
last connect (the server closes a connection idle for 60 s: opening them must take less). It
records the most streams open at once (sent and not finished) and the router's RSS and in-flight
gauge every 0.2 s; once every stream has ended it waits for the router's fds to fall back to
where they were before. A second round on the same router shows whether the memory the first
left behind is reused or grows. The open-file limit is raised to its hard limit first (`strata
up` and the router inherit it).

Prints a markdown summary; exit status 1 when any stream failed or had the wrong token count,
or the router's fds did not come back within 30 s of the end.

usage: python3 scripts/streams_up.py STRATA_BINARY [--streams 10000] [--max-tokens 16]
           [--decode 2] [--max-num-seqs 256] [--sources 127.0.0.2,127.0.0.3,127.0.0.4]
           [--connecting 256] [--rounds 2]
"""
import argparse
import asyncio
import collections
import json
import os
import re
import resource
import shutil
import signal
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos_up  # noqa: E402
from chaos_up import cu  # noqa: E402
from soak_up import children, name_of, proc_fds, proc_rss_mib  # noqa: E402

USAGE = re.compile(rb'"completion_tokens":\s*(\d+)')


async def read_answer(reader):
    """The response's bytes up to the end of the connection or of the stream ([DONE])."""
    raw = b""
    while True:
        chunk = await reader.read(65536)
        if not chunk:
            return raw
        raw += chunk
        if b"data: [DONE]" in raw[-len(chunk) - 16:]:
            return raw


async def one_stream(i, port, source, body, connecting, go, stats):
    """One streaming request, sent once `go` is set (after every connection is open); counts
    its outcome in stats["outcomes"]."""
    data = json.dumps(body).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
            "Connection: close\r\n\r\n").encode()
    writer = None
    counted = False

    def connected():
        nonlocal counted
        counted = True
        stats["connected"] += 1
        if stats["connected"] == stats["streams"]:
            go.set()
    try:
        async with connecting:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0)), 60)
        connected()
        await go.wait()
        writer.write(head + data)
        await writer.drain()
        stats["open"] += 1
        stats["peak_open"] = max(stats["peak_open"], stats["open"])
        try:
            raw = await asyncio.wait_for(read_answer(reader), 600)
        finally:
            stats["open"] -= 1
        status = raw[9:12].decode(errors="replace")
        if status != "200":
            stats["outcomes"][f"HTTP {status}"] += 1
            stats["errors"][raw[raw.find(b"\r\n\r\n") + 4:][:200].decode(errors="replace")] += 1
        elif b"data: [DONE]" not in raw:
            stats["outcomes"]["cut (no [DONE])"] += 1
        elif b'"error"' in raw:
            stats["outcomes"]["error event"] += 1
        else:
            usage = USAGE.findall(raw)
            got = int(usage[-1]) if usage else -1
            stats["outcomes"]["ok" if got == body["max_tokens"]
                              else f"wrong token count ({got})"] += 1
    except (OSError, asyncio.TimeoutError) as e:
        if not counted:
            connected()  # a connection that failed does not hold the others back
        stats["outcomes"][f"client {type(e).__name__}"] += 1
        stats["errors"][str(e)[:200]] += 1
    finally:
        if writer is not None:
            writer.close()


async def run_streams(args, port):
    sources = args.sources.split(",")
    connecting = asyncio.Semaphore(args.connecting)
    go = asyncio.Event()
    stats = {"streams": args.streams, "connected": 0, "open": 0, "peak_open": 0,
             "outcomes": collections.Counter(), "errors": collections.Counter()}
    tasks = []
    for i in range(args.streams):
        body = {"model": "tiny-llama", "prompt": f"stream {i}: hello there", "temperature": 0,
                "max_tokens": args.max_tokens, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        tasks.append(asyncio.create_task(
            one_stream(i, port, sources[i % len(sources)], body, connecting, go, stats)))
    await asyncio.gather(*tasks)
    return stats


def one_round(args, port, router_port, router):
    """Runs the streams once, sampling the router's RSS and in-flight gauge every 0.2 s."""
    peak = {"rss": 0.0, "inflight": 0.0}
    done = threading.Event()

    def watch():
        while not done.wait(0.2):
            peak["rss"] = max(peak["rss"], proc_rss_mib(router))
            try:
                n = cu.metric(router_port, "strata_router_inflight_requests") or 0
            except OSError:
                continue
            peak["inflight"] = max(peak["inflight"], n)
    watcher = threading.Thread(target=watch)
    watcher.start()
    start = time.time()
    stats = asyncio.run(run_streams(args, port))
    seconds = time.time() - start
    done.set()
    watcher.join()
    return {"stats": stats, "seconds": seconds, **peak}


def router_pid(up, ports):
    port_names = {p: n for n, p in ports.items()}
    for pid, argv in children(up.p.pid).items():
        if name_of(argv, port_names) == "router":
            return pid
    raise RuntimeError("no router process under strata up")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("strata")
    ap.add_argument("--streams", type=int, default=10000)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--decode", type=int, default=2)
    ap.add_argument("--max-num-seqs", type=int, default=256)
    ap.add_argument("--sources", default="127.0.0.2,127.0.0.3,127.0.0.4")
    ap.add_argument("--connecting", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=2,
                    help="times the streams run on the same cluster (a second round shows "
                         "whether memory the first left behind is reused or grows)")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < args.streams + 1024:
        sys.exit(f"streams_up: the open-file hard limit ({hard}) is below --streams + 1024")
    per_source = -(-args.streams // len(args.sources.split(",")))
    if per_source > 4096:
        sys.exit(f"streams_up: {per_source} streams per source address; the router admits "
                 "4,096 per client address: give more --sources")
    tmp = tempfile.mkdtemp(prefix="strata_streams_")
    inflight = -(-args.streams // args.decode) + 64
    up = cu.start_up(args.strata, tmp, (
        f"router: {{http_port: 0, max_inflight_per_worker: {inflight}, "
        "worker_stream_idle_timeout_s: 600}\n"
        f"prefill: {{count: 0}}\ndecode: {{count: {args.decode}}}\n"
        f"engine: {{num_kv_blocks: {max(1024, 4 * args.max_num_seqs)}, "
        f"max_num_seqs: {args.max_num_seqs}}}\n"), timeout=180)
    ports = chaos_up.process_ports(up)
    router = router_pid(up, ports)
    rc = 1
    try:
        for _ in range(4):  # warm-up: every path of a stream has run once
            status, _ = cu.request(up.http, "POST", "/v1/completions",
                                   {"model": "tiny-llama", "prompt": "warm up", "max_tokens": 4})
            assert status == 200
        time.sleep(1)
        rss0, fds0 = proc_rss_mib(router), proc_fds(router)
        print(f"\n{args.streams} streams of {args.max_tokens} tokens through 1 router, "
              f"{args.decode} decode workers (max_num_seqs {args.max_num_seqs}); client "
              f"addresses {args.sources}; every connection opened before any request is sent")
        print(f"router before: VmRSS {rss0:.1f} MiB, {fds0} open fds")
        print("| round | streams ok (right token count, [DONE]) | other outcomes | most streams "
              "open at once (client) | most in flight (router gauge) | seconds | router VmRSS "
              "peak / 5 s after (MiB) | router fds 5 s after |")
        print("|---:|---:|---|---:|---:|---:|---:|---:|")
        rc = 0
        for round_ in range(1, args.rounds + 1):
            result = one_round(args, up.http, ports["router"], router)
            back = cu.wait_until(lambda: proc_fds(router) <= fds0 + 2, timeout=30, interval=0.5)
            time.sleep(5)
            stats = result["stats"]
            ok = stats["outcomes"]["ok"]
            others = ", ".join(f"{o}: {n}" for o, n in sorted(stats["outcomes"].items())
                               if o != "ok") or "none"
            print(f"| {round_} | {ok} of {args.streams} | {others} | {stats['peak_open']} | "
                  f"{result['inflight']:.0f} | {result['seconds']:.1f} | "
                  f"{result['rss']:.1f} / {proc_rss_mib(router):.1f} | {proc_fds(router)} |",
                  flush=True)
            for error, n in stats["errors"].most_common(5):
                print(f"  {n} x {error}")
            if ok != args.streams or not back:
                rc = 1
    finally:
        up.stop(signal.SIGTERM, timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
