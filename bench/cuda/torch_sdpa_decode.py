#!/usr/bin/env python3
"""PyTorch SDPA on the decode shapes of decode_attention_bench, same GPU, same run.

q [B, Hq, 1, 128], dense (not paged) K and V [B, Hk, ctx, 128], bf16, no mask (one query row
attends to the whole context), torch.nn.functional.scaled_dot_product_attention with
enable_gqa=True (GQA without materializing repeated K/V) and PyTorch's default backend choice.
If enable_gqa is refused, K/V are repeat_interleave'd to Hq heads before timing (mode
"repeat_kv"; then the bytes PyTorch reads are larger than the GB/s figure counts).

GB/s = the same K+V bytes as ours (B x ctx x Hk x 128 x 2 x 2) over the median time per call,
CUDA events over a batch of calls, 7 repetitions. One random buffer sized for the largest shape
is drawn once; every shape views slices of it, and shapes reading < 256 MiB rotate over
disjoint slices so the timing is not served from the L2. Prints "CSV,torch,..." lines.

    python3 torch_sdpa_decode.py [--quick]
"""
import math
import sys

import torch
import torch.nn.functional as F

HEAD_DIM = 128
ROTATE_BYTES = 256 << 20
MODELS = [("llama3.1-8b", 32, 8), ("qwen3-30b-a3b", 32, 4)]


def shapes(quick):
    batches = [1, 32] if quick else [1, 8, 32, 64, 256]
    contexts = [2048, 32768] if quick else [512, 2048, 8192, 32768]
    for name, hq, hk in MODELS:
        for b in batches:
            for ctx in contexts:
                yield name, hq, hk, b, ctx


def kv_elems(hk, b, ctx):
    return b * hk * ctx * HEAD_DIM


def rotations(hk, b, ctx):
    return max(1, min(64, math.ceil(ROTATE_BYTES / (kv_elems(hk, b, ctx) * 4))))


def time_calls(fn, n):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / n


def bench(buf, name, hq, hk, b, ctx):
    n = kv_elems(hk, b, ctx)
    rots = rotations(hk, b, ctx)
    q = torch.randn(b, hq, 1, HEAD_DIM, dtype=torch.bfloat16, device="cuda")
    kvs = []
    for r in range(rots):
        base = 2 * n * r
        k = buf[base:base + n].view(b, hk, ctx, HEAD_DIM)
        v = buf[base + n:base + 2 * n].view(b, hk, ctx, HEAD_DIM)
        kvs.append((k, v))
    mode = "enable_gqa"
    try:
        F.scaled_dot_product_attention(q, kvs[0][0], kvs[0][1], enable_gqa=True)
    except (RuntimeError, TypeError):
        mode = "repeat_kv"
        g = hq // hk
        kvs = [(k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)) for k, v in kvs]
    calls = [0]

    def step():
        k, v = kvs[calls[0] % len(kvs)]
        calls[0] += 1
        if mode == "enable_gqa":
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        else:
            F.scaled_dot_product_attention(q, k, v)

    time_calls(step, 3)
    one = time_calls(step, 1)
    iters = max(5, min(2000, int(5.0 / max(one, 1e-3))))
    ms = sorted(time_calls(step, iters) for _ in range(7))[3]
    gbs = n * 2 * 2 / (ms * 1e-3) / 1e9
    print(f"CSV,torch,{name},{b},{ctx},{ms * 1e3:.2f},{gbs:.1f},{mode}", flush=True)


def main():
    quick = "--quick" in sys.argv
    torch.manual_seed(0)
    total = max(2 * kv_elems(hk, b, ctx) * rotations(hk, b, ctx)
                for _, _, hk, b, ctx in shapes(quick))
    buf = torch.randn(total, dtype=torch.bfloat16, device="cuda")
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    with torch.no_grad():
        for shape in shapes(quick):
            bench(buf, *shape)


if __name__ == "__main__":
    main()
