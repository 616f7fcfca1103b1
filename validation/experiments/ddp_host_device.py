"""What PyTorch DDP adds to a host-bound eager training step (2 GPUs).

The unseen DDP steps that the host sets the pace of (GPT-2 small at batch 2-6, TinyLlama at
batch 1) come out 7-25% faster in the model than measured, while the model prices DDP's GPU
side only: the per-gradient copies into the buckets, the bucket all-reduces, the last bucket
after the backward (docs/multi-gpu.md). This times narrow HF models (the GPU idles, the step is
the host), none of them an unseen configuration, on both GPUs at once, in three modes per model:

    plain    the model without DDP (each rank its own step, both processes busy as under DDP)
    no_sync  under DDP inside ``ddp.no_sync()``: DDP's forward and autograd hooks, no reduction
    ddp      under DDP: hooks, bucket copies, one NCCL all-reduce per bucket

Per step: wall time around forward + backward + fused AdamW + zero_grad + synchronize, on each
rank after a barrier; a step's time is the slower rank's (as ``multi_gpu_unseen.py`` takes it).
The parameter tensors and DDP's bucket count (``ddp._get_ddp_logging_data()``) are recorded per
model. ``--interleave`` (the second run): one DDP wrapper from the start and the three modes
step by step in turn (``plain`` calls the wrapped module itself, whose backward DDP's hooks then
skip), so that the host's drift falls on all three alike; without it the modes run one after
another (the first run: the drift between them exceeded the effect). The thread CPU time kept
beside the wall time is the calling thread's only: CUDA backward runs on the autograd engine's
own thread.

    python3 validation/experiments/ddp_host_device.py --out ddp-host.json [--interleave] [--tiny]
"""

from __future__ import annotations

import argparse
import statistics
import time

from two_gpus import finish, spawn, start_rank  # this folder's (first on sys.path)

# (name, family, config fields, batch, seq): narrow, so the GPU idles; not the unseen grids'
MODELS = [
    ("llama-w256-l8", "llama", dict(hidden_size=256, intermediate_size=704, num_hidden_layers=8,
                                    num_attention_heads=4, num_key_value_heads=2,
                                    vocab_size=8192), 2, 256),
    ("llama-w256-l24", "llama", dict(hidden_size=256, intermediate_size=704,
                                     num_hidden_layers=24, num_attention_heads=4,
                                     num_key_value_heads=2, vocab_size=8192), 2, 256),
    ("gpt2-w256-l12", "gpt2", dict(n_embd=256, n_layer=12, n_head=4, vocab_size=8192,
                                   n_positions=512), 2, 256),
    ("gpt2-w256-l24", "gpt2", dict(n_embd=256, n_layer=24, n_head=4, vocab_size=8192,
                                   n_positions=512), 2, 256),
]  # fmt: skip
TINY = [("tiny", "llama", dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=2, num_key_value_heads=1, vocab_size=128),
         1, 16)]  # fmt: skip
POLICIES = ("amp", "bf16")


def build(torch, family: str, fields: dict, policy: str):
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig

    if family == "llama":
        cfg = LlamaConfig(**fields, max_position_embeddings=1024, attn_implementation="sdpa")
    else:
        cfg = GPT2Config(**fields, attn_implementation="sdpa")
    dtype = torch.float32 if policy == "amp" else torch.bfloat16
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=dtype).to("cuda").train()
    return cfg, model


def one_step(torch, dist, model, ctx, opt, ids, policy: str) -> tuple[float, float]:
    """(wall, thread-CPU) seconds of one training step of this rank, started after a barrier."""
    torch.cuda.synchronize()
    dist.barrier()
    t0, c0 = time.perf_counter(), time.thread_time()
    with ctx(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=policy == "amp"):
        loss = model(input_ids=ids, labels=ids).loss
    with ctx():
        loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    return time.perf_counter() - t0, time.thread_time() - c0


def time_mode(torch, dist, model, opt, ids, policy: str, steps: int, ctx) -> dict:
    """Per-step wall and thread-CPU seconds of this rank after 3 warm-up steps (DDP's bucket
    rebuild, AdamW's states)."""
    times = [one_step(torch, dist, model, ctx, opt, ids, policy) for _ in range(steps + 3)][3:]
    return {"wall_s": [w for w, _ in times], "thread_cpu_s": [c for _, c in times]}


def interleaved(torch, dist, ddp, ids, policy: str, steps: int) -> dict:
    """``time_mode``'s figures of the three modes taken step by step in turn (their order
    rotating), all on one DDP wrapper and one optimizer."""
    import contextlib

    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4, fused=True)
    modes = {"plain": (ddp.module, contextlib.nullcontext), "no_sync": (ddp, ddp.no_sync),
             "ddp": (ddp, contextlib.nullcontext)}  # fmt: skip
    out = {m: {"wall_s": [], "thread_cpu_s": []} for m in modes}
    names = list(modes)
    for i in range(steps + 3):
        for m in names[i % 3 :] + names[: i % 3]:
            model, ctx = modes[m]
            wall, cpu = one_step(torch, dist, model, ctx, opt, ids, policy)
            if i >= 3:
                out[m]["wall_s"].append(wall)
                out[m]["thread_cpu_s"].append(cpu)
    return out


def report(rank: int, rec: dict) -> None:
    if rank == 0:
        med = {m: statistics.median(v["wall_s"]) * 1e3 for m, v in rec["modes"].items()}
        print(f"{rec['model']} {rec['policy']}: tensors {rec['tensors']}, buckets "
              f"{rec.get('buckets')}: " + ", ".join(f"{m} {t:.2f} ms" for m, t in med.items()),
              flush=True)  # fmt: skip


def worker(rank: int, world: int, port: int, args) -> None:
    import contextlib

    torch, dist = start_rank(rank, world, port)
    from torch.nn.parallel import DistributedDataParallel as DDP

    out = []
    for name, family, fields, b, seq in TINY if args.tiny else MODELS:
        for policy in POLICIES:
            cfg, model = build(torch, family, fields, policy)
            ids = torch.randint(0, cfg.vocab_size, (b, seq), device="cuda")
            rec = {"model": name, "family": family, "policy": policy, "batch": b, "seq": seq,
                   "tensors": sum(1 for p in model.parameters() if p.requires_grad),
                   "params": sum(p.numel() for p in model.parameters()), "modes": {}}  # fmt: skip
            if args.interleave:
                ddp = DDP(model, device_ids=[rank])
                rec["modes"] = interleaved(torch, dist, ddp, ids, policy, args.steps)
                rec["buckets"] = int(ddp._get_ddp_logging_data().get("num_buckets_reduced", -1))
                out.append(rec)
                del ddp, model, ids
                torch.cuda.empty_cache()
                report(rank, rec)
                continue
            opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
            rec["modes"]["plain"] = time_mode(torch, dist, model, opt, ids, policy, args.steps,
                                              contextlib.nullcontext)  # fmt: skip
            ddp = DDP(model, device_ids=[rank])
            opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4, fused=True)
            rec["modes"]["no_sync"] = time_mode(torch, dist, ddp, opt, ids, policy, args.steps,
                                                ddp.no_sync)  # fmt: skip
            rec["modes"]["ddp"] = time_mode(torch, dist, ddp, opt, ids, policy, args.steps,
                                            contextlib.nullcontext)  # fmt: skip
            try:
                rec["buckets"] = int(ddp._get_ddp_logging_data().get("num_buckets_reduced", -1))
                rec["bucket_sizes"] = ddp._get_ddp_logging_data().get("bucket_sizes")
            except Exception as exc:  # a private API: recorded if it moved
                rec["buckets"] = f"unavailable: {exc!r}"[:200]
            out.append(rec)
            del ddp, model, opt, ids
            torch.cuda.empty_cache()
            report(rank, rec)
    meta = {"what": __doc__.splitlines()[0], "script": "validation/experiments/"
            "ddp_host_device.py", "cpu": _cpu_model(), "steps": args.steps,
            "interleave": args.interleave}  # fmt: skip
    finish(torch, dist, rank, world, out, meta, args.out)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        return "unknown"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--interleave", action="store_true")
    args = ap.parse_args()
    spawn(worker, args)


if __name__ == "__main__":
    main()
