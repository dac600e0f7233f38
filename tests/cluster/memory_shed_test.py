"""Memory on real processes. Shedding: a standalone mixed worker and a router started with
--max-memory-mb below their resident memory refuse new completions with an OpenAI-style 503
(code memory_limit, Retry-After), count them in <prefix>_shed_requests_total, and stay up and
healthy; the same worker without the limit serves the same request. (Recovery when memory falls
again is tests/openai/frontend_test.cc's OverTheMemoryLimit... test.) No growth: a router's
resident memory stays flat over thousands of answered requests (each request's state is freed
after its last event).

Usage: memory_shed_test.py STRATA_BINARY   (ctest passes it)
"""
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_util as cu  # noqa: E402

STRATA = None
MODEL = "tiny-llama"
BODY = {"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 3, "temperature": 0,
        "ignore_eos": True}
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    raise AssertionError("no VmRSS")


def raw_post(port, path, body):
    """(status, Retry-After header, parsed body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = json.loads(resp.read())
    conn.close()
    return resp.status, resp.getheader("Retry-After"), data


class MemoryShedTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="strata_memory_shed_test_")
        self.procs = []
        self.model = cu.init_model(STRATA, self.tmp)

    def tearDown(self):
        for p in reversed(self.procs):
            p.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def worker(self, wid, limit_mb):
        w = cu.start_worker(STRATA, self.model, self.tmp, "mixed", wid, None,
                            ["--served-model-name", MODEL, "--max-memory-mb", str(limit_mb)])
        self.procs.append(w)
        return w, int(w.match.group(1))

    def assert_shed(self, port, prefix):
        for path, body in (("/v1/completions", BODY), ("/v1/chat/completions", CHAT)):
            status, retry_after, answer = raw_post(port, path, body)
            self.assertEqual(status, 503, answer)
            self.assertEqual(retry_after, "1")
            self.assertEqual(answer["error"]["code"], "memory_limit", answer)
            self.assertEqual(answer["error"]["type"], "server_error")
        self.assertEqual(cu.metric(port, f"{prefix}_shed_requests_total", {"reason": "memory"}),
                         2)
        # Shedding is not sickness: the process stays up and says so.
        self.assertEqual(cu.request(port, "GET", "/health")[0], 200)

    def test_a_mixed_worker_over_its_limit_sheds_and_one_under_it_serves(self):
        over, port = self.worker("mixed-over", 1)
        self.assertGreater(rss_mb(over.p.pid), 1)
        self.assert_shed(port, "strata_worker")
        self.assertIsNone(over.p.poll())
        # The same request where the limit is far above the process's memory: served.
        _, port = self.worker("mixed-under", rss_mb(over.p.pid) + 4096)
        status, answer = cu.request(port, "POST", "/v1/completions", BODY)
        self.assertEqual(status, 200, answer)
        self.assertEqual(answer["usage"]["completion_tokens"], 3)
        self.assertEqual(cu.metric(port, "strata_worker_shed_requests_total",
                                   {"reason": "memory"}), None)

    def test_a_router_over_its_limit_sheds(self):
        router = cu.start_router(STRATA, self.model, self.tmp,
                                 ["--served-model-name", MODEL, "--max-memory-mb", "1"])
        self.procs.append(router)
        self.assert_shed(int(router.match.group(1)), "strata_router")

    def test_a_router_frees_every_answered_request(self):
        # Without workers (and no grace to wait for one) every request is answered 503 by the
        # router's cluster backend at once: the whole per-request path, no engine.
        router = cu.start_router(STRATA, self.model, self.tmp,
                                 ["--served-model-name", MODEL, "--worker-grace", "0"])
        self.procs.append(router)
        port = int(router.match.group(1))
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        body = json.dumps(BODY)

        def send(n):
            for _ in range(n):
                conn.request("POST", "/v1/completions", body=body,
                             headers={"Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                self.assertEqual(resp.status, 503)
        send(1500)  # warm-up: allocator arenas, metric series, connection buffers
        before = rss_mb(router.p.pid)
        send(6000)
        # Kept per request, 6,000 requests' state would be well above 10 MiB.
        self.assertLess(rss_mb(router.p.pid) - before, 4)
        conn.close()

    def test_a_bad_limit_is_refused_at_start(self):
        run = subprocess.run([STRATA, "router", "--model", self.model, "--max-memory-mb", "-5"],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(run.returncode, 2)
        self.assertIn("--max-memory-mb", run.stderr)


if __name__ == "__main__":
    STRATA = sys.argv.pop(1)
    unittest.main()
