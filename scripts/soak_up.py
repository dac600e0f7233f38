#!/usr/bin/env python3
"""Soak under `strata up`: SIGKILLs of every component kind under load for --seconds, with every
process's memory, file descriptors and KV pool usage recorded over time.

Starts `strata up` with --routers routers behind its TCP front, --prefill prefill and --decode
decode workers and --kvstores kvstore daemons (tiny-llama preset, a G2 host tier on every
worker and the G4 daemons behind it), runs the clients of scripts/chaos_up.py (retries and
stream resumption with an Idempotency-Key, every finished stream checked against the same
request answered whole), and every --kill-every seconds SIGKILLs the next kind in turn: router,
prefill worker, decode worker, kvstore daemon. Only instance 0 of each kind is a victim (router-0,
prefill-0, decode-0, kvstore-0): `strata up` starts it again each time, while the other
instances (and `strata up` itself) live through the whole run and serve the load and every
failover; they are the processes whose growth is judged.

Every --sample-every seconds it records, for `strata up` and each of its children: resident
memory (/proc/PID/status VmRSS), open file descriptors (/proc/PID/fd) and, from the process's
/metrics, the KV pool in use (a worker's device pool blocks used and its host tier's bytes, a
kvstore daemon's bytes held) and a router's requests in flight. Writes into --out:
  samples.csv     one row per process per sample
  rss.svg, fds.svg, pool.svg   the same over time, kills marked
  summary.md      the outcome table and the growth table
"No growth" is measured: for each process that lived through the run, the mean RSS and fds of
the --window seconds after --warmup against the mean of the last --window seconds (the window
shrinks to a third of the measured time on short runs). Exit status 1 when a non-streaming
request failed, a stream was wrong, a process was not ready at the end, or a survivor's RSS grew
by more than --max-growth (default 10%) or its fds by more than 16.

usage: python3 scripts/soak_up.py STRATA_BINARY [--seconds 3600] [--kill-every 30]
           [--sample-every 10] [--warmup 120] [--window 600] [--out soak_out]
           [--routers 2] [--prefill 2] [--decode 2] [--kvstores 2] [chaos_up.py's client flags]
"""
import argparse
import csv
import os
import re
import signal
import shutil
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos_up  # noqa: E402
import svg_lines  # noqa: E402
from chaos_up import cu  # noqa: E402

KINDS = ("router", "prefill", "decode", "kvstore")
FIELDS = ("t", "process", "pid", "rss_mib", "fds", "kv_blocks_used", "kv_blocks_capacity",
          "host_tier_mib", "kvstore_mib", "router_inflight")


def proc_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return None


def proc_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def children(parent):
    """{pid: argv} of the live children of `parent`."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            # The fields after the command name (which may hold spaces) in parentheses.
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            if ppid != parent:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                out[int(entry)] = f.read().decode(errors="replace").split("\0")
        except (OSError, ValueError):
            continue  # ended meanwhile
    return out


def name_of(argv, port_names):
    """A child's name in `strata up`'s listing: a router by its --http-port, others by --id."""
    for flag in ("--id", "--http-port"):
        if flag in argv[:-1]:
            value = argv[argv.index(flag) + 1]
            if flag == "--id":
                return value
            if value.isdigit() and int(value) in port_names:
                return port_names[int(value)]
    return None


def pool_usage(port, name):
    """The KV pool and load figures of one process's /metrics (None where it has none)."""
    row = dict.fromkeys(FIELDS[5:])
    try:
        status, text = cu.request(port, "GET", "/metrics", timeout=5)
    except OSError:
        return row
    if status != 200:
        return row
    m = lambda metric, labels=None: cu.metric_from_text(text, metric, labels)  # noqa: E731
    if name.startswith(("prefill", "decode", "mixed")):
        row["kv_blocks_used"] = m("strata_worker_kv_blocks_used")
        row["kv_blocks_capacity"] = m("strata_worker_kv_blocks_capacity")
        host = m("strata_kvstore_usage_bytes", {"tier": "host"})
        row["host_tier_mib"] = None if host is None else host / 2**20
    elif name.startswith("kvstore"):
        held = m("strata_kvstore_usage_bytes")
        row["kvstore_mib"] = None if held is None else held / 2**20
    elif name.startswith("router"):
        row["router_inflight"] = m("strata_router_inflight_requests")
    return row


class Sampler:
    """Samples every process of `up` every `every` seconds on a thread of its own."""

    def __init__(self, up, ports, every, path):
        self.up, self.ports, self.every = up, ports, every
        self.port_names = {port: name for name, port in ports.items()}
        self.rows = []
        self.file = open(path, "w", newline="")
        self.csv = csv.DictWriter(self.file, fieldnames=FIELDS)
        self.csv.writeheader()
        self.stop_event = threading.Event()
        self.start_time = time.time()
        self.thread = threading.Thread(target=self._run)

    def start(self):
        self.thread.start()

    def stop(self):
        self.stop_event.set()
        self.thread.join()
        self.file.close()

    def _run(self):
        while not self.stop_event.is_set():
            self.sample()
            self.stop_event.wait(self.every)

    def sample(self):
        t = round(time.time() - self.start_time, 1)
        procs = {self.up.p.pid: "strata-up"}
        for pid, argv in children(self.up.p.pid).items():
            name = name_of(argv, self.port_names)
            if name:
                procs[pid] = name
        for pid, name in sorted(procs.items(), key=lambda p: p[1]):
            row = dict.fromkeys(FIELDS)
            try:
                row.update(t=t, process=name, pid=pid, rss_mib=proc_rss_mib(pid),
                           fds=proc_fds(pid))
            except OSError:
                continue  # killed between the listing and the reading
            if name in self.ports:
                row.update(pool_usage(self.ports[name], name))
            self.rows.append(row)
            self.csv.writerow(row)
        self.file.flush()


def growth(rows, survivors, warmup, window, end):
    """Per survivor: (mean RSS early, late, mean fds early, late, pids), the windows being
    [warmup, warmup + window) and [end - window, end]."""
    out = {}
    for name in survivors:
        mine = [r for r in rows if r["process"] == name]
        early = [r for r in mine if warmup <= r["t"] < warmup + window]
        late = [r for r in mine if r["t"] >= end - window]
        if not early or not late:
            continue
        out[name] = (statistics.mean(r["rss_mib"] for r in early),
                     statistics.mean(r["rss_mib"] for r in late),
                     statistics.mean(r["fds"] for r in early),
                     statistics.mean(r["fds"] for r in late),
                     len({r["pid"] for r in mine}))
    return out


def plots(rows, kills, out_dir):
    names = sorted({r["process"] for r in rows})
    markers = [(t, f"kill {victim}") for t, victim in kills]

    def series(field, scale=1.0, only=None):
        result = {}
        for name in names:
            pts = [(r["t"], None if r[field] is None else r[field] * scale)
                   for r in rows if r["process"] == name]
            if only and not only(name):
                continue
            if any(y is not None for _, y in pts):
                result[name] = pts
        return result

    charts = {
        "rss.svg": svg_lines.line_chart("Resident memory per process (dashed: SIGKILLs)",
                                        "seconds", "VmRSS (MiB)", series("rss_mib"), markers),
        "fds.svg": svg_lines.line_chart("Open file descriptors per process (dashed: SIGKILLs)",
                                        "seconds", "fds", series("fds"), markers),
    }
    pool = {}
    for name, pts in series("kv_blocks_used").items():
        pool[f"{name} device blocks"] = pts
    for name, pts in series("host_tier_mib").items():
        pool[f"{name} G2 MiB"] = pts
    for name, pts in series("kvstore_mib").items():
        pool[f"{name} MiB"] = pts
    for name, pts in series("router_inflight").items():
        pool[f"{name} in flight"] = pts
    charts["pool.svg"] = svg_lines.line_chart(
        "KV pools in use: worker device blocks, host tier and kvstore MiB; router requests in "
        "flight", "seconds", "blocks / MiB / requests", pool, markers)
    for file, svg in charts.items():
        with open(os.path.join(out_dir, file), "w") as f:
            f.write(svg)


def cluster_config(args, tmp):
    return (f"router: {{http_port: 0, replicas: {args.routers}}}\n"
            f"prefill: {{count: {args.prefill}}}\ndecode: {{count: {args.decode}}}\n"
            "engine: {num_kv_blocks: 256}\n"
            f"kv_tiers: {{host_mb: 16, kvstore_count: {args.kvstores}, kvstore_mb: 32}}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("strata")
    ap.add_argument("--seconds", type=float, default=3600)
    ap.add_argument("--kill-every", type=float, default=30,
                    help="seconds between SIGKILLs; the victim's kind rotates")
    ap.add_argument("--sample-every", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=120)
    ap.add_argument("--window", type=float, default=600)
    ap.add_argument("--max-growth", type=float, default=0.10,
                    help="largest RSS growth of a survivor (late window over early) that passes")
    ap.add_argument("--out", default="soak_out")
    ap.add_argument("--routers", type=int, default=2)
    ap.add_argument("--prefill", type=int, default=2)
    ap.add_argument("--decode", type=int, default=2)
    ap.add_argument("--kvstores", type=int, default=2)
    chaos_up.add_load_args(ap)
    args = ap.parse_args()
    if min(args.routers, args.prefill, args.decode, args.kvstores) < 2:
        sys.exit("soak_up: every kind needs 2 or more instances (instance 0 is killed, the "
                 "others are the survivors whose growth is measured)")
    window = min(args.window, (args.seconds - args.warmup) / 3)
    if window <= 0:
        sys.exit("soak_up: --seconds must exceed --warmup")
    os.makedirs(args.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="strata_soak_")
    up = cu.start_up(args.strata, tmp, cluster_config(args, tmp), timeout=300)
    ports = chaos_up.process_ports(up)
    routers = chaos_up.router_names(args.routers)
    workers = [f"{kind}-{i}" for kind, n in (("prefill", args.prefill), ("decode", args.decode),
                                             ("kvstore", args.kvstores)) for i in range(n)]
    victims = {"router": routers[0], "prefill": "prefill-0", "decode": "decode-0",
               "kvstore": "kvstore-0"}
    survivors = ["strata-up"] + [n for n in routers + workers if n not in victims.values()]
    sampler = Sampler(up, ports, args.sample_every, os.path.join(args.out, "samples.csv"))
    sampler.start()
    load = chaos_up.Load(up.http, args, routers_die=True)
    load.start()
    start = sampler.start_time
    kills = []
    try:
        turn = 0
        while time.time() - start + args.kill_every < args.seconds:
            time.sleep(args.kill_every)
            victim = victims[KINDS[turn % len(KINDS)]]
            turn += 1
            if chaos_up.kill(up, victim, ports):
                kills.append((round(time.time() - start, 1), victim))
            print(f"{time.time() - start:7.1f} s  killed {victim:<10} {load.answers():7d} "
                  "answers so far", flush=True)
        time.sleep(max(0.0, args.seconds - (time.time() - start)))
    finally:
        load.stop()
    end = time.time() - start
    sampler.stop()
    down = chaos_up.not_ready(routers + workers, ports)
    restarts = up.tail_all().count(" started again (pid ")
    rc = up.stop(signal.SIGTERM, timeout=120)
    shutil.rmtree(tmp, ignore_errors=True)
    plots(sampler.rows, kills, args.out)

    grown = growth(sampler.rows, survivors, args.warmup, window, end)
    killed = {k: sum(1 for _, v in kills if v == victims[k]) for k in KINDS}
    lines = [f"{end:.0f} s, {args.clients} clients ({args.stream_fraction:.0%} streaming), "
             f"{args.routers} routers, {args.prefill} prefill + {args.decode} decode workers, "
             f"{args.kvstores} kvstore daemons; SIGKILLs: "
             + ", ".join(f"{victims[k]} x{n}" for k, n in killed.items())
             + f"; {restarts} restarts by strata up; strata up exited {rc}",
             "", "| survivor | pids seen | RSS MiB, first window | RSS MiB, last window | growth "
             "| fds, first | fds, last |", "|---|---:|---:|---:|---:|---:|---:|"]
    bad = []
    for name, (r0, r1, f0, f1, pids) in grown.items():
        change = (r1 - r0) / r0 if r0 else 0.0
        lines.append(f"| {name} | {pids} | {r0:.1f} | {r1:.1f} | {change:+.1%} | {f0:.0f} "
                     f"| {f1:.0f} |")
        if change > args.max_growth or f1 - f0 > 16 or pids != 1:
            bad.append(name)
    lines.append(f"\nwindows: [{args.warmup:.0f}, {args.warmup + window:.0f}) s and "
                 f"[{end - window:.0f}, {end:.0f}] s; samples every {args.sample_every:.0f} s "
                 f"in {args.out}/samples.csv")
    summary = "\n".join(lines)
    summary += "\n\n" + "\n".join(load.table_lines())
    print("\n" + summary)
    print("every process ready again at the end" if not down
          else f"NOT ready at the end: {', '.join(down)}")
    if bad:
        print(f"GROWTH beyond {args.max_growth:.0%} RSS / 16 fds (or restarted): {', '.join(bad)}")
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(summary + "\n")
    return 1 if load.failed() or down or rc != 0 or bad else 0


if __name__ == "__main__":
    sys.exit(main())
