"""The host cost of one eager ``torch.distributed`` collective call, on one GPU.

``validate --collectives`` fits its small-message floor to back-to-back eager calls (38 us on
2 x H200, 44 us on 4), where NCCL's own cost model says 7.8 us for the 2-GPU ring; the model
takes that floor for a Python call each and prices collectives replayed from a CUDA graph at
NCCL's latency instead (docs/multi-gpu.md). One GPU can time the call's host side: a one-rank
NCCL group's ``all_reduce`` of 1 KiB issued back to back from Python (wall time per call, and
CUDA-event time per call), the same calls captured into a CUDA graph and replayed, and a plain
``x.add_(1)`` loop (an eager kernel launch) beside them. With one rank NCCL does nothing, so the
graph captures no kernel and its row is empty (run of 2026-11-29:
validation/results/h200-sxm/dist-call-host-2026-11-29); only the eager rows are results.

    python validation/experiments/dist_call_host_device.py --out dist-call-host.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import time

from llm_device import capture  # this folder (the script's own, first on sys.path)

from gpumodel.validate.families.collectives import SAFE_ENV

CALLS = 2000
GRAPH_CALLS = 200


def per_call(torch, fn, calls: int) -> tuple[float, float]:
    """(wall seconds, CUDA-event seconds) per call of ``calls`` back-to-back ``fn()``."""
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    start.record()
    for _ in range(calls):
        fn()
    stop.record()
    wall = time.perf_counter() - t0
    stop.synchronize()
    return wall / calls, start.elapsed_time(stop) / 1e3 / calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="dist-call-host.json")
    args = ap.parse_args()
    os.environ.update(SAFE_ENV)
    import torch
    import torch.distributed as dist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    buf = torch.ones(512, dtype=torch.bfloat16, device="cuda")  # 1 KiB
    x = torch.zeros(1, device="cuda")

    def reduce() -> None:
        dist.all_reduce(buf)

    def add() -> None:
        x.add_(1)

    def graph_body() -> None:
        for _ in range(GRAPH_CALLS):
            reduce()

    rows: dict[str, list[list[float]]] = {"all_reduce eager": [], "add_ eager": [],
                                          "all_reduce graph": []}  # fmt: skip
    for fn in (reduce, add):
        per_call(torch, fn, 200)  # warm-up
    graph = capture(torch, graph_body)
    for _ in range(5):  # interleaved repeats
        rows["all_reduce eager"].append(list(per_call(torch, reduce, CALLS)))
        rows["add_ eager"].append(list(per_call(torch, add, CALLS)))
        wall, gpu = per_call(torch, graph.replay, 10)
        rows["all_reduce graph"].append([wall / GRAPH_CALLS, gpu / GRAPH_CALLS])
    summary = {
        k: {"wall_per_call_s": statistics.median(r[0] for r in v),
            "gpu_per_call_s": statistics.median(r[1] for r in v)}
        for k, v in rows.items()
    }  # fmt: skip
    out = {"torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version())),
           "gpu": torch.cuda.get_device_name(0), "calls": CALLS, "graph_calls": GRAPH_CALLS,
           "summary": summary, "repeats": rows}  # fmt: skip
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(summary, indent=1))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
