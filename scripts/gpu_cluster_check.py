"""The GPU cluster check: `strata up` with the CUDA plugin, disaggregated (1 prefill + 2 decode
workers, all on GPU 0, KV over CUDA IPC), disaggregated on the staged path (1 + 1, KV through
pinned host memory and UCX, with G2, G3 and G4 tiers) and mixed (1 worker on GPU 0), on the
trained golden fixtures.

Usage: gpu_cluster_check.py BIN_DIR [FIXTURE ...]   (scripts/gpu_cluster_check.sh runs it)

BIN_DIR holds `strata` and `libstrata_cuda.so`. Prints one line per check and then
"N passed, M failed"; exits 1 if any check failed.
"""
import concurrent.futures
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "cluster"))
import cluster_util as cu  # noqa: E402

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "models")
DEFAULT_FIXTURES = ["llama3_trained", "mixtral_trained"]
MODEL = "golden"
# Long enough for several full blocks, short of the fixtures' 256 positions with the answers.
PREFIX = list(range(20, 116))  # 96 tokens = 6 blocks of 16
# Chat needs a template; the fixtures have none, so the check adds a minimal one to its copy.
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")

results = []


def check(name, fn):
    t0 = time.time()
    try:
        fn()
        results.append((name, True, ""))
        print(f"PASS  {name}  ({time.time() - t0:.1f} s)", flush=True)
    except Exception as e:  # noqa: BLE001 - every failure is reported, then the next check runs
        results.append((name, False, str(e)))
        print(f"FAIL  {name}  ({time.time() - t0:.1f} s): {e}", flush=True)


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def body(prompt, max_tokens, **kw):
    return {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, **kw}


def complete(port, prompt, max_tokens=32, **kw):
    status, out = cu.request(port, "POST", "/v1/completions", body(prompt, max_tokens, **kw),
                             timeout=120)
    expect(status == 200, f"HTTP {status}: {out}")
    return out


class Cluster:
    """`strata up` with a config; .http is the router port, .metrics maps process -> port."""

    def __init__(self, strata, tmp, name, config):
        self.tmp = os.path.join(tmp, name)
        os.makedirs(self.tmp)
        self.up = cu.start_up(strata, self.tmp, config, timeout=240)
        self.http = self.up.http
        self.metrics = {m.group(1): int(m.group(2)) for m in re.finditer(
            r"  (\S+): http://127\.0\.0\.1:(\d+)/metrics", self.up.output)}

    def worker_ports(self, prefix):
        return {n: p for n, p in self.metrics.items() if n.startswith(prefix)}

    def pids(self):
        out = subprocess.run(["pgrep", "-P", str(self.up.p.pid)], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split()]

    def stop(self):
        return self.up.stop(signal.SIGTERM, timeout=60)


def gpu_memory_mib(pids):
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                              "--format=csv,noheader,nounits"], capture_output=True,
                             text=True).stdout
    except FileNotFoundError:
        return 0  # no GPU here: only the KV block counts are checked
    used = {}
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit():
            used[int(parts[0])] = int(parts[1])
    return sum(used.get(p, 0) for p in pids)


def metric_sum(ports, name):
    """A counter summed over the processes behind `ports` (name -> port)."""
    return sum(cu.metric(p, name) or 0 for p in ports.values())


def expect_handoff_path(ports, path):
    for n, p in ports.items():
        expect(cu.metric(p, "strata_worker_kv_handoff_path", {"path": path}) == 1,
               f"{n} is not on the {path} path")


def config(model, plugin, pools, extra="", engine=""):
    return (f"model: {model}\nrouter: {{http_port: 0}}\n"
            f"engine: {{plugin: {plugin}, num_kv_blocks: 64, max_num_batched_tokens: 64{engine}}}\n"
            f"{pools}{extra}")


def generate(strata, model, plugin, prompt, n):
    out = subprocess.run([strata, "generate", "--model", model, "--plugin", plugin, "--prompt",
                          prompt, "--max-tokens", str(n), "--temperature", "0", "--ignore-eos",
                          "--json"], capture_output=True, text=True, timeout=300)
    expect(out.returncode == 0, f"generate exited {out.returncode}: {out.stderr[-500:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_fixture(strata, plugin, fixture, tmp):
    model = os.path.join(tmp, fixture)
    shutil.copytree(os.path.join(FIXTURES, fixture), model)
    tc_path = os.path.join(model, "tokenizer_config.json")
    with open(tc_path) as f:
        tc = json.load(f)
    tc["chat_template"] = CHAT_TEMPLATE
    with open(tc_path, "w") as f:
        json.dump(tc, f)
    with open(os.path.join(model, "reference.json")) as f:
        cases = json.load(f)["cases"]
    disagg = mixed = staged = None
    try:
        disagg = Cluster(strata, tmp, fixture + "-disagg", config(
            model, plugin, "prefill: {count: 1, gpus: [0]}\n"
                           "decode: {count: 2, gpus: [0]}\n",
            "kv_tiers: {host_mb: 4}\n"))
        mixed = Cluster(strata, tmp, fixture + "-mixed", config(
            model, plugin, "prefill: {count: 0}\ndecode: {count: 0}\nmixed: {count: 1, gpus: [0]}\n"))
        for c in (disagg, mixed):
            status, models = cu.request(c.http, "GET", "/v1/models")
            expect(status == 200, models)
        served = models["data"][0]["id"]
        global MODEL
        MODEL = served
        fixture_checks(strata, plugin, fixture, model, cases, disagg, mixed)
        if fixture == DEFAULT_FIXTURES[0]:
            disagg.stop()
            disagg = None
            staged = Cluster(strata, tmp, fixture + "-staged", config(
                model, plugin, "prefill: {count: 1, gpus: [0]}\ndecode: {count: 1, gpus: [0]}\n",
                f"kv_tiers: {{host_mb: 1, disk_path: {tmp}/{fixture}-disk, disk_mb: 16, "
                f"disk_admit_uses: 1, kvstore_count: 1, kvstore_mb: 64}}\n",
                engine=", kv_device_path: staged"))
            staged_checks(fixture, cases, staged, mixed)
    finally:
        for c in (disagg, mixed, staged):
            if c is not None:
                rc = c.stop()
                if rc != 0:
                    print(f"note: strata up ({c.tmp}) exited {rc}", flush=True)


def fixture_checks(strata, plugin, fixture, model, cases, disagg, mixed):
    gen = {}

    def reference_ids():
        for c in cases:
            g = generate(strata, model, plugin, c["prompt"], len(c["greedy_new_ids"]))
            expect(g["tokens"] == c["greedy_new_ids"],
                   f"{c['prompt']!r}: {g['tokens']} != reference {c['greedy_new_ids']}")
            gen[c["prompt"]] = g["text"]
    check(f"{fixture}: strata generate --plugin cuda gives the reference ids", reference_ids)

    def disagg_mixed_generate():
        for c in cases:
            n = len(c["greedy_new_ids"])
            a = complete(disagg.http, c["prompt"], n)["choices"][0]["text"]
            b = complete(mixed.http, c["prompt"], n)["choices"][0]["text"]
            expect(a == b, f"{c['prompt']!r}: disaggregated {a!r} != mixed {b!r}")
            if c["prompt"] in gen:
                expect(a == gen[c["prompt"]], f"{c['prompt']!r}: {a!r} != generate "
                                              f"{gen[c['prompt']]!r}")
    check(f"{fixture}: disaggregated == mixed == generate (greedy, {len(cases)} cases)",
          disagg_mixed_generate)

    prefill_port = disagg.worker_ports("prefill")
    decode_ports = disagg.worker_ports("decode")

    def over_ipc():
        expect_handoff_path({**prefill_port, **decode_ports}, "ipc")
        copies = metric_sum(prefill_port, "strata_worker_transport_device_copies_total")
        received = metric_sum(decode_ports, "strata_worker_kv_received_bytes_total")
        expect(copies > 0 and received > 0, f"device copies {copies}, bytes received {received}")
        print(f"      prefill device copies {copies:.0f}, decode KV bytes received "
              f"{received:.0f}", flush=True)
    check(f"{fixture}: KV moved prefill -> decode over CUDA IPC", over_ipc)

    def prefix_hit():
        first = complete(disagg.http, PREFIX, 16)
        time.sleep(1.5)  # the router's KV index learns the blocks from heartbeats
        second = complete(disagg.http, PREFIX, 16)
        want = complete(mixed.http, PREFIX, 16)["choices"][0]["text"]
        expect(first["choices"][0]["text"] == second["choices"][0]["text"] == want,
               "texts differ across the cached, uncached and mixed runs")
        cached = second["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
        expect(cached > 0, f"no cached tokens: {second['usage']}")
    check(f"{fixture}: prefix-cache hit gives the same text", prefix_hit)

    def g2_fetch():
        ports = list(prefill_port.values()) + list(decode_ports.values())
        g2_hits = lambda: sum(cu.metric(p, "strata_kvstore_hits_total", {"tier": "host"}) or 0
                              for p in ports)
        hits0 = g2_hits()
        ref = complete(mixed.http, PREFIX, 16)["choices"][0]["text"]
        # Other prompts push PREFIX's blocks out of every worker's 64-block pool into G2: 20
        # prompts of 12 blocks, about 120 blocks for each decode worker and 240 for the prefill.
        for s in range(1, 21):
            complete(disagg.http, [(t * 7 + s * 13) % 300 + 10 for t in range(180)], 4)
        got = complete(disagg.http, PREFIX, 16)["choices"][0]["text"]
        hits = g2_hits() - hits0
        expect(got == ref, f"{got!r} != {ref!r}")
        expect(hits > 0, "no G2 (host) hits on any worker")
        print(f"      G2 block hits {hits:.0f}", flush=True)
    check(f"{fixture}: a G2 fetch gives the same text", g2_fetch)

    def openai_chat():
        import openai
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{disagg.http}/v1", api_key="unused")
        msgs = [{"role": "user", "content": "To be"}]
        chunks = list(client.chat.completions.create(
            model=MODEL, messages=msgs, max_tokens=12, temperature=0, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
        text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        whole = openai.OpenAI(base_url=f"http://127.0.0.1:{mixed.http}/v1",
                              api_key="unused").chat.completions.create(
            model=MODEL, messages=msgs, max_tokens=12, temperature=0,
            extra_body={"ignore_eos": True})
        expect(chunks[-1].usage.completion_tokens == 12, chunks[-1].usage)
        expect(text == whole.choices[0].message.content, f"{text!r} != {whole.choices[0]}")
    check(f"{fixture}: the openai client's streaming chat (disaggregated == mixed)", openai_chat)

    def structured_output():
        import openai
        schema = {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer"},
            "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
            "ok": {"type": "boolean"}},
            "required": ["name", "age", "tags", "ok"], "additionalProperties": False}
        fmt = {"type": "json_schema", "json_schema": {"name": "p", "schema": schema,
                                                      "strict": True}}
        msgs = [{"role": "user", "content": "Describe a person as JSON."}]
        texts = {}
        for name, port in (("disaggregated", disagg.http), ("mixed", mixed.http)):
            client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
            for temperature, seed in ((0, 0), (0.8, 1), (0.8, 2)):
                out = client.chat.completions.create(
                    model=MODEL, messages=msgs, max_tokens=200, temperature=temperature,
                    seed=seed, response_format=fmt)
                text = out.choices[0].message.content
                expect(out.choices[0].finish_reason == "stop", f"{name}: {out.choices[0]}")
                obj = json.loads(text)
                expect(set(obj) == {"name", "age", "tags", "ok"}, f"{name}: {text}")
                expect(isinstance(obj["name"], str) and len(obj["name"]) <= 12, text)
                expect(isinstance(obj["age"], int) and not isinstance(obj["age"], bool), text)
                expect(isinstance(obj["ok"], bool), text)
                expect(all(t in ("a", "b", "c") for t in obj["tags"]) and len(obj["tags"]) <= 3,
                       text)
                texts[(name, temperature, seed)] = text
            regex = r"[0-9]{3}-[a-z]{2,4}"
            out = complete(port, [5, 6, 7], max_tokens=20, guided_regex=regex, ignore_eos=False)
            expect(re.fullmatch(regex, out["choices"][0]["text"]), f"{name}: {out}")
        for temperature, seed in ((0, 0), (0.8, 1), (0.8, 2)):
            a, b = texts[("disaggregated", temperature, seed)], texts[("mixed", temperature, seed)]
            expect(a == b, f"disaggregated {a!r} != mixed {b!r}")
    check(f"{fixture}: structured output (json_schema, regex) parses and validates "
          "(disaggregated == mixed)", structured_output)

    def memory_after_cancels():
        pids = disagg.pids()
        ports = list(prefill_port.values()) + list(decode_ports.values())

        def cancel_round(seed):
            with concurrent.futures.ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda i: cu.open_stream_and_drop(
                    disagg.http, body([seed + i] * 100, 150, stream=True)), range(16)))

        def idle():
            return all((cu.metric(p, "strata_worker_kv_blocks_used") or 0) == 0 and
                       (cu.metric(p, "strata_worker_running_requests") or 0) == 0 for p in ports)
        # A first round sizes the engines' batch-16 buffers (kept for reuse, not leaked); the
        # baseline is taken after it, and a second round must leave memory where it was.
        cancel_round(30)
        expect(cu.wait_until(idle, timeout=30), "KV blocks still in use after the first cancels")
        base = gpu_memory_mib(pids)
        cancel_round(60)
        expect(cu.wait_until(idle, timeout=30), "KV blocks still in use after the cancels")
        after = gpu_memory_mib(pids)
        print(f"      GPU memory of the cluster's processes: {base} MiB before, {after} MiB "
              f"after 16 more cancelled streams", flush=True)
        expect(after <= base + 2, f"GPU memory grew from {base} to {after} MiB")
    check(f"{fixture}: KV blocks and GPU memory back to baseline after cancels",
          memory_after_cancels)

    def killed_decode_resumes():
        prompt = cases[0]["prompt"]
        n = 200
        ref = complete(mixed.http, prompt, n)["choices"][0]["text"]
        req = body(prompt, n, stream=True, stream_options={"include_usage": True})
        killed = []

        def on_event(count):
            if count == 3 and not killed:
                for n_, p in decode_ports.items():
                    if cu.metric(p, "strata_worker_running_requests"):
                        pid = worker_pid(disagg, n_)
                        os.kill(pid, signal.SIGKILL)
                        killed.append(n_)
                        return
        status, events, done = stream_with_hook(disagg.http, req, on_event)
        expect(killed, "no decode worker was running the request when the stream began")
        expect(status == 200 and done, f"status {status}, done {done}, {events[-2:]}")
        errors = [e for e in events if "error" in e]
        expect(not errors, errors)
        text = "".join(c["text"] for e in events for c in e.get("choices", []))
        expect(text == ref, f"resumed text differs:\n{text!r}\n{ref!r}")
        resumed = cu.metric(disagg.http, "strata_router_resumed_streams_total")
        print(f"      killed {killed[0]}; router resumed streams {resumed}", flush=True)
    check(f"{fixture}: decode worker SIGKILLed mid-stream: resumed, same text",
          killed_decode_resumes)


def staged_checks(fixture, cases, staged, mixed):
    prefill = staged.worker_ports("prefill")
    decode = staged.worker_ports("decode")

    def same_text():
        for c in cases:
            n = len(c["greedy_new_ids"])
            a = complete(staged.http, c["prompt"], n)["choices"][0]["text"]
            b = complete(mixed.http, c["prompt"], n)["choices"][0]["text"]
            expect(a == b, f"{c['prompt']!r}: staged {a!r} != mixed {b!r}")
        expect_handoff_path({**prefill, **decode}, "staged")
        pieces = metric_sum(prefill, "strata_worker_transport_staged_pieces_total")
        copies = metric_sum(prefill, "strata_worker_transport_device_copies_total")
        expect(pieces > 0 and copies == 0, f"staged pieces {pieces}, ipc copies {copies}")
        print(f"      staged pieces sent {pieces:.0f}", flush=True)
    check(f"{fixture}: staged path (pinned host + UCX): disaggregated == mixed "
          f"({len(cases)} cases)", same_text)

    def lower_tiers():
        port = next(iter(prefill.values()))
        prompt = [(t * 11 + 5) % 300 + 10 for t in range(160)]
        ref = complete(mixed.http, prompt, 16)["choices"][0]["text"]
        first = complete(staged.http, prompt, 16)["choices"][0]["text"]
        # 64 blocks of G1 and 256 of G2 (1 MiB of 4 KiB blocks): 40 other prompts of 12 blocks
        # push the prompt's blocks down to G3 (and G4).
        for s in range(1, 41):
            complete(staged.http, [(t * 7 + s * 131) % 300 + 10 for t in range(190)], 1)
        expect(cu.wait_until(lambda: (cu.metric(port, "strata_kvstore_usage_blocks",
                                                {"tier": "disk"}) or 0) > 0, timeout=60),
               "nothing reached the disk tier")
        lower = lambda: sum(cu.metric(port, "strata_kvstore_hits_total", {"tier": t}) or 0
                            for t in ("disk", "remote"))
        hits0 = lower()
        got = complete(staged.http, prompt, 16)["choices"][0]["text"]
        hits = lower() - hits0
        expect(first == ref and got == ref, f"{first!r} / {got!r} != {ref!r}")
        expect(hits > 0, "no G3 or G4 hits on the prefill worker")
        print(f"      G3 + G4 block hits {hits:.0f}", flush=True)
    check(f"{fixture}: a prompt pushed down to G3/G4 comes back with the same text", lower_tiers)


def worker_pid(cluster, name):
    for pid in cluster.pids():
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        if b"--id" in argv and argv[argv.index(b"--id") + 1].decode() == name:
            return pid
    raise AssertionError(f"no process for {name}")


def stream_with_hook(port, req, on_event):
    """A streaming POST read event by event; on_event(count) runs after each data event."""
    import http.client
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.request("POST", "/v1/completions", body=json.dumps(req),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        return resp.status, [json.loads(resp.read())], False
    events, done, buf = [], False, b""
    while True:
        chunk = resp.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            raw, buf = buf.split(b"\n\n", 1)
            raw = raw.strip()
            if not raw.startswith(b"data: "):
                continue
            payload = raw[len(b"data: "):].decode()
            if payload == "[DONE]":
                done = True
            else:
                events.append(json.loads(payload))
                on_event(len(events))
    conn.close()
    return 200, events, done


def main():
    bin_dir = os.path.abspath(sys.argv[1])
    fixtures = sys.argv[2:] or DEFAULT_FIXTURES
    strata = os.path.join(bin_dir, "strata")
    # STRATA_CHECK_PLUGIN: another plugin file, to try the check's own logic without a GPU.
    plugin = os.environ.get("STRATA_CHECK_PLUGIN", os.path.join(bin_dir, "libstrata_cuda.so"))
    tmp = tempfile.mkdtemp(prefix="strata_gpu_check_")
    try:
        for fixture in fixtures:
            try:
                run_fixture(strata, plugin, fixture, tmp)
            except Exception as e:  # noqa: BLE001 - a cluster that does not start is a failure
                check(f"{fixture}: cluster starts", lambda e=e: (_ for _ in ()).throw(e))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    passed = sum(1 for _, ok, _ in results if ok)
    failed = len(results) - passed
    print(f"{passed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
