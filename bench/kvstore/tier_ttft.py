"""TTFT of a repeated long prompt served from each KV tier vs computed from scratch, on a real
local cluster (the functional check is tests/cluster/kvtier_test.py).

Cluster: a router (round-robin, so every prompt is prefilled on the prefill worker and the repeat
goes to the other decode worker), two decode workers, one prefill worker with a G1 pool of 1.5
prompts, a pinned host tier (G2) of 3 prompts, a RocksDB disk tier (G3) and a `strata kvstore`
daemon (G4). Per repeat, with a fresh prompt:
  scratch  the prompt's first request (nothing cached anywhere);
  G1       the same prompt again at once (its blocks are still in the prefill worker's pool);
  G2       after one other prompt pushed it from G1 to G2;
  G3       after four more pushed it out of G2 (demoted to G3 and G4; waits for the demotions);
  G4       a second prompt, computed once and pushed down by five others (never fetched back in
           between), then sent to a new prefill worker with empty G1-G3 (the old one is
           stopped): the daemon's copy; its tokens are checked against its own first answer.
TTFT is measured by the client: request sent -> first streamed token. Every answer's greedy
tokens must equal the scratch answer's.

usage: python3 bench/kvstore/tier_ttft.py STRATA_BINARY [--tokens 8192] [--repeats 3]
           [--preset tiny-llama-32k]
"""
import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "cluster"))
import cluster_util as cu  # noqa: E402

MODEL = "tiny"
BLOCK = 16
BLOCK_BYTES = 32 << 10  # tiny-llama: 4 layers x K,V x 16 tokens x 2 heads x 32 dims x f32


def prompt(seed, tokens):
    """A deterministic token-array prompt; different seeds share no block (vocab 1024)."""
    return [10 + (seed * 7919 + i * 104729) % 1000 for i in range(tokens)]


def stream_ttft(port, tokens, max_tokens=8):
    """Streams a completion; returns (TTFT seconds, generated text)."""
    body = json.dumps({"model": MODEL, "prompt": tokens, "max_tokens": max_tokens,
                       "temperature": 0, "ignore_eos": True, "stream": True})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.monotonic()
    conn.request("POST", "/v1/completions", body=body,
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    ttft, text = None, ""
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        event = json.loads(line[6:])
        if event.get("choices"):
            if ttft is None:
                ttft = time.monotonic() - t0
            text += event["choices"][0].get("text", "")
    conn.close()
    return ttft, text


class Cluster:
    def __init__(self, strata, preset, tokens):
        self.strata, self.tokens = strata, tokens
        self.prompt_mb = tokens // BLOCK * BLOCK_BYTES / (1 << 20)
        self.tmp = tempfile.mkdtemp(prefix="strata_tier_ttft_")
        self.model = os.path.join(self.tmp, "model")
        subprocess.run([strata, "model", "init", "--preset", preset, "--out", self.model],
                       check=True, stdout=subprocess.DEVNULL)
        self.name = ["--served-model-name", MODEL]
        self.router = cu.start_router(strata, self.model, self.tmp,
                                      self.name + ["--policy", "round-robin"])
        self.http = int(self.router.match.group(1))
        self.grpc = self.router.match.group(2)
        self.kvstore = cu.Proc(
            [strata, "kvstore", "--id", "kvstore-0", "--port", "0", "--http-port", "0",
             "--capacity-bytes", str(int(40 * self.prompt_mb) << 20),
             "--router", f"127.0.0.1:{self.grpc}"],
            os.path.join(self.tmp, "kvstore-0.log"),
            r"kvstore kvstore-0: grpc 127\.0\.0\.1:(\d+), http 127\.0\.0\.1:(\d+)")
        self.kv_grpc = self.kvstore.match.group(1)
        self.kv_http = int(self.kvstore.match.group(2))
        kv_blocks = ["--num-kv-blocks", str(2 * tokens // BLOCK + 64)]
        self.decode = [cu.start_worker(strata, self.model, self.tmp, "decode", f"decode-{i}",
                                       self.grpc, self.name + kv_blocks) for i in range(2)]
        self.generation = 0
        self.prefill = self.start_prefill()
        assert cu.wait_until(lambda: cu.request(self.http, "GET", "/ready")[0] == 200)

    def start_prefill(self):
        wid = f"prefill-{self.generation}"
        self.generation += 1
        blocks = self.tokens // BLOCK
        argv = ["--num-kv-blocks", str(blocks * 3 // 2),
                "--kv-host-mb", str(int(3 * self.prompt_mb)),
                "--kv-disk-path", os.path.join(self.tmp, "disk-" + wid),
                "--kv-disk-mb", str(int(20 * self.prompt_mb)), "--kv-disk-admit-uses", "1",
                "--kv-remote", f"127.0.0.1:{self.kv_grpc}"]
        w = cu.start_worker(self.strata, self.model, self.tmp, "prefill", wid, self.grpc,
                            self.name + argv)
        w.http = int(w.match.group(1))
        assert cu.wait_until(lambda: cu.metric(self.http, "strata_router_workers",
                                               {"role": "prefill"}) >= 1, timeout=60)
        return w

    def replace_prefill(self):
        new = self.start_prefill()
        self.prefill.stop()
        assert cu.wait_until(lambda: cu.metric(self.http, "strata_router_workers",
                                               {"role": "prefill"}) == 1, timeout=60)
        self.prefill = new

    def wait_settled(self, port, tier, at_least, timeout=300):
        deadline, last = time.time() + timeout, -1
        while time.time() < deadline:
            now = cu.metric(port, "strata_kvstore_usage_blocks", {"tier": tier})
            if now >= at_least and now == last:
                return
            last = now
            time.sleep(0.5)
        raise AssertionError(f"{tier} did not settle at >= {at_least} blocks (last {last})")

    def diagnose(self):
        """Why a tier was missed: the prefill worker's staging counters and import warnings."""
        for name in ("strata_worker_kv_stage_total", "strata_worker_kv_imported_blocks_total",
                     "strata_worker_kv_fetch_failed_blocks_total"):
            for outcome in ({"outcome": "fetch"}, {"outcome": "recompute"}, {"outcome": "none"}) \
                    if name.endswith("stage_total") else ({},):
                print(f"    {name}{outcome or ''} = {cu.metric(self.prefill.http, name, outcome)}",
                      file=sys.stderr)
        with open(self.prefill.log_path, errors="replace") as f:
            for line in f.readlines()[-5:]:
                print("    log: " + line.rstrip(), file=sys.stderr)

    def computed(self):
        return cu.metric(self.prefill.http, "strata_worker_prompt_tokens_computed_total")

    def close(self):
        for w in self.decode + [self.prefill]:
            w.stop()
        self.kvstore.stop()
        self.router.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)


def one_repeat(c, seed, rows):
    tokens = c.tokens
    blocks = tokens // BLOCK
    remote_prompt = seed + 50  # G4 uses its own prompt, pushed straight down (see the docstring)

    def measure(tier, p=seed):
        computed0 = c.computed()
        ttft, text = stream_ttft(c.http, prompt(p, tokens))
        rows.setdefault(tier, []).append((ttft, c.computed() - computed0, text))
        print(f"  seed {p} {tier:>9}: TTFT {ttft * 1000:8.1f} ms, "
              f"{rows[tier][-1][1]:.0f} of {tokens} prompt tokens computed", file=sys.stderr)
        if not tier.startswith("scratch") and rows[tier][-1][1] > tokens // 2:
            c.diagnose()

    def flush(n):
        for i in range(n):
            stream_ttft(c.http, prompt(seed * 100 + 1 + i + flush.used, tokens), max_tokens=1)
        flush.used += n
    flush.used = 0

    measure("scratch")
    measure("G1")
    flush(1)
    measure("G2")
    flush(4)
    c.wait_settled(c.prefill.http, "disk", blocks)
    measure("G3")
    measure("scratch-G4", remote_prompt)
    flush(5)
    c.wait_settled(c.kv_http, "remote", blocks)
    c.replace_prefill()
    measure("G4", remote_prompt)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("strata")
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--preset", default="tiny-llama-32k")
    a = ap.parse_args()
    if a.tokens % BLOCK:
        sys.exit(f"--tokens must be a multiple of {BLOCK}")
    c = Cluster(os.path.abspath(a.strata), a.preset, a.tokens)
    rows = {}
    try:
        for r in range(a.repeats):
            one_repeat(c, r + 1, rows)
    finally:
        c.close()
    scratch = statistics.median(t for t, _, _ in rows["scratch"])
    print(f"\n{a.tokens}-token prompt, {a.repeats} repeats, preset {a.preset}; "
          f"TTFT median (min-max), ms")
    print("| served from | TTFT ms | vs scratch | prompt tokens computed | tokens = scratch |")
    print("|---|---:|---:|---:|---|")
    for tier in ("scratch", "G1", "G2", "G3", "G4"):
        ts = [t for t, _, _ in rows[tier]]
        med = statistics.median(ts)
        comp = statistics.median(n for _, n, _ in rows[tier])
        ref = rows["scratch-G4" if tier == "G4" else "scratch"]
        same = all(rows[tier][i][2] == ref[i][2] for i in range(len(ts)))
        print(f"| {tier} | {med * 1000:.1f} ({min(ts) * 1000:.1f}-{max(ts) * 1000:.1f}) | "
              f"{scratch / med:.2f}x | {comp:.0f} | {'yes' if same else 'NO'} |")
    if not all(rows[t][i][2] == rows["scratch-G4" if t == "G4" else "scratch"][i][2]
               for t in rows if t != "scratch-G4" for i in range(len(rows[t]))):
        sys.exit("token mismatch: a tier served different greedy tokens than scratch")


if __name__ == "__main__":
    main()
