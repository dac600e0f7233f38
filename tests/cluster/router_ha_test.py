"""Router high availability through `strata up --routers 2` (two routers behind its TCP front,
every worker registered with both): one router SIGKILLed under load refuses nothing and gets no
answer wrong (the requests it held are retried on a new connection and answered by the other
router with the same greedy text), it is started again and registered with; and after a worker
restart both routers' KV indexes agree.

Usage: router_ha_test.py STRATA_BINARY
"""
import http.client
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from cluster_util import metric, start_up, wait_until  # noqa: E402

STRATA = None
PROMPTS = [f"The {w} of the matter is" for w in ("heart", "core", "root", "gist", "crux", "nub")]
MAX_TOKENS = 24


def body(prompt, streaming):
    return {"model": "tiny-llama", "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0,
            "stream": streaming}


class Cut(Exception):
    """The connection ended before the whole answer arrived."""


def complete_once(port, prompt, streaming, timeout=60):
    """One attempt: (status, text). Raises Cut when the connection breaks mid-request."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", "/v1/completions", body=json.dumps(body(prompt, streaming)),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read().decode()
    except (ConnectionError, http.client.HTTPException, OSError) as e:
        raise Cut(repr(e))
    finally:
        conn.close()
    if resp.status != 200:
        return resp.status, raw
    if not streaming:
        return 200, json.loads(raw)["choices"][0]["text"]
    text, done = "", False
    for event in raw.split("\n\n"):
        data = [line[len("data: "):] for line in event.splitlines() if line.startswith("data: ")]
        if not data:
            continue
        if data[0] == "[DONE]":
            done = True
        else:
            text += json.loads(data[0])["choices"][0]["text"]
    if not done:
        raise Cut("stream ended without [DONE]")
    return 200, text


def complete(port, prompt, streaming, attempts=6):
    """What a client does about a router's death: retry a cut request on a new connection.
    Returns (status, text, attempts used)."""
    for attempt in range(1, attempts + 1):
        try:
            status, text = complete_once(port, prompt, streaming)
            return status, text, attempt
        except Cut:
            time.sleep(0.1 * attempt)
    return None, "cut on every attempt", attempts


def process_pid(needle):
    """The pid of the one process whose command line contains every string in `needle`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv]
        if all(n in words for n in needle):
            found.append(int(pid))
    assert len(found) == 1, (needle, found)
    return found[0]


class RouterHaTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="strata-router-ha-")
        self.up = start_up(STRATA, self.tmp,
                           "router:\n  http_port: 0\n  replicas: 2\n"
                           "prefill:\n  count: 1\ndecode:\n  count: 1\n")
        # "  router-0: http://127.0.0.1:P/metrics": each router's own port.
        self.routers = {m.group(1): int(m.group(2)) for m in re.finditer(
            r"(router-\d): http://127\.0\.0\.1:(\d+)/metrics", self.up.output)}
        self.assertEqual(sorted(self.routers), ["router-0", "router-1"], self.up.output)

    def tearDown(self):
        rc = self.up.stop()
        self.assertEqual(rc, 0, self.up.tail())

    def up_log(self):
        return self.up.tail_all()

    def workers_of(self, router, role):
        return metric(self.routers[router], "strata_router_workers", {"role": role}) or 0

    def test_a_router_killed_under_load_refuses_nothing_and_gets_nothing_wrong(self):
        port = self.up.http
        for r in self.routers:  # both routers know both workers
            self.assertTrue(wait_until(lambda: self.workers_of(r, "decode") == 1 and
                                       self.workers_of(r, "prefill") == 1), r)
        want = {}
        for p in PROMPTS:
            status, text, _ = complete(port, p, False)
            self.assertEqual(status, 200, text)
            want[p] = text

        results, lock, stop = [], threading.Lock(), threading.Event()

        def client(i):
            n = 0
            while not stop.is_set():
                prompt, streaming = PROMPTS[(i + n) % len(PROMPTS)], (i + n) % 2 == 0
                status, text, attempts = complete(port, prompt, streaming)
                with lock:
                    results.append((prompt, streaming, status, text, attempts))
                n += 1

        threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        time.sleep(2)
        victim = process_pid(["router", "--http-port", str(self.routers["router-0"])])
        os.kill(victim, signal.SIGKILL)
        time.sleep(4)
        stop.set()
        for t in threads:
            t.join(120)

        refused = [r for r in results if r[2] != 200]
        wrong = [r for r in results if r[2] == 200 and r[3] != want[r[0]]]
        retried = [r for r in results if r[4] > 1]
        print(f"{len(results)} requests, {len(retried)} retried after a cut, "
              f"{len(refused)} refused, {len(wrong)} wrong", file=sys.stderr)
        self.assertGreater(len(results), 20)
        self.assertEqual(refused, [])
        self.assertEqual(wrong, [])

        # The killed router is started again on its ports and the workers register with it.
        self.assertTrue(wait_until(lambda: "router-0 is ready again" in self.up_log(), 60),
                        self.up_log()[-2000:])
        self.assertTrue(wait_until(lambda: self.workers_of("router-0", "decode") == 1 and
                                   self.workers_of("router-0", "prefill") == 1, 15))
        for p in PROMPTS:  # served through either router again
            status, text, attempts = complete(port, p, True)
            self.assertEqual((status, text, attempts), (200, want[p], 1))

    def test_both_routers_indexes_agree_after_a_worker_restart(self):
        port = self.up.http
        for r in self.routers:
            self.assertTrue(wait_until(lambda: self.workers_of(r, "decode") == 1, 15), r)

        def blocks(router):
            return metric(self.routers[router], "strata_router_kv_index_blocks") or 0

        for p in PROMPTS:
            self.assertEqual(complete(port, p, False)[0], 200)
        before = self.settled_agreement(blocks)
        self.assertIsNotNone(before, f"{blocks('router-0')} vs {blocks('router-1')} blocks")

        victim = process_pid(["worker", "--id", "decode-0"])
        os.kill(victim, signal.SIGKILL)
        self.assertTrue(wait_until(lambda: "decode-0 is ready again" in self.up_log(), 60),
                        self.up_log()[-2000:])
        # The restarted worker's empty pool replaces what both routers had of it; new prompts
        # fill both indexes alike.
        for p in PROMPTS[:3]:
            self.assertEqual(complete(port, (p + " again and") * 6, False)[0], 200)
        settled = self.settled_agreement(blocks)
        self.assertIsNotNone(settled, f"{blocks('router-0')} vs {blocks('router-1')} blocks")
        print(f"index blocks before the restart {before}, after {settled}", file=sys.stderr)

    def settled_agreement(self, blocks, timeout=30, quiet=2.5):
        """The block count both routers report once it has stayed the same, and equal between
        them, for `quiet` seconds (several heartbeats); None if that never happens."""
        deadline, last, since = time.time() + timeout, None, time.time()
        while time.time() < deadline:
            now = (blocks("router-0"), blocks("router-1"))
            if now != last:
                last, since = now, time.time()
            elif now[0] == now[1] and now[0] > 0 and time.time() - since >= quiet:
                return now[0]
            time.sleep(0.25)
        return None


if __name__ == "__main__":
    STRATA = sys.argv.pop(1)
    unittest.main()
