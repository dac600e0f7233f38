"""Several models behind one router, through `strata up` with a `models` list and the official
`openai` client: the built-in tiny-llama (served as llama-a, with a prefill and a decode worker)
and tiny-moe (served as moe-b, one mixed worker). /v1/models lists both; each request is
answered by its model's workers only (their engine step counters move, the other model's stay),
moe-b's greedy answer through the router is the one its worker gives directly; an unknown model
is 404 model_not_found.

Usage: models_test.py STRATA_BINARY   (ctest passes it)
"""
import os
import re
import shutil
import sys
import tempfile
import time
import unittest

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_util as cu  # noqa: E402

STRATA = None

CONFIG = """router: {http_port: 0}
engine: {num_kv_blocks: 256, max_num_seqs: 8}
models:
  - name: llama-a
    model: preset:tiny-llama
    prefill: {count: 1}
    decode: {count: 1}
  - name: moe-b
    model: preset:tiny-moe
    decode: {count: 0}
    mixed: {count: 1}
"""

STEPS = "strata_worker_engine_steps_total"


class TwoModelsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="strata_models_test_")
        cls.up = cu.start_up(STRATA, cls.tmp, CONFIG, timeout=180)
        # "  <process>: http://127.0.0.1:<port>/metrics" for every process.
        cls.ports = {m.group(1): int(m.group(2)) for m in re.finditer(
            r"^\s+(\S+): http://127\.0\.0\.1:(\d+)/metrics$", cls.up.output, re.M)}
        cls.client = openai.OpenAI(base_url=f"http://127.0.0.1:{cls.up.http}/v1",
                                   api_key="none", max_retries=0, timeout=60)

    @classmethod
    def tearDownClass(cls):
        rc = cls.up.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert rc == 0, f"strata up exited {rc}"

    def steps(self):
        """Engine steps of every worker, by process name."""
        return {name: cu.metric(port, STEPS) or 0.0 for name, port in self.ports.items()
                if name.startswith(("llama-a-", "moe-b-"))}

    def complete(self, model, prompt="The quick brown fox", max_tokens=6):
        return self.client.completions.create(model=model, prompt=prompt, max_tokens=max_tokens,
                                              temperature=0, extra_body={"ignore_eos": True})

    def test_processes_are_named_by_model(self):
        for name in ("router", "llama-a-prefill-0", "llama-a-decode-0", "moe-b-mixed-0"):
            self.assertIn(name, self.ports, self.up.output)

    def test_models_lists_both_and_retrieves_each(self):
        listed = self.client.models.list()
        self.assertEqual([m.id for m in listed.data], ["llama-a", "moe-b"])
        for m in listed.data:
            self.assertEqual(m.owned_by, "strata")
            self.assertEqual(m.object, "model")
        self.assertEqual(self.client.models.retrieve("moe-b").id, "moe-b")
        with self.assertRaises(openai.NotFoundError):
            self.client.models.retrieve("gpt-4")

    def test_each_model_is_answered_by_its_own_workers(self):
        for model, own in (("moe-b", ("moe-b-",)), ("llama-a", ("llama-a-",))):
            before = self.steps()
            answer = self.complete(model)
            self.assertEqual(answer.model, model)
            self.assertEqual(answer.usage.completion_tokens, 6)
            # Each worker's own /metrics counts the engine steps it ran for the request.
            after = self.steps()
            moved = {n for n in after if after[n] > before[n]}
            self.assertTrue(moved, f"no worker stepped for {model}")
            for name in moved:
                self.assertTrue(name.startswith(own), f"{name} ran a request for {model}")

    def test_router_answer_is_the_models_own(self):
        # moe-b's mixed worker serves the API itself: its greedy answer is what the router's
        # answer for moe-b must be, token for token.
        direct = openai.OpenAI(base_url=f"http://127.0.0.1:{self.ports['moe-b-mixed-0']}/v1",
                               api_key="none", max_retries=0, timeout=60)
        prompt = "Several models behind one router"
        want = direct.completions.create(model="moe-b", prompt=prompt, max_tokens=8,
                                         temperature=0, extra_body={"ignore_eos": True})
        got = self.complete("moe-b", prompt=prompt, max_tokens=8)
        self.assertEqual(got.choices[0].text, want.choices[0].text)

    def test_chat_streams_by_name(self):
        for model in ("llama-a", "moe-b"):
            chunks = list(self.client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
                temperature=0, stream=True, extra_body={"ignore_eos": True}))
            self.assertTrue(chunks)
            self.assertTrue(all(c.model == model for c in chunks))
            self.assertEqual(chunks[-1].choices[0].finish_reason, "length")

    def test_unknown_model_is_404_model_not_found(self):
        with self.assertRaises(openai.NotFoundError) as raised:
            self.complete("llama-c")
        self.assertEqual(raised.exception.code, "model_not_found")
        self.assertIn("llama-c", raised.exception.message)

    def test_router_counts_workers_by_model(self):
        http = self.up.http
        ok = cu.wait_until(lambda: cu.metric(
            http, "strata_router_model_workers", {"model": "moe-b", "role": "mixed"}) == 1)
        self.assertTrue(ok)
        for role, n in (("prefill", 1), ("decode", 1), ("mixed", 0)):
            self.assertEqual(cu.metric(http, "strata_router_model_workers",
                                       {"model": "llama-a", "role": role}), n, role)


if __name__ == "__main__":
    STRATA = sys.argv.pop(1)
    unittest.main(verbosity=2)
