"""HTTPS on the OpenAI endpoint with real processes: `strata up` with `router.http_tls: auto`
makes a throwaway CA and certificate and the router serves the API over TLS; the official
`openai` client, trusting that CA (its HTTP client's verify=an SSL context of the CA file), lists models and runs a completion and a
streaming chat; `strata replay` replays a small trace against the https URL with --ca; a client
that does not trust the CA is refused; plaintext HTTP to the port gets a 400 that says why; a
router given bad certificate files exits at once with a one-line reason.

Usage: https_test.py STRATA_BINARY   (ctest passes it)
"""
import http.client
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import unittest

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_util as cu  # noqa: E402

STRATA = None


class HttpsUpTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="strata_https_test_")
        cls.up = cu.start_up(STRATA, cls.tmp, (
            "prefill: {count: 0}\ndecode: {count: 0}\nmixed: {count: 1}\n"
            "router: {http_port: 0, http_tls: auto}\nengine: {num_kv_blocks: 256}\n"))
        cls.logs = os.path.join(cls.tmp, "logs")
        cls.ca = os.path.join(cls.logs, "tls", "http-ca.crt")
        cls.base = f"https://127.0.0.1:{cls.up.http}/v1"

    @classmethod
    def tearDownClass(cls):
        rc = cls.up.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert rc == 0, f"strata up exited {rc}"

    def client(self, cafile):
        """An `openai` client whose HTTP client trusts `cafile` (None: the system's CAs)."""
        verify = ssl.create_default_context(cafile=cafile)
        return openai.OpenAI(base_url=self.base, api_key="unused", max_retries=0, timeout=60,
                             http_client=openai.DefaultHttpxClient(verify=verify))

    def test_up_serves_https_and_says_so(self):
        self.assertEqual(self.up.match.group(0)[:len("strata is serving at https://")],
                         "strata is serving at https://")
        self.assertTrue(os.path.exists(self.ca))
        key = os.path.join(self.logs, "tls", "http-tls.key")
        self.assertEqual(os.stat(key).st_mode & 0o777, 0o600)
        with open(os.path.join(self.logs, "router.log")) as f:
            log = f.read()
        self.assertRegex(log, r"serves HTTPS, certificate CN=strata-up.*, expires 20\d\d-")

    def test_openai_client_over_https(self):
        c = self.client(self.ca)
        models = [m.id for m in c.models.list().data]
        self.assertEqual(models, ["tiny-llama"])
        done = c.completions.create(model="tiny-llama", prompt="Hello", max_tokens=4,
                                    temperature=0, extra_body={"ignore_eos": True})
        self.assertEqual(done.usage.completion_tokens, 4)
        pieces = []
        finish = None
        stream = c.chat.completions.create(
            model="tiny-llama", messages=[{"role": "user", "content": "Hi"}], max_tokens=6,
            temperature=0, stream=True, extra_body={"ignore_eos": True})
        for chunk in stream:
            for choice in chunk.choices:
                if choice.delta.content:
                    pieces.append(choice.delta.content)
                finish = choice.finish_reason or finish
        self.assertEqual(finish, "length")
        self.assertGreater(len(pieces), 0)

    def test_replay_over_https_with_the_ca(self):
        trace = os.path.join(self.tmp, "trace.jsonl")
        with open(trace, "w") as f:
            for i in range(3):
                f.write(json.dumps({"timestamp": 100 * i, "input_length": 40,
                                    "output_length": 4, "hash_ids": [i]}) + "\n")
        out = os.path.join(self.tmp, "replay")
        argv = [STRATA, "replay", "--trace", trace, "--format", "mooncake", "--url", self.base,
                "--max-output-tokens", "4", "--timeout", "60", "--out", out]
        run = subprocess.run(argv + ["--ca", self.ca], capture_output=True, text=True,
                             timeout=120)
        self.assertEqual(run.returncode, 0, run.stderr[-2000:])
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
        self.assertEqual(summary["requests"], 3, summary)
        self.assertEqual(summary["completed"], 3, summary)
        # Without the CA the server cannot be verified: the replay stops before sending.
        run = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("certificate", run.stderr)

    def test_client_without_the_ca_is_refused(self):
        with self.assertRaises(openai.APIConnectionError):
            self.client(None).models.list()  # the system's CAs only

    def test_plain_http_to_the_https_port_gets_400(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.up.http, timeout=10)
        conn.request("GET", "/v1/models")
        resp = conn.getresponse()
        body = json.loads(resp.read())
        conn.close()
        self.assertEqual(resp.status, 400)
        self.assertIn("HTTPS", body["error"]["message"])
        # The router still serves TLS clients afterwards.
        context = ssl.create_default_context(cafile=self.ca)
        conn = http.client.HTTPSConnection("127.0.0.1", self.up.http, context=context,
                                           timeout=10)
        conn.request("GET", "/ready")
        self.assertEqual(conn.getresponse().status, 200)
        conn.close()

    def test_bad_certificate_files_stop_the_router_with_a_reason(self):
        d = os.path.join(self.logs, "tls")
        cases = (
            (["--http-tls-cert", os.path.join(d, "missing.crt"), "--http-tls-key",
              os.path.join(d, "http-tls.key")], 1, "missing.crt"),
            (["--http-tls-cert", os.path.join(d, "http-ca.crt"), "--http-tls-key",
              os.path.join(d, "http-tls.key")], 1, "does not belong to the certificate"),
            (["--http-tls-cert", os.path.join(d, "http-tls.crt")], 2, "go together"),
        )
        for flags, code, reason in cases:
            p = subprocess.run([STRATA, "router", "--http-port", "0", "--grpc-port", "0", *flags],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, code, p.stderr)
            self.assertIn(reason, p.stderr)
            errors = [line for line in p.stderr.splitlines() if reason in line]
            self.assertEqual(len(errors), 1, p.stderr)


if __name__ == "__main__":
    STRATA = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
