"""Does a host-bound eager training step run slower when other processes step beside it?

On two 2 x H200 VMs (``ddp_gpu_device.py``, ``ddp_host_device.py --interleave``) the step of a
rank without DDP (each of two processes stepping its own copy of the model, the GPU idle for
most of it) took 1.3-1.6x the time the model prices from the host profile, which
``gpumodel validate`` measures in one process. This separates the causes: the same narrow HF
models (``ddp_host_device.MODELS``' first and third; not an unseen configuration) stepped by

    solo        one process, nothing else running
    procs-N     N processes at once (N = 2, 4, 8; process i on GPU i mod 2), no process group,
                each step started together (a multiprocessing barrier)
    nccl-2      2 processes with an NCCL process group up (as a DDP job has), stepping their
                own models, each step after ``dist.barrier()``

in rounds (every variant once a round, the order rotating), so that the host's drift falls on
all alike. Per process and step: wall time around forward + backward + fused AdamW + zero_grad
+ synchronize, after 3 warm-up steps.

``--wide`` (the second run): two of ``ddp_gpu_device.py``'s wider models at the batch whose
plain two-process step it found 30-38% slower than priced (GPT-2-shaped 896 x 12 at batch 2,
Llama-shaped 1536 x 12 at batch 1, 1,024 tokens), ``solo``, ``nccl-2`` and ``ddp-2`` (the same
two processes under DDP): whether a wider model's step alone matches the model on the VM of
the call.

    python3 validation/experiments/host_ranks_device.py --out host-ranks.json [--rounds 3] [--wide]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from ddp_gpu_device import MODELS as WIDE_MODELS  # this folder's
from ddp_host_device import MODELS, _cpu_model, build

CASES = [MODELS[0], MODELS[2]]  # llama-w256-l8, gpt2-w256-l12, batch 2 x 256
VARIANTS = ("solo", "procs-2", "nccl-2", "procs-4", "procs-8")
# --wide: two of ddp_gpu_device.py's models at a batch where their steps are host-bound there
WIDE_CASES = [(name, family, fields, batches[0], seq)
              for name, family, fields, batches, seq in WIDE_MODELS
              if name in ("gpt2-w896-l12", "llama-w1536-l12")]  # fmt: skip
WIDE_VARIANTS = ("solo", "nccl-2", "ddp-2")
POLICY = "amp"


def run_case(torch, case, steps: int, sync, wrap=None) -> list[float]:
    _name, family, fields, b, seq = case
    cfg, model = build(torch, family, fields, POLICY)
    model = wrap(model) if wrap is not None else model
    ids = torch.randint(0, cfg.vocab_size, (b, seq), device="cuda")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    times = []
    for i in range(steps + 3):
        torch.cuda.synchronize()
        sync()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if i >= 3:
            times.append(time.perf_counter() - t0)
    del model, opt, ids
    torch.cuda.empty_cache()
    return times


def proc(rank: int, world: int, variant: str, steps: int, barrier, queue, port: int,
         wide: bool) -> None:  # fmt: skip
    import torch

    gpu = rank % torch.cuda.device_count()
    torch.cuda.set_device(gpu)
    sync, wrap, grouped = barrier.wait, None, variant.startswith(("nccl", "ddp"))
    if grouped:
        from two_gpus import start_rank

        _, dist = start_rank(rank, world, port)
        sync = dist.barrier
    if variant.startswith("ddp"):
        from torch.nn.parallel import DistributedDataParallel

        def wrap(m):
            return DistributedDataParallel(m, device_ids=[rank])

    out = {c[0]: run_case(torch, c, steps, sync, wrap) for c in (WIDE_CASES if wide else CASES)}
    queue.put((rank, out))
    if grouped:
        dist.destroy_process_group()


def run_variant(variant: str, steps: int, wide: bool = False) -> dict:
    import socket

    import torch.multiprocessing as mp

    world = 1 if variant == "solo" else int(variant.split("-")[1])
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(world), ctx.Queue()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [ctx.Process(target=proc, args=(r, world, variant, steps, barrier, queue, port, wide))
             for r in range(world)]  # fmt: skip
    for p in procs:
        p.start()
    got = dict(queue.get(timeout=600) for _ in procs)
    for p in procs:
        p.join()
    rec = {"variant": variant, "processes": world, "cases": {}}
    for name in got[0]:
        per = [got[r][name] for r in range(world)]
        rec["cases"][name] = {
            "per_process_s": per,
            "median_of_process_medians_s": statistics.median(statistics.median(t) for t in per),
            "median_slowest_s": statistics.median(max(s) for s in zip(*per)),
        }  # fmt: skip
    return rec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--wide", action="store_true",
                    help="ddp_gpu_device.py's GPT-2 896 x 12 (b2) and Llama 1536 x 12 (b1) at "
                    "1,024 tokens, alone, as 2 processes and under DDP")  # fmt: skip
    args = ap.parse_args()
    variants = WIDE_VARIANTS if args.wide else VARIANTS
    from gpumodel.validate.families.collectives import SAFE_ENV

    os.environ.update(SAFE_ENV)
    records = []
    for r in range(args.rounds):
        order = variants[r % len(variants):] + variants[: r % len(variants)]
        for v in order:
            rec = run_variant(v, args.steps, args.wide)
            rec["round"] = r
            records.append(rec)
            print(v, r, {k: round(c["median_of_process_medians_s"] * 1e3, 2)
                         for k, c in rec["cases"].items()}, flush=True)  # fmt: skip
    import torch
    import transformers

    doc = {"what": __doc__.splitlines()[0], "script": "validation/experiments/host_ranks_device.py",
           "cpu": _cpu_model(), "cpus": os.cpu_count(), "torch": torch.__version__,
           "transformers": transformers.__version__, "gpu": torch.cuda.get_device_name(0),
           "steps": args.steps, "policy": POLICY, "wide": args.wide,
           "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "records": records}  # fmt: skip
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
