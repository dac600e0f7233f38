#!/usr/bin/env python3
"""PyTorch SDPA (flash backend) on the prefill shapes of prefill_attention_bench, same GPU.

Timing: q [1, 32, N, 128], K and V [1, Hk, N, 128] repeat_interleave'd to 32 heads before
timing (the flash backend wants equal head counts; the expansion is not timed), bf16,
is_causal=True, torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION). TFLOP/s counts
4 x 128 x 32 x N (N + 1) / 2, as the C++ bench does. Median of 7 batches of calls, CUDA events.
Prints "CSV,torch,<model>,<N>,<us>,<tflops>,<backend>".

Check (--check DIR): reads the raw bf16 files prefill_attention_bench --dump DIR wrote for the
2k-token shapes (q [N, 32, 128], dense K and V [N, Hk, 128], our out [N, 32, 128]), computes an
fp32 causal reference and SDPA's bf16 output on the same inputs, and prints
"CSV,check,<model>,<N>,<ours vs fp32>,<sdpa vs fp32>,<ours vs sdpa>" (normalized L2 errors).

    python3 torch_sdpa_prefill.py [--quick] [--check DIR]
"""
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

HEAD_DIM = 128
MODELS = [("llama3.1-8b", 32, 8), ("qwen3-30b-a3b", 32, 4)]


def time_calls(fn, n):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / n


def sdpa(q, k, v):
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def bench(name, hq, hk, n):
    q = torch.rand(1, hq, n, HEAD_DIM, dtype=torch.bfloat16, device="cuda") * 4 - 2
    k = torch.rand(1, hk, n, HEAD_DIM, dtype=torch.bfloat16, device="cuda") * 2 - 1
    v = torch.rand(1, hk, n, HEAD_DIM, dtype=torch.bfloat16, device="cuda") * 2 - 1
    k = k.repeat_interleave(hq // hk, dim=1).contiguous()
    v = v.repeat_interleave(hq // hk, dim=1).contiguous()
    step = lambda: sdpa(q, k, v)
    time_calls(step, 3)
    one = time_calls(step, 1)
    iters = max(3, min(1000, int(25.0 / max(one, 1e-3))))
    ms = sorted(time_calls(step, iters) for _ in range(7))[3]
    tflops = 4.0 * HEAD_DIM * hq * n * (n + 1) / 2 / (ms * 1e-3) / 1e12
    print(f"CSV,torch,{name},{n},{ms * 1e3:.2f},{tflops:.2f},flash", flush=True)


def load(path, shape):
    raw = torch.from_numpy(__import__("numpy").fromfile(path, dtype="int16"))
    return raw.view(torch.bfloat16).reshape(shape).cuda()


def rel(a, b):
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm()).item()


def check(directory, name, hq, hk, n):
    base = os.path.join(directory, f"{name}_{n}_")
    if not os.path.exists(base + "out.bin"):
        return
    q = load(base + "q.bin", (n, hq, HEAD_DIM)).transpose(0, 1)  # [Hq, N, D]
    k = load(base + "k.bin", (n, hk, HEAD_DIM)).transpose(0, 1)
    v = load(base + "v.bin", (n, hk, HEAD_DIM)).transpose(0, 1)
    ours = load(base + "out.bin", (n, hq, HEAD_DIM)).transpose(0, 1)
    k = k.repeat_interleave(hq // hk, dim=0)
    v = v.repeat_interleave(hq // hk, dim=0)
    s = torch.matmul(q.float(), k.float().transpose(1, 2)) / HEAD_DIM ** 0.5
    mask = torch.ones(n, n, dtype=torch.bool, device="cuda").triu(1)
    ref = torch.matmul(s.masked_fill(mask, float("-inf")).softmax(-1), v.float())
    theirs = sdpa(q[None].contiguous(), k[None].contiguous(), v[None].contiguous())[0]
    print(f"CSV,check,{name},{n},{rel(ours, ref):.3e},{rel(theirs, ref):.3e},"
          f"{rel(ours, theirs):.3e}", flush=True)


def main():
    quick = "--quick" in sys.argv
    torch.manual_seed(0)
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}", flush=True)
    tokens = [1024, 8192] if quick else [1024, 2048, 4096, 8192, 16384]
    with torch.no_grad():
        if "--check" in sys.argv:
            directory = sys.argv[sys.argv.index("--check") + 1]
            for name, hq, hk in MODELS:
                check(directory, name, hq, hk, 2048)
        for name, hq, hk in MODELS:
            for n in tokens:
                bench(name, hq, hk, n)


if __name__ == "__main__":
    main()
