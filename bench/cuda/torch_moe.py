#!/usr/bin/env python3
"""PyTorch MoE layer on the shapes of moe_bench, same GPU, same run.

Qwen3-30B-A3B (128 experts, top-8, hidden 2048, inter 768) and Mixtral-8x7B (8, top-2, 4096,
14336) at 1, 8, 64, 512, 4096 tokens, random bf16 weights. One call = what moe_bench times:
softmax + top-k routing with renormalization, then the experts with no host synchronization:

    flat = ids.flatten(); order = argsort(flat, stable); offs = cumsum(bincount(flat))
    xs = x[order // k]                                    (gather rows in expert order)
    h = torch._grouped_mm(xs, w_gate_up^T, offs)          (one grouped GEMM over all experts)
    a = silu(h[:, :I]) * h[:, I:]
    y = torch._grouped_mm(a, w_down^T, offs)
    out = zeros(T, H).index_add_(0, order // k, y * weight)   (fp32 accumulation, then bf16)

mode "grouped_mm" when torch._grouped_mm accepts these arguments; otherwise "loop": the same
with one torch.matmul pair per expert over its slice, which needs the group sizes on the host
(one synchronization per call). Like moe_bench, each call routes its own logits (8 sets,
round robin) so small shapes are not served from the L2. Median time per call over 7
repetitions of a batch of calls (CUDA events). Prints "CSV,torch,..." lines.

    python3 torch_moe.py [--quick]
"""
import sys

import torch
import torch.nn.functional as F

MODELS = [("qwen3-30b-a3b", 128, 8, 2048, 768), ("mixtral-8x7b", 8, 2, 4096, 14336)]
ROUTINGS = 8


def route(logits, k):
    prob = torch.softmax(logits.float(), dim=-1)
    w, ids = torch.topk(prob, k, dim=-1)
    return w / w.sum(dim=-1, keepdim=True), ids


def experts_grouped(x, w, ids, w_gu, w_dn, inter):
    k = ids.shape[1]
    flat = ids.flatten()
    order = torch.argsort(flat, stable=True)
    offs = torch.cumsum(torch.bincount(flat, minlength=w_gu.shape[0]), 0).to(torch.int32)
    token = order // k
    h = torch._grouped_mm(x[token], w_gu.transpose(-2, -1), offs=offs)
    a = F.silu(h[:, :inter]) * h[:, inter:]
    y = torch._grouped_mm(a, w_dn.transpose(-2, -1), offs=offs)
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    out.index_add_(0, token, y.float() * w.flatten()[order, None])
    return out.to(torch.bfloat16)


def experts_loop(x, w, ids, w_gu, w_dn, inter):
    k = ids.shape[1]
    flat = ids.flatten()
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=w_gu.shape[0]).tolist()
    token = order // k
    xs = x[token]
    y = torch.empty_like(xs)
    begin = 0
    for e, n in enumerate(counts):
        if n:
            h = xs[begin:begin + n] @ w_gu[e].t()
            y[begin:begin + n] = (F.silu(h[:, :inter]) * h[:, inter:]) @ w_dn[e].t()
        begin += n
    out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    out.index_add_(0, token, y.float() * w.flatten()[order, None])
    return out.to(torch.bfloat16)


def pick_mode(dev):
    if not hasattr(torch, "_grouped_mm"):
        return "loop"
    try:
        x = torch.randn(24, 64, device=dev, dtype=torch.bfloat16)
        ids = torch.randint(0, 4, (12, 2), device=dev)
        w = torch.full((12, 2), 0.5, device=dev)
        w_gu = torch.randn(4, 64, 64, device=dev, dtype=torch.bfloat16)
        w_dn = torch.randn(4, 64, 32, device=dev, dtype=torch.bfloat16)
        a = experts_grouped(x[:12], w, ids, w_gu, w_dn, 32)
        b = experts_loop(x[:12], w, ids, w_gu, w_dn, 32)
        torch.cuda.synchronize()
        err = ((a.float() - b.float()).norm() / b.float().norm()).item()
        return "grouped_mm" if err < 2e-2 else "loop"
    except Exception as e:  # noqa: BLE001 -- any refusal means: fall back
        print(f"# torch._grouped_mm refused ({type(e).__name__}: {e}); per-expert loop")
        return "loop"


def time_shape(fn, x, logits, k, w_gu, w_dn, inter, calls):
    def call(i):
        w, ids = route(logits[i % ROUTINGS], k)
        return fn(x, w, ids, w_gu, w_dn, inter)

    for i in range(ROUTINGS):
        call(i)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    per_call = []
    for _ in range(7):
        e0.record()
        for i in range(calls):
            call(i)
        e1.record()
        e1.synchronize()
        per_call.append(e0.elapsed_time(e1) * 1e3 / calls)
    return sorted(per_call)[len(per_call) // 2]


def main():
    quick = "--quick" in sys.argv
    tokens = [1, 64, 4096] if quick else [1, 8, 64, 512, 4096]
    dev = torch.device("cuda")
    torch.manual_seed(0)
    mode = pick_mode(dev)
    fn = experts_grouped if mode == "grouped_mm" else experts_loop
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name()}, mode {mode}")
    for name, experts, k, hidden, inter in MODELS:
        w_gu = (torch.rand(experts, 2 * inter, hidden, device=dev, dtype=torch.bfloat16) - 0.5) * (
            2 / hidden ** 0.5)
        w_dn = (torch.rand(experts, hidden, inter, device=dev, dtype=torch.bfloat16) - 0.5) * (
            2 / inter ** 0.5)
        for t in tokens:
            x = torch.randn(t, hidden, device=dev, dtype=torch.bfloat16)
            logits = torch.randn(ROUTINGS, t, experts, device=dev, dtype=torch.bfloat16) * 2
            us = time_shape(fn, x, logits, k, w_gu, w_dn, inter, 8 if t >= 512 else 32)
            flops = 2.0 * t * k * 3 * hidden * inter
            print(f"{name:14s} T {t:5d}: {us:9.1f} us {flops / us / 1e6:6.1f} TFLOP/s ({mode})")
            print(f"CSV,torch,{name},{t},{us:.2f},{flops / us / 1e6:.2f},{mode}")
        del w_gu, w_dn
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
