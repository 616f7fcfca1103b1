#!/usr/bin/env python3
"""Unseen multi-GPU whole steps (issue #17's runtimes and training, on more than one GPU):
measured, never fitted to. One process a GPU (NCCL), as users run them:

- ``tp-decode``: Llama-3-8B, Llama-3-70B (and Llama-2-7B, run 3) decode at tensor parallel 2 on
  the ``fused-graph`` stand-in (``fused_engine.py`` sharded as vLLM shards Llama:
  column-parallel QKV and gate+up, row-parallel o and down each followed by an NCCL all-reduce,
  vocabulary-parallel embedding and LM head; the whole step, collectives included, in one CUDA
  graph);
- ``ddp-train``: HF training steps (``labels=`` loss, fused AdamW) of GPT-2 small and a
  TinyLlama-1.1B-shaped Llama under ``DistributedDataParallel`` (its defaults: 25 MB buckets,
  gradients reduced while the backward runs), ``amp`` and ``bf16``; the batch is per GPU;
- ``fsdp-train``: the same under FSDP2 (``fully_shard`` on each decoder layer and the model:
  gpumodel's ZeRO-3), ``mixed`` (fp32 shards, bf16 compute, fp32 reduction) and ``bf16``.
- ``tp-eager``: Llama-3-8B ``hf-eager`` decode (DynamicCache) and prefill at tensor parallel 2
  as HF transformers runs it: ``from_pretrained`` with the model's own TP plan (q/k/v and
  gate/up column-parallel, o and down row-parallel) from a checkpoint of random weights that
  GPU 0 writes first; the grids are ``steps_unseen.py``'s Llama parts', so a one-GPU run of those
  parts in the same call (``run_tp_eager_device.sh``) prices the same points.

Every point runs on every GPU in the same order; a step's time is the slowest GPU's (CUDA events
around each step after a barrier), in rounds that cycle over one model's points. Peak memory is
the largest GPU's ``max_memory_allocated``. The host profile (``gpumodel validate --host-only``,
a child process on GPU 0) is measured first, in the same device call. One torch.profiler trace
per part is taken on GPU 0 (the other GPUs run the same steps untraced) after its timed points.

Records use ``steps_unseen.py``'s schema, plus ``gpus``, ``tp`` or ``dp`` (and ``zero`` 3 for
FSDP); the grids are fixed per run (``--grid``) before the run is scored. Measurement code only: nothing here
imports the fitting code (the host profile is gpumodel's own measurement, as a user takes it).

Usage (device, 2+ GPUs):  python validation/unseen/multi_gpu_unseen.py --part tp-decode,ddp-train --out DIR
Smoke test (CPU, gloo):   python validation/unseen/multi_gpu_unseen.py --tiny --part tp-decode,ddp-train --out /tmp/x
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import socket
import sys
import time
import traceback
from pathlib import Path

# NVLink multicast stays off on the lent multi-GPU machines (the device's KINDS.md: a program
# that uses it can take the host's GPUs out of service); set before anything touches CUDA.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1"}  # fmt: skip
os.environ.update(SAFE_ENV)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import steps_unseen as su  # noqa: E402  (this folder's measurement helpers)

PARTS = ("tp-decode", "ddp-train", "fsdp-train", "tp-eager")


def llama3_70b_config(tiny: bool):
    # Meta Llama-3-70B config.json: hidden 8192, 80 layers, 64 heads, 8 kv heads, ffn 28672,
    # vocab 128256, rope theta 500000, rms eps 1e-5, untied embeddings.
    return su._llama(tiny, dict(hidden=8192, ffn=28672, layers=80, heads=64, kv=8, vocab=128256,
                                theta=500000.0), dict(ffn=160, kv=2, vocab=512), 8192)  # fmt: skip


def tp_grids(tiny: bool, grid: int) -> list[tuple[str, object, list[tuple[int, int]]]]:
    """(workload, config, [(batch, context)]) of the tp-decode part, fixed per run."""
    if tiny:
        return [("llama-3-8b", su.llama3_8b_config(True), [(1, 16), (2, 32)]),
                ("llama-3-70b", llama3_70b_config(True), [(2, 16)])]  # fmt: skip
    if grid == 6:  # written 2026-11-30 (twelfth session) before its run, the model unchanged:
        # batches and contexts no earlier grid used, to check the accuracy table's classes
        return [("llama-3-8b", su.llama3_8b_config(False), [(4, 1024), (12, 4096), (40, 2048),
                                                            (2, 6144)]),
                ("llama-3-70b", llama3_70b_config(False), [(8, 4096), (40, 1024), (2, 8192)])]
    if grid == 1:
        small = [(b, c) for c in (512, 2048, 4096) for b in (1, 8, 32, 64)]
        large = [(1, 2048), (8, 2048), (32, 2048), (64, 2048), (1, 8192), (16, 8192)]
    elif grid == 2:  # run 2's, written before run 1 was scored against a DDP model
        small = [(16, 1024), (24, 3072), (48, 1024), (48, 8192), (4, 8192), (96, 2048)]
        large = [(4, 4096), (16, 2048), (24, 4096), (48, 1024), (96, 1024)]
    else:  # run 3's, after the split-KV and DDP changes: Llama-2-7B (16 K/V heads a GPU)
        # around FlashAttention-2's switch at 211 blocks (batch 13.2)
        mha = [(8, 2048), (12, 2048), (14, 2048), (16, 2048), (24, 1024), (4, 4096)]
        return [("llama-2-7b", su.llama2_7b_config(False), mha),
                ("llama-3-70b", llama3_70b_config(False), [(2, 16384), (128, 512)])]  # fmt: skip
    return [("llama-3-8b", su.llama3_8b_config(False), small),
            ("llama-3-70b", llama3_70b_config(False), large)]  # fmt: skip


def ddp_grids(tiny: bool, grid: int) -> list[tuple[str, object, str, tuple[int, ...], int,
                                                 int | None]]:  # fmt: skip
    """(workload, config, policy, batches per GPU, seq, traced batch or None) of the ddp-train
    part, fixed per run. A traced batch outside the timed ones is traced only (not scored)."""
    if tiny:
        return [("gpt2-small", su.gpt2_config(True), "amp", (1, 2), 64, 2),
                ("tinyllama-1.1b", su.tinyllama_config(True), "bf16", (1, 2), 64, None)]  # fmt: skip
    if grid == 1:
        return [("gpt2-small", su.gpt2_config(False), "amp", (4, 8, 16), 1024, 8),
                ("tinyllama-1.1b", su.tinyllama_config(False), "amp", (1, 2, 4), 2048, None),
                ("tinyllama-1.1b", su.tinyllama_config(False), "bf16", (2, 4), 2048, None)]  # fmt: skip
    if grid == 9:  # written 2026-11-30 (fifteenth session) after the slowest-rank host factor
        # and the DDP and FSDP host refits that follow it, before its run: points no earlier
        # grid measured, at the host-bound batches where runs 14 and 15 missed
        return [("gpt2-small", su.gpt2_config(False), "amp", (4,), 1024, None),
                ("gpt2-small", su.gpt2_config(False), "bf16", (3,), 1024, None),
                ("tinyllama-1.1b", su.tinyllama_config(False), "amp", (1,), 1024, None),
                ("tinyllama-1.1b", su.tinyllama_config(False), "bf16", (2,), 1024, None),
                ("qwen3-0.6b", su.qwen3_0_6b_config(False), "bf16", (2,), 1024, None)]  # fmt: skip
    if grid == 8:  # written 2026-11-30 (fourteenth session) after the four-VM training host
        # factor and the FSDP unit host's refit, before its run: points no earlier grid measured
        return [("gpt2-small", su.gpt2_config(False), "amp", (5,), 1024, None),
                ("gpt2-small", su.gpt2_config(False), "bf16", (2,), 1024, None),
                ("tinyllama-1.1b", su.tinyllama_config(False), "amp", (2,), 1024, None),
                ("qwen3-0.6b", su.qwen3_0_6b_config(False), "bf16", (1,), 1024, None)]  # fmt: skip
    if grid == 7:  # written 2026-11-30 (thirteenth session) after DDP's host work and job peak
        # were priced, before its run: host-bound points none of runs 1-12 measured
        return [("gpt2-small", su.gpt2_config(False), "amp", (3,), 1024, None),
                ("gpt2-small", su.gpt2_config(False), "bf16", (1, 5), 1024, None),
                ("tinyllama-1.1b", su.tinyllama_config(False), "bf16", (1,), 1024, None),
                ("qwen3-0.6b", su.qwen3_0_6b_config(False), "amp", (1,), 1024, None)]  # fmt: skip
    if grid == 6:  # written 2026-11-30 before its run (see tp_grids)
        return [("gpt2-small", su.gpt2_config(False), "bf16", (10,), 1024, None),
                ("qwen3-0.6b", su.qwen3_0_6b_config(False), "amp", (3,), 2048, None),
                ("tinyllama-1.1b", su.tinyllama_config(False), "amp", (5,), 2048, None)]  # fmt: skip
    if grid == 4:  # written 2026-11-29 (seventh session) before its run, the model unchanged
        return [("qwen3-0.6b", su.qwen3_0_6b_config(False), "bf16", (2, 6), 2048, None),
                ("gpt2-small", su.gpt2_config(False), "amp", (6, 20), 1024, None),
                ("tinyllama-1.1b", su.tinyllama_config(False), "bf16", (6,), 2048, None)]  # fmt: skip
    if grid == 3:  # after the DDP model: larger steps, another size of model
        return [("tinyllama-1.1b", su.tinyllama_config(False), "amp", (8,), 2048, None),
                ("gpt2-small", su.gpt2_config(False), "bf16", (32,), 512, None),
                ("qwen3-0.6b", su.qwen3_0_6b_config(False), "bf16", (4,), 2048, None),
                ("llama-2-7b", su.llama2_7b_config(False), "bf16", (1, 2), 1024, None)]  # fmt: skip
    # run 2's: measured before a DDP model was written; the trace is of run 1's b4 amp point
    return [("gpt2-small", su.gpt2_config(False), "amp", (2, 12, 24), 1024, None),
            ("gpt2-small", su.gpt2_config(False), "bf16", (8, 16), 1024, None),
            ("tinyllama-1.1b", su.tinyllama_config(False), "amp", (3, 6), 2048, 4),
            ("tinyllama-1.1b", su.tinyllama_config(False), "bf16", (1, 8), 2048, None),
            ("qwen3-0.6b", su.qwen3_0_6b_config(False), "amp", (2, 4), 2048, None)]  # fmt: skip


def tp_eager_grids(tiny: bool, grid: int) -> list[tuple[str, object, list[tuple[int, int]],
                                                      list[tuple[int, int]], tuple[int, int] | None]]:  # fmt: skip
    """(workload, config, decode (batch, context), prefill (batch, seq), the traced decode point
    or None) of the tp-eager part. Grid 1 (runs 1-2): written 2026-12-01 (twenty-first session)
    before run 1, the model unchanged; ``steps_unseen.py``'s Llama decode and prefill grids.
    Grid 2 (run 3): written after the HF tensor-parallel hooks were fitted on run 2 and before
    its run: points no earlier grid measured, and Qwen2.5-7B (28 layers, the same seven sharded
    projections a layer, biased q/k/v). Grid 3 (run 4): Llama-2-7B (32 K/V heads, 16 a rank)
    and Mistral-7B."""
    if tiny:
        qwen = su.qwen2_5_7b_config(True)
        qwen.num_key_value_heads = 2  # one K/V head a rank at tp 2
        return [("llama-3-8b", su.llama3_8b_config(True), [(1, 16), (2, 32)], [(1, 16), (2, 16)],
                 (2, 32))] + ([("qwen2.5-7b", qwen, [(1, 16)], [(1, 16)], (1, 16))]
                              if grid == 2 else [])  # fmt: skip
    if grid == 3:  # written 2026-12-01 after run 3 was scored, before its run, the model
        # unchanged since run 3: two more architectures at points no grid measured, no traces
        return [("llama-2-7b", su.llama2_7b_config(False), [(1, 512), (8, 1024), (16, 2048)],
                 [(1, 256), (2, 1024)], None),
                ("mistral-7b", su.mistral_7b_config(False), [(2, 1024), (12, 2048), (40, 512)],
                 [(1, 1024), (4, 512)], None)]  # fmt: skip
    if grid == 2:
        return [("llama-3-8b", su.llama3_8b_config(False),
                 [(4, 1024), (16, 3072), (48, 1024), (2, 6144), (24, 2048)],
                 [(1, 256), (2, 1024), (1, 3072)], None),
                ("qwen2.5-7b", su.qwen2_5_7b_config(False), [(1, 1024), (8, 2048), (32, 512)],
                 [(1, 512), (2, 2048)], (8, 2048))]  # fmt: skip
    decode = [(b, c) for c in (512, 2048, 4096) for b in (1, 8, 32, 64)]
    prefill = [(1, 128), (1, 512), (1, 1024), (1, 2048), (4, 512), (4, 2048), (8, 2048)]
    return [("llama-3-8b", su.llama3_8b_config(False), decode, prefill, (8, 2048))]


def fsdp_grids(tiny: bool, grid: int) -> list[tuple[str, object, str, tuple[int, ...], int]]:
    """(workload, config, policy, batches per GPU, seq) of the fsdp-train part: ``mixed`` is fp32
    parameters sharded, bf16 compute and fp32 gradient reduction (FSDP2's MixedPrecisionPolicy);
    ``bf16`` all bf16. Grids 1 and 2 (the same points; 2 also traces TinyLlama mixed at batch 2)
    were written before any FSDP step was scored; grid 3 after FSDP's host was fitted to them."""
    if tiny:
        return [("tinyllama-1.1b", su.tinyllama_config(True), "mixed", (1, 2), 64),
                ("tinyllama-1.1b", su.tinyllama_config(True), "bf16", (2,), 64)]  # fmt: skip
    if grid == 9:  # written 2026-11-30 before its run (see ddp_grids)
        return [("gpt2-small", su.gpt2_config(False), "mixed", (3,), 1024),
                ("tinyllama-1.1b", su.tinyllama_config(False), "bf16", (1,), 1024),
                ("qwen3-0.6b", su.qwen3_0_6b_config(False), "mixed", (1,), 1024)]  # fmt: skip
    if grid == 8:  # written 2026-11-30 before its run (see ddp_grids)
        return [("gpt2-small", su.gpt2_config(False), "bf16", (2,), 1024),
                ("tinyllama-1.1b", su.tinyllama_config(False), "mixed", (2,), 1024),
                ("qwen3-0.6b", su.qwen3_0_6b_config(False), "bf16", (1,), 1024),
                ("tinyllama-1.1b", su.tinyllama_config(False), "bf16", (3,), 2048)]  # fmt: skip
    if grid == 6:  # written 2026-11-30 before its run (see tp_grids)
        return [("gpt2-small", su.gpt2_config(False), "bf16", (6,), 1024),
                ("qwen3-0.6b", su.qwen3_0_6b_config(False), "mixed", (3,), 2048),
                ("tinyllama-1.1b", su.tinyllama_config(False), "bf16", (4,), 2048),
                ("llama-2-7b", su.llama2_7b_config(False), "bf16", (1,), 2048)]  # fmt: skip
    if grid == 5:  # written 2026-11-29 (eighth session) after the FSDP2 memory model, before
        # its run: other batches, sequence lengths and policies than runs 4-7 and the experiment
        return [("gpt2-small", su.gpt2_config(False), "mixed", (12,), 1024),
                ("qwen3-0.6b", su.qwen3_0_6b_config(False), "bf16", (4,), 2048),
                ("tinyllama-1.1b", su.tinyllama_config(False), "mixed", (3,), 2048),
                ("llama-2-7b", su.llama2_7b_config(False), "bf16", (1,), 4096)]  # fmt: skip
    if grid == 4:  # written 2026-11-29 (seventh session) before its run, the model unchanged
        return [("gpt2-small", su.gpt2_config(False), "bf16", (4, 16), 1024),
                ("qwen3-0.6b", su.qwen3_0_6b_config(False), "mixed", (2, 6), 2048),
                ("tinyllama-1.1b", su.tinyllama_config(False), "bf16", (1, 6), 2048),
                ("llama-2-7b", su.llama2_7b_config(False), "mixed", (1,), 2048)]  # fmt: skip
    if grid == 3:
        return [("gpt2-small", su.gpt2_config(False), "mixed", (2, 8), 1024),
                ("qwen3-0.6b", su.qwen3_0_6b_config(False), "bf16", (2, 8), 2048),
                ("tinyllama-1.1b", su.tinyllama_config(False), "mixed", (1, 8), 2048),
                ("llama-2-7b", su.llama2_7b_config(False), "mixed", (2,), 1024)]  # fmt: skip
    return [("tinyllama-1.1b", su.tinyllama_config(False), "mixed", (2, 4), 2048),
            ("tinyllama-1.1b", su.tinyllama_config(False), "bf16", (2, 4), 2048),
            ("qwen3-0.6b", su.qwen3_0_6b_config(False), "mixed", (4,), 2048),
            ("llama-2-7b", su.llama2_7b_config(False), "bf16", (1, 2), 1024)]  # fmt: skip


# --------------------------------------------------------------------------- one GPU's worker


class Dist:
    """This process's rank and the collectives the harness itself needs."""

    def __init__(self, env: su.Env, rank: int, world: int):
        import torch
        import torch.distributed as dist

        self.torch, self.dist, self.env = torch, dist, env
        self.rank, self.world = rank, world

    def agree(self, ok: bool) -> bool:
        """True when every rank is ok (a failed setup on one GPU skips the point on all)."""
        t = self.torch.tensor([0 if ok else 1], device=self.env.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MAX)
        return int(t.item()) == 0

    def go_on(self, deadline: float, round_: int) -> bool:
        """Rank 0's call (at least three rounds, then while its deadline holds), for all."""
        flag = [round_ < 3 or time.perf_counter() < deadline]
        self.dist.broadcast_object_list(flag, src=0)
        return bool(flag[0])

    def time_steps(self, step, warm: int, n: int) -> tuple[list[float], float]:
        """``Env.time_steps`` after a barrier, so that no GPU's first step waits for another's
        warm-up."""
        for _ in range(warm):
            step()
        self.env.sync()
        self.dist.barrier()
        return self.env.time_steps(step, 0, n)


def run_rounds(d: Dist, points: list[su.Point], rounds: int, warm: int, steps: int,
               deadline: float) -> None:  # fmt: skip
    for r in range(rounds):
        if not d.go_on(deadline, r):
            su.log(f"time budget reached after {r} rounds")
            break
        for p in points:
            time_point(d, p, r, warm, steps)


def time_point(d: Dist, p: su.Point, r: int, warm: int, steps: int) -> None:
    """One round of ``p`` on every GPU: a fresh setup, warm-up, timed steps."""
    if p.status != "ok":
        return
    state, ok = None, True
    try:
        d.env.fresh_memory()
        state = p.setup()
    except Exception as exc:
        ok = False
        p.status = "oom" if su.is_oom(exc) else "error"
        p.error = f"{type(exc).__name__}: {exc}"[:500]
        su.log(f"{p.label()}: setup {p.status}: {p.error[:200]}")
    if not d.agree(ok):
        if ok:
            p.status, p.error = "error", "another GPU's setup failed"
    else:
        start = time.perf_counter() - su.T0
        times, wall = d.time_steps(lambda s=state, p=p: p.step(s), warm, steps)
        p.add_round(times, wall, start, d.env.peaks())
        if d.rank == 0:
            med = sorted(times)[len(times) // 2]
            su.log(f"round {r + 1} {p.label()}: median {med * 1e3:.2f} ms "
                   f"(wall {wall * 1e3:.2f} ms)")  # fmt: skip
    if p.teardown is not None and state is not None:
        p.teardown(state)
    state = None
    d.env.fresh_memory()


def run_paired(d: Dist, pairs: list[tuple[su.Point, su.Point]], rounds: int, warm: int,
               steps: int, deadline: float) -> None:  # fmt: skip
    """``run_rounds`` over the tensor-parallel points, each followed by its one-GPU twin on GPU 0
    while the other GPUs wait at a barrier: the two are timed seconds apart, so the host's drift
    comes between them little (tp-eager run 1's VM ran its host ~2x slower for tens of seconds at
    a time, and its one-GPU points were timed minutes after the tensor-parallel ones)."""
    for r in range(rounds):
        if not d.go_on(deadline, r):
            su.log(f"time budget reached after {r} rounds")
            break
        for p2, p1 in pairs:
            time_point(d, p2, r, warm, steps)
            if d.rank == 0:
                su.run_round_robin(d.env, [p1], 1, warm, steps, float("inf"))
            d.dist.barrier()


def collective_host_probe(d: Dist, calls: int = 300, repeats: int = 5) -> dict:
    """Host seconds per eager ``dist.all_reduce`` of a decode step's activations (8 x 4096
    bf16) against per ``add_`` on the same tensor, every rank at once, alternated ``repeats``
    times: each loop is timed up to its last launch, before the GPU is waited for."""
    torch, dist = d.torch, d.dist
    x = torch.ones(8, 4096, dtype=torch.bfloat16, device=d.env.device)
    calls_of = {"all_reduce": lambda: dist.all_reduce(x), "add_": lambda: x.add_(1.0)}
    out: dict = {name: [] for name in calls_of}
    for fn in calls_of.values():  # warm-up
        for _ in range(20):
            fn()
    d.env.sync()
    for _ in range(repeats):
        for name, fn in calls_of.items():
            d.dist.barrier()
            d.env.sync()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            out[name].append((time.perf_counter() - t0) / calls)
            d.env.sync()
    med = {k: sorted(v)[len(v) // 2] for k, v in out.items()}
    if d.rank == 0:
        su.log(f"collective host probe: all_reduce {med['all_reduce'] * 1e6:.1f} us, add_ "
               f"{med['add_'] * 1e6:.1f} us a call (x{med['all_reduce'] / med['add_']:.2f})")  # fmt: skip
    return {"tensor": "8 x 4096 bf16", "calls": calls, "per_call_s": out, "median_s": med,
            "ratio": med["all_reduce"] / med["add_"]}  # fmt: skip


def trace_on_rank0(d: Dist, p: su.Point, out_dir: Path, name: str, memory: bool) -> dict | None:
    """``steps_unseen.trace_point`` on GPU 0; the other GPUs run the same steps (a fresh
    setup, one warm-up, five steps) untraced."""
    if p.status != "ok":
        return None
    d.dist.barrier()
    if d.rank == 0:
        info = su.trace_point(d.env, p, out_dir, name, memory)
    else:
        state = p.setup()
        for _ in range(6):
            p.step(state)
        d.env.sync()
        info = None
        if p.teardown is not None:
            p.teardown(state)
        del state
        d.env.fresh_memory()
    d.dist.barrier()
    return info


def part_tp_decode(d: Dist, args, out_dir: Path, out: dict) -> None:
    import torch
    from fused_engine import Engine, dims_of

    for workload, cfg, grid in tp_grids(args.tiny, args.grid):
        t0 = time.perf_counter()
        eng = Engine(torch, dims_of(cfg), d.env.device, tp=d.world, rank=d.rank)
        d.env.sync()
        su.log(f"{workload} tp {d.world}: {eng.params / 1e9:.3f} B params on this GPU, built in "
               f"{time.perf_counter() - t0:.1f} s")  # fmt: skip
        out["models"].setdefault(workload, {"params_per_gpu": eng.params,
                                            "config": cfg.to_dict()})  # fmt: skip
        if workload == "llama-3-8b":  # the sharded engine's logits against plain torch ops
            with torch.no_grad():
                out["fused_check"] = su.fused_check(d.env, eng, (2, 16) if args.tiny else (8, 2048))
        pts = su.fused_decode_points(eng, workload, grid, {"gpus": d.world, "tp": d.world}, {
            "engine": "validation/unseen/fused_engine.py at tp (vLLM's Llama sharding, NCCL "
            "all-reduces in the graph; a stand-in, not vLLM)", "cache": "static, random K/V of "
            "`context` positions, this GPU's kv heads", "graph": "one CUDA graph per point and "
            "GPU, replayed"})  # fmt: skip
        with torch.no_grad():
            run_rounds(d, pts, args.rounds, 2, args.steps, part_deadline(args, out))
            if workload == "llama-3-8b" and args.grid == 1:
                target = (2, 32) if args.tiny else (8, 2048)
                traced = next(p for p in pts if (p.key["batch"], p.key["seq"]) == target)
                info = trace_on_rank0(d, traced, out_dir, f"trace-{workload}-decode-tp{d.world}",
                                      False)  # fmt: skip
                if info:
                    out["traces"].append(info)
        out["records"] += [p.record() for p in pts]
        del eng, pts
        traced = None
        d.env.fresh_memory()


def part_ddp_train(d: Dist, args, out_dir: Path, out: dict) -> None:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    for workload, cfg, policy, batches, seq, trace_b in ddp_grids(args.tiny, args.grid):
        t0 = time.perf_counter()
        dtype = torch.float32 if policy == "amp" else torch.bfloat16
        model = su.build_causal_lm(d.env, cfg, dtype).train()
        n_params = sum(p.numel() for p in model.parameters())
        ddp = DDP(model, device_ids=[d.rank] if d.env.cuda else None)
        su.log(f"{workload} {policy} DDP x{d.world}: {n_params / 1e6:.1f} M params, built in "
               f"{time.perf_counter() - t0:.1f} s")  # fmt: skip
        out["models"].setdefault(workload, {"params": n_params, "config": cfg.to_dict()})
        extra = () if trace_b is None or trace_b in batches else (trace_b,)
        pts = su.train_points(d.env, workload, ddp, cfg, policy, (*batches, *extra), seq)
        traced = next((p for p in pts if p.key["batch"] == trace_b), None)
        pts = [p for p in pts if p.key["batch"] in batches]  # the timed points
        for p in pts + ([traced] if traced is not None and traced not in pts else []):
            p.key.update(gpus=d.world, dp=d.world)
            p.details["ddp"] = ("torch.nn.parallel.DistributedDataParallel, defaults (bucket_cap_mb "
                                "25, gradient_as_bucket_view False), NCCL; batch per GPU")  # fmt: skip
        run_rounds(d, pts, args.rounds, 2, args.steps, part_deadline(args, out))
        if traced is not None:
            info = trace_on_rank0(d, traced, out_dir, f"trace-{workload}-train-{policy}-ddp"
                                  f"{d.world}-b{trace_b}", True)  # fmt: skip
            if info:
                out["traces"].append(info)
        out["records"] += [p.record() for p in pts]
        traced = None
        del model, ddp, pts
        d.env.fresh_memory()


def part_fsdp_train(d: Dist, args, out_dir: Path, out: dict) -> None:
    """HF training under FSDP2 (``fully_shard`` on each decoder layer, then on the model), as
    PyTorch's FSDP2 tutorial applies it; gpumodel's ZeRO-3."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    for workload, cfg, policy, batches, seq in fsdp_grids(args.tiny, args.grid):
        t0 = time.perf_counter()
        dtype = torch.float32 if policy == "mixed" else torch.bfloat16
        model = su.build_causal_lm(d.env, cfg, dtype).train()
        n_params = sum(p.numel() for p in model.parameters())
        layers = max((m for m in model.modules() if isinstance(m, torch.nn.ModuleList)), key=len)
        mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if policy == "mixed" else MixedPrecisionPolicy())  # fmt: skip
        for layer in layers:
            fully_shard(layer, mp_policy=mp)
        fully_shard(model, mp_policy=mp)
        su.log(f"{workload} {policy} FSDP x{d.world}: {n_params / 1e6:.1f} M params, "
               f"{len(layers)} layers sharded, built in {time.perf_counter() - t0:.1f} s")  # fmt: skip
        out["models"].setdefault(workload, {"params": n_params, "config": cfg.to_dict()})
        pts = su.train_points(d.env, workload, model, cfg, policy, batches, seq)
        for p in pts:
            p.key.update(gpus=d.world, dp=d.world, zero=3)
            p.details["fsdp"] = ("torch.distributed.fsdp.fully_shard (FSDP2) on each decoder "
                                 "layer and the model; batch per GPU")  # fmt: skip
            if policy == "mixed":
                p.details["weights"] = ("fp32 sharded; MixedPrecisionPolicy(param_dtype=bf16, "
                                        "reduce_dtype=fp32)")  # fmt: skip
        run_rounds(d, pts, args.rounds, 2, args.steps, part_deadline(args, out))
        if args.grid == 2 and (workload, policy) == ("tinyllama-1.1b", "mixed"):
            info = trace_on_rank0(d, pts[0], out_dir, f"trace-{workload}-train-{policy}-fsdp"
                                  f"{d.world}-b{pts[0].key['batch']}", True)  # fmt: skip
            if info:
                out["traces"].append(info)
        out["records"] += [p.record() for p in pts]
        del model, pts, layers
        d.env.fresh_memory()


def hf_tp_model(d: Dist, cfg, out_dir: Path):
    """Llama with random weights, sharded by HF transformers' own tensor-parallel loading: GPU 0
    writes a checkpoint (``/dev/shm`` where it has room, else ``out_dir``), every rank loads it
    with the model's TP plan (``DistributedConfig(tp_size=...)``; ``tp_plan="auto"`` where that
    config does not exist), the checkpoint is deleted."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    where = [None]
    if d.rank == 0:
        need = 40e9  # Llama-3-8B's 16 GB of bf16 weights, with room
        shm = Path("/dev/shm")
        room = shm.is_dir() and shutil.disk_usage(shm).free > need
        where = [str((shm if room and d.env.cuda else out_dir) / "gpumodel-tp-checkpoint")]
        t0 = time.perf_counter()
        model = su.build_causal_lm(d.env, cfg, torch.bfloat16)
        model.save_pretrained(where[0])
        del model
        d.env.fresh_memory()
        su.log(f"checkpoint of random weights written to {where[0]} in "
               f"{time.perf_counter() - t0:.1f} s")  # fmt: skip
    d.dist.broadcast_object_list(where, src=0)
    # transformers' TP setup reads these even with the process group already up
    os.environ.update(RANK=str(d.rank), LOCAL_RANK=str(d.rank), WORLD_SIZE=str(d.world))
    t0 = time.perf_counter()
    try:
        from transformers import DistributedConfig

        how = {"distributed_config": DistributedConfig(tp_size=d.world)}
    except (ImportError, TypeError):
        how = {"tp_plan": "auto"}
    model = AutoModelForCausalLM.from_pretrained(where[0], dtype=torch.bfloat16, **how).eval()
    d.env.sync()
    d.dist.barrier()
    if d.rank == 0:
        shutil.rmtree(where[0], ignore_errors=True)
    local = sum(p.to_local().numel() if hasattr(p, "to_local") else p.numel()
                for p in model.parameters())  # fmt: skip
    q = model.model.layers[0].self_attn.q_proj.weight
    q_local = tuple((q.to_local() if hasattr(q, "to_local") else q).shape)
    su.log(f"rank {d.rank}: loaded with {sorted(how)} in {time.perf_counter() - t0:.1f} s, "
           f"{local / 1e9:.3f} B params on this GPU, q_proj {q_local}")  # fmt: skip
    return model, {"params_per_gpu": local, "q_proj_local_shape": q_local,
                   "loaded_with": sorted(how), "config": cfg.to_dict()}  # fmt: skip


def part_tp_eager(d: Dist, args, out_dir: Path, out: dict) -> None:
    """``--paired`` (run 2 on): each point's one-GPU twin is timed on GPU 0 right after it
    (``run_paired``), on a model with random weights built there, and the eager collective's
    host cost is probed first (``collective_host_probe``)."""
    import torch
    import transformers

    for workload, cfg, decode, prefill, traced_at in tp_eager_grids(args.tiny, args.grid):
        model, info = hf_tp_model(d, cfg, out_dir)
        info["transformers"] = transformers.__version__
        out["models"][workload] = info
        if args.paired and "collective_host_probe" not in out:
            out["collective_host_probe"] = collective_host_probe(d)
        single = (su.build_causal_lm(d.env, cfg, torch.bfloat16).eval()
                  if args.paired and d.rank == 0 else None)  # fmt: skip
        key = {"gpus": d.world, "tp": d.world}
        how = (f"transformers {transformers.__version__} from_pretrained with the model's TP plan "
               f"({info['loaded_with'][0]}), {d.world} processes, NCCL")  # fmt: skip
        groups = ((su.decode_points_eager(d.env, model, cfg, decode, workload, shards=d.world),
                   2, decode, su.decode_points_eager),
                  (su.prefill_points_eager(d.env, model, cfg, prefill, workload), 1, prefill,
                   su.prefill_points_eager))  # fmt: skip
        for pts, warm, grid, make in groups:
            for p in pts:
                p.key.update(key)
                p.details["tensor_parallel"] = how
            if not args.paired:
                run_rounds(d, pts, args.rounds, warm, args.steps, part_deadline(args, out))
            else:
                twins = (make(d.env, single, cfg, grid, workload) if single is not None
                         else [None] * len(pts))  # fmt: skip
                for t in twins:
                    if t is not None:
                        t.details["paired"] = (f"timed on GPU 0 right after the tp {d.world} "
                                               "point of the same round (run_paired)")  # fmt: skip
                run_paired(d, list(zip(pts, twins)), args.rounds, warm, args.steps,
                           part_deadline(args, out))  # fmt: skip
                out["single_records"] += [t.record() for t in twins if t is not None]
            out["records"] += [p.record() for p in pts]
        traced = next((p for p in groups[0][0] if (p.key["batch"], p.key["seq"]) == traced_at),
                      None)  # fmt: skip
        if traced is not None:
            tag = workload.replace("-", "").replace(".", "") if workload != "llama-3-8b" else "llama3-8b"
            name = f"trace-{tag}-decode-eager-tp{d.world}"
            info = trace_on_rank0(d, traced, out_dir, name, False)
            if info:
                out["traces"].append(info)
            if single is not None:  # its one-GPU twin, traced in the same process just after
                twin = su.decode_points_eager(d.env, single, cfg, [traced_at], workload)[0]
                out["traces"].append(su.trace_point(d.env, twin, out_dir,
                                                    f"trace-{tag}-decode-eager-tp1-twin", False))  # fmt: skip
            d.dist.barrier()
        del model, single, groups, traced
        d.env.fresh_memory()


def part_deadline(args, out: dict) -> float:
    """An even share of what is left of the budget for each of the parts' models still to run."""
    left = su.T0 + args.budget_s - time.perf_counter()
    out["_groups_left"] -= 1
    return time.perf_counter() + left / max(1, out["_groups_left"] + 1) * 0.8


def worker(rank: int, world: int, port: int, args, out_dir: Path) -> None:
    os.environ.update(SAFE_ENV)
    import torch
    import torch.distributed as dist

    env = su.Env(args.tiny)
    if env.cuda:
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if env.cuda else "gloo", rank=rank, world_size=world,
                            init_method=f"tcp://127.0.0.1:{port}",
                            timeout=dt.timedelta(seconds=300))  # fmt: skip
    d = Dist(env, rank, world)
    parts = args.parts
    groups = ((len(tp_grids(args.tiny, args.grid)) if "tp-decode" in parts else 0)
              + (len(ddp_grids(args.tiny, args.grid)) if "ddp-train" in parts else 0)
              + (len(fsdp_grids(args.tiny, args.grid)) if "fsdp-train" in parts else 0)
              + (2 * len(tp_eager_grids(args.tiny, args.grid)) if "tp-eager" in parts else 0))  # fmt: skip
    out: dict = {"rank": rank, "models": {}, "records": [], "traces": [], "single_records": [],
                 "_groups_left": groups}  # fmt: skip
    path = out_dir / f".rank{rank}.json"
    # the training parts first: tp-decode leaves ~1 GiB allocated in the process after its
    # engines and graphs are deleted (992 MiB on both GPUs in run 11), which sat under runs 1-3
    # and 9-11's training peaks (their annotations.json); decode's peaks are not scored
    runs = (("ddp-train", part_ddp_train), ("fsdp-train", part_fsdp_train),
            ("tp-decode", part_tp_decode), ("tp-eager", part_tp_eager))  # fmt: skip
    try:
        for name, part in runs:
            if name in parts:
                held_before_part(d, out, name)
                part(d, args, out_dir, out)
                write_json(path, out)
        held_before_part(d, out, "end")
    except Exception:
        traceback.print_exc()
        raise
    finally:
        write_json(path, out)
        dist.destroy_process_group()


def held_before_part(d: Dist, out: dict, part: str) -> None:
    """The bytes this process's tensors hold as a part starts (``end``: after the last), logged
    and kept: every point's peak sits on them, so anything a part leaves behind shows here
    (added 2026-11-30, thirteenth session, after the DDP and FSDP2 peaks of runs measured after
    ``tp-decode`` sat ~1 GiB above those of runs without it)."""
    d.env.fresh_memory()
    if not d.env.cuda:
        return
    held = int(d.torch.cuda.memory_allocated())
    out.setdefault("held_before_part_bytes", {})[part] = held
    if d.rank == 0:
        su.log(f"held before {part}: {held / 2**20:.1f} MiB")


# --------------------------------------------------------------------------- the parent


def write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str))
    os.replace(tmp, path)


def merge(per_rank: list[dict]) -> list[dict]:
    """One record per point: each round's steps are the slowest GPU's, step by step; peaks the
    largest GPU's; a point failed on any GPU failed."""
    n = min(len(r["records"]) for r in per_rank)
    merged = []
    for i in range(n):
        recs = [r["records"][i] for r in per_rank]
        first = recs[0]
        p = su.Point({k: first[k] for k in ("workload", "runtime", "phase", "policy", "batch",
                                            "seq", "context", "gpus", "tp", "dp", "zero")
                      if k in first},
                     None, None, tokens=first["tokens_per_step"], details=first["details"])  # fmt: skip
        bad = next((r for r in recs if r["status"] != "ok"), None)
        if bad is not None:
            p.status, p.error = bad["status"], bad["error"]
        rounds = [rec.get("steps_s") or [] for rec in recs]
        n_rounds = min(len(r) for r in rounds)
        p.rounds = [[max(ts) for ts in zip(*(r[k] for r in rounds))] for k in range(n_rounds)]
        walls = [rec.get("round_wall_per_step_s") or [] for rec in recs]
        p.walls = [max(ws) for ws in zip(*walls)][:n_rounds]
        p.starts = (first.get("round_started_s") or [])[:n_rounds]
        p.peak_alloc = [max(x) for x in [[r["peak_allocated_bytes"] for r in recs]]
                        if all(v is not None for v in x)]  # fmt: skip
        p.peak_res = [max(x) for x in [[r["peak_reserved_bytes"] for r in recs]]
                      if all(v is not None for v in x)]  # fmt: skip
        p.traced = any(r["traced"] for r in recs)
        rec = p.record()
        rec["per_gpu_step_median_s"] = [(r["step_s"] or {}).get("median") for r in recs]
        rec["per_gpu_peak_allocated_bytes"] = [r["peak_allocated_bytes"] for r in recs]
        merged.append(rec)
    return merged


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", default="tp-decode,ddp-train", help=",".join(PARTS))
    ap.add_argument("--out", required=True)
    ap.add_argument("--tag", default="multi-gpu")
    ap.add_argument("--tiny", action="store_true", help="tiny configs, 2 CPU processes (gloo)")
    ap.add_argument("--grid", type=int, choices=(1, 2, 3, 4, 5, 6, 7, 8, 9), default=1,
                    help="run 1-3's points; 4: the seventh session's DDP and FSDP points (its "
                    "tp-decode points are grid 3's); 5: the eighth session's FSDP points "
                    "(fsdp-train only); 6: the twelfth session's points of all three parts; 7: the "
                    "thirteenth's host-bound DDP points (ddp-train only); 8: the fourteenth's DDP and FSDP "
                    "points; 9: the fifteenth's")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--budget-s", type=float, default=300.0)
    ap.add_argument("--no-host", action="store_true")
    ap.add_argument("--paired", action="store_true",
                    help="tp-eager: time each point's one-GPU twin right after it, on GPU 0")  # fmt: skip
    ap.add_argument("--host-window", type=float, default=30.0)
    args = ap.parse_args()
    args.parts = {p.strip() for p in args.part.split(",") if p.strip()}
    if not args.parts or args.parts - set(PARTS):
        print(f"error: unknown part(s) {sorted(args.parts - set(PARTS))}", file=sys.stderr)
        return 2
    if args.rounds < 3 or args.steps < 5:
        print("error: need --rounds >= 3 and --steps >= 5", file=sys.stderr)
        return 2
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    import torch
    import torch.multiprocessing as mp

    env = su.Env(args.tiny)
    world = 2 if args.tiny else torch.cuda.device_count()
    if world < 2:
        print(f"error: needs 2 or more GPUs, found {world}", file=sys.stderr)
        return 2
    result: dict = {"schema": su.SCHEMA, "tag": args.tag, "parts": sorted(args.parts),
                    "tiny": args.tiny, "gpus": world,
                    "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                    "env": su.env_info(env), "method": {"rounds": args.rounds,
                    "timed_steps_per_round": args.steps, "timer": "CUDA events around each "
                    "step on every GPU after a barrier; a step's time is the slowest GPU's",
                    "processes": f"one a GPU (torch.multiprocessing.spawn), "
                    f"{'gloo' if args.tiny else 'NCCL ' + '.'.join(map(str, torch.cuda.nccl.version()))}",
                    "nccl_env": SAFE_ENV}, "host_profile": None, "models": {}, "records": [],
                    "traces": [], "command": " ".join(sys.argv)}  # fmt: skip
    if not args.no_host:
        path = out_dir / f"host-{args.tag}.yaml"
        prof = su.measure_host(args.tiny, path, args.host_window)
        result["host_profile"] = path.name
        result["env"]["cpu_model"] = prof["cpu_model"]
        result["env"]["cuda_driver"] = prof["cuda_driver"]
        su.log(f"host profile: launch {prof['kernel_launch_s'] * 1e6:.1f} us -> {path.name}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    try:
        mp.spawn(worker, args=(world, port, args, out_dir), nprocs=world, join=True)
    except Exception as exc:  # what the ranks wrote before it still counts
        result["error"] = f"{type(exc).__name__}: {exc}"[:1000]
        su.log(f"workers failed: {result['error'][:300]}")
    finally:
        per_rank = []
        for r in range(world):
            f = out_dir / f".rank{r}.json"
            if f.exists():
                per_rank.append(json.loads(f.read_text()))
                f.unlink()
        if len(per_rank) == world:
            # the one-GPU twins (tp-eager --paired): GPU 0's alone
            result["records"] = merge(per_rank) + per_rank[0].get("single_records", [])
            if per_rank[0].get("collective_host_probe"):
                result["collective_host_probe"] = [r.get("collective_host_probe")
                                                   for r in per_rank]  # fmt: skip
            result["models"] = per_rank[0]["models"]
            result["traces"] = per_rank[0]["traces"]
            result["fused_check"] = [r.get("fused_check") for r in per_rank]
            result["held_before_part_bytes"] = [r.get("held_before_part_bytes")
                                                for r in per_rank]  # fmt: skip
        result["finished_at"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        result["seconds"] = round(time.perf_counter() - su.T0, 1)
        write_json(out_dir / f"steps-{args.tag}.json", result)
        table = su.summary_table(result["records"])
        (out_dir / f"summary-{args.tag}.md").write_text(table)
        print(table, flush=True)
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main())
