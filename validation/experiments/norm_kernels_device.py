"""Which CUDA kernels does PyTorch run for the norms that ``gpumodel validate`` times?

For every (op, rows, hidden, dtype) point of the validation grid (``families.norm.norm_points``) this
runs the same call as the harness (``F.layer_norm``, ``F.rms_norm``, ``torch.softmax`` on bf16)
under ``torch.profiler`` and records each kernel it launches: name, launches per call and mean
device time. A fused op is one kernel; a composite one is several, each paying its own launch
and its own pass over memory: the model needs to know which it is pricing.

Run on a GPU machine: ``python validation/experiments/norm_kernels_device.py --out norm-kernels.json``.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

CALLS = 5


def kernels_of(fn, torch) -> list[dict]:
    """Kernels one call of ``fn`` launches: name, launches per call, mean device microseconds."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
    per: dict[str, list[float]] = defaultdict(list)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            per[ev.name].append(ev.device_time if hasattr(ev, "device_time") else ev.cuda_time)
    return [{"kernel": name, "per_call": len(ts) / CALLS, "mean_us": sum(ts) / len(ts)}
            for name, ts in per.items()]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F

    from gpumodel.validate.families.norm import norm_points

    rows_out = []
    for kind, rows, hidden, dtype in norm_points(False):
        dt = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
        x = torch.randn(rows, hidden, device="cuda", dtype=dt)
        w = torch.ones(hidden, device="cuda", dtype=dt)
        b = torch.zeros(hidden, device="cuda", dtype=dt)
        call = {
            "layernorm": lambda x=x, w=w, b=b, h=hidden: F.layer_norm(x, (h,), w, b, 1e-5),
            "rmsnorm": lambda x=x, w=w, h=hidden: F.rms_norm(x, (h,), w, 1e-6),
            "softmax": lambda x=x: torch.softmax(x, dim=-1),
        }[kind]
        ks = kernels_of(call, torch)
        row = {"op": kind, "rows": rows, "hidden": hidden, "dtype": dtype, "kernels": ks,
               "launches_per_call": sum(k["per_call"] for k in ks),
               "device_us_per_call": sum(k["per_call"] * k["mean_us"] for k in ks)}  # fmt: skip
        rows_out.append(row)
        names = "; ".join(f"{k['kernel'][:60]} x{k['per_call']:g} {k['mean_us']:.1f}us" for k in ks)
        print(f"{kind:9s} {rows:7d} x {hidden:5d}: {row['device_us_per_call']:9.1f} us  {names}",
              flush=True)  # fmt: skip
        del x
    Path(args.out).write_text(json.dumps({"torch": torch.__version__,
                                          "device": torch.cuda.get_device_name(),
                                          "points": rows_out}, indent=1), encoding="utf-8")  # fmt: skip


if __name__ == "__main__":
    main()
