"""What the one-GPU benchmark scripts (bench_disagg.py, gpu_profile.py, gpu_replay.py) share."""
import re


def one_gpu_cluster(model, plugin, max_num_batched_tokens, mode):
    """`strata up` config: mode "mixed" = one mixed worker, else 1 prefill + 1 decode, all on
    GPU 0 (no GPU ids with the CPU plugin)."""
    engine = (f"engine: {{plugin: {plugin}, max_num_batched_tokens: {max_num_batched_tokens}, "
              f"max_num_seqs: 64}}\n")
    gpus = "" if plugin == "cpu" else ", gpus: [0]"
    if mode == "mixed":
        pools = f"prefill: {{count: 0}}\ndecode: {{count: 0}}\nmixed: {{count: 1{gpus}}}\n"
    else:
        pools = f"prefill: {{count: 1{gpus}}}\ndecode: {{count: 1{gpus}}}\n"
    return f"model: {model}\nrouter: {{http_port: 0}}\n{engine}{pools}"


def kv_block_capacity(metrics_text):
    """A worker's KV pool in blocks, from its /metrics text; None when it does not say."""
    m = re.search(r"^strata_worker_kv_blocks_capacity(?:\{[^}]*\})? ([0-9.e+]+)", metrics_text,
                  re.M)
    return int(float(m.group(1))) if m else None
