"""What makes the same eager decode step take 20 ms one second and 35 ms the next?

On the H100 and H200 VMs the full Llama-3-8B eager decode step (host-bound) switches between
two speeds, ~1.6-1.8x apart, for seconds at a time (validation/results/steps-h200-run10: 19.8
and 37.7 ms for the same point in neighbouring rounds). This times that step call by call and
records, for each call, what could explain a slow one:

    wall_s       perf_counter around forward + synchronize
    thread_cpu_s CPU time of the calling thread over the call (descheduled time is not in it)
    cpu          the CPU the thread ran on after the call (/proc/thread-self/stat field 39)
    nivcsw       involuntary context switches of the thread during the call
    steal        the machine's steal jiffies during the call (/proc/stat)
    probe_s      a fixed pure-Python loop timed right after the call (the CPU's own speed)
    gpu_s        CUDA-event time of the call (to show it is host-bound)

in phases: as users run it; the main thread pinned to one CPU; torch.set_num_threads(1); and
as users run it again. Other processes' CPU use over the run is read from /proc. Only reads;
changes nothing outside this process.

    python3 validation/experiments/host_modes_device.py --out modes.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from host_gap_device import warm_8b_step


def thread_cpu() -> int:
    with open("/proc/thread-self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])  # field 39: processor


def steal_jiffies() -> int:
    with open("/proc/stat") as f:
        return int(f.readline().split()[8])


def probe_s() -> float:
    t0 = time.perf_counter()
    x = 0
    for i in range(20000):
        x += i * i
    return time.perf_counter() - t0


def proc_cpu_ticks() -> dict[str, int]:
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                s = f.read()
        except OSError:
            continue
        name = s[s.index("(") + 1 : s.rindex(")")]
        rest = s.rsplit(")", 1)[1].split()
        out[f"{pid}:{name}"] = int(rest[11]) + int(rest[12])  # utime + stime
    return out


def run_phase(torch, step, calls: int) -> list[dict]:
    rows = []
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)
    for _ in range(calls):
        ru0 = resource.getrusage(resource.RUSAGE_THREAD)
        st0 = steal_jiffies()
        c0 = time.thread_time()
        t0 = time.perf_counter()
        a.record()
        step()
        b.record()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        c1 = time.thread_time()
        ru1 = resource.getrusage(resource.RUSAGE_THREAD)
        rows.append(
            {
                "t": t0,
                "wall_s": t1 - t0,
                "thread_cpu_s": c1 - c0,
                "cpu": thread_cpu(),
                "nivcsw": ru1.ru_nivcsw - ru0.ru_nivcsw,
                "steal": steal_jiffies() - st0,
                "gpu_s": a.elapsed_time(b) / 1e3,
                "probe_s": probe_s(),
            }
        )
    return rows


def summary(rows: list[dict]) -> dict:
    wall = sorted(r["wall_s"] for r in rows)
    fast = wall[len(wall) // 10]
    slow = [r for r in rows if r["wall_s"] > 1.3 * fast]
    quick = [r for r in rows if r["wall_s"] <= 1.3 * fast]

    def mean(rs, k):
        return statistics.fmean(r[k] for r in rs) if rs else None

    moves = sum(1 for x, y in itertools.pairwise(rows) if x["cpu"] != y["cpu"])
    return {
        "calls": len(rows),
        "wall_ms_p10_median_p90": [
            round(wall[len(wall) // 10] * 1e3, 3),
            round(statistics.median(wall) * 1e3, 3),
            round(wall[9 * len(wall) // 10] * 1e3, 3),
        ],
        "slow_share": round(len(slow) / len(rows), 3),
        "cpu_moves": moves,
        "cpus_used": sorted({r["cpu"] for r in rows}),
        **{
            f"{lab}_{k}": (round(v * 1e3, 3) if v is not None and k.endswith("_s") else v)
            for lab, rs in (("fast", quick), ("slow", slow))
            for k in ("wall_s", "thread_cpu_s", "probe_s", "gpu_s", "nivcsw", "steal")
            for v in [mean(rs, k)]
        },
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--calls", type=int, default=500)
    args = ap.parse_args()
    import torch

    step = warm_8b_step(torch, 1, 512)
    all_cpus = os.sched_getaffinity(0)
    threads0 = torch.get_num_threads()
    before = proc_cpu_ticks()
    t_start = time.time()
    phases: dict[str, list[dict]] = {}
    phases["as run 1"] = run_phase(torch, step, args.calls)
    here = thread_cpu()
    os.sched_setaffinity(0, {here})
    phases[f"main thread pinned to cpu {here}"] = run_phase(torch, step, args.calls)
    os.sched_setaffinity(0, all_cpus)
    phases["as run 2"] = run_phase(torch, step, args.calls)
    torch.set_num_threads(1)
    phases["torch.set_num_threads(1)"] = run_phase(torch, step, args.calls)
    torch.set_num_threads(threads0)
    phases["as run 3"] = run_phase(torch, step, args.calls)
    after = proc_cpu_ticks()
    busy = sorted(((after[k] - before.get(k, 0), k) for k in after), reverse=True)[:12]
    hz = os.sysconf("SC_CLK_TCK")
    result = {
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(),
        "cpus": len(all_cpus),
        "torch_threads": threads0,
        "seconds": round(time.time() - t_start, 1),
        "busiest_processes_cpu_s": {k: round(v / hz, 2) for v, k in busy},
        "summary": {k: summary(v) for k, v in phases.items()},
        "rows": {
            k: [
                {kk: (round(vv, 6) if isinstance(vv, float) else vv) for kk, vv in r.items()}
                for r in v
            ]
            for k, v in phases.items()
        },
    }
    for k, s in result["summary"].items():
        print(k, json.dumps(s), flush=True)
    print("busiest", json.dumps(result["busiest_processes_cpu_s"]))
    with open(args.out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
