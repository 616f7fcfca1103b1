"""Do a VM's vCPUs run at different speeds, for long enough to bias a host profile?

A host profile measured in one process (``gpumodel validate --host-only``) priced the full
Llama-3-8B eager decode step 6-14% under what the steps of another process then took on three
clean runs (validation/results/steps-h100-run11, -run12, steps-h200-run10), where the profile's
proxy, timed in the same process as the 8B step, is within ~4% of it
(validation/results/h100-sxm/host-modes-2026-11-25). Linux keeps a thread on one CPU for long
stretches (every call of that experiment ran on CPU 0), so a lasting speed difference between
vCPUs would follow a process. This pins the main thread to each vCPU in turn and times there a
fixed pure-Python loop and the 8B eager decode step (batch 1, a 512-token DynamicCache cut
back after each call), all vCPUs once per pass, several passes. Only reads; the affinity
change is of this process's own thread.

    python3 validation/experiments/host_cpus_device.py --out cpus.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from host_gap_device import warm_8b_step
from host_modes_device import probe_s


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--passes", type=int, default=4)
    ap.add_argument("--calls", type=int, default=15)
    args = ap.parse_args()
    import torch

    cpus = sorted(os.sched_getaffinity(0))
    step = warm_8b_step(torch, 1, 512)
    rows = []
    for p in range(args.passes):
        for cpu in cpus:
            os.sched_setaffinity(0, {cpu})
            time.sleep(0.01)
            probe = statistics.median(probe_s() for _ in range(20))
            calls = []
            for _ in range(args.calls):
                t0 = time.perf_counter()
                step()
                torch.cuda.synchronize()
                calls.append(time.perf_counter() - t0)
            rows.append({"pass": p, "cpu": cpu, "t": time.perf_counter(), "probe_s": probe,
                         "step_s": statistics.median(calls)})  # fmt: skip
    os.sched_setaffinity(0, set(cpus))
    per_cpu = {}
    for cpu in cpus:
        mine = [r for r in rows if r["cpu"] == cpu]
        per_cpu[cpu] = {
            "step_ms": [round(r["step_s"] * 1e3, 2) for r in mine],
            "probe_ms": [round(r["probe_s"] * 1e3, 3) for r in mine],
        }
        print(cpu, json.dumps(per_cpu[cpu]), flush=True)
    result = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
              "passes": args.passes, "calls": args.calls, "per_cpu": per_cpu, "rows": rows}  # fmt: skip
    with open(args.out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
