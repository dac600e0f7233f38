"""Cluster mTLS on real processes: `strata up` with `tls: auto` makes a throwaway CA and
certificate and gives them to the router, prefill and decode workers, which serve a request over
mutual TLS; a worker with the cluster's certificate joins, a plaintext worker cannot register
(and says why), and incomplete --tls-* flags are a usage error.

Usage: mtls_test.py STRATA_BINARY   (ctest passes it)
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_util as cu  # noqa: E402

STRATA = None


class TlsAutoTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="strata_mtls_test_")
        cls.up = cu.start_up(STRATA, cls.tmp, (
            "prefill: {count: 1}\ndecode: {count: 1}\nrouter: {http_port: 0}\n"
            "engine: {num_kv_blocks: 256}\n"
            "kv_tiers: {host_mb: 16, kvstore_count: 1, kvstore_mb: 16}\ntls: auto\n"))
        cls.logs = os.path.join(cls.tmp, "logs")
        with open(os.path.join(cls.logs, "router.log")) as f:
            cls.grpc = int(re.search(r"registry at 127\.0\.0\.1:(\d+)", f.read()).group(1))
        cls.workers = []

    @classmethod
    def tearDownClass(cls):
        for w in cls.workers:
            w.stop()
        rc = cls.up.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert rc == 0, f"strata up exited {rc}"

    def tls_flags(self):
        d = os.path.join(self.logs, "tls")
        return ["--tls-ca", os.path.join(d, "ca.crt"), "--tls-cert", os.path.join(d, "tls.crt"),
                "--tls-key", os.path.join(d, "tls.key")]

    def decode_workers(self):
        return cu.metric(self.up.http, "strata_router_workers", {"role": "decode"}) or 0

    def extra_worker(self, wid, tls):
        extra = ["--kv-hash-key-file", os.path.join(self.logs, "kv_hash.key")]
        if tls:
            extra += self.tls_flags()
        w = cu.start_worker(STRATA, "preset:tiny-llama", self.tmp, "decode", wid, self.grpc,
                            extra)
        self.workers.append(w)
        return w

    def test_up_writes_certificates_and_every_process_uses_them(self):
        d = os.path.join(self.logs, "tls")
        self.assertEqual(sorted(os.listdir(d)), ["ca.crt", "tls.crt", "tls.key"])
        self.assertEqual(os.stat(os.path.join(d, "tls.key")).st_mode & 0o777, 0o600)
        for name in ("router", "prefill-0", "decode-0", "kvstore-0"):
            with open(os.path.join(self.logs, name + ".log")) as f:
                self.assertIn("cluster gRPC: mTLS", f.read(), name)

    def test_workers_reach_the_kvstore_daemon_over_mtls(self):
        # The daemon registered with the router, and each worker said Hello to its KvStore
        # service (a TLS handshake both ways) once the router named it.
        def log(name):
            with open(os.path.join(self.logs, name + ".log")) as f:
                return f.read()
        self.assertTrue(cu.wait_until(lambda: "registered with the router" in log("kvstore-0"), 15))
        for name in ("prefill-0", "decode-0"):
            self.assertTrue(cu.wait_until(lambda: "connected to kvstore" in log(name), 15),
                            log(name)[-2000:])

    def test_a_request_crosses_the_mtls_cluster(self):
        # Long enough that the router places prefill on the prefill worker: router -> decode
        # (Generate) and decode -> prefill (Prefill) both run over mutual TLS.
        prompt = list(range(10, 10 + 97))
        status, answer = cu.request(self.up.http, "POST", "/v1/completions",
                                    {"model": "tiny-llama", "prompt": prompt, "max_tokens": 4,
                                     "temperature": 0, "ignore_eos": True})
        self.assertEqual(status, 200, answer)
        self.assertEqual(answer["usage"]["completion_tokens"], 4)
        self.assertGreaterEqual(cu.metric(self.up.http, "strata_router_placements_total",
                                          {"prefill": "remote"}) or 0, 1)

    def test_certified_worker_joins_and_plaintext_worker_is_refused(self):
        before = self.decode_workers()
        plain = self.extra_worker("decode-plain", tls=False)
        good = self.extra_worker("decode-tls", tls=True)
        self.assertTrue(cu.wait_until(lambda: self.decode_workers() == before + 1, 15))
        self.assertTrue(cu.wait_until(
            lambda: "does it use the same cluster gRPC security? this process: plaintext"
            in plain.tail_all(), 15), plain.tail())
        self.assertNotIn("cluster gRPC: mTLS", plain.tail_all())
        self.assertIn("registered with the router", good.tail_all())
        self.assertNotIn("registered with the router", plain.tail_all())
        self.assertEqual(self.decode_workers(), before + 1)

    def test_incomplete_tls_flags_are_a_usage_error(self):
        d = os.path.join(self.logs, "tls")
        for args in (["router", "--tls-ca", os.path.join(d, "ca.crt")],
                     ["kvstore", "--capacity-bytes", "1048576", "--tls-key",
                      os.path.join(d, "tls.key")]):
            p = subprocess.run([STRATA, *args], capture_output=True, text=True, timeout=30)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("go together", p.stderr)
        # A key that is not the certificate's.
        p = subprocess.run([STRATA, "router", "--tls-ca", os.path.join(d, "ca.crt"),
                            "--tls-cert", os.path.join(d, "ca.crt"), "--tls-key",
                            os.path.join(d, "tls.key")], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("does not belong to the certificate", p.stderr)


if __name__ == "__main__":
    STRATA = sys.argv.pop(1)
    unittest.main(verbosity=2)
