"""A hung engine: the worker's engine-progress watchdog and the router's worker stream idle
timeout, with real router and worker processes on loopback. The hang is the test-only fault
injection STRATA_TEST_ENGINE_STALL=TOKEN:AFTER:SECONDS (the engine thread sleeps inside a step
of a request whose prompt holds token id TOKEN, once it has AFTER tokens).

Usage: watchdog_test.py STRATA_BINARY   (ctest passes it)
"""
import concurrent.futures
import os
import shutil
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_util as cu  # noqa: E402

STRATA = None
MODEL = "tiny-llama"
MARKER = 5  # the token id that makes the fault-injecting worker hang
# A prompt of token ids: four full KV blocks (block size 16) without the marker, then it.
PREFIX = list(range(100, 164))
HUNG_PROMPT = PREFIX + [MARKER, 300, 301]


def body(prompt, max_tokens, **kw):
    return {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, **kw}


def with_env(env, fn):
    """Runs fn() with os.environ extended by env (a worker started in fn inherits it)."""
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        return fn()
    finally:
        os.environ.clear()
        os.environ.update(saved)


class WatchdogTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="strata_watchdog_test_")
        self.procs = []
        self.model = cu.init_model(STRATA, self.tmp)

    def tearDown(self):
        for p in reversed(self.procs):
            p.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start_worker(self, wid, router_grpc=None, stall=None, extra=()):
        args = ["--served-model-name", MODEL, *extra]
        start = lambda: cu.start_worker(STRATA, self.model, self.tmp, "mixed", wid,  # noqa: E731
                                        router_grpc, args)
        w = with_env({"STRATA_TEST_ENGINE_STALL": stall}, start) if stall else start()
        self.procs.append(w)
        return w, int(w.match.group(1))

    def test_a_stalled_engine_fails_health_until_it_progresses_again(self):
        worker, port = self.start_worker("mixed-stall", stall=f"{MARKER}:3:4",
                                         extra=["--engine-stall-timeout-s", "0.5"])
        # Idle for longer than the limit: not stalled.
        time.sleep(1.0)
        status, health = cu.request(port, "GET", "/health")
        self.assertEqual(status, 200, health)
        self.assertEqual(cu.metric(port, "strata_worker_engine_stalled"), 0)
        # A long answer whose steps keep completing: never stalled while it runs.
        client = concurrent.futures.ThreadPoolExecutor(1)
        long_answer = client.submit(cu.request, port, "POST", "/v1/completions",
                                    body(PREFIX, 300))
        seen = set()
        while not long_answer.done():
            seen.add(cu.request(port, "GET", "/health")[0])
            time.sleep(0.05)
        self.assertEqual(long_answer.result()[0], 200)
        self.assertEqual(seen, {200})
        # The marked request: the engine sleeps 4 s inside a step.
        hung = client.submit(cu.request, port, "POST", "/v1/completions", body(HUNG_PROMPT, 8))
        self.assertTrue(cu.wait_until(lambda: cu.request(port, "GET", "/health")[0] == 503,
                                      timeout=10))
        status, health = cu.request(port, "GET", "/health")
        self.assertEqual(status, 503, health)
        self.assertEqual(health["status"], "stalled")
        self.assertIn("engine stalled", health["reason"])
        self.assertGreaterEqual(health["seconds"], 0.5)
        status, ready = cu.request(port, "GET", "/ready")
        self.assertEqual(status, 503, ready)
        self.assertEqual(ready["status"], "stalled")
        self.assertEqual(cu.metric(port, "strata_worker_engine_stalled"), 1)
        self.assertGreaterEqual(
            cu.metric(port, "strata_worker_engine_last_progress_age_seconds"), 0.5)
        # The step returns: healthy again, and the request finishes.
        status, answer = hung.result(timeout=30)
        self.assertEqual(status, 200, answer)
        self.assertEqual(answer["usage"]["completion_tokens"], 8)
        self.assertTrue(cu.wait_until(lambda: cu.request(port, "GET", "/health")[0] == 200,
                                      timeout=10))
        self.assertEqual(cu.request(port, "GET", "/ready")[0], 200)
        self.assertEqual(cu.metric(port, "strata_worker_engine_stalled"), 0)
        # One line for each change (the watchdog logs within a tenth of the limit).
        self.assertTrue(cu.wait_until(lambda: "engine progressing again" in worker.tail_all(),
                                      timeout=5), worker.tail())
        log = worker.tail_all()
        self.assertEqual(log.count("engine stalled: no step completed"), 1, log[-3000:])
        self.assertEqual(log.count("engine progressing again"), 1, log[-3000:])

    def test_a_hung_workers_stream_moves_to_another_worker(self):
        router = cu.start_router(STRATA, self.model, self.tmp,
                                 ["--served-model-name", MODEL,
                                  "--worker-stream-idle-timeout-s", "2"])
        self.procs.append(router)
        http, grpc = int(router.match.group(1)), router.match.group(2)
        _, hung_port = self.start_worker("mixed-0", grpc, stall=f"{MARKER}:5:8",
                                         extra=["--engine-stall-timeout-s", "1"])
        _, good_port = self.start_worker("mixed-1", grpc)
        self.assertTrue(cu.wait_until(lambda: cu.metric(http, "strata_router_workers",
                                                        {"role": "mixed"}) == 2, timeout=30))
        # mixed-0 caches the prompt's prefix (it has no marker) so that the router's kv-aware
        # placement sends the marked request there; the index learns it from a heartbeat.
        self.assertEqual(cu.request(hung_port, "POST", "/v1/completions", body(PREFIX, 1))[0],
                         200)
        self.assertTrue(cu.wait_until(
            lambda: (cu.metric(http, "strata_router_kv_index_blocks") or 0) >= 4, timeout=10))
        start = time.time()
        status, events, done = cu.stream(http, "/v1/completions",
                                         body(HUNG_PROMPT, 40, stream=True), timeout=60)
        elapsed = time.time() - start
        # The reference: the same request on the healthy worker's own API (afterwards, so that
        # only mixed-0 held the prompt's prefix when the router placed it).
        status, reference = cu.request(good_port, "POST", "/v1/completions",
                                       body(HUNG_PROMPT, 40))
        self.assertEqual(status, 200, reference)
        self.assertEqual(status, 200, events)
        self.assertTrue(done, events[-3:])
        self.assertFalse([e for e in events if "error" in e])
        text = "".join(c["text"] for e in events for c in e.get("choices", []))
        self.assertEqual(text, reference["choices"][0]["text"])
        # It moved on after the idle timeout rather than waiting out the 8 s hang.
        self.assertLess(elapsed, 6.5, f"the stream took {elapsed:.1f}s")
        self.assertEqual(cu.metric(http, "strata_router_worker_stream_idle_timeouts_total"), 1)
        self.assertEqual(cu.metric(http, "strata_router_resumed_streams_total"), 1)
        # The hung worker registers again with its next heartbeat, which says it is stalled.
        self.assertTrue(cu.wait_until(
            lambda: "mixed-0 reports its engine stalled" in router.tail_all(), timeout=10),
            router.tail())


if __name__ == "__main__":
    STRATA = sys.argv.pop(1)
    unittest.main(verbosity=2)
