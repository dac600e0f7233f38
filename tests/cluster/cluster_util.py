"""Starts strata processes on loopback for the cluster tests and talks to them over HTTP."""
import http.client
import json
import os
import re
import select
import signal
import socket
import subprocess
import time


class Proc:
    """A strata subprocess whose first stdout line that matches `pattern` gives its ports."""

    def __init__(self, argv, log_path, pattern, timeout=60):
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log)
        self.output = ""  # stdout read so far (up to the matching line)
        self.match = self._wait_line(re.compile(pattern), timeout)

    def _wait_line(self, regex, timeout):
        deadline = time.time() + timeout
        buf = b""
        while time.time() < deadline:
            if self.p.poll() is not None:
                raise RuntimeError(f"{self.p.args} exited {self.p.returncode}: {self.tail()}")
            r, _, _ = select.select([self.p.stdout], [], [], 0.2)
            if not r:
                continue
            chunk = os.read(self.p.stdout.fileno(), 4096)
            buf += chunk
            self.output = buf.decode(errors="replace")
            for line in self.output.splitlines():
                m = regex.search(line)
                if m:
                    return m
        raise RuntimeError(f"timed out waiting for {regex.pattern}: {self.tail()}")

    def tail_all(self):
        """Everything the process wrote to its log (stderr) so far."""
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def tail(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read()[-2000:].decode(errors="replace")

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()
        self.p.stdout.close()
        return self.p.returncode


def start_router(strata, model, log_dir, extra=()):
    return Proc([strata, "router", "--http-port", "0", "--grpc-port", "0", "--model", model,
                 *extra], os.path.join(log_dir, "router.log"),
                r"http://127\.0\.0\.1:(\d+)/v1, registry at 127\.0\.0\.1:(\d+)")


def start_worker(strata, model, log_dir, role, wid, router_grpc=None, extra=()):
    argv = [strata, "worker", "--role", role, "--id", wid, "--http-port", "0", "--grpc-port",
            "0", "--model", model, "--num-kv-blocks", "512", "--block-size", "16", *extra]
    if router_grpc:
        argv += ["--router", f"127.0.0.1:{router_grpc}"]
    return Proc(argv, os.path.join(log_dir, wid + ".log"), r"http 127\.0\.0\.1:(\d+), grpc")


def init_model(strata, tmp, preset="tiny-llama"):
    """Writes the built-in `preset`'s weights and tokenizer to tmp/model; returns that path."""
    model = os.path.join(tmp, "model")
    subprocess.run([strata, "model", "init", "--preset", preset, "--out", model], check=True,
                   stdout=subprocess.DEVNULL)
    return model


def start_router_and_mixed(strata, model, log_dir, extra=()):
    """A router and one mixed worker (mixed-0) registered with it, both given `extra`; returns
    (router, worker) once the router is ready. Their HTTP ports: .http on each."""
    router = start_router(strata, model, log_dir, extra)
    router.http = int(router.match.group(1))
    worker = start_worker(strata, model, log_dir, "mixed", "mixed-0", router.match.group(2),
                          extra)
    worker.http = int(worker.match.group(1))
    assert wait_until(lambda: request(router.http, "GET", "/ready")[0] == 200, timeout=30)
    return router, worker


def start_up(strata, tmp, config, timeout=120):
    """`strata up --config` with `config` (YAML text; its logs under tmp/logs) written to
    tmp/cluster.yaml; returns the Proc once it serves, with .http the router's HTTP port and
    .output listing each process's /metrics URL."""
    path = os.path.join(tmp, "cluster.yaml")
    with open(path, "w") as f:
        f.write(config + f"log_dir: {tmp}/logs\n")
    up = Proc([strata, "up", "--config", path], os.path.join(tmp, "up.err"),
              r"strata is serving at https?://127\.0\.0\.1:(\d+)/v1", timeout)
    up.http = int(up.match.group(1))
    return up


def request(port, method, path, body=None, headers=None, timeout=60):
    """Returns (status, parsed JSON or raw text)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
    conn.request(method, path, body=data,
                 headers={"Content-Type": "application/json", **(headers or {})})
    resp = conn.getresponse()
    raw = resp.read().decode()
    conn.close()
    try:
        return resp.status, json.loads(raw)
    except ValueError:
        return resp.status, raw


def stream(port, path, body, timeout=120):
    """POSTs a streaming request; returns (status, [parsed data events], saw_done)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        return resp.status, [json.loads(resp.read())], False
    events, done = [], False
    for raw in resp.read().decode().split("\n\n"):
        raw = raw.strip()
        if not raw:
            continue
        assert raw.startswith("data: "), raw
        payload = raw[len("data: "):]
        if payload == "[DONE]":
            done = True
        else:
            events.append(json.loads(payload))
    conn.close()
    return 200, events, done


def metric(port, name, labels=None):
    """Sum of the samples of `name` (matching `labels`) on a /metrics page."""
    status, text = request(port, "GET", "/metrics")
    assert status == 200
    return metric_from_text(text, name, labels)


def metric_from_text(text, name, labels=None):
    """Sum of the samples of `name` (matching `labels`) in exposition-format `text`; None when
    there are none."""
    total, found = 0.0, False
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$", line)
        if not m or m.group(1) != name:
            continue
        if labels and not all(f'{k}="{v}"' in (m.group(2) or "") for k, v in labels.items()):
            continue
        total += float(m.group(3))
        found = True
    return total if found else None


def wait_until(predicate, timeout=15, interval=0.1):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def open_stream_and_drop(port, body, read_events=2):
    """Starts a streaming request, reads a few events, then drops the connection."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    got = b""
    while got.count(b"data: ") < read_events:
        chunk = s.recv(4096)
        if not chunk:
            break
        got += chunk
    s.close()
    return got
