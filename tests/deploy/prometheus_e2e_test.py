"""`strata up` scraped by a real Prometheus with the shipped scrape config and rules.

Starts a cluster with `strata up`, points copies of deploy/prometheus/prometheus.yaml (scrape
and evaluation intervals shortened to 1 s) and strata-rules.yaml at its processes, sends
traffic, and asks Prometheus's HTTP API that every target is up (router, prefill, decode and a
kvstore daemon) and that the SLO and KV-tier recording rules return values.

Usage: prometheus_e2e_test.py STRATA PROMETHEUS SOURCE_DIR
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

STRATA = PROMETHEUS = SOURCE = None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def post_json(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def wait_until(fn, timeout, what):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = fn()
            if last:
                return last
        except Exception as e:  # noqa: BLE001 - the server may not be up yet
            last = e
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}: {last}")


class PrometheusE2ETest(unittest.TestCase):
    def test_targets_up_and_slo_rules_evaluate(self):
        tmp = tempfile.mkdtemp(prefix="strata_prom_e2e_")
        up = prom = None
        try:
            config = os.path.join(tmp, "cluster.yaml")
            with open(config, "w") as f:
                f.write(f"prefill: {{count: 1}}\ndecode: {{count: 1}}\nrouter: {{http_port: 0}}\n"
                        f"engine: {{num_kv_blocks: 256}}\nlog_dir: {tmp}/logs\n"
                        f"kv_tiers: {{host_mb: 16, kvstore_count: 1, kvstore_mb: 32}}\n")
            up_log = open(os.path.join(tmp, "up.out"), "w+")
            up = subprocess.Popen([STRATA, "up", "--config", config], stdout=up_log,
                                  stderr=subprocess.STDOUT)

            def read_up():
                up_log.flush()
                with open(up_log.name) as f:
                    text = f.read()
                return text if "strata is serving at" in text else None
            text = wait_until(read_up, 120, "strata up")
            urls = dict(re.findall(r"^\s+(\S+): (http://\S+)/metrics$", text, re.M))
            self.assertEqual(sorted(urls), ["decode-0", "kvstore-0", "prefill-0", "router"], text)
            hostport = {k: urllib.parse.urlparse(v).netloc for k, v in urls.items()}

            prom_dir = os.path.join(tmp, "prometheus")
            shutil.copytree(os.path.join(SOURCE, "deploy", "prometheus"), prom_dir)
            cfg = os.path.join(prom_dir, "prometheus.yaml")
            with open(cfg) as f:
                text = f.read()
            text = re.sub(r"scrape_interval: \S+", "scrape_interval: 1s", text)
            text = re.sub(r"evaluation_interval: \S+", "evaluation_interval: 1s", text)
            with open(cfg, "w") as f:
                f.write(text)
            for job, name in [("router", "router"), ("prefill", "prefill-0"),
                              ("decode", "decode-0"), ("kvstore", "kvstore-0")]:
                with open(os.path.join(prom_dir, "targets", f"{job}.yaml"), "w") as f:
                    f.write(f'- targets: ["{hostport[name]}"]\n')
            port = free_port()
            prom = subprocess.Popen(
                [PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp}/tsdb",
                 f"--web.listen-address=127.0.0.1:{port}"],
                stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "prom.log"), "w"))
            api = f"http://127.0.0.1:{port}/api/v1"

            router = urls["router"]
            for i in range(12):
                out = post_json(f"{router}/v1/completions",
                                {"model": "tiny-llama", "prompt": f"request {i}: " + "word " * 40,
                                 "max_tokens": 8, "temperature": 0, "ignore_eos": True})
                self.assertEqual(out["usage"]["completion_tokens"], 8)

            def all_up():
                targets = get_json(f"{api}/targets")["data"]["activeTargets"]
                jobs = {t["labels"]["job"]: t["health"] for t in targets}
                return jobs if len(jobs) == 4 and set(jobs.values()) == {"up"} else None
            wait_until(all_up, 60, "every target up")

            def has_value(expr):
                def check():
                    result = get_json(f"{api}/query?" + urllib.parse.urlencode(
                        {"query": expr}))["data"]["result"]
                    return result if result and result[0]["value"][1] not in ("NaN",) else None
                return check
            # Keep traffic flowing while the 5m-rate rules get their second sample.
            for expr in ["strata:ttft_seconds:p50_5m", "strata:ttft_slo_attainment:ratio_rate5m",
                         "strata:requests:rate5m", "job:strata_worker_kv_blocks:utilization",
                         "job_tier:strata_kvstore_usage:ratio",
                         'job_state:strata_worker_kv_remote_daemons:min{state="connected"}']:
                def poke_and_check(expr=expr):
                    post_json(f"{router}/v1/completions", {"model": "tiny-llama", "prompt": "hi",
                                                           "max_tokens": 2})
                    return has_value(expr)()
                result = wait_until(poke_and_check, 60, expr)
                self.assertTrue(result, expr)
            # The workers found the daemon through the router (`strata up` runs them with
            # --kv-remote-from-router) and connected to it: every pool's minimum is 1.
            def daemon_connected():
                result = get_json(f"{api}/query?" + urllib.parse.urlencode(
                    {"query": 'job_state:strata_worker_kv_remote_daemons:min{state="connected"}'}
                ))["data"]["result"]
                jobs = {r["metric"].get("job"): float(r["value"][1]) for r in result}
                return jobs if len(jobs) == 2 and set(jobs.values()) == {1.0} else None
            wait_until(daemon_connected, 60, "every pool connected to the kvstore daemon")
            attainment = float(get_json(f"{api}/query?" + urllib.parse.urlencode(
                {"query": "strata:ttft_slo_attainment:ratio_rate5m"}))["data"]["result"][0]
                ["value"][1])
            self.assertGreaterEqual(attainment, 0.0)
            self.assertLessEqual(attainment, 1.0)
        finally:
            if prom:
                prom.terminate()
                prom.wait(30)
            if up:
                up.send_signal(signal.SIGTERM)
                try:
                    up.wait(60)
                except subprocess.TimeoutExpired:
                    up.kill()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    STRATA, PROMETHEUS, SOURCE = sys.argv[1:4]
    del sys.argv[1:4]
    unittest.main(verbosity=2)
