"""Does what ran earlier in a process change the host cost of an eager HF decode step?

The unseen steps script measures the host profile (which runs torch.profiler, torch.compile
and cuDNN attention graph builds) in the same process before its workloads, and there the full
Llama-3-8B eager decode step took 26-28 ms on a steady H200 VM; the same step in a fresh
process (host_gap_device.py) took 20-22 ms. This times that step (full 32-layer 8B width,
batch 8, a 2048-token DynamicCache cut back after each call; host perf_counter and CUDA events per call),
in one process: fresh, then after each suspect in turn. Only reads.

    python3 validation/experiments/process_state_device.py --out state.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from host_gap_device import sample, warm_8b_step


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    import torch

    # the cache cut back after each call: the same KV length every call (a growing one would
    # pay a cuDNN graph build per call)
    step = warm_8b_step(torch, 8, 2048, warm=3)
    results: dict[str, list[float]] = {}

    def measure(label: str) -> None:
        host = []
        for _ in range(args.rounds):
            h, _g = sample(torch, step, args.calls)
            host.append(h)
        results[label] = host
        print(f"{label:40s} host {statistics.median(host) * 1e3:7.2f} ms "
              f"[{min(host) * 1e3:.2f}-{max(host) * 1e3:.2f}]", flush=True)  # fmt: skip

    measure("fresh process")
    measure("fresh process, again")
    # 1) torch.profiler as the host profile runs it (CPU + CUDA, record_shapes)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True):
        step()
    torch.cuda.synchronize()
    measure("after one torch.profiler session")
    # 2) torch.compile reduce-overhead of a small module, called a few times
    lin = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.SiLU(),
                              torch.nn.Linear(256, 256)).cuda().to(torch.bfloat16)  # fmt: skip
    fn = torch.compile(lin, mode="reduce-overhead")
    x = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        fn(x)
    torch.cuda.synchronize()
    measure("after torch.compile(reduce-overhead)")
    # 3) the whole host profile, in process
    from gpumodel.validate.host import measure_host_profile

    t0 = time.perf_counter()
    measure_host_profile()
    print(f"host profile in process: {time.perf_counter() - t0:.1f} s", flush=True)
    measure("after gpumodel's host profile")
    with open(args.out, "w") as f:
        json.dump({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
                   "calls": args.calls, "rounds": args.rounds, "host_s": results}, f, indent=1)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
