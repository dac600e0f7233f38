"""Tenant isolation of the prefix cache on real processes: per-request cache_salt and per-API-key
default salts through `strata up` (router, prefill and decode workers sharing the random block
hash key it writes), hiding cached_tokens on a mixed worker, and a worker whose block hash key
differs from the router's being refused at registration.

Usage: tenant_test.py STRATA_BINARY   (ctest passes it)
"""
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_util as cu  # noqa: E402

STRATA = None
MODEL = "tiny-llama"


def body(prompt, **kw):
    return {"model": MODEL, "prompt": prompt, "max_tokens": 2, "temperature": 0,
            "ignore_eos": True, **kw}


def cached(port, prompt, key=None, **kw):
    """Sends a completion; returns its usage.prompt_tokens_details.cached_tokens."""
    headers = {"Authorization": f"Bearer {key}"} if key else None
    status, answer = cu.request(port, "POST", "/v1/completions", body(prompt, **kw), headers)
    assert status == 200, answer
    return answer["usage"]["prompt_tokens_details"]["cached_tokens"]


def prompt_tokens(first):
    """A token-array prompt of 6 full 16-token blocks (ids < the preset's vocab of 1024);
    each test starts its own at a different id."""
    return list(range(first, first + 97))


class UpClusterTest(unittest.TestCase):
    """One `strata up` cluster (1 prefill, 1 decode worker) with two API keys, each with its own
    default salt."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="strata_tenant_test_")
        cls.up = cu.start_up(STRATA, cls.tmp, (
            "prefill: {count: 1}\ndecode: {count: 1}\nrouter: {http_port: 0}\n"
            "engine: {num_kv_blocks: 256}\n"
            "api_keys:\n  - {key: k-one, cache_salt: tenant-one}\n"
            "  - {key: k-two, cache_salt: tenant-two}\n  - k-plain\n"))
        cls.http = cls.up.http

    @classmethod
    def tearDownClass(cls):
        rc = cls.up.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert rc == 0, f"strata up exited {rc}"

    def settle(self):
        # The router's KV index learns blocks from heartbeats: let one pass so that a hit (or a
        # miss) is the workers' and the index's both.
        time.sleep(1.2)

    def test_up_writes_a_private_key_and_gives_it_to_every_process(self):
        key = os.path.join(self.tmp, "logs", "kv_hash.key")
        self.assertTrue(os.path.exists(key))
        self.assertEqual(os.stat(key).st_mode & 0o777, 0o600)
        with open(key) as f:
            self.assertEqual(len(f.read().strip()), 64)
        for name in ("router", "prefill-0", "decode-0"):
            with open(os.path.join(self.tmp, "logs", name + ".log")) as f:
                self.assertNotIn("another KV hash key", f.read(), name)

    def test_salts_isolate_and_the_same_salt_shares(self):
        p = prompt_tokens(100)
        self.assertEqual(cached(self.http, p, "k-plain", cache_salt="salt-a"), 0)
        self.settle()
        self.assertEqual(cached(self.http, p, "k-plain", cache_salt="salt-b"), 0)
        self.settle()
        self.assertEqual(cached(self.http, p, "k-plain"), 0)  # unsalted shares nothing either
        self.settle()
        self.assertGreater(cached(self.http, p, "k-plain", cache_salt="salt-a"), 0)
        self.assertGreater(cached(self.http, p, "k-plain", cache_salt="salt-b"), 0)
        self.assertGreater(cached(self.http, p, "k-plain"), 0)

    def test_api_key_default_salts_isolate_keys(self):
        p = prompt_tokens(250)
        self.assertEqual(cached(self.http, p, "k-one"), 0)
        self.settle()
        self.assertEqual(cached(self.http, p, "k-two"), 0)
        self.settle()
        self.assertGreater(cached(self.http, p, "k-one"), 0)
        # The default is only a salt: a request naming the other key's salt shares its blocks.
        self.assertGreater(cached(self.http, p, "k-two", cache_salt="tenant-one"), 0)

    def test_bad_cache_salt_is_an_openai_400(self):
        for bad in (17, "", "x" * 257):
            status, answer = cu.request(self.http, "POST", "/v1/completions",
                                        body([1, 2, 3], cache_salt=bad),
                                        {"Authorization": "Bearer k-plain"})
            self.assertEqual(status, 400, answer)
            self.assertEqual(answer["error"]["param"], "cache_salt")
            self.assertEqual(answer["error"]["type"], "invalid_request_error")


class HideAndKeyTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="strata_tenant_key_test_")
        self.model = os.path.join(self.tmp, "model")
        subprocess.run([STRATA, "model", "init", "--preset", "tiny-llama", "--out", self.model],
                       check=True, stdout=subprocess.DEVNULL)
        self.procs = []

    def tearDown(self):
        for p in reversed(self.procs):
            p.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def key_file(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_mixed_worker_hides_cached_tokens_but_counts_them(self):
        w = cu.start_worker(STRATA, self.model, self.tmp, "mixed", "mixed-hide",
                            extra=["--served-model-name", MODEL, "--hide-cached-tokens"])
        self.procs.append(w)
        port = int(w.match.group(1))
        p = prompt_tokens(400)
        self.assertEqual(cached(port, p), 0)
        self.assertEqual(cached(port, p), 0)
        # The cache did hit: only the client's view is hidden. (The metric is recorded just
        # after the response is sent.)
        self.assertTrue(cu.wait_until(
            lambda: (cu.metric(port, "strata_worker_cached_prompt_tokens_total") or 0) > 0))

    def test_worker_with_another_key_is_refused_registration(self):
        key_a = self.key_file("a.key", "0123456789abcdef0123456789abcdef\n")
        key_b = self.key_file("b.key", "fedcba9876543210fedcba9876543210\n")
        name = ["--served-model-name", MODEL]
        router = cu.start_router(STRATA, self.model, self.tmp,
                                 name + ["--kv-hash-key-file", key_a])
        self.procs.append(router)
        http, grpc = int(router.match.group(1)), router.match.group(2)
        wrong = cu.start_worker(STRATA, self.model, self.tmp, "decode", "decode-wrong", grpc,
                                name + ["--kv-hash-key-file", key_b])
        self.procs.append(wrong)
        message = "keys its block hashes with another KV hash key than the router's"
        self.assertTrue(cu.wait_until(lambda: message in wrong.tail_all(), timeout=20),
                        wrong.tail())
        self.assertIn("--kv-hash-key-file", wrong.tail_all())
        # It keeps retrying (every heartbeat interval) but says why once.
        time.sleep(1.5)
        self.assertEqual(wrong.tail_all().count(message), 1, wrong.tail())
        unkeyed = cu.start_worker(STRATA, self.model, self.tmp, "decode", "decode-unkeyed", grpc,
                                  name)
        self.procs.append(unkeyed)
        self.assertTrue(cu.wait_until(lambda: message in unkeyed.tail_all(), timeout=20))
        self.assertEqual(cu.request(http, "GET", "/ready")[0], 503)
        self.assertIn(cu.metric(http, "strata_router_workers", {"role": "decode"}), (None, 0.0))
        # The same key (written differently: no trailing newline) registers and serves.
        same = cu.start_worker(STRATA, self.model, self.tmp, "decode", "decode-right", grpc,
                               name + ["--kv-hash-key-file",
                                       self.key_file("a2.key", "0123456789abcdef0123456789abcdef")])
        self.procs.append(same)
        self.assertTrue(cu.wait_until(lambda: cu.request(http, "GET", "/ready")[0] == 200,
                                      timeout=30))
        self.assertEqual(cu.metric(http, "strata_router_workers", {"role": "decode"}), 1.0)
        self.assertEqual(cached(http, prompt_tokens(550)), 0)

    def test_per_key_rate_limits_answer_429_with_retry_after(self):
        """A standalone mixed worker: k-slow may send 2 requests a minute, k-free has no limit."""
        w = cu.start_worker(STRATA, self.model, self.tmp, "mixed", "mixed-limits",
                            extra=["--served-model-name", MODEL, "--api-key", "k-free",
                                   "--api-key", "k-slow", "--api-key-rate-limit", "key-1=rpm:2"])
        self.procs.append(w)
        port = int(w.match.group(1))
        slow, free = {"Authorization": "Bearer k-slow"}, {"Authorization": "Bearer k-free"}
        for _ in range(2):
            self.assertEqual(cu.request(port, "POST", "/v1/completions", body([1, 2]), slow)[0],
                             200)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("POST", "/v1/completions", body=json.dumps(body([1, 2])),
                     headers={"Content-Type": "application/json", **slow})
        resp = conn.getresponse()
        answer = json.loads(resp.read())
        conn.close()
        self.assertEqual(resp.status, 429, answer)
        self.assertEqual(answer["error"]["type"], "rate_limit_error")
        self.assertIn("requests per minute (limit 2)", answer["error"]["message"])
        retry_after = resp.getheader("Retry-After")
        self.assertTrue(25 <= int(retry_after) <= 30, retry_after)
        for _ in range(3):  # another key is not held back
            self.assertEqual(cu.request(port, "POST", "/v1/completions", body([1, 2]), free)[0],
                             200)

    def test_bad_key_file_stops_the_process_with_a_clear_error(self):
        short = self.key_file("short.key", "tiny\n")
        out = subprocess.run([STRATA, "router", "--model", self.model, "--http-port", "0",
                              "--grpc-port", "0", "--kv-hash-key-file", short],
                             capture_output=True, text=True, timeout=60)
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertIn("--kv-hash-key-file", out.stderr)
        self.assertIn("16 to 4096 bytes", out.stderr)
        # A default salt must name one of the --api-key keys, as key-N from 0.
        for entry, words in (("key-1=t", "below the number of --api-key (1)"),
                             ("k0=t", "expected key-N=SALT"), ("key-0=", "must be 1 to 256")):
            out = subprocess.run([STRATA, "worker", "--model", self.model, "--api-key", "k",
                                  "--api-key-cache-salt", entry],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 2, out.stderr)
            self.assertIn(words, out.stderr)
        for flags, words in (
                (["--rate-limit", "rps:5"], "--rate-limit: rate limit part 'rps:5'"),
                (["--api-key-rate-limit", "key-0=rpm:0"], "--api-key-rate-limit: key-0")):
            out = subprocess.run([STRATA, "worker", "--model", self.model, "--api-key", "k",
                                  *flags], capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 2, out.stderr)
            self.assertIn(words, out.stderr)


if __name__ == "__main__":
    STRATA = sys.argv.pop(1)
    unittest.main(verbosity=2)
