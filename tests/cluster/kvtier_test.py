"""End-to-end test of the tiered KV store on a real cluster: a prefill worker
with a small device pool (G1), a small pinned host tier (G2), a RocksDB disk tier (G3) and a
remote `strata kvstore` daemon (G4). A long prompt is evicted down the tiers by other prompts,
sent again from another decode worker, and served from each tier in turn: the tier's hit
counters move, the prefill worker computes fewer prompt tokens than from scratch, and the greedy
tokens are identical to the first, computed-from-scratch answer (the worker that reads G4 finds
the daemon through the router's registry, `--kv-remote-from-router`). Then the G3 holder is
SIGKILLed and restarted on the same disk path and serves the prompt from disk again.

Usage: kvtier_test.py STRATA_BINARY
"""
import os
import re
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
BLOCK = 16
PROMPT_TOKENS = 512  # 32 blocks of 32 KiB (tiny-llama: 4 layers x K,V x 16 x 2 heads x 32 x f32)


def prompt(seed):
    """A deterministic token-array prompt; different seeds share no block."""
    return [10 + (seed * 7919 + i * 104729) % 1000 for i in range(PROMPT_TOKENS)]  # vocab 1024


def complete(port, tokens):
    t0 = time.monotonic()
    status, body = cu.request(port, "POST", "/v1/completions",
                              {"model": MODEL, "prompt": tokens, "max_tokens": 8,
                               "temperature": 0, "ignore_eos": True})
    assert status == 200, body
    return body["choices"][0]["text"], time.monotonic() - t0


def tier_metric(port, name, tier):
    return cu.metric(port, name, {"tier": tier})


def wait_settled(port, tier, at_least, timeout=60):
    """Waits until a tier holds at least `at_least` blocks and stopped growing (demotions are
    asynchronous: a loaded machine may still be writing them)."""
    deadline = time.time() + timeout
    last = -1
    while time.time() < deadline:
        now = tier_metric(port, "strata_kvstore_usage_blocks", tier)
        if now >= at_least and now == last:
            return
        last = now
        time.sleep(0.5)
    raise AssertionError(f"{tier} tier did not settle at >= {at_least} blocks (last {last})")


class KvTierTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # tearDownClass does not run when this fails: whatever started is stopped here, so no
        # process outlives the test (other tests look processes up by their ids).
        cls.decode, cls.started, cls.kvstore, cls.router, cls.tmp = [], [], None, None, None
        try:
            cls.start_cluster()
        except BaseException:
            for p in cls.decode + cls.started + [cls.kvstore, cls.router]:
                if p is not None and p.p.poll() is None:
                    p.stop(signal.SIGKILL)
            if cls.tmp is not None:
                shutil.rmtree(cls.tmp, ignore_errors=True)
            raise

    @classmethod
    def start_cluster(cls):
        cls.tmp = tempfile.mkdtemp(prefix="strata_kvtier_test_")
        cls.model = os.path.join(cls.tmp, "model")
        subprocess.run([STRATA, "model", "init", "--preset", "tiny-llama", "--out", cls.model],
                       check=True, stdout=subprocess.DEVNULL)
        cls.name = ["--served-model-name", MODEL]
        # round-robin: every request is prefilled remotely and decode workers alternate, so the
        # repeated prompt lands on the other decode worker.
        cls.router = cu.start_router(STRATA, cls.model, cls.tmp,
                                     cls.name + ["--policy", "round-robin"])
        cls.http = int(cls.router.match.group(1))
        cls.grpc = cls.router.match.group(2)
        cls.kvstore = cu.Proc([STRATA, "kvstore", "--id", "kvstore-0", "--port", "0",
                               "--http-port", "0", "--capacity-bytes", str(64 << 20),
                               "--router", f"127.0.0.1:{cls.grpc}"],
                              os.path.join(cls.tmp, "kvstore-0.log"),
                              r"kvstore kvstore-0: grpc 127\.0\.0\.1:(\d+), http 127\.0\.0\.1:(\d+)")
        cls.kv_grpc = cls.kvstore.match.group(1)
        cls.kv_http = int(cls.kvstore.match.group(2))
        for i in range(2):
            cls.decode.append(cu.start_worker(STRATA, cls.model, cls.tmp, "decode", f"decode-{i}",
                                              cls.grpc, cls.name))
        cls.prefill = cls.start_prefill("prefill-0")
        assert cu.wait_until(lambda: cu.metric(cls.http, "strata_router_workers",
                                               {"role": "decode"}) == 2, timeout=30)
        assert cu.wait_until(lambda: cu.request(cls.http, "GET", "/ready")[0] == 200)

    @classmethod
    def start_prefill(cls, wid, disk=None, discover=False):
        # G1 48 blocks (1.5 prompts), G2 2 MiB = 64 blocks (two prompts; a fetched run may use
        # half of it), G3 16 MiB, G4 remote: the daemon named, or (discover) the daemons the
        # router lists.
        remote = (["--kv-remote-from-router"] if discover
                  else ["--kv-remote", f"127.0.0.1:{cls.kv_grpc}"])
        argv = ["--num-kv-blocks", "48", "--kv-host-mb", "2",
                "--kv-disk-path", disk or os.path.join(cls.tmp, "disk-" + wid),
                "--kv-disk-mb", "16", "--kv-disk-admit-uses", "1"] + remote
        # start_worker passes --num-kv-blocks 512 first; the later flag wins.
        w = cu.start_worker(STRATA, cls.model, cls.tmp, "prefill", wid, cls.grpc, cls.name + argv)
        w.http = int(w.match.group(1))
        cls.started.append(w)  # every prefill worker is stopped at teardown, whatever replaced it
        # The worker prints its ports before it registers. A restarted worker reuses its id, and
        # until the router has its new address a request goes to the dead one, fails over to no
        # prefill worker at all and is prefilled on a decode worker (that may hold the prompt).
        grpc = re.search(r"grpc 127\.0\.0\.1:(\d+)", w.match.string).group(1)
        registered = f"worker {wid} registered (ROLE_PREFILL at 127.0.0.1:{grpc})"
        assert cu.wait_until(lambda: registered in cls.router.tail_all(), timeout=30), registered
        # G4 is up: connected to the daemon (a discovering worker first hears of it from the
        # router, in its registration's answer).
        assert cu.wait_until(lambda: cu.metric(w.http, "strata_worker_kv_remote_daemons",
                                               {"state": "connected"}) == 1, timeout=30)
        return w

    @classmethod
    def tearDownClass(cls):
        for w in cls.decode + cls.started:
            w.stop()
        cls.kvstore.stop()
        rc = cls.router.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert rc == 0, f"router exited {rc}"

    def computed(self, w):
        return cu.metric(w.http, "strata_worker_prompt_tokens_computed_total")

    def flush_down(self, seeds):
        """Other prompts through the prefill worker push earlier ones down the tiers."""
        for s in seeds:
            complete(self.http, prompt(s))

    def served_from(self, w, tier, reference):
        """Sends the prompt again; asserts tokens, the tier's hits and fewer computed tokens."""
        hits0 = tier_metric(w.http, "strata_kvstore_hits_total", tier)
        computed0 = self.computed(w)
        text, seconds = complete(self.http, prompt(0))
        self.assertEqual(text, reference)
        hits = tier_metric(w.http, "strata_kvstore_hits_total", tier) - hits0
        print("  all tiers now: " + ", ".join(
            f"{t} hits {tier_metric(w.http, 'strata_kvstore_hits_total', t):.0f} "
            f"usage {tier_metric(w.http, 'strata_kvstore_usage_blocks', t):.0f}"
            for t in ("host", "disk", "remote")), file=sys.stderr)
        computed = self.computed(w) - computed0
        print(f"  {tier}: {hits:.0f} block hits, {computed:.0f} of {PROMPT_TOKENS} prompt tokens "
              f"computed, {seconds * 1000:.1f} ms", file=sys.stderr)
        self.assertGreater(hits, 0, f"no {tier} hits")
        self.assertLess(computed, PROMPT_TOKENS / 2)
        return seconds

    def test_a_prompt_is_served_from_every_tier_with_identical_tokens(self):
        computed0 = self.computed(self.prefill)
        reference, scratch_s = complete(self.http, prompt(0))
        self.assertGreaterEqual(self.computed(self.prefill) - computed0, PROMPT_TOKENS - BLOCK)
        print(f"  from scratch: {scratch_s * 1000:.1f} ms", file=sys.stderr)

        # G2: one other prompt evicts the first from G1 into G2.
        self.flush_down([1])
        self.served_from(self.prefill, "host", reference)

        # G3: enough other prompts to push it out of G2 too (demoted to G3 and G4).
        self.flush_down([2, 3, 4, 5])
        wait_settled(self.prefill.http, "disk", 32)
        self.served_from(self.prefill, "disk", reference)

        # G4: another prefill worker with empty G1-G3 reads the daemon's copy; it knows the
        # daemon only from the router's registry, not from its flags.
        self.flush_down([6, 7, 8, 9])
        wait_settled(self.kv_http, "remote", 64)
        other = self.start_prefill("prefill-1", discover=True)
        self.assertEqual(cu.metric(other.http, "strata_worker_kv_remote_daemons",
                                   {"state": "known"}), 1)
        self.prefill.stop()
        assert cu.wait_until(lambda: cu.metric(self.http, "strata_router_workers",
                                               {"role": "prefill"}) == 1, timeout=30)
        daemon_hits0 = tier_metric(self.kv_http, "strata_kvstore_hits_total", "remote")
        self.served_from(other, "remote", reference)
        self.assertGreater(tier_metric(self.kv_http, "strata_kvstore_hits_total", "remote"),
                           daemon_hits0)
        other.stop()

        # G3 crash safety: SIGKILL the G3 holder mid-writes, restart it on the same path.
        restarted = self.start_prefill("prefill-0")
        assert cu.wait_until(lambda: cu.metric(self.http, "strata_router_workers",
                                               {"role": "prefill"}) == 1, timeout=30)
        print(f"  restarted: disk usage "
              f"{tier_metric(restarted.http, 'strata_kvstore_usage_blocks', 'disk'):.0f}",
              file=sys.stderr)
        self.flush_down([10, 11])
        restarted.stop(signal.SIGKILL)
        self.prefill = self.start_prefill("prefill-0")
        assert cu.wait_until(lambda: cu.metric(self.http, "strata_router_workers",
                                               {"role": "prefill"}) == 1, timeout=30)
        self.served_from(self.prefill, "disk", reference)


class UpRestartTest(unittest.TestCase):
    """The same check through `strata up`: one config with G2, G3 and a kvstore daemon; a prompt
    pushed down to disk; the G3 holder (the prefill worker) SIGKILLed during its writes; `up`
    starts it again on the same ports and disk path by itself, and the prompt is served from the
    lower tiers with the same tokens."""

    def test_up_restarts_a_killed_g3_holder_that_serves_from_disk_again(self):
        tmp = tempfile.mkdtemp(prefix="strata_up_restart_test_")
        up = None
        try:
            up = cu.start_up(STRATA, tmp,
                             f"router: {{http_port: 0}}\n"
                             f"prefill: {{count: 1}}\ndecode: {{count: 1}}\n"
                             f"engine: {{num_kv_blocks: 48}}\n"
                             f"kv_tiers: {{host_mb: 2, disk_path: {tmp}/disk, disk_mb: 16, "
                             f"disk_admit_uses: 1, kvstore_count: 1, kvstore_mb: 64}}\n")
            http = up.http
            ports = dict(re.findall(r"(\S+): http://127\.0\.0\.1:(\d+)/metrics", up.output))
            prefill = int(ports["prefill-0"])
            workers = [prefill, int(ports["decode-0"])]

            def total(name, labels=None):
                values = [cu.metric(p, name, labels) for p in workers]
                assert None not in values, f"{name} {labels} missing on a worker"
                return sum(values)

            def served(tokens):
                status, body = cu.request(http, "POST", "/v1/completions",
                                          {"model": "tiny-llama", "prompt": tokens,
                                           "max_tokens": 8, "temperature": 0,
                                           "ignore_eos": True})
                self.assertEqual(status, 200, body)
                return body["choices"][0]["text"]

            reference = served(prompt(0))
            for seed in (1, 2, 3, 4, 5):  # push it out of G1 and G2, down to the disk
                served(prompt(seed))
            wait_settled(prefill, "disk", 32)
            served(prompt(6))  # more writes in flight when the holder dies
            pid = int(subprocess.run(["pgrep", "-P", str(up.p.pid), "-f", "id prefill-0"],
                                     capture_output=True, text=True).stdout.split()[0])
            os.kill(pid, signal.SIGKILL)
            assert cu.wait_until(lambda: "prefill-0 is ready again" in up.tail_all(),
                                 timeout=90), up.tail()
            self.assertIn("prefill-0 killed by signal 9", up.tail_all())
            self.assertIn("starting prefill-0 again in 1s (restart 1 in a row)", up.tail_all())
            new_pid = int(subprocess.run(["pgrep", "-P", str(up.p.pid), "-f", "id prefill-0"],
                                         capture_output=True, text=True).stdout.split()[0])
            self.assertNotEqual(new_pid, pid)
            assert cu.wait_until(lambda: cu.metric(http, "strata_router_workers",
                                                   {"role": "prefill"}) == 1, timeout=30)
            # The new process reopened G3 on the same path: the blocks written before the kill
            # are there, verified, and the prompt comes back from the lower tiers.
            self.assertGreater(tier_metric(prefill, "strata_kvstore_usage_blocks", "disk"), 0)
            hits0 = (total("strata_kvstore_hits_total", {"tier": "disk"}) +
                     total("strata_kvstore_hits_total", {"tier": "remote"}))
            computed0 = total("strata_worker_prompt_tokens_computed_total")
            self.assertEqual(served(prompt(0)), reference)
            hits = (total("strata_kvstore_hits_total", {"tier": "disk"}) +
                    total("strata_kvstore_hits_total", {"tier": "remote"})) - hits0
            computed = total("strata_worker_prompt_tokens_computed_total") - computed0
            print(f"  after the restart: {hits:.0f} disk + remote block hits, {computed:.0f} of "
                  f"{PROMPT_TOKENS} prompt tokens computed", file=sys.stderr)
            self.assertGreater(hits, 0)
            self.assertLess(computed, PROMPT_TOKENS / 2)
            self.assertEqual(total("strata_kvstore_checksum_failures_total", {"tier": "disk"}), 0)
            self.assertEqual(up.stop(signal.SIGTERM, timeout=90), 0, up.tail())
            print("  " + "\n  ".join(l for l in up.tail_all().splitlines() if "prefill-0" in l),
                  file=sys.stderr)
        finally:
            if up is not None and up.p.poll() is None:
                up.stop(signal.SIGKILL)
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    STRATA = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
