"""A router's death does not lose a request its client retries (docs/api.md, "Retries and
resumption"), with real router and worker processes on loopback: a keyed stream whose router is
SIGKILLed mid-answer resumes on a router started again on the same ports, from the client's
Last-Event-ID, and reads as the same answer uncut; a non-streaming request cut by the router's
death gets its whole answer on retry; and the headers' misuse is refused clearly. Then through
`strata up --routers 2` with prefill and decode workers: a stream whose router is SIGKILLed
resumes on the other router behind the same front, from the decode worker that holds it.

Usage: resume_test.py STRATA_BINARY   (ctest passes it)
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_util as cu  # noqa: E402
import resume_client as rc  # noqa: E402

STRATA = None
MODEL = "tiny-llama"


def body(prompt, max_tokens, **kw):
    return {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, **kw}


def usage_of(events):
    """The final usage, less the cached prompt tokens (an answer's reference runs first, so the
    prompt is cached only for the run compared with it)."""
    usages = [e["usage"] for e in events if e.get("usage")]
    return counts(usages[-1]) if usages else None


def counts(usage):
    return {k: usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}


class ResumeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="strata_resume_test_")
        self.procs = []
        self.model = os.path.join(self.tmp, "model")
        subprocess.run([STRATA, "model", "init", "--preset", "tiny-llama", "--out", self.model],
                       check=True, stdout=subprocess.DEVNULL)
        router = self.start_router(0, 0)
        self.http, self.grpc = int(router.match.group(1)), int(router.match.group(2))
        self.router = router
        worker = cu.start_worker(STRATA, self.model, self.tmp, "mixed", "mixed-0", self.grpc,
                                 ["--served-model-name", MODEL,
                                  "--detached-request-grace-s", "20"])
        self.procs.append(worker)
        self.worker_http = int(worker.match.group(1))
        self.assertTrue(cu.wait_until(lambda: cu.metric(self.http, "strata_router_workers",
                                                        {"role": "mixed"}) == 1, timeout=30))

    def tearDown(self):
        for p in reversed(self.procs):
            p.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start_router(self, http_port, grpc_port):
        """A router on these ports (0: ephemeral); a later one on the same ports replaces a
        killed one, and the workers register with it at their next heartbeat."""
        log = os.path.join(self.tmp, f"router-{len(self.procs)}.log")
        r = cu.Proc([STRATA, "router", "--http-port", str(http_port), "--grpc-port",
                     str(grpc_port), "--model", self.model, "--served-model-name", MODEL],
                    log, r"http://127\.0\.0\.1:(\d+)/v1, registry at 127\.0\.0\.1:(\d+)")
        self.procs.append(r)
        return r

    def replace_router(self):
        """SIGKILLs the router and starts another on its ports."""
        self.router.stop(signal.SIGKILL)
        self.router = self.start_router(self.http, self.grpc)

    def test_a_stream_cut_by_its_routers_death_resumes_exactly_on_the_next_router(self):
        prompt = "The router dies in the middle of this answer, and"
        req = body(prompt, 300, stream=True, stream_options={"include_usage": True})
        # The reference: the same request uncut, without a key.
        status, ref_events, done = cu.stream(self.http, "/v1/completions", req)
        self.assertEqual(status, 200, ref_events)
        self.assertTrue(done)
        ref_text = "".join(c["text"] for e in ref_events for c in e.get("choices", []))
        killed = []

        def kill_midway(result):
            if not killed and len(result.events) == 5:
                killed.append(result.last_id)
                self.replace_router()

        key = rc.new_key()
        got = rc.post(self.http, "/v1/completions", req, key=key, on_event=kill_midway)
        self.assertEqual(killed, ["5"])
        self.assertEqual(got.status, 200, got.body)
        self.assertTrue(got.done, got.events[-3:])
        self.assertEqual(got.retries, 1, got.errors)
        self.assertEqual(got.resumes, 1)
        self.assertFalse([e for e in got.events if "error" in e], got.events[-3:])
        # Nothing repeated, nothing missing, the same usage.
        self.assertEqual(got.text(), ref_text)
        self.assertEqual(usage_of(got.events), usage_of(ref_events))
        self.assertEqual(cu.metric(self.http, "strata_router_idempotent_lookups_total",
                                   {"result": "attached"}), 1)
        # A non-streaming retry of the same request (same key) gets the whole answer, from
        # the generation the worker still holds.
        plain = {k: v for k, v in req.items() if k not in ("stream", "stream_options")}
        whole = rc.post(self.http, "/v1/completions", plain, key=key)
        self.assertEqual(whole.status, 200, whole.body)
        self.assertEqual(whole.text(), ref_text)
        self.assertEqual(cu.metric(self.http, "strata_router_idempotent_lookups_total",
                                   {"result": "attached"}), 2)
        # The worker keeps the finished answer for the rest of its grace.
        self.assertEqual(cu.metric(self.worker_http, "strata_worker_held_requests"), 1)

    def test_a_chat_stream_resumes_after_its_first_events(self):
        req = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me more."}],
               "max_tokens": 120, "temperature": 0, "ignore_eos": True, "stream": True}
        status, ref_events, done = cu.stream(self.http, "/v1/chat/completions", req)
        self.assertEqual(status, 200, ref_events)
        ref = "".join(c["delta"].get("content") or "" for e in ref_events for c in e["choices"])
        killed = []

        def kill_midway(result):
            if not killed and len(result.events) == 2:  # the role and the first content
                killed.append(result.last_id)
                self.replace_router()

        got = rc.post(self.http, "/v1/chat/completions", req, on_event=kill_midway)
        self.assertEqual(killed, ["2"])
        self.assertTrue(got.done)
        self.assertEqual(got.resumes, 1)
        deltas = [c["delta"] for e in got.events for c in e["choices"]]
        self.assertEqual([d for d in deltas if "role" in d], [{"role": "assistant",
                                                               "content": ""}])
        self.assertEqual("".join(d.get("content") or "" for d in deltas), ref)
        self.assertEqual(got.events[-1]["choices"][0]["finish_reason"],
                         ref_events[-1]["choices"][0]["finish_reason"])

    def test_a_non_streaming_request_cut_by_its_routers_death_is_answered_whole_on_retry(self):
        req = body("A long answer that the router will not see finish:", 1500)
        key = rc.new_key()
        answer = {}
        client = threading.Thread(
            target=lambda: answer.update(got=rc.post(self.http, "/v1/completions", req, key=key)))
        client.start()
        # Once the worker runs it, the router dies; the worker keeps generating.
        self.assertTrue(cu.wait_until(
            lambda: (cu.metric(self.http, "strata_router_inflight_requests") or 0) == 1,
            timeout=10, interval=0.02))
        self.replace_router()
        client.join(120)
        got = answer["got"]
        self.assertEqual(got.status, 200, got.body)
        self.assertEqual(got.retries, 1, got.errors)
        status, ref = cu.request(self.http, "POST", "/v1/completions", req)
        self.assertEqual(status, 200, ref)
        self.assertEqual(got.text(), ref["choices"][0]["text"])
        self.assertEqual(counts(got.body["usage"]), counts(ref["usage"]))

    def test_misused_headers_are_refused_clearly(self):
        req = body("Hello", 4, stream=True)
        # A resume whose generation no worker holds cannot continue: 404, nothing started.
        status, err = cu.request(self.http, "POST", "/v1/completions", req,
                                 headers={"Idempotency-Key": "never-seen", "Last-Event-ID": "3"})
        self.assertEqual(status, 404, err)
        self.assertIn("Last-Event-ID", err["error"]["message"])
        # Malformed key or event id: 400.
        for headers in ({"Idempotency-Key": "x" * 300},
                        {"Idempotency-Key": "has space"},
                        {"Idempotency-Key": "k1", "Last-Event-ID": "1.2"},
                        {"Idempotency-Key": "k1", "Last-Event-ID": "-1"}):
            status, err = cu.request(self.http, "POST", "/v1/completions", req, headers=headers)
            self.assertEqual(status, 400, (headers, err))
        # One key, two different requests: the second is refused while the first is held.
        first = rc.post(self.http, "/v1/completions", body("Hello", 4), key="k2")
        self.assertEqual(first.status, 200, first.body)
        again = rc.post(self.http, "/v1/completions", body("Hello", 4), key="k2")
        self.assertEqual(again.text(), first.text())
        other = rc.post(self.http, "/v1/completions", body("Goodbye", 4), key="k2")
        self.assertEqual(other.status, 409, other.body)
        self.assertEqual(cu.metric(self.http, "strata_router_idempotent_lookups_total",
                                   {"result": "conflict"}), 1)



def process_pid(needle):
    """The pid of the one process whose command line holds every string in `needle`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                words = [a.decode(errors="replace") for a in f.read().split(b"\0")]
        except OSError:
            continue
        if all(n in words for n in needle):
            found.append(int(pid))
    assert len(found) == 1, (needle, found)
    return found[0]


class TwoRoutersResumeTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="strata_resume_test_up_")
        self.up = cu.start_up(STRATA, self.tmp,
                              "router:\n  http_port: 0\n  replicas: 2\n"
                              "prefill:\n  count: 1\ndecode:\n  count: 1\n")
        self.routers = {m.group(1): int(m.group(2)) for m in re.finditer(
            r"(router-\d): http://127\.0\.0\.1:(\d+)/metrics", self.up.output)}
        self.assertEqual(sorted(self.routers), ["router-0", "router-1"], self.up.output)
        for port in self.routers.values():
            self.assertTrue(cu.wait_until(lambda: cu.metric(port, "strata_router_workers",
                                                            {"role": "decode"}) == 1))

    def tearDown(self):
        self.up.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_a_stream_whose_router_dies_resumes_on_the_other_router(self):
        # A prompt long enough to be prefilled on the prefill worker (nothing of it is cached
        # yet: the reference runs afterwards).
        req = body("Disaggregated and highly available: " + "tokens " * 40, 200, stream=True,
                   stream_options={"include_usage": True})
        killed = []

        def kill_its_router(result):
            if killed or len(result.events) != 5:
                return
            holder = [name for name, port in self.routers.items()
                      if cu.metric(port, "strata_router_inflight_requests") == 1]
            self.assertEqual(len(holder), 1, holder)
            os.kill(process_pid(["router", "--http-port", str(self.routers[holder[0]])]),
                    signal.SIGKILL)
            killed.append(holder[0])

        got = rc.post(self.up.http, "/v1/completions", req, on_event=kill_its_router)
        status, ref_events, done = cu.stream(self.up.http, "/v1/completions", req)
        self.assertEqual(status, 200, ref_events)
        ref_text = "".join(c["text"] for e in ref_events for c in e.get("choices", []))
        self.assertEqual(len(killed), 1)
        self.assertTrue(got.done, got.events[-3:])
        self.assertEqual(got.resumes, 1, got.errors)
        self.assertEqual(got.text(), ref_text)
        self.assertEqual(usage_of(got.events), usage_of(ref_events))
        other = [name for name in self.routers if name != killed[0]][0]
        self.assertEqual(cu.metric(self.routers[other], "strata_router_idempotent_lookups_total",
                                   {"result": "attached"}), 1)


if __name__ == "__main__":
    STRATA = sys.argv.pop(1)
    unittest.main()
