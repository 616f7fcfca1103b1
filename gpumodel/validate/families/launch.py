"""Kernel launch: an empty kernel launched back to back, one at a time with a host sync, and
timed by CUDA events. Measured constants (fit only, never scored): the empty kernel's GPU
time and the host's launch cost.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpumodel.validate.cupy_engine import Context as _Context
from gpumodel.validate.families.base import Family, make_record

if TYPE_CHECKING:
    from gpumodel.calibrate import Point
    from gpumodel.calibration import CalibrationParams
    from gpumodel.specs import GPUSpec


def launch_op() -> dict[str, Any]:
    return {"op": "kernel", "flops": 0, "bytes": 0, "threads": 1, "threads_per_block": 32}


# --------------------------------------------------------------------------- measure


def _launch_point(ctx: _Context) -> list[dict[str, Any]]:
    from gpumodel.validate.timing import time_cuda, time_host

    cp = ctx.cupy
    kern = ctx.kernel("timing.cu", "empty_kernel")
    stream = cp.cuda.get_current_stream()
    per_trial = 500 if ctx.quick else 2000

    def launch() -> None:
        kern((1,), (1,), ())

    def back_to_back() -> None:
        for _ in range(per_trial):
            launch()
        stream.synchronize()

    def sync_each() -> None:
        launch()
        stream.synchronize()

    op = launch_op()
    out = []
    t, spread, reps = time_host(back_to_back, repeats=7 if not ctx.quick else 5, warmup=1)
    meta = {"mode": "back_to_back", "launches_per_trial": per_trial, "api": "cupy.RawKernel"}
    out.append(make_record("launch", op, t / per_trial, reps, spread, meta))
    t, spread, reps = time_host(sync_each, repeats=100 if ctx.quick else 400, warmup=20)
    meta = {"mode": "sync_each", "timer": "host", "api": "cupy.RawKernel"}
    out.append(make_record("launch", op, t, reps, spread, meta))
    t, spread, reps = time_cuda(launch, min_repeats=20, max_repeats=200, target_s=0.002)
    meta = {"mode": "event", "timer": "cuda_event", "api": "cupy.RawKernel"}
    out.append(make_record("launch", op, t, reps, spread, meta))
    return out


# --------------------------------------------------------------------------- fit


def fit(fam: dict[str, list[Point]], gpu: GPUSpec, params: CalibrationParams) -> CalibrationParams:
    """Empty-kernel GPU time (event-timed) and host launch cost: medians of the measurements."""
    import numpy as np

    launch = fam.get("launch", [])
    event = [p.measured_s for p in launch if p.meta.get("mode") == "event"]
    host = [p.measured_s for p in launch if p.meta.get("mode") == "back_to_back"]
    if event:
        params = params.model_copy(update={"kernel_overhead_s": float(np.median(event))})
    if host:
        params = params.model_copy(update={"launch_host_s": float(np.median(host))})
    return params


LAUNCH = Family(
    name="launch",
    engine="cupy",
    points=lambda quick: [()],
    label=lambda: "launch overhead",
    measure=_launch_point,
    fit=fit,
    fit_order=1,
    fit_only=True,
)
