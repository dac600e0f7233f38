"""PyTorch's way of sampling a decode step's logits, the peer of sample_bench's device kernel.

The same shapes and modes as bench/cuda/sample_bench.cc (Llama 3 and Qwen3 vocabularies, batch 1
/ 8 / 64; greedy, temperature + top-p, top-k + top-p + min-p, top-p with 5 logprobs), sampled the
way PyTorch serving code does it (Hugging Face's logits processors, vLLM's PyTorch fallback):
scale, torch.topk for top-k, torch.sort + softmax + cumsum for top-p, a mask for min-p, then
one draw per row from the renormalized distribution (the row's uniform against the cumulative
sum, as the strata rule draws), and log_softmax + topk for logprobs. All on the GPU, bf16
logits in, ids (and logprobs) out; CUDA events, median of 30 (10 with --quick) after 3 warm-ups.

Usage: torch_sample.py [--quick]     prints a table and "CSV,rows,vocab,mode,us" lines
"""
import sys

import torch

MODES = [
    # name, temperature, top_k, top_p, min_p, logprobs (as in sample_bench's kModes)
    ("greedy", 0.0, 0, 1.0, 0.0, -1),
    ("T0.8 top-p0.9", 0.8, 0, 0.9, 0.0, -1),
    ("top-k50 top-p0.95 min-p0.05", 1.0, 50, 0.95, 0.05, -1),
    ("top-p0.9 logprobs5", 1.0, 0, 0.9, 0.0, 5),
]


def logits(rows, vocab, gen):
    """sample_bench's rows: a long tail in [-6, 2) and ~0.2% of tokens lifted by 6-10."""
    tail = torch.rand(rows, vocab, generator=gen, device="cuda") * 8 - 6
    lifted = torch.rand(rows, vocab, generator=gen, device="cuda") < 0.002
    lift = torch.rand(rows, vocab, generator=gen, device="cuda") * 4 + 6
    return (tail + lifted * lift).to(torch.bfloat16)


def sample(x, uniform, temperature, top_k, top_p, min_p, logprobs):
    if temperature == 0.0:
        ids = torch.argmax(x, dim=-1)
    else:
        scaled = x.float() / temperature
        if top_k > 0:
            values, index = torch.topk(scaled, top_k, dim=-1)  # sorted, descending
        else:
            values, index = torch.sort(scaled, dim=-1, descending=True)
        probs = torch.softmax(values, dim=-1)
        if top_p < 1.0:
            cum = torch.cumsum(probs, dim=-1)
            probs = probs.masked_fill(cum - probs >= top_p, 0.0)
        if min_p > 0.0:
            probs = probs.masked_fill(probs < min_p * probs[:, :1], 0.0)
        cum = torch.cumsum(probs, dim=-1)
        target = uniform[:, None] * cum[:, -1:]
        pick = torch.searchsorted(cum, target, right=True).clamp_(max=cum.shape[-1] - 1)
        ids = torch.gather(index, -1, pick).squeeze(-1)
    if logprobs >= 0:
        lp = torch.log_softmax(x.float(), dim=-1)
        chosen = torch.gather(lp, -1, ids[:, None])
        top = torch.topk(lp, logprobs, dim=-1)
        return ids, chosen, top
    return ids


def main():
    quick = "--quick" in sys.argv
    reps = 10 if quick else 30
    gen = torch.Generator(device="cuda")
    gen.manual_seed(1234)
    print(f"torch_sample on {torch.cuda.get_device_name()}: PyTorch sort-based sampling, "
          f"torch {torch.__version__}\n")
    print(f"{'batch':>6} {'vocab':>7}  {'mode':<28} {'torch us':>10}")
    for vocab in (128256, 151936):
        for rows in (1, 8, 64):
            x = logits(rows, vocab, gen)
            uniform = torch.rand(rows, generator=gen, device="cuda", dtype=torch.float64)
            for name, *params in MODES:
                for _ in range(3):
                    sample(x, uniform, *params)
                times = []
                for _ in range(reps):
                    e0 = torch.cuda.Event(enable_timing=True)
                    e1 = torch.cuda.Event(enable_timing=True)
                    e0.record()
                    sample(x, uniform, *params)
                    e1.record()
                    e1.synchronize()
                    times.append(e0.elapsed_time(e1) * 1e3)
                us = sorted(times)[len(times) // 2]
                print(f"{rows:>6} {vocab:>7}  {name:<28} {us:>10.1f}")
                print(f"CSV,{rows},{vocab},{name},{us:.2f}")


if __name__ == "__main__":
    main()
