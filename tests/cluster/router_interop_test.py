"""strata mixed workers behind the ecosystem's routers: `vllm-router` and `sglang-router` (the
PyPI wheels, run as real processes) in front of two `strata worker --role mixed`, next to
strata's own router over the same two workers. Completions, streaming chat and the `openai`
client go through each peer router and must give the greedy text strata's router gives, tool
calling requests included (the model carries the Qwen2.5 chat template, which renders tools); the
endpoints the peer routers probe (health, server and model info, load, tokenize) answer.

Usage: router_interop_test.py STRATA_BINARY   (ctest passes it; scripts/test.sh installs the
routers into the test venv)
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_util as cu  # noqa: E402

STRATA = None
MODEL = "tiny-llama"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
PROMPTS = ["The capital of France is", "Once upon a time, in a land far away,",
           "A disaggregated cluster moves the KV cache"]
CHAT = [{"role": "user", "content": "Tell me a story about a router."}]
BIN = os.path.dirname(sys.executable)  # the venv the routers were installed into


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peer_router_argv(name, port, workers):
    """The command line of a peer router on `port` in front of `workers` (HTTP ports), its
    Prometheus exporter on a free port (both default to the same fixed one)."""
    urls = [f"http://127.0.0.1:{w}" for w in workers]
    common = ["--host", "127.0.0.1", "--port", str(port), "--worker-urls", *urls,
              "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
    if name == "vllm-router":
        return [os.path.join(BIN, "vllm-router"), *common]
    return [os.path.join(BIN, "sglang-router"), "launch", *common]


def missing_router():
    """Why the peer routers cannot run here, or None."""
    for exe in ("vllm-router", "sglang-router"):
        if not os.access(os.path.join(BIN, exe), os.X_OK):
            return (f"{exe} is not installed in {BIN} (scripts/test.sh installs the PyPI wheels "
                    "vllm-router and sglang-router into the test venv)")
    return None


class PeerRouter:
    def __init__(self, name, workers, log_dir, tag=""):
        self.name = name
        self.port = free_port()
        self.log_path = os.path.join(log_dir, name + tag + ".log")
        self.log = open(self.log_path, "wb")
        self.p = subprocess.Popen(peer_router_argv(name, self.port, workers),
                                  stdout=self.log, stderr=subprocess.STDOUT)

    def tail(self):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read()[-3000:].decode(errors="replace")

    def ready(self):
        """Serves and lists the workers' model (sglang-router learns it from /server_info)."""
        if self.p.poll() is not None:
            raise RuntimeError(f"{self.name} exited {self.p.returncode}: {self.tail()}")
        try:
            status, body = cu.request(self.port, "GET", "/v1/models", timeout=5)
        except OSError:
            return False
        return status == 200 and isinstance(body, dict) and \
            MODEL in [m.get("id") for m in body.get("data", [])]

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(15)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


def chat_text(port, stream):
    body = {"model": MODEL, "messages": CHAT, "max_tokens": 10, "temperature": 0,
            "ignore_eos": True}
    if not stream:
        status, answer = cu.request(port, "POST", "/v1/chat/completions", body)
        assert status == 200, answer
        return answer["choices"][0]["message"]["content"]
    status, events, done = cu.stream(port, "/v1/chat/completions", {**body, "stream": True})
    assert status == 200 and done, events
    return "".join(e["choices"][0]["delta"].get("content") or ""
                   for e in events if e.get("choices"))


def completion_text(port, prompt):
    status, answer = cu.request(port, "POST", "/v1/completions",
                                {"model": MODEL, "prompt": prompt, "max_tokens": 8,
                                 "temperature": 0, "ignore_eos": True})
    assert status == 200, answer
    return answer["choices"][0]["text"]


@unittest.skipIf(missing_router() is not None, missing_router())
class RouterInteropTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="strata_interop_test_")
        cls.model = os.path.join(cls.tmp, "model")
        subprocess.run([STRATA, "model", "init", "--preset", "tiny-llama", "--out", cls.model],
                       check=True, stdout=subprocess.DEVNULL)
        # A template that renders tools, so that tools lost on the way would change the prompt.
        shutil.copy(os.path.join(ROOT, "tests", "fixtures", "chat_templates", "qwen2_5",
                                 "template.jinja"), os.path.join(cls.model, "chat_template.jinja"))
        name = ["--served-model-name", MODEL]
        # strata's router is strict about unknown fields; the workers use the default (warn).
        cls.router = cu.start_router(STRATA, cls.model, cls.tmp,
                                     name + ["--unknown-params", "reject"])
        cls.http = int(cls.router.match.group(1))
        grpc = cls.router.match.group(2)
        cls.workers = [cu.start_worker(STRATA, cls.model, cls.tmp, "mixed", f"mixed-{i}", grpc,
                                       name) for i in range(2)]
        cls.worker_http = [int(w.match.group(1)) for w in cls.workers]
        assert cu.wait_until(lambda: cu.metric(cls.http, "strata_router_workers",
                                               {"role": "mixed"}) == 2, timeout=30)
        assert cu.wait_until(lambda: cu.request(cls.http, "GET", "/ready")[0] == 200)
        cls.peers = {n: PeerRouter(n, cls.worker_http, cls.tmp)
                     for n in ("vllm-router", "sglang-router")}
        for peer in cls.peers.values():
            assert cu.wait_until(peer.ready, timeout=30), peer.tail()

    @classmethod
    def tearDownClass(cls):
        for peer in cls.peers.values():
            peer.stop()
        for w in cls.workers:
            w.stop()
        cls.router.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_completions_match_strata_router(self):
        for prompt in PROMPTS:
            reference = completion_text(self.http, prompt)
            self.assertTrue(reference)
            for name, peer in self.peers.items():
                with self.subTest(router=name, prompt=prompt):
                    self.assertEqual(completion_text(peer.port, prompt), reference, peer.tail())

    def test_streaming_chat_matches_strata_router(self):
        reference = chat_text(self.http, stream=False)
        self.assertTrue(reference)
        self.assertEqual(chat_text(self.http, stream=True), reference)
        for name, peer in self.peers.items():
            with self.subTest(router=name):
                self.assertEqual(chat_text(peer.port, stream=True), reference, peer.tail())

    def test_openai_client_through_peer_routers(self):
        import openai
        strata = openai.OpenAI(base_url=f"http://127.0.0.1:{self.http}/v1", api_key="none")
        ref_c = strata.completions.create(model=MODEL, prompt=PROMPTS[0], max_tokens=8,
                                          temperature=0).choices[0].text
        ref_chat = strata.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=8,
                                                  temperature=0).choices[0].message.content
        for name, peer in self.peers.items():
            with self.subTest(router=name):
                client = openai.OpenAI(base_url=f"http://127.0.0.1:{peer.port}/v1",
                                       api_key="none")
                self.assertIn(MODEL, [m.id for m in client.models.list().data])
                c = client.completions.create(model=MODEL, prompt=PROMPTS[0], max_tokens=8,
                                              temperature=0)
                self.assertEqual(c.choices[0].text, ref_c)
                chunks = client.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=8,
                                                        temperature=0, stream=True)
                text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
                self.assertEqual(text, ref_chat)

    def test_tools_through_peer_routers(self):
        import openai
        strata = openai.OpenAI(base_url=f"http://127.0.0.1:{self.http}/v1", api_key="none")
        call = {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}
        messages = CHAT + [call, {"role": "tool", "tool_call_id": "call_1", "content": "21C"}]
        kw = dict(model=MODEL, messages=messages, max_tokens=8, temperature=0)
        reference = strata.chat.completions.create(tools=TOOLS, tool_choice="auto", **kw)
        ref_text = reference.choices[0].message.content
        # The tools change the prompt, so they change the greedy text.
        without = strata.chat.completions.create(**kw).choices[0].message.content
        self.assertNotEqual(ref_text, without)
        for name, peer in self.peers.items():
            with self.subTest(router=name):
                client = openai.OpenAI(base_url=f"http://127.0.0.1:{peer.port}/v1",
                                       api_key="none")
                done = client.chat.completions.create(tools=TOOLS, tool_choice="auto", **kw)
                self.assertEqual(done.choices[0].message.content, ref_text, peer.tail())
                chunks = client.chat.completions.create(tools=TOOLS, tool_choice="auto",
                                                        stream=True, **kw)
                text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
                self.assertEqual(text, ref_text, peer.tail())

    def test_vllm_sglang_parameters(self):
        # What both routers add to every request, sent straight to a worker and to strata's
        # strict router: served, not rejected.
        extras = {"no_stop_trim": False, "skip_special_tokens": True, "return_hidden_states": False,
                  "echo": False, "min_tokens": 2, "top_k": -1, "min_p": 0.0,
                  "repetition_penalty": 1.0, "stop_token_ids": [], "ignore_eos": False,
                  "spaces_between_special_tokens": True, "include_stop_str_in_output": False}
        body = {"model": MODEL, "prompt": PROMPTS[1], "max_tokens": 6, "temperature": 0,
                **extras}
        for port in (self.worker_http[0], self.http):
            status, answer = cu.request(port, "POST", "/v1/completions", body)
            self.assertEqual(status, 200, answer)
            self.assertGreaterEqual(answer["usage"]["completion_tokens"], 2)
        # A stop string kept (no_stop_trim) or cut (the default).
        full = completion_text(self.http, PROMPTS[1])
        stop = full[2:5]
        base = {"model": MODEL, "prompt": PROMPTS[1], "max_tokens": 8, "temperature": 0,
                "ignore_eos": True, "stop": [stop]}
        # On a worker directly, and through strata's router (which passes it on over gRPC).
        for port in (self.worker_http[1], self.http):
            _, cut = cu.request(port, "POST", "/v1/completions", base)
            _, kept = cu.request(port, "POST", "/v1/completions", {**base, "no_stop_trim": True})
            self.assertEqual(cut["choices"][0]["text"], full[:full.index(stop)])
            self.assertEqual(kept["choices"][0]["text"], full[:full.index(stop) + len(stop)])

    def test_unknown_params_policy(self):
        body = {"model": MODEL, "prompt": PROMPTS[0], "max_tokens": 2, "temperature": 0,
                "x_interop_probe": 1}
        status, answer = cu.request(self.http, "POST", "/v1/completions", body)
        self.assertEqual(status, 400)
        self.assertEqual(answer["error"]["message"],
                         "Unrecognized request argument supplied: x_interop_probe")
        port = self.worker_http[0]
        before = cu.metric(port, "strata_worker_unknown_params_total",
                           {"param": "x_interop_probe"}) or 0
        for _ in range(2):
            status, answer = cu.request(port, "POST", "/v1/completions", body)
            self.assertEqual(status, 200, answer)
        # The request's metrics are recorded when it completes, which may be just after its
        # answer reached the client.
        counted = lambda: cu.metric(port, "strata_worker_unknown_params_total",  # noqa: E731
                                    {"param": "x_interop_probe"})
        self.assertTrue(cu.wait_until(lambda: counted() == before + 2, timeout=10), counted())
        logged = [line for line in self.workers[0].tail_all().splitlines()
                  if "x_interop_probe" in line]
        self.assertEqual(len(logged), 1, logged)

    def test_probed_endpoints(self):
        for port in (self.worker_http[0], self.http):
            for path in ("/server_info", "/get_server_info"):
                status, info = cu.request(port, "GET", path)
                self.assertEqual(status, 200, info)
                self.assertEqual(info["served_model_name"], MODEL)
                self.assertEqual(info["model_path"], self.model)
                self.assertGreater(info["max_model_len"], 0)
            for path in ("/model_info", "/get_model_info"):
                status, info = cu.request(port, "GET", path)
                self.assertEqual(status, 200, info)
                self.assertEqual(info["model_path"], self.model)
                self.assertTrue(info["is_generation"])
            status, load = cu.request(port, "GET", "/get_load")
            self.assertEqual(status, 200, load)
            self.assertEqual(load[0]["dp_rank"], 0)
            self.assertGreaterEqual(load[0]["num_tokens"], 0)
            self.assertEqual(cu.request(port, "GET", "/health_generate")[0], 200)
            status, tok = cu.request(port, "POST", "/tokenize", {"model": MODEL,
                                                                 "prompt": PROMPTS[0]})
            self.assertEqual(status, 200, tok)
            _, answer = cu.request(port, "POST", "/v1/completions",
                                   {"model": MODEL, "prompt": PROMPTS[0], "max_tokens": 1})
            self.assertEqual(tok["count"], answer["usage"]["prompt_tokens"])
            status, detok = cu.request(port, "POST", "/detokenize", {"tokens": tok["tokens"]})
            self.assertEqual(status, 200, detok)
            self.assertIn(PROMPTS[0], detok["prompt"])
        # sglang-router reads the workers' /get_load (-1 when it cannot).
        status, loads = cu.request(self.peers["sglang-router"].port, "GET", "/get_loads")
        self.assertEqual(status, 200, loads)
        self.assertEqual(len(loads["workers"]), 2)
        for w in loads["workers"]:
            self.assertGreaterEqual(w["load"], 0, loads)


    def test_vllm_router_reads_its_get_load_format(self):
        # A worker set to vllm-router's /get_load body: vllm-router reads its load (-1 when it
        # cannot, as it does for the sglang-format workers above).
        worker = cu.start_worker(STRATA, self.model, self.tmp, "mixed", "mixed-vllm-load",
                                 extra=["--served-model-name", MODEL,
                                        "--get-load-format", "vllm-router"])
        port = int(worker.match.group(1))
        peer = None
        try:
            status, load = cu.request(port, "GET", "/get_load")
            self.assertEqual(status, 200, load)
            self.assertEqual(load["load"], 0)
            peer = PeerRouter("vllm-router", [port, self.worker_http[0]], self.tmp, "-load")
            self.assertTrue(cu.wait_until(peer.ready, timeout=30), peer.tail())
            status, loads = cu.request(peer.port, "GET", "/get_loads")
            self.assertEqual(status, 200, loads)
            by_url = {w["worker"]: w["load"] for w in loads["workers"]}
            self.assertEqual(by_url[f"http://127.0.0.1:{port}"], 0, loads)
            self.assertEqual(by_url[f"http://127.0.0.1:{self.worker_http[0]}"], -1, loads)
        finally:
            if peer is not None:
                peer.stop()
            worker.stop()

if __name__ == "__main__":
    STRATA = sys.argv.pop(1)
    unittest.main(verbosity=2)
