#!/usr/bin/env python3
"""Worker deaths under load: `strata up` serving clients while workers are SIGKILLed.

Starts `strata up` (a router, --prefill prefill workers and --decode decode workers on the
built-in tiny-llama preset), runs --clients client threads that send completions back to back
(a --stream-fraction of them streamed, the rest not), and SIGKILLs a random worker every
--kill-every seconds for --seconds. `strata up` starts each killed worker again (restart.*), and
the router places a request whose worker died again where the client has seen nothing yet
(any non-streaming request, a stream before its first token) and resumes a stream that had
started on another worker. Each stream that ends well is checked against the same request
answered whole (non-streaming): "stream wrong" if the texts differ.

Prints a line per kill, then a summary: requests by outcome, streams cut (when their resumes
ran out), the restarts `strata up` reported, the router's retries and resumes, and whether
every worker was ready again at the end. Exit status 1 when a non-streaming request failed, a
stream's text was wrong or a worker did not come back, else 0.

With --kill-router the router is among the victims too: `strata up` starts it again on its
ports and the workers register again. The clients send every request with an Idempotency-Key
and, on a connection error, retry it (up to --attempts times, with a small backoff) with the
same key and, for a stream that had events, Last-Event-ID (tests/cluster/resume_client.py): the
router that answers the retry serves it from the generation its worker still holds, and a
stream continues after the last event the client had. Outcomes say how the answer came: "ok"
at once, "retried ok" after a retry that started nothing new (before any event), "resumed ok"
for a stream continued after a cut (checked against the whole answer like any other stream).
Requests whose every attempt was refused are counted as refused, streams whose retries ran out
as cut by the router's death (apart, not as failures). --no-retry runs plain clients instead (no
key, no retry), for comparison.

With --routers N (2 or more), `strata up` runs N routers behind its TCP front, every worker
registered with each; with --kill-router a random one of them is among the victims, and the
clients' retries reach the routers that are up. Run the same seed with --routers 1 for the
single-router figures side by side.

usage: python3 scripts/chaos_up.py STRATA_BINARY [--seconds 70] [--kill-every 8]
           [--clients 8] [--stream-fraction 0.25] [--prefill 1] [--decode 2] [--seed 1]
           [--kill-router] [--routers 1] [--max-tokens 4-32] [--attempts 6] [--no-retry]
"""
import argparse
import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "cluster"))
import cluster_util as cu  # noqa: E402
import resume_client  # noqa: E402


def add_load_args(ap):
    """The client flags chaos_up.py and soak_up.py share."""
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--stream-fraction", type=float, default=0.25)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-tokens", default="4-32",
                    help="LO-HI: each request's max_tokens is drawn from this range")
    ap.add_argument("--attempts", type=int, default=6,
                    help="tries per request on connection errors (with an Idempotency-Key)")
    ap.add_argument("--no-retry", action="store_true",
                    help="plain clients: no Idempotency-Key, one attempt")


def process_ports(up):
    """Each process's own HTTP port, from `up`'s listing ("  NAME: http://127.0.0.1:P/metrics")."""
    ports = dict(l.split(": http://127.0.0.1:") for l in up.output.splitlines()
                 if l.startswith("  ") and l.endswith("/metrics"))
    return {name.strip(): int(url.split("/")[0]) for name, url in ports.items()}


def process_pid(up, name, ports):
    """The pid of `strata up`'s child `name` (a router by its HTTP port, any other process by its
    --id), or None while it is not running."""
    pattern = (f" router .*--http-port {ports[name]} " if name.startswith("router")
               else f"id {name} ")
    pids = subprocess.run(["pgrep", "-P", str(up.p.pid), "-f", pattern],
                          capture_output=True, text=True).stdout.split()
    return int(pids[0]) if pids else None


def kill(up, name, ports):
    """SIGKILLs `strata up`'s child `name`; False when it was not running."""
    pid = process_pid(up, name, ports)
    if pid is None:
        return False
    os.kill(pid, signal.SIGKILL)
    return True


class Load:
    """--clients threads sending completions to `port` back to back until stop(), each outcome
    counted (see the module's docstring). `routers_die`: connection errors are counted as cuts
    by a router's death rather than client exceptions."""

    # A stream cut once its resumes ran out is counted apart; anything else failing (a
    # non-streaming request, a stream refused before it started, a wrong stream) is a failure.
    EXPECTED = ("request ok", "request retried ok", "stream ok", "stream retried ok",
                "stream resumed ok", "stream cut", "refused (router down)",
                "refused (router has no worker yet)", "cut by the router's death")

    def __init__(self, port, args, routers_die):
        self.port, self.args, self.routers_die = port, args, routers_die
        self.lo_tokens, self.hi_tokens = (int(x) for x in args.max_tokens.split("-"))
        self.attempts = 1 if args.no_retry else args.attempts
        self.outcomes, self.errors = collections.Counter(), collections.Counter()
        self.retries = collections.Counter()  # client-side "retries" and "resumes"
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.threads = [threading.Thread(target=self._client, args=(i,))
                        for i in range(args.clients)]

    def start(self):
        for t in self.threads:
            t.start()

    def stop(self):
        self.stop_event.set()
        for t in self.threads:
            t.join()

    def answers(self):
        with self.lock:
            return sum(self.outcomes.values())

    def failed(self):
        return sum(n for o, n in self.outcomes.items() if o not in self.EXPECTED)

    def _count(self, outcome, error=None):
        with self.lock:
            self.outcomes[outcome] += 1
            if error:
                self.errors[(outcome, error[:140])] += 1

    @staticmethod
    def _outcome_of(status, reply, kind="stream"):
        # A router that has just started again has no worker until their next heartbeat: it
        # refuses with 503 (nothing was accepted).
        if status == 503 and "no decode worker is available" in json.dumps(reply):
            return "refused (router has no worker yet)"
        return f"{kind} {status}"

    def _send(self, body):
        """One logical request: (Result, None), or (None, the connection error) when every
        attempt failed."""
        try:
            got = resume_client.post(self.port, "/v1/completions", body,
                                     key="" if self.args.no_retry else None,
                                     attempts=self.attempts, timeout=120)
        except resume_client.CONNECTION_ERRORS as e:
            return None, e
        with self.lock:
            self.retries["retries"] += got.retries
            self.retries["resumes"] += got.resumes
        return got, None

    @staticmethod
    def _how(got):
        return "resumed ok" if got.resumes else "retried ok" if got.retries else "ok"

    def _client(self, i):
        args = self.args
        crng = random.Random(args.seed * 1000 + i)
        streaming = i < round(args.clients * args.stream_fraction)
        while not self.stop_event.is_set():
            body = {"model": "tiny-llama", "temperature": 0, "ignore_eos": True,
                    "prompt": f"client {i}: " + "word " * crng.randint(5, 60),
                    "max_tokens": crng.randint(self.lo_tokens, self.hi_tokens),
                    "stream": streaming}
            try:
                self._one(body, streaming)
            except Exception as e:  # noqa: BLE001 - counted and shown in the summary
                self._count("client exception", str(e))

    def _one(self, body, streaming):
        got, error = self._send(body)
        if error is not None:
            if isinstance(error, ConnectionRefusedError):
                self._count("refused (router down)")
                time.sleep(0.1)
            else:
                self._count("cut by the router's death" if self.routers_die
                            else "client exception", f"{type(error).__name__}: {error}")
            return
        if got.status != 200:
            reply = got.body if got.body is not None else {}
            self._count(self._outcome_of(got.status, reply,
                                         "stream" if streaming else "request"), json.dumps(reply))
        elif not streaming:
            self._count(f"request {self._how(got)}")
        else:
            failed = [e for e in got.events if "error" in e]
            if failed or not got.done:
                self._count("stream cut", json.dumps(failed[0]) if failed else "no [DONE]")
                return
            # A stream resumed on another worker or after its router's death must read as one
            # answer: the same text as the same request answered whole.
            ref, _ = self._send(dict(body, stream=False))
            if ref is None or ref.status != 200:
                self._count(f"stream {self._how(got)}")  # its reference was lost: unchecked
            elif got.text() == ref.text():
                self._count(f"stream {self._how(got)}")
            else:
                self._count(f"stream wrong ({self._how(got)})",
                            f"{got.text()!r} != {ref.text()!r}")

    def table_lines(self):
        """The client retries, the outcome table (markdown) and the most common errors."""
        total = sum(self.outcomes.values())
        lines = [f"clients retried {self.retries['retries']} times after connection errors, "
                 f"{self.retries['resumes']} of them resuming a started stream (Last-Event-ID)",
                 "| outcome | count | share |", "|---|---:|---:|"]
        for outcome, n in sorted(self.outcomes.items()):
            lines.append(f"| {outcome} | {n} | {n / max(total, 1):.4%} |")
        for (outcome, error), n in self.errors.most_common(8):
            lines.append(f"  {n} x {outcome}: {error}")
        return lines


def not_ready(names, ports, timeout=60):
    """The processes among `names` whose /ready (a kvstore daemon's /health) does not answer
    200 within `timeout`."""
    def ready(name):
        path = "/health" if name.startswith("kvstore") else "/ready"
        try:
            return cu.request(ports[name], "GET", path, timeout=5)[0] == 200
        except OSError:  # a process killed last may still be waiting for its restart
            return False
    return [name for name in names
            if not cu.wait_until(lambda: ready(name), timeout=timeout, interval=0.5)]


def router_names(count):
    return ["router"] if count == 1 else [f"router-{i}" for i in range(count)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("strata")
    ap.add_argument("--seconds", type=float, default=70)
    ap.add_argument("--kill-every", type=float, default=8)
    ap.add_argument("--prefill", type=int, default=1)
    ap.add_argument("--decode", type=int, default=2)
    ap.add_argument("--kill-router", action="store_true")
    ap.add_argument("--routers", type=int, default=1,
                    help="routers behind strata up's one port (router.replicas)")
    add_load_args(ap)
    args = ap.parse_args()
    if args.decode < 2:
        sys.exit("chaos_up: --decode must be >= 2 (a request is placed again on another worker)")
    rng = random.Random(args.seed)
    tmp = tempfile.mkdtemp(prefix="strata_chaos_")
    up = cu.start_up(args.strata, tmp,
                     f"router: {{http_port: 0, replicas: {args.routers}}}\n"
                     f"prefill: {{count: {args.prefill}}}\n"
                     f"decode: {{count: {args.decode}}}\nengine: {{num_kv_blocks: 256}}\n",
                     timeout=180)
    ports = process_ports(up)
    names = [f"prefill-{i}" for i in range(args.prefill)] + \
        [f"decode-{i}" for i in range(args.decode)]
    routers = router_names(args.routers)
    victims = names + (routers if args.kill_router else [])
    load = Load(up.http, args, routers_die=args.kill_router)
    load.start()
    start = time.time()
    kills = 0
    try:
        while time.time() - start + args.kill_every < args.seconds:
            time.sleep(args.kill_every)
            victim = rng.choice(victims)
            kills += kill(up, victim, ports)
            print(f"{time.time() - start:6.1f} s  killed {victim:<10} {load.answers():6d} "
                  "answers so far", flush=True)
        time.sleep(max(0.0, args.seconds - (time.time() - start)))
    finally:
        load.stop()
    # Every worker and router is serving again: its /ready answers 200.
    down = not_ready(names + routers, ports)
    restarts = up.tail_all().count(" started again (pid ")
    retried = sum(cu.metric(ports[r], "strata_router_retries_total") or 0 for r in routers)
    resumed = sum(cu.metric(ports[r], "strata_router_resumed_streams_total") or 0
                  for r in routers)
    rc = up.stop(signal.SIGTERM, timeout=120)
    shutil.rmtree(tmp, ignore_errors=True)

    print(f"\n{args.seconds:.0f} s, {args.clients} clients ({args.stream_fraction:.0%} streaming), "
          f"{args.routers} router(s), {args.prefill} prefill + {args.decode} decode workers, "
          f"{kills} SIGKILLs, {restarts} restarts by strata up, strata up exited {rc}; the "
          f"routers (since their last start) placed {retried:.0f} requests again and resumed "
          f"{resumed:.0f} streams")
    print("\n".join(load.table_lines()))
    print("every worker ready again at the end" if not down
          else f"NOT ready at the end: {', '.join(down)}")
    return 1 if load.failed() or down or rc != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
