"""Where an FSDP2 training step's peak memory falls, and what is alive at it (2 GPUs).

Experiment for the model's FSDP peak (docs/multi-gpu.md: Llama-2-7B ``mixed`` priced 17.7% over,
``bf16`` priced 7-9% under when the gradients are taken as freed between steps). Not the unseen
set: its own configurations, timing nothing; never scored against.

For each (model, policy, batch, seq), on every rank of a 2-GPU ``torch.multiprocessing`` job:
HF causal LM with random weights (``mixed``: fp32 parameters with FSDP2's
``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``; ``bf16``: bf16 parameters, no
policy), ``fully_shard`` on each decoder layer and then on the model, fused AdamW,
``zero_grad(set_to_none=True)``, loss through ``labels=``. Three steps; each phase (forward,
backward, optimizer step, zero_grad) between ``reset_peak_memory_stats`` calls, its peak and
the allocated bytes after it recorded. The third step runs under
``torch.cuda.memory._record_memory_history``: rank 0 replays the allocation trace to find the
step's peak and sums the blocks alive at it by who allocated them (the first Python frame in
FSDP, the optimizer, the loss, the model's modules; none: the autograd engine's C++).

``--wrap ddp`` (2026-11-30, thirteenth session): the same for PyTorch DDP (its defaults:
``gradient_as_bucket_view=False``, 25 MiB buckets) in ``amp`` (fp32 parameters, bf16 autocast)
and ``bf16``, six steps all under the memory history from before the wrap (so DDP's buckets are
in the trace), each step's peak and the blocks alive at it by owner (the innermost Python frame
where none of the above). One point runs twice, the second pausing 1 s after each step
(``DDP_POINTS``' last field: do blocks freed by DDP outlive their step while NCCL's work objects
hold them?).

usage: python3 fsdp_memory_phases_device.py --out FILE.json [--wrap fsdp|ddp] [--tiny]
"""

from __future__ import annotations

import argparse
import functools
import json
import time

from two_gpus import finish, spawn, start_rank  # this folder's (first on sys.path)

# (name, LlamaConfig fields) from the public config.json files
MODELS = {
    "tinyllama-1.1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                           num_attention_heads=32, num_key_value_heads=4, vocab_size=32000),
    "llama-2-7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=32, vocab_size=32000),
    "tiny": dict(hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=500),
}  # fmt: skip
POINTS = [("tinyllama-1.1b", "bf16", 1, 2048), ("tinyllama-1.1b", "mixed", 1, 2048),
          ("tinyllama-1.1b", "bf16", 4, 2048), ("tinyllama-1.1b", "mixed", 4, 2048),
          ("llama-2-7b", "bf16", 1, 2048), ("llama-2-7b", "mixed", 1, 2048),
          ("llama-2-7b", "bf16", 2, 2048)]  # fmt: skip
TINY_POINTS = [("tiny", "bf16", 2, 64), ("tiny", "mixed", 2, 64)]
# DDP's: (model, policy, batch, seq, seconds settled after each step); not the unseen grids'
DDP_POINTS = [("tinyllama-1.1b", "amp", 2, 1024, 0.0), ("tinyllama-1.1b", "amp", 2, 1024, 1.0),
              ("tinyllama-1.1b", "bf16", 2, 1024, 0.0), ("tinyllama-1.1b", "amp", 6, 1024, 0.0),
              ("llama-2-7b", "bf16", 1, 1024, 0.0)]  # fmt: skip
DDP_TINY_POINTS = [("tiny", "amp", 2, 64, 0.0), ("tiny", "bf16", 2, 64, 0.5)]


def owner(frames: list[dict]) -> str:
    """Who allocated a block: the first Python frame of FSDP, the optimizer, the loss or the
    model's modules; the autograd engine when no Python frame is recorded."""
    files = [f.get("filename", "") for f in frames]
    for key, label in (("distributed/fsdp", "fsdp"), ("nn/parallel/distributed", "ddp"),
                       ("torch/optim", "optimizer"),
                       ("loss_utils", "loss"), ("transformers/models", "model forward"),
                       ("torch/nn/functional", "model forward"), ("autograd", "autograd")):  # fmt: skip
        hit = next((i for i, f in enumerate(files) if key in f), None)
        if hit is not None:
            if label in ("fsdp", "ddp"):  # the FSDP or DDP function that allocated
                return f"{label}:{frames[hit].get('name', '?')}"
            return label
    if not frames:
        return "no python frame (autograd engine)"
    return f"other:{frames[0].get('name', '?')}@{files[0][-40:]}:{frames[0].get('line', '?')}"


def replay_peak(
    snapshot: dict, device: int, base_bytes: int, bounds: list[int] | None = None
) -> dict | list[dict]:
    """The trace's peak: bytes alive at it (``base_bytes`` allocated before recording started),
    the blocks allocated during the trace still alive there, summed by owner. With ``bounds``
    (event counts at the ends of steps), one such dict per step, the step's own peak."""
    events = snapshot["device_traces"][device]
    if bounds is not None:
        return replay_ranges(events, base_bytes, bounds)
    # a block's memory returns to the pool when its free completes (after the streams that used
    # it); traces without completions free at the request
    free = ("free_completed" if any(e["action"] == "free_completed" for e in events)
            else "free_requested")  # fmt: skip
    live: dict[int, tuple[int, str]] = {}
    now = peak = base_bytes
    peak_live: dict[int, tuple[int, str]] = {}
    for e in events:
        if e["action"] == "alloc":
            live[e["addr"]] = (e["size"], owner(e.get("frames", [])))
            now += e["size"]
            if now > peak:
                peak, peak_live = now, dict(live)
        elif e["action"] == free:  # a block from before the trace: its size is in the event
            now -= live.pop(e["addr"])[0] if e["addr"] in live else e["size"]
    by: dict[str, int] = {}
    for size, who in peak_live.values():
        by[who] = by.get(who, 0) + size
    return {"peak_bytes": peak, "before_trace_bytes": base_bytes,
            "alive_at_peak_by_owner": dict(sorted(by.items(), key=lambda kv: -kv[1]))}  # fmt: skip


def replay_ranges(events: list[dict], base_bytes: int, bounds: list[int]) -> list[dict]:
    """``replay_peak`` over consecutive ranges of one trace: each range's peak and its owners."""
    free = ("free_completed" if any(e["action"] == "free_completed" for e in events)
            else "free_requested")  # fmt: skip
    live: dict[int, tuple[int, str]] = {}
    now, out, start = base_bytes, [], 0
    for end in bounds:
        peak, peak_live = now, dict(live)
        for e in events[start:end]:
            if e["action"] == "alloc":
                live[e["addr"]] = (e["size"], owner(e.get("frames", [])))
                now += e["size"]
                if now > peak:
                    peak, peak_live = now, dict(live)
            elif e["action"] == free:
                now -= live.pop(e["addr"])[0] if e["addr"] in live else e["size"]
        by: dict[str, int] = {}
        for size, who in peak_live.values():
            by[who] = by.get(who, 0) + size
        out.append({"peak_bytes": peak, "after_bytes": now, "alive_at_peak_by_owner":
                    dict(sorted(by.items(), key=lambda kv: -kv[1])[:14])})  # fmt: skip
        start = end
    return out


def build_model(torch, name: str, dtype):
    """The HF Llama of ``MODELS[name]`` with random weights, on this GPU, in ``dtype``."""
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = LlamaConfig(**MODELS[name], max_position_embeddings=4096, attn_implementation="sdpa",
                      tie_word_embeddings=False)  # fmt: skip
    torch.manual_seed(0)
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(cfg, dtype=dtype).train()
    torch.set_default_dtype(old)
    return cfg, model


def ddp_point(torch, rank: int, name: str, policy: str, b: int, seq: int, settle_s: float) -> dict:
    """Six DDP training steps under the memory history from before the wrap: each step's
    peak, the allocated bytes after it and (rank 0) the blocks alive at its peak by owner."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    cuda = torch.cuda
    cfg, model = build_model(torch, name, torch.float32 if policy == "amp" else torch.bfloat16)
    n_params = sum(p.numel() for p in model.parameters())
    cuda.synchronize()
    base = cuda.memory_allocated()
    cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
    ddp = DDP(model, device_ids=[rank])
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4, fused=True)
    ids = torch.randint(0, cfg.vocab_size, (b, seq), device="cuda")
    cuda.synchronize()
    after_wrap = cuda.memory_allocated()
    bounds, steps = [], []
    for _ in range(6):
        cuda.reset_peak_memory_stats()
        start = cuda.memory_allocated()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=policy == "amp"):
            loss = ddp(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del loss
        cuda.synchronize()
        if settle_s:
            time.sleep(settle_s)
        steps.append({"start_bytes": start, "peak_bytes": cuda.max_memory_allocated(),
                      "allocated_after_bytes": cuda.memory_allocated()})  # fmt: skip
        if rank == 0:  # the trace's length at the step's end
            bounds.append(len(cuda.memory._snapshot()["device_traces"][cuda.current_device()]))
    snap = cuda.memory._snapshot() if rank == 0 else None
    cuda.memory._record_memory_history(enabled=None)
    out = {"wrap": "ddp", "model": name, "policy": policy, "batch": b, "seq": seq,
           "settle_s": settle_s, "params": n_params, "before_wrap_bytes": base,
           "after_wrap_bytes": after_wrap, "steps": steps}  # fmt: skip
    if snap is not None:
        out["trace_steps"] = replay_peak(snap, cuda.current_device(), base, bounds)
    del ddp, model, opt, ids, snap
    import gc

    gc.collect()
    cuda.empty_cache()
    return out


def one_point(torch, rank: int, name: str, policy: str, b: int, seq: int) -> dict:
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    cfg, model = build_model(torch, name, torch.float32 if policy == "mixed" else torch.bfloat16)
    n_params = sum(p.numel() for p in model.parameters())
    layers = model.model.layers
    layer_params = sum(p.numel() for p in layers[0].parameters())
    mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
          if policy == "mixed" else MixedPrecisionPolicy())  # fmt: skip
    for layer in layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    zero_grad = functools.partial(opt.zero_grad, set_to_none=True)
    ids = torch.randint(0, cfg.vocab_size, (b, seq), device="cuda")
    cuda = torch.cuda
    steps = []
    snap = None
    for step in range(3):
        phases = {}
        if step == 2:
            base = cuda.memory_allocated()
            cuda.memory._record_memory_history(max_entries=400000, stacks="python")
        cuda.synchronize()
        cuda.reset_peak_memory_stats()
        start = cuda.memory_allocated()
        loss = model(input_ids=ids, labels=ids).loss
        for phase, fn in (("forward", None), ("backward", loss.backward), ("step", opt.step),
                          ("zero_grad", zero_grad)):  # fmt: skip
            if fn is not None:
                cuda.reset_peak_memory_stats()
                fn()
            cuda.synchronize()
            phases[phase] = {"peak_bytes": cuda.max_memory_allocated(),
                             "allocated_after_bytes": cuda.memory_allocated()}  # fmt: skip
        del loss
        if step == 2:
            snap = cuda.memory._snapshot()
            cuda.memory._record_memory_history(enabled=None)
        steps.append({"start_bytes": start, "phases": phases})
    out = {"model": name, "policy": policy, "batch": b, "seq": seq, "params": n_params,
           "layer_params": layer_params, "layers": len(layers),
           "root_params": n_params - layer_params * len(layers), "steps": steps}  # fmt: skip
    if rank == 0 and snap is not None:
        out["trace_peak"] = replay_peak(snap, torch.cuda.current_device(), base)
    del model, opt, zero_grad, ids, snap
    import gc

    gc.collect()
    cuda.empty_cache()
    return out


def worker(rank: int, world: int, port: int, args) -> None:
    torch, dist = start_rank(rank, world, port)
    results = []
    if args.wrap == "ddp":
        points = DDP_TINY_POINTS if args.tiny else DDP_POINTS
    else:
        points = [(*p, 0.0) for p in (TINY_POINTS if args.tiny else POINTS)]
    for name, policy, b, seq, settle_s in points:
        t0 = time.perf_counter()
        try:
            if args.wrap == "ddp":
                r = ddp_point(torch, rank, name, policy, b, seq, settle_s)
            else:
                r = one_point(torch, rank, name, policy, b, seq)
            r["seconds"] = time.perf_counter() - t0
        except Exception as e:  # recorded; the next point runs
            r = {"model": name, "policy": policy, "batch": b, "seq": seq, "error": repr(e)[:300]}
            torch.cuda.empty_cache()
        r["rank"] = rank
        results.append(r)
        if rank == 0:
            print(
                json.dumps({k: v for k, v in r.items() if k not in ("steps",)})[:1500], flush=True
            )
        dist.barrier()
    meta = {"what": __doc__.splitlines()[0], "script": "validation/experiments/"
            "fsdp_memory_phases_device.py", "wrap": args.wrap}  # fmt: skip
    finish(torch, dist, rank, world, results, meta, args.out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--wrap", choices=("fsdp", "ddp"), default="fsdp")
    args = ap.parse_args()
    spawn(worker, args)


if __name__ == "__main__":
    main()
