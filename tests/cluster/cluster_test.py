"""End-to-end tests of a strata cluster: real router, prefill and decode worker processes on
loopback, driven by a plain HTTP client and by the official `openai` client.

Usage: cluster_test.py STRATA_BINARY   (ctest passes it; the test command installs `openai`)
"""
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_util as cu  # noqa: E402

STRATA = None
MODEL = "tiny-llama"
LONG_PROMPT = ("A disaggregated cluster computes the prompt on a prefill worker, moves the KV "
               "cache to a decode worker and streams the answer back to the client. ")


def completion_body(prompt, max_tokens=12, **kw):
    return {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, **kw}


class ClusterTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="strata_cluster_test_")
        cls.model = os.path.join(cls.tmp, "model")
        subprocess.run([STRATA, "model", "init", "--preset", "tiny-llama", "--out", cls.model],
                       check=True, stdout=subprocess.DEVNULL)
        name = ["--served-model-name", MODEL]
        cls.recording = os.path.join(cls.tmp, "recorded.jsonl")
        cls.router = cu.start_router(STRATA, cls.model, cls.tmp,
                                     name + ["--record-trace", cls.recording])
        cls.http = int(cls.router.match.group(1))
        grpc = cls.router.match.group(2)
        cls.workers = {
            wid: cu.start_worker(STRATA, cls.model, cls.tmp, role, wid, grpc, name)
            for role, wid in [("prefill", "prefill-0"), ("decode", "decode-0"),
                              ("decode", "decode-1")]}
        cls.mixed = cu.start_worker(STRATA, cls.model, cls.tmp, "mixed", "mixed-solo",
                                    extra=name)
        cls.mixed_http = int(cls.mixed.match.group(1))
        assert cu.wait_until(lambda: cu.metric(cls.http, "strata_router_workers",
                                               {"role": "decode"}) == 2, timeout=30)
        assert cu.wait_until(lambda: cu.request(cls.http, "GET", "/ready")[0] == 200)

    @classmethod
    def tearDownClass(cls):
        for w in cls.workers.values():
            w.stop()
        cls.mixed.stop()
        rc = cls.router.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert rc == 0, f"router exited {rc}"

    def worker_port(self, wid):
        return int(self.workers[wid].match.group(1))

    def test_disaggregated_greedy_output_matches_mixed_worker_and_generate(self):
        remote_before = cu.metric(self.http, "strata_router_placements_total",
                                  {"prefill": "remote"}) or 0
        received_before = sum(cu.metric(self.worker_port(w), "strata_worker_kv_received_bytes_total")
                              for w in ("decode-0", "decode-1"))
        status, via_router = cu.request(self.http, "POST", "/v1/completions",
                                        completion_body(LONG_PROMPT, 16))
        self.assertEqual(status, 200, via_router)
        status, via_mixed = cu.request(self.mixed_http, "POST", "/v1/completions",
                                       completion_body(LONG_PROMPT, 16))
        self.assertEqual(status, 200, via_mixed)
        gen = subprocess.run([STRATA, "generate", "--model", self.model, "--prompt", LONG_PROMPT,
                              "--max-tokens", "16", "--temperature", "0", "--ignore-eos",
                              "--json"], check=True, capture_output=True, text=True)
        want = json.loads(gen.stdout.strip().splitlines()[-1])
        text = via_router["choices"][0]["text"]
        self.assertEqual(via_router["usage"]["completion_tokens"], 16)
        self.assertEqual(text, via_mixed["choices"][0]["text"])
        self.assertEqual(text, want["text"])
        # It really went prefill worker -> UCX -> decode worker.
        self.assertGreater(cu.metric(self.http, "strata_router_placements_total",
                                     {"prefill": "remote"}), remote_before)
        received = sum(cu.metric(self.worker_port(w), "strata_worker_kv_received_bytes_total")
                       for w in ("decode-0", "decode-1"))
        self.assertGreater(received, received_before)

    def test_token_array_prompts_and_prefix_cache_hits(self):
        tokens = list(range(100, 180))
        body = completion_body(tokens, 4)
        first = cu.request(self.http, "POST", "/v1/completions", body)[1]
        # The KV index learns the blocks from heartbeats; the same prompt then hits a cache.
        time.sleep(1.2)
        second = cu.request(self.http, "POST", "/v1/completions", body)[1]
        self.assertEqual(first["choices"][0]["text"], second["choices"][0]["text"])
        self.assertGreater(second["usage"]["prompt_tokens_details"]["cached_tokens"], 0)

    def test_streaming_completion_and_chat(self):
        status, events, done = cu.stream(self.http, "/v1/completions", completion_body(
            LONG_PROMPT, 6, stream=True, stream_options={"include_usage": True}))
        self.assertEqual(status, 200)
        self.assertTrue(done)
        self.assertEqual(events[-1]["choices"], [])
        self.assertEqual(events[-1]["usage"]["completion_tokens"], 6)
        streamed = "".join(e["choices"][0]["text"] for e in events if e["choices"])
        full = cu.request(self.http, "POST", "/v1/completions", completion_body(LONG_PROMPT, 6))[1]
        self.assertEqual(streamed, full["choices"][0]["text"])

        chat = {"model": MODEL, "messages": [{"role": "user", "content": "Hi! " * 10}],
                "max_tokens": 5, "temperature": 0, "ignore_eos": True}
        status, events, done = cu.stream(self.http, "/v1/chat/completions", {**chat, "stream": True})
        self.assertEqual(status, 200)
        self.assertTrue(done)
        self.assertEqual(events[0]["choices"][0]["delta"]["role"], "assistant")
        self.assertEqual(events[-1]["choices"][0]["finish_reason"], "length")
        status, whole = cu.request(self.http, "POST", "/v1/chat/completions", chat)
        self.assertEqual(status, 200)
        self.assertEqual(whole["object"], "chat.completion")
        self.assertEqual("".join(e["choices"][0]["delta"].get("content", "") for e in events),
                         whole["choices"][0]["message"]["content"])

    def test_official_openai_client(self):
        import openai
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{self.http}/v1", api_key="unused")
        self.assertIn(MODEL, [m.id for m in client.models.list().data])
        c = client.completions.create(model=MODEL, prompt=LONG_PROMPT, max_tokens=8,
                                      temperature=0, extra_body={"ignore_eos": True})
        self.assertEqual(c.usage.completion_tokens, 8)
        pieces = [ch.choices[0].text for ch in client.completions.create(
            model=MODEL, prompt=LONG_PROMPT, max_tokens=8, temperature=0, stream=True,
            extra_body={"ignore_eos": True}) if ch.choices]
        self.assertEqual("".join(pieces), c.choices[0].text)
        chat = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Tell me a story."}],
            max_tokens=6, temperature=0, logprobs=True, top_logprobs=2)
        self.assertEqual(chat.choices[0].message.role, "assistant")
        self.assertEqual(len(chat.choices[0].logprobs.content), chat.usage.completion_tokens)
        chunks = list(client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Tell me a story."}],
            max_tokens=6, temperature=0, stream=True, stream_options={"include_usage": True}))
        self.assertEqual(chunks[-1].usage.completion_tokens, chat.usage.completion_tokens)
        with self.assertRaises(openai.NotFoundError):
            client.completions.create(model="no-such-model", prompt="x", max_tokens=1)

    def test_openai_client_logit_bias_echo_stop_token_ids_user(self):
        import openai
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{self.http}/v1", api_key="unused")
        greedy = dict(model=MODEL, prompt=LONG_PROMPT, max_tokens=4, temperature=0, logprobs=0,
                      extra_body={"ignore_eos": True})

        def one_id(text):  # the id of a one-token string, through the router's /tokenize
            status, t = cu.request(self.http, "POST", "/tokenize",
                                   {"model": MODEL, "prompt": text, "add_special_tokens": False})
            self.assertEqual(status, 200, t)
            self.assertEqual(len(t["tokens"]), 1, (text, t))
            return t["tokens"][0]

        # The request is served by a prefill and a decode worker: the bias reaches both.
        plain = client.completions.create(**greedy, user="someone")
        first = one_id(plain.choices[0].logprobs.tokens[0])
        forced = next(i for i in range(300, 400) if i != first)
        status, d = cu.request(self.http, "POST", "/detokenize",
                               {"model": MODEL, "tokens": [forced]})
        self.assertEqual(status, 200, d)
        up = client.completions.create(**greedy, logit_bias={str(forced): 100})
        self.assertEqual(up.choices[0].logprobs.tokens, [d["prompt"]] * 4)
        down = client.completions.create(**greedy, logit_bias={str(first): -100})
        self.assertNotEqual(down.choices[0].logprobs.tokens[0],
                            plain.choices[0].logprobs.tokens[0])
        with self.assertRaises(openai.BadRequestError) as bad:
            client.completions.create(**greedy, logit_bias={"1": 101})
        self.assertEqual(bad.exception.body["param"], "logit_bias")

        # echo: the prompt leads the text, streamed or not.
        args = dict(model=MODEL, prompt=LONG_PROMPT, max_tokens=4, temperature=0,
                    extra_body={"ignore_eos": True})
        echoed = client.completions.create(**args, echo=True)
        self.assertEqual(echoed.choices[0].text, LONG_PROMPT + plain.choices[0].text)
        pieces = [ch.choices[0].text for ch in client.completions.create(
            **args, echo=True, stream=True) if ch.choices]
        self.assertTrue(pieces[0].startswith(LONG_PROMPT))
        self.assertEqual("".join(pieces), echoed.choices[0].text)

        # Chat stops on a token id; user and service_tier are accepted and change nothing.
        messages = [{"role": "user", "content": "Tell me a story."}]
        chat = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=6,
                                              temperature=0, logprobs=True, user="u",
                                              service_tier="auto")
        stop_id = one_id(chat.choices[0].logprobs.content[0].token)
        stopped = client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=6, temperature=0,
            extra_body={"stop_token_ids": [stop_id], "ignore_eos": True})
        self.assertEqual(stopped.choices[0].finish_reason, "stop")
        self.assertEqual(stopped.usage.completion_tokens, 1)

    def test_200_concurrent_streams(self):
        def one(i):
            return cu.stream(self.http, "/v1/completions", completion_body(
                f"request {i}: " + LONG_PROMPT, 8, stream=True))
        with concurrent.futures.ThreadPoolExecutor(200) as pool:
            results = list(pool.map(one, range(200)))
        for status, events, done in results:
            self.assertEqual(status, 200, events)
            self.assertTrue(done)
            self.assertEqual(events[-1]["choices"][0]["finish_reason"], "length")

    def test_client_disconnect_frees_blocks_on_both_workers(self):
        got = cu.open_stream_and_drop(self.http, completion_body(
            "disconnect me " + LONG_PROMPT, 3000, stream=True))
        self.assertIn(b"data: ", got)
        ports = [self.worker_port(w) for w in self.workers] + [self.http]

        def idle():
            busy = sum(cu.metric(p, "strata_worker_running_requests") or 0 for p in ports[:-1])
            used = sum(cu.metric(p, "strata_worker_kv_blocks_used") or 0 for p in ports[:-1])
            return busy == 0 and used == 0 and \
                cu.metric(self.http, "strata_router_inflight_requests") == 0
        self.assertTrue(cu.wait_until(idle, timeout=20), "blocks or requests left behind")

    def test_errors_are_openai_shaped_and_the_cluster_keeps_serving(self):
        cases = [
            (b"{not json", 400, None),
            (completion_body("x", 4, logit_bias={"1": 500}), 400, "logit_bias"),
            (completion_body("x", -1), 400, "max_tokens"),
            (completion_body([i % 1000 for i in range(5000)], 4), 413, None),
            ({**completion_body("x", 4), "model": "nope"}, 404, "model"),
        ]
        for body, want, param in cases:
            status, err = cu.request(self.http, "POST", "/v1/completions", body)
            self.assertEqual(status, want, err)
            self.assertIn("message", err["error"])
            self.assertIn("type", err["error"])
            if param:
                self.assertEqual(err["error"]["param"], param)
        status, ok = cu.request(self.http, "POST", "/v1/completions", completion_body("x", 2))
        self.assertEqual(status, 200, ok)
        # A field nobody knows is served without it (--unknown-params warn, the default), counted.
        before = cu.metric(self.http, "strata_router_unknown_params_total",
                           {"param": "frobnicate"}) or 0
        status, ok = cu.request(self.http, "POST", "/v1/completions",
                                completion_body("x", 2, frobnicate=1))
        self.assertEqual(status, 200, ok)
        self.assertEqual(cu.metric(self.http, "strata_router_unknown_params_total",
                                   {"param": "frobnicate"}), before + 1)

    def test_metrics_pass_promtool(self):
        promtool = shutil.which("promtool")
        if not promtool:
            self.skipTest("promtool not installed")
        for port in [self.http, self.mixed_http] + [self.worker_port(w) for w in self.workers]:
            text = cu.request(port, "GET", "/metrics")[1]
            r = subprocess.run([promtool, "check", "metrics"], input=text, text=True,
                               capture_output=True)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        text = cu.request(self.http, "GET", "/metrics")[1]
        self.assertIn("strata_router_time_to_first_token_seconds_bucket", text)

    def test_recorded_traffic_replays_with_strata_replay(self):
        shared = [(i * 7) % 1000 for i in range(1100)]  # two full 512-token trace blocks
        for tail in ([1, 2, 3], [4, 5, 6, 7]):
            status, _ = cu.request(self.http, "POST", "/v1/completions",
                                   completion_body(shared + tail, 3))
            self.assertEqual(status, 200)
        with open(self.recording) as f:
            records = [json.loads(line) for line in f]
        last = records[-2:]
        self.assertEqual([r["input_tokens"] for r in last], [1103, 1104])
        self.assertEqual([r["output_tokens"] for r in last], [3, 3])
        self.assertEqual(len(last[0]["block_hashes"]), 3)
        self.assertEqual(last[0]["block_hashes"][:2], last[1]["block_hashes"][:2])
        self.assertNotEqual(last[0]["block_hashes"][2], last[1]["block_hashes"][2])
        self.assertNotIn("prompt", last[0])
        arrivals = [r["arrival_s"] for r in records]
        self.assertEqual(arrivals, sorted(arrivals))
        n = min(6, len(records))
        out = os.path.join(self.tmp, "replay_out")
        r = subprocess.run([STRATA, "replay", "--trace", self.recording, "--format", "strata",
                            "--url", f"http://127.0.0.1:{self.http}", "--max-requests", str(n),
                            "--speedup", "4", "--out", out], capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
        self.assertEqual(summary["requests"], n)
        self.assertEqual(summary["completed"], n, summary)

    def test_zz_killed_decode_worker_is_routed_around(self):
        self.workers["decode-1"].stop(signal.SIGKILL)
        for _ in range(6):
            status, body = cu.request(self.http, "POST", "/v1/completions",
                                      completion_body(LONG_PROMPT, 3))
            self.assertEqual(status, 200, body)
        self.assertTrue(cu.wait_until(lambda: cu.metric(
            self.http, "strata_router_workers", {"role": "decode"}) == 1, timeout=10))


class DecodeWorkerDeathTest(unittest.TestCase):
    """A request whose decode worker dies half-way through its answer gets the whole answer,
    the same as without the death. A non-streaming one is placed again from the start (the
    router holds a non-streaming answer until its end, so the client has seen nothing); a
    stream is resumed on the other decode worker from the tokens its client already has."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="strata_death_test_")
        self.procs = []
        model = os.path.join(self.tmp, "model")
        subprocess.run([STRATA, "model", "init", "--preset", "tiny-llama", "--out", model],
                       check=True, stdout=subprocess.DEVNULL)
        name = ["--served-model-name", MODEL]
        router = cu.start_router(STRATA, model, self.tmp, name)
        self.procs.append(router)
        self.http, grpc = int(router.match.group(1)), router.match.group(2)
        self.decode = {}
        for role, wid in [("prefill", "prefill-0"), ("decode", "decode-0"),
                          ("decode", "decode-1")]:
            w = cu.start_worker(STRATA, model, self.tmp, role, wid, grpc, name)
            self.procs.append(w)
            if role == "decode":
                self.decode[wid] = w
        assert cu.wait_until(lambda: cu.metric(self.http, "strata_router_workers",
                                               {"role": "decode"}) == 2, timeout=30)

    def tearDown(self):
        for p in reversed(self.procs):
            p.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def kill_mid_answer(self, send):
        """Runs `send` in a thread and SIGKILLs the decode worker serving it once that worker
        has run 20 more engine steps; returns what `send` returned."""
        client = concurrent.futures.ThreadPoolExecutor(1).submit(send)

        def busy():
            for wid, w in self.decode.items():
                if cu.metric(int(w.match.group(1)), "strata_worker_running_requests"):
                    return wid
            return None
        assert cu.wait_until(lambda: busy() is not None or client.done(), timeout=60)
        victim = busy()
        self.assertIsNotNone(victim, "the answer was done before a worker could be killed")
        port = int(self.decode[victim].match.group(1))
        steps0 = cu.metric(port, "strata_worker_engine_steps_total")
        assert cu.wait_until(lambda: cu.metric(port, "strata_worker_engine_steps_total") >
                             steps0 + 20 or client.done(), timeout=60)
        self.assertFalse(client.done(), "the answer was done before its worker was killed")
        self.decode[victim].stop(signal.SIGKILL)
        return client.result(timeout=300)

    def test_non_streaming_answer_survives_its_decode_worker_dying(self):
        body = completion_body(LONG_PROMPT, max_tokens=1500)
        status, reference = cu.request(self.http, "POST", "/v1/completions", body, timeout=300)
        self.assertEqual(status, 200, reference)
        self.assertEqual(reference["usage"]["completion_tokens"], 1500)
        status, answer = self.kill_mid_answer(
            lambda: cu.request(self.http, "POST", "/v1/completions", body, timeout=300))
        self.assertEqual(status, 200, answer)
        self.assertEqual(answer["choices"][0]["text"], reference["choices"][0]["text"])
        self.assertEqual(answer["usage"]["completion_tokens"], 1500)
        self.assertGreaterEqual(cu.metric(self.http, "strata_router_retries_total"), 1)

    def test_stream_is_resumed_on_another_worker_when_its_decode_worker_dies(self):
        body = completion_body(LONG_PROMPT, max_tokens=1500)
        status, reference = cu.request(self.http, "POST", "/v1/completions", body, timeout=300)
        self.assertEqual(status, 200, reference)
        streamed = dict(body, stream=True, stream_options={"include_usage": True})
        status, events, done = self.kill_mid_answer(
            lambda: cu.stream(self.http, "/v1/completions", streamed, timeout=300))
        self.assertEqual(status, 200, events)
        self.assertTrue(done, events[-3:])
        self.assertFalse([e for e in events if "error" in e], [e for e in events if "error" in e])
        text = "".join(c["text"] for e in events for c in e.get("choices", []))
        self.assertEqual(text, reference["choices"][0]["text"])
        finishes = [c["finish_reason"] for e in events for c in e.get("choices", [])
                    if c.get("finish_reason")]
        self.assertEqual(finishes, ["length"])
        usage = [e["usage"] for e in events if e.get("usage")]
        self.assertEqual(usage[-1]["completion_tokens"], 1500, usage)
        self.assertEqual(usage[-1]["prompt_tokens"], reference["usage"]["prompt_tokens"])
        self.assertEqual(cu.metric(self.http, "strata_router_resumed_streams_total"), 1)


class UpTest(unittest.TestCase):
    def test_up_serves_and_stops_every_process(self):
        tmp = tempfile.mkdtemp(prefix="strata_up_test_")
        try:
            up = cu.start_up(STRATA, tmp, "prefill: {count: 1}\ndecode: {count: 1}\n"
                             "router: {http_port: 0}\nengine: {num_kv_blocks: 256}\n")
            port = up.http
            children = [int(p) for p in subprocess.run(
                ["pgrep", "-P", str(up.p.pid)], capture_output=True, text=True).stdout.split()]
            self.assertEqual(len(children), 3)
            status, body = cu.request(port, "POST", "/v1/completions",
                                      completion_body(LONG_PROMPT, 4))
            self.assertEqual(status, 200, body)
            self.assertEqual(up.stop(signal.SIGTERM, timeout=60), 0, up.tail())
            for pid in children:
                self.assertFalse(os.path.exists(f"/proc/{pid}"), f"process {pid} left behind")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def test_up_starts_a_killed_router_again_and_the_workers_come_back_to_it(self):
        tmp = tempfile.mkdtemp(prefix="strata_up_router_test_")
        up = None
        try:
            up = cu.start_up(STRATA, tmp, "prefill: {count: 1}\ndecode: {count: 1}\n"
                             "router: {http_port: 0}\nengine: {num_kv_blocks: 256}\n")
            status, reference = cu.request(up.http, "POST", "/v1/completions",
                                           completion_body(LONG_PROMPT, 6))
            self.assertEqual(status, 200, reference)
            router = int(subprocess.run(["pgrep", "-P", str(up.p.pid), "-f", " router "],
                                        capture_output=True, text=True).stdout.split()[0])
            os.kill(router, signal.SIGKILL)
            assert cu.wait_until(lambda: "router is ready again" in up.tail_all(), timeout=60), \
                up.tail()
            self.assertIn("starting router again in 1s (restart 1 in a row)", up.tail_all())
            # Same port; the workers register again with their next heartbeat.
            assert cu.wait_until(lambda: cu.metric(up.http, "strata_router_workers",
                                                   {"role": "decode"}) == 1, timeout=30)
            status, answer = cu.request(up.http, "POST", "/v1/completions",
                                        completion_body(LONG_PROMPT, 6))
            self.assertEqual(status, 200, answer)
            self.assertEqual(answer["choices"][0]["text"], reference["choices"][0]["text"])
            self.assertEqual(up.stop(signal.SIGTERM, timeout=60), 0, up.tail())
        finally:
            if up is not None and up.p.poll() is None:
                up.stop(signal.SIGKILL)
            shutil.rmtree(tmp, ignore_errors=True)

    def test_up_requests_wait_for_their_only_decode_worker_to_be_started_again(self):
        """The only decode worker dies mid-answer, twice, under concurrent streaming and
        non-streaming requests: the router finds no decode worker to place them on again,
        waits (--worker-grace, counted from the failure) while `strata up` starts the worker
        again, and every client gets the whole answer, the same as before the failures."""
        tmp = tempfile.mkdtemp(prefix="strata_up_decode_test_")
        up = None
        try:
            up = cu.start_up(STRATA, tmp, "prefill: {count: 1}\ndecode: {count: 1}\n"
                             "router: {http_port: 0}\nengine: {num_kv_blocks: 512}\n")
            # Past the grace that follows the router's own start: only the wait after the
            # worker's failure can save the requests.
            time.sleep(6)
            body = completion_body(LONG_PROMPT, max_tokens=600)
            status, reference = cu.request(up.http, "POST", "/v1/completions", body, timeout=300)
            self.assertEqual(status, 200, reference)
            want = reference["choices"][0]["text"]

            def one(i):
                if i % 2:
                    return cu.request(up.http, "POST", "/v1/completions", body, timeout=300)
                status, events, done = cu.stream(up.http, "/v1/completions",
                                                 dict(body, stream=True), timeout=300)
                if status != 200:
                    return status, events
                text = "".join(e["choices"][0]["text"] for e in events if e.get("choices"))
                return (200 if done else 599), {"choices": [{"text": text}]}

            for kill in range(2):
                ports = dict(l.split(": http://127.0.0.1:") for l in up.output.splitlines()
                             if l.startswith("  ") and l.endswith("/metrics"))
                decode_port = int(ports["  decode-0"].split("/")[0])
                pool = concurrent.futures.ThreadPoolExecutor(8)
                clients = [pool.submit(one, i) for i in range(8)]
                steps0 = cu.metric(decode_port, "strata_worker_engine_steps_total") or 0
                assert cu.wait_until(
                    lambda: (cu.metric(decode_port, "strata_worker_engine_steps_total") or 0)
                    > steps0 + 20 or any(c.done() for c in clients), timeout=60)
                self.assertFalse(any(c.done() for c in clients),
                                 "an answer was done before its worker was killed")
                decode = int(subprocess.run(["pgrep", "-P", str(up.p.pid), "-f", "id decode-0 "],
                                            capture_output=True, text=True).stdout.split()[0])
                os.kill(decode, signal.SIGKILL)
                for c in clients:
                    status, answer = c.result(timeout=300)
                    self.assertEqual(status, 200, answer)
                    self.assertEqual(answer["choices"][0]["text"], want)
                pool.shutdown()
                self.assertEqual(up.tail_all().count("decode-0 is ready again"), kill + 1,
                                 up.tail())
            # Every request was placed again after each failure: from the start, or (a stream
            # with tokens already) resumed.
            moved = ((cu.metric(up.http, "strata_router_retries_total") or 0) +
                     (cu.metric(up.http, "strata_router_resumed_streams_total") or 0))
            self.assertGreaterEqual(moved, 16)
            self.assertEqual(up.stop(signal.SIGTERM, timeout=60), 0, up.tail())
        finally:
            if up is not None and up.p.poll() is None:
                up.stop(signal.SIGKILL)
            shutil.rmtree(tmp, ignore_errors=True)


class StandaloneAdmissionTest(unittest.TestCase):
    """A standalone mixed worker has its own admission limit: with one running and one waiting
    (--max-num-seqs 1 --max-waiting-requests 1) the next request gets an OpenAI-shaped 429 with
    Retry-After, and once the queue empties it is served again."""

    def test_a_full_queue_answers_429_with_retry_after(self):
        import http.client
        import socket
        tmp = tempfile.mkdtemp(prefix="strata_admission_test_")
        worker = None
        streams = []
        try:
            subprocess.run([STRATA, "model", "init", "--preset", "tiny-llama", "--out",
                            os.path.join(tmp, "model")], check=True, capture_output=True)
            worker = cu.start_worker(STRATA, os.path.join(tmp, "model"), tmp, "mixed",
                                     "mixed-admission", extra=["--served-model-name", MODEL,
                                                               "--max-num-seqs", "1",
                                                               "--max-waiting-requests", "1"])
            port = int(worker.match.group(1))

            def open_stream():
                s = socket.create_connection(("127.0.0.1", port), timeout=30)
                data = json.dumps(completion_body("Once upon a time", 900, stream=True)).encode()
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Type: application/json\r\nContent-Length: " +
                          str(len(data)).encode() + b"\r\n\r\n" + data)
                streams.append(s)

            open_stream()
            assert cu.wait_until(lambda: cu.metric(port, "strata_worker_running_requests") == 1,
                                 timeout=30)
            open_stream()
            assert cu.wait_until(lambda: cu.metric(port, "strata_worker_waiting_requests") == 1,
                                 timeout=30)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("POST", "/v1/completions", body=json.dumps(completion_body("Hi", 4)),
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            body = json.loads(resp.read())
            self.assertEqual(resp.status, 429, body)
            self.assertEqual(body["error"]["type"], "rate_limit_error")
            self.assertIn("overloaded", body["error"]["message"])
            self.assertGreaterEqual(int(resp.getheader("Retry-After")), 1)
            for s in streams:  # the two streams end: the queue empties
                s.close()
            streams.clear()
            assert cu.wait_until(
                lambda: cu.metric(port, "strata_worker_waiting_requests") == 0 and
                cu.metric(port, "strata_worker_running_requests") == 0, timeout=30)
            status, answer = cu.request(port, "POST", "/v1/completions", completion_body("Hi", 4))
            self.assertEqual(status, 200, answer)
        finally:
            for s in streams:
                s.close()
            if worker is not None:
                worker.stop()
            shutil.rmtree(tmp, ignore_errors=True)


class ProfileTest(unittest.TestCase):
    """`strata profile` against a mixed worker: prefill samples after cached prefixes longer and
    shorter than a trace block, a profile that names the worker's model and device, and the
    goodput router accepting the worker with it and refusing one on another device."""

    def test_profile_names_model_and_device_and_the_router_matches_workers(self):
        tmp = tempfile.mkdtemp(prefix="strata_profile_test_")
        procs = []
        try:
            model = os.path.join(tmp, "model")
            subprocess.run([STRATA, "model", "init", "--preset", "tiny-llama", "--out", model],
                           check=True, capture_output=True)
            worker = cu.start_worker(STRATA, model, tmp, "mixed", "mixed-profile",
                                     extra=["--served-model-name", MODEL])
            procs.append(worker)
            port = int(worker.match.group(1))
            status, info = cu.request(port, "GET", "/server_info")
            self.assertEqual(status, 200, info)
            self.assertTrue(info["device"].startswith("cpu:"), info)
            out = os.path.join(tmp, "profile.json")
            done = subprocess.run(
                [STRATA, "profile", "--url", f"http://127.0.0.1:{port}", "--model", model,
                 "--name", "test-cpu", "--out", out, "--prefill-lens", "16,64,256",
                 "--prefill-batches", "1,2", "--prefill-contexts", "512",
                 "--prefill-context-lens", "64,700", "--decode-batches", "1,2,4",
                 "--decode-lens", "32,128", "--decode-tokens", "16", "--repeats", "1"],
                capture_output=True, text=True, timeout=300)
            self.assertEqual(done.returncode, 0, done.stderr[-2000:])
            with open(out) as f:
                profile = json.load(f)
            self.assertEqual(profile["model"], MODEL)
            self.assertEqual(profile["device"], info["device"])
            worker.stop()
            procs.clear()
            # A goodput router with only this profile: a CPU worker of this model registers;
            # the same worker under another served name is refused with the reason.
            router = cu.start_router(STRATA, model, tmp,
                                     extra=["--policy", "goodput", "--profile", out,
                                            "--served-model-name", MODEL])
            procs.append(router)
            grpc = int(router.match.group(2))
            good = cu.start_worker(STRATA, model, tmp, "mixed", "mixed-ok", router_grpc=grpc,
                                   extra=["--served-model-name", MODEL])
            procs.append(good)
            assert cu.wait_until(lambda: "registered with the router" in good.tail_all(),
                                 timeout=30), good.tail()
            other = cu.start_worker(STRATA, model, tmp, "mixed", "mixed-other",
                                    router_grpc=grpc, extra=["--served-model-name", "other"])
            procs.append(other)
            assert cu.wait_until(lambda: "no goodput profile for model 'other'" in
                                 other.tail_all(), timeout=30), other.tail()
        finally:
            for p in procs:
                p.stop()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    STRATA = sys.argv.pop(1)
    unittest.main(verbosity=2)
