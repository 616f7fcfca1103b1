#!/usr/bin/env python3
"""Fit ``FSDP_UNIT_HOST_OPS`` (gpumodel/llm/fsdp.py): FSDP2's host work per sharded unit and
micro-batch, in eager elementwise calls of the host profile measured in the same device call.

The fit set: the FSDP2 points (ZeRO-3 over 2 ranks) of two 2 x H200 VMs,
``validation/results/steps-h200x2-multi-gpu-run4-fsdp`` and ``-run5-fsdp``, each with its call's
host profile (``host-multi-gpu.yaml``). Per point, the calls' worth ``u`` at which the model
prices the step at its measured median (every other term as shipped: the eager host with the
training host factor, the optimizer, DDP-free ZeRO-3 collectives), found by bisection on
``u`` (the step time never falls as ``u`` grows); the constant is the median over the points,
to the nearest 10 calls. Each VM's median is printed beside it. The unseen multi-GPU runs are
never read. The training host factor is an input: refit this after refitting that.

    PYTHONPATH=. python validation/fitset/fit_fsdp_unit_host.py
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import gpumodel as gm  # noqa: E402
import gpumodel.llm.fsdp as fsdp  # noqa: E402

FIT_SETS = ("steps-h200x2-multi-gpu-run4-fsdp", "steps-h200x2-multi-gpu-run5-fsdp")
RESULTS = ROOT / "validation" / "results"


def points(run: str) -> list[dict]:
    """The run's FSDP2 records that ran (ZeRO-3 over dp > 1)."""
    data = json.loads((RESULTS / run / "steps-multi-gpu.json").read_text())
    return [r for r in data["records"]
            if r.get("status") == "ok" and r.get("zero") == 3 and r.get("dp", 1) > 1]  # fmt: skip


def model(workload: str) -> str:
    """A preset, else the model file the unseen harness's user wrote for it (Qwen3-0.6B)."""
    path = ROOT / "validation" / "unseen" / "models" / f"{workload}.yaml"
    return str(path) if path.is_file() else workload


def priced_s(rec: dict, host: gm.HostProfile, cal, unit_ops: float) -> float:
    """The step the model prices for ``rec`` with ``unit_ops`` calls' worth a unit."""
    saved = fsdp.FSDP_UNIT_HOST_OPS
    fsdp.FSDP_UNIT_HOST_OPS = unit_ops
    try:
        return gm.predict_training_step(
            model(rec["workload"]), "h200-sxm", rec["gpus"], micro_batch=rec["batch"],
            global_batch=rec["batch"] * rec["gpus"], seq=rec["seq"], dtype="bf16",
            calibration=cal, recompute="none", zero=3, policy=rec["policy"], fusion="unfused",
            host=host,
        ).step_time_s  # fmt: skip
    finally:
        fsdp.FSDP_UNIT_HOST_OPS = saved


def solve(rec: dict, host: gm.HostProfile, cal) -> float | None:
    """``u`` pricing the point at its measured median; None when even u = 0 prices it slower."""
    measured = rec["step_s"]["median"]
    lo, hi = 0.0, 5000.0
    if priced_s(rec, host, cal, lo) >= measured:
        return None
    for _ in range(40):
        mid = (lo + hi) / 2
        if priced_s(rec, host, cal, mid) < measured:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def fit() -> tuple[float, dict[str, list[float]]]:
    cal = gm.load_calibration("h200-sxm")
    per_run: dict[str, list[float]] = {}
    for run in FIT_SETS:
        host = gm.load_host(str(RESULTS / run / "host-multi-gpu.yaml"))
        per_run[run] = [u for rec in points(run) if (u := solve(rec, host, cal)) is not None]
    every = [u for us in per_run.values() for u in us]
    return round(statistics.median(every), -1), per_run


def main() -> int:
    value, per_run = fit()
    for run, us in per_run.items():
        print(f"{run}: {len(us)} points, {min(us):.0f}-{max(us):.0f}, median "
              f"{statistics.median(us):.0f}")  # fmt: skip
    print(f"FSDP_UNIT_HOST_OPS = {value:g} (shipped {fsdp.FSDP_UNIT_HOST_OPS:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
