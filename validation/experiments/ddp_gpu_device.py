"""What PyTorch DDP adds to an eager training step whose GPU is busy (2 GPUs): its time split
into GPU work, collectives and host.

The unseen DDP steps of GPT-2 small, TinyLlama and Qwen3-0.6B at batch 1-5 x 1024 tokens come
out 6-28% faster in the model than measured (docs/validation.md, multi-GPU runs 14 and 15),
where the model adds to the one-GPU step only DDP's bucket copies, its per-bucket all-reduces,
the last bucket after the backward, NCCL's channels' share of the SMs while they overlap, and
DDP's host work (llm/ddp.py). This times wider HF models than ``ddp_host_device.py`` (the GPU
busy for much of the step), none of them an unseen configuration, on both GPUs at once, the
three modes of ``ddp_host_device.py --interleave`` step by step in turn (plain, no_sync, ddp),
and then traces two steps of each of plain and ddp on every rank with torch.profiler (CPU and
CUDA, no shapes) to split each step: compute kernels' summed and union time, NCCL kernels'
summed time and the part of it with no compute kernel beside it, the kernels per step, and the
GPU's idle time inside the step. The gzipped traces are written beside the JSON.

    python3 validation/experiments/ddp_gpu_device.py --out DIR [--steps 20] [--tiny]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil

from ddp_host_device import _cpu_model, build, interleaved, report  # this folder's
from two_gpus import finish, spawn, start_rank

# (name, family, config fields, batches, seq): wide enough that the GPU is busy for much of a
# step at batch 1-6 x 1024; widths and depths that no unseen grid holds (GPT-2 small is 768 x 12,
# TinyLlama 2048 x 22, Qwen3-0.6B 1024 x 28)
MODELS = [
    ("gpt2-w896-l12", "gpt2", dict(n_embd=896, n_layer=12, n_head=14, vocab_size=50257,
                                   n_positions=1024), (2, 6), 1024),
    ("gpt2-w640-l16", "gpt2", dict(n_embd=640, n_layer=16, n_head=10, vocab_size=50257,
                                   n_positions=1024), (4,), 1024),
    ("llama-w1536-l12", "llama", dict(hidden_size=1536, intermediate_size=4096,
                                      num_hidden_layers=12, num_attention_heads=12,
                                      num_key_value_heads=4, vocab_size=32000), (1, 3), 1024),
    ("llama-w1280-l20", "llama", dict(hidden_size=1280, intermediate_size=3456,
                                      num_hidden_layers=20, num_attention_heads=10,
                                      num_key_value_heads=2, vocab_size=32000), (2,), 1024),
]  # fmt: skip
TINY = [("tiny", "llama", dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=2, num_key_value_heads=1, vocab_size=128),
         (1,), 16)]  # fmt: skip
POLICIES = ("amp", "bf16")
TRACED_ROUNDS = 2


def traced(torch, dist, ddp, ids, policy: str, path: str) -> None:
    """Two rounds of a plain and a DDP step under torch.profiler, each step inside a
    ``step-<mode>`` range; the chrome trace gzipped to ``path``."""
    import contextlib

    from ddp_host_device import one_step
    from torch.profiler import ProfilerActivity, profile, record_function

    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4, fused=True)
    modes = {"plain": ddp.module, "ddp": ddp}
    for m in modes.values():  # AdamW's states and DDP's buckets before the trace
        one_step(torch, dist, m, contextlib.nullcontext, opt, ids, policy)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(TRACED_ROUNDS):
            for name, model in modes.items():
                with record_function(f"step-{name}"):
                    one_step(torch, dist, model, contextlib.nullcontext, opt, ids, policy)
    raw = path + ".raw.json"
    prof.export_chrome_trace(raw)
    with open(raw, "rb") as src, gzip.open(path + ".tmp", "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.replace(path + ".tmp", path)
    os.remove(raw)


def _union_us(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def split_steps(path: str) -> list[dict]:
    """Each ``step-<mode>`` range of the trace at ``path``: its wall time and its kernels' split
    (microseconds)."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    steps = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith(
        "step-") and e.get("cat") == "user_annotation"]  # fmt: skip
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    out = []
    for s in steps:
        lo, hi = s["ts"], s["ts"] + s["dur"]
        ks = [k for k in kernels if lo <= k["ts"] < hi]
        nccl = [(k["ts"], k["ts"] + k["dur"]) for k in ks if "nccl" in k["name"].lower()]
        comp = [(k["ts"], k["ts"] + k["dur"]) for k in ks if "nccl" not in k["name"].lower()]
        busy = _union_us(nccl + comp)
        comp_union = _union_us(comp)
        out.append({"mode": s["name"][5:], "wall_us": s["dur"], "kernels": len(comp),
                    "nccl_kernels": len(nccl), "compute_sum_us": sum(b - a for a, b in comp),
                    "compute_union_us": comp_union, "nccl_sum_us": sum(b - a for a, b in nccl),
                    "nccl_exposed_us": busy - comp_union, "gpu_idle_us": s["dur"] - busy})  # fmt: skip
    return out


def worker(rank: int, world: int, port: int, args) -> None:
    torch, dist = start_rank(rank, world, port)
    from torch.nn.parallel import DistributedDataParallel as DDP

    out = []
    for name, family, fields, batches, seq in TINY if args.tiny else MODELS:
        for policy in POLICIES:
            for b in batches:
                cfg, model = build(torch, family, fields, policy)
                ids = torch.randint(0, cfg.vocab_size, (b, seq), device="cuda")
                rec = {"model": name, "family": family, "config": fields, "policy": policy,
                       "batch": b, "seq": seq,
                       "tensors": sum(1 for p in model.parameters() if p.requires_grad),
                       "params": sum(p.numel() for p in model.parameters())}  # fmt: skip
                ddp = DDP(model, device_ids=[rank])
                rec["modes"] = interleaved(torch, dist, ddp, ids, policy, args.steps)
                rec["buckets"] = int(ddp._get_ddp_logging_data().get("num_buckets_reduced", -1))
                trace = os.path.join(args.out, f"trace-{name}-{policy}-b{b}-rank{rank}.json.gz")
                traced(torch, dist, ddp, ids, policy, trace)
                rec["trace"] = os.path.basename(trace)
                rec["traced_steps"] = split_steps(trace)
                out.append(rec)
                del ddp, model, ids
                torch.cuda.empty_cache()
                report(rank, rec)
    meta = {"what": __doc__.splitlines()[0], "script": "validation/experiments/"
            "ddp_gpu_device.py", "cpu": _cpu_model(), "steps": args.steps}  # fmt: skip
    finish(torch, dist, rank, world, out, meta, os.path.join(args.out, "ddp-gpu.json"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="a folder: ddp-gpu.json and the traces")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    spawn(worker, args)


if __name__ == "__main__":
    main()
