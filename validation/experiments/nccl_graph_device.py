"""A collective's time called eagerly from Python against replayed from a CUDA graph.

``gpumodel validate --collectives`` times back-to-back eager ``torch.distributed`` calls; their
small-message floor (38 us on 2 x H200, 44 us on 4) is a Python call each, and the model prices
a collective inside a graph runtime's step at NCCL's own latency instead (``in_graph=True``:
docs/multi-gpu.md). This measures what that assumes: per size, the same all-reduce (and
all-gather, reduce-scatter) ``CALLS`` times back to back eagerly, and captured ``CALLS`` times
into one CUDA graph and replayed, both between CUDA events, the slowest rank counting; beside
each, the model's ``in_graph`` and eager predictions (the calibration found for this machine,
if any).

Run on 2 x H200 on 2026-11-29 (validation/results/h200-sxm-x2/nccl-graph-2026-11-29; its model
columns are the datasheet's: the results folder was parked for the call, so no calibration was
found; docs/multi-gpu.md compares the calibrated prices). Run on a multi-GPU machine (NVLink
multicast off, as the harness sets it):
``python validation/experiments/nccl_graph_device.py --out nccl-graph.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket

from llm_device import capture  # this folder (the script's own, first on sys.path)

from gpumodel.validate.families.collectives import SAFE_ENV

SIZES = tuple(1 << k for k in range(10, 27, 2))  # 1 KiB .. 64 MiB
CALLS = 50
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


def _worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(SAFE_ENV)
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)  # fmt: skip
    dev = torch.device("cuda", rank)
    rows = []
    for collective in COLLECTIVES:
        for size in SIZES:
            n = size // 2  # bf16 elements of the nccl-tests size
            if collective == "all_reduce":
                buf = torch.ones(n, dtype=torch.bfloat16, device=dev)

                def call(buf=buf) -> None:
                    dist.all_reduce(buf)
            elif collective == "all_gather":
                inp = torch.ones(n // world, dtype=torch.bfloat16, device=dev)
                outp = torch.empty(n, dtype=torch.bfloat16, device=dev)

                def call(inp=inp, outp=outp) -> None:
                    dist.all_gather_into_tensor(outp, inp)
            else:
                inp = torch.ones(n, dtype=torch.bfloat16, device=dev)
                outp = torch.empty(n // world, dtype=torch.bfloat16, device=dev)

                def call(inp=inp, outp=outp) -> None:
                    dist.reduce_scatter_tensor(outp, inp)

            def timed(run) -> float:
                start = torch.cuda.Event(enable_timing=True)
                stop = torch.cuda.Event(enable_timing=True)
                dist.barrier()
                torch.cuda.synchronize()
                start.record()
                run()
                stop.record()
                stop.synchronize()
                t = torch.tensor([start.elapsed_time(stop) / 1e3 / CALLS], device=dev)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                return float(t.item())

            def eager() -> None:
                for _ in range(CALLS):
                    call()

            graph = capture(torch, eager)  # CALLS calls in one graph
            eager()
            graph.replay()
            e = sorted(timed(eager) for _ in range(3))[1]
            g = sorted(timed(graph.replay) for _ in range(3))[1]
            rows.append({"collective": collective, "bytes": size, "gpus": world,
                         "eager_s": e, "graph_s": g})  # fmt: skip
            del graph
    if rank == 0:
        with open(out, "w") as f:
            json.dump(rows, f)
    dist.destroy_process_group()


def predicted(row: dict, gpu: str) -> dict:
    import gpumodel as gm
    from gpumodel.ops.collectives import collective_op

    op = collective_op(row["collective"], bytes=row["bytes"], gpus=row["gpus"])
    graph = op.model_copy(update={"in_graph": True})
    return {"model_eager_s": gm.predict(op, gpu).time_s,
            "model_graph_s": gm.predict(graph, gpu).time_s}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="nccl-graph.json")
    ap.add_argument("--gpu", default="h200", help="spec id for the model's predictions")
    args = ap.parse_args()
    os.environ.update(SAFE_ENV)
    import torch
    import torch.multiprocessing as mp

    world = torch.cuda.device_count()
    if world < 2:
        raise SystemExit("error: needs 2 or more GPUs")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    raw = args.out + ".raw"
    mp.spawn(_worker, args=(world, port, raw), nprocs=world, join=True)
    with open(raw) as f:
        rows = [{**r, **predicted(r, args.gpu)} for r in json.load(f)]
    with open(args.out, "w") as f:
        json.dump({"gpus": world, "torch": torch.__version__, "rows": rows}, f, indent=1)
    for r in rows:
        print(json.dumps(r))


if __name__ == "__main__":
    main()
