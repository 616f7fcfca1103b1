"""What SM clock do issue-bound and memory-bound kernels run at?

gpumodel prices issue-bound kernels (HF ``repeat_kv`` copies, norms, softmax) in elements per
SM-cycle at the spec's boost clock, and carries that rate to other GPUs by SMs x clock. That only
holds if the clock under load is the boost clock (or the same fraction of it on both GPUs).
This runs each kernel back to back for ``--seconds`` while ``nvidia-smi`` samples the SM and
memory clocks and the power draw every 50 ms, and records the median of each with the kernel's
time per call (CUDA events). It only reads clocks; it never sets them.

Run on a GPU machine: ``python validation/experiments/clocks_under_load_device.py --out clocks.json``.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

QUERY = "clocks.sm,clocks.mem,power.draw,clocks_event_reasons.active"


def workloads(torch) -> dict:
    """name -> (callable, elements per call), each sized far above L2."""
    import torch.nn.functional as F

    dev, bf16 = "cuda", torch.bfloat16
    x4k = torch.randn(65536, 4096, device=dev, dtype=bf16)
    x1k = torch.randn(262144, 1024, device=dev, dtype=bf16)
    w4k = torch.ones(4096, device=dev, dtype=bf16)
    w1k = torch.ones(1024, device=dev, dtype=bf16)
    kv = torch.randn(8, 8, 16384, 128, device=dev, dtype=bf16)
    a = torch.randn(8192, 8192, device=dev, dtype=bf16)
    big = torch.empty(2**29, device=dev, dtype=bf16)
    out = torch.empty_like(big)

    def repeat_kv():
        return kv[:, :, None].expand(8, 8, 4, 16384, 128).reshape(8, 32, 16384, 128)

    return {
        "rmsnorm 65536x4096": (lambda: F.rms_norm(x4k, (4096,), w4k), x4k.numel()),
        "layernorm 262144x1024": (lambda: F.layer_norm(x1k, (1024,), w1k), x1k.numel()),
        "softmax 65536x4096": (lambda: torch.softmax(x4k, dim=-1), x4k.numel()),
        "repeat_kv 8x8x16384x128 x4": (repeat_kv, 4 * kv.numel()),
        "copy 1 GiB": (lambda: out.copy_(big), big.numel()),
        "gemm bf16 8192^3": (lambda: a @ a, 8192**3),
    }


def run_one(torch, fn, seconds: float) -> dict:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with tempfile.NamedTemporaryFile("r", suffix=".csv") as log:
        smi = subprocess.Popen(
            ["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
             "-lms", "50", "-f", log.name],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(0.3)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        calls, t0 = 0, time.perf_counter()
        start.record()
        while time.perf_counter() - t0 < seconds:
            for _ in range(10):
                fn()
            calls += 10
            torch.cuda.synchronize()
        stop.record()
        torch.cuda.synchronize()
        smi.terminate()
        smi.wait()
        rows = [r for r in csv.reader(Path(log.name).read_text().splitlines()) if len(r) >= 3]
    skip = max(1, len(rows) // 10)  # the samples before the loop ramps up
    sm = [float(r[0]) for r in rows[skip:]]
    mem = [float(r[1]) for r in rows[skip:]]
    power = [float(r[2]) for r in rows[skip:]]
    reasons = sorted({r[3].strip() for r in rows[skip:] if len(r) > 3})
    return {
        "time_per_call_s": start.elapsed_time(stop) / 1e3 / calls,
        "calls": calls,
        "samples": len(sm),
        "sm_clock_mhz_median": statistics.median(sm) if sm else None,
        "sm_clock_mhz_min": min(sm) if sm else None,
        "mem_clock_mhz_median": statistics.median(mem) if mem else None,
        "power_w_median": statistics.median(power) if power else None,
        "clock_event_reasons": reasons,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=2.0)
    args = ap.parse_args()
    import torch

    limits = subprocess.run(
        ["nvidia-smi", "--query-gpu=clocks.max.sm,clocks.max.mem,power.limit,driver_version",
         "--format=csv,noheader"], capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "max_sm_mem_clock_power_limit_driver": limits,
        "kernels": {},
    }
    for name, (fn, elements) in workloads(torch).items():
        r = run_one(torch, fn, args.seconds)
        r["elements_per_s"] = elements / r["time_per_call_s"]
        result["kernels"][name] = r
        print(f"{name:28s} {r['time_per_call_s'] * 1e6:9.1f} us  SM {r['sm_clock_mhz_median']} "
              f"MHz (min {r['sm_clock_mhz_min']})  mem {r['mem_clock_mhz_median']} MHz  "
              f"{r['power_w_median']} W  {r['clock_event_reasons']}")  # fmt: skip
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
