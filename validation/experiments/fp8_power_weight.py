#!/usr/bin/env python3
"""Experiment: does a dtype draw more tensor power than W says? (a negative result, 2026-11-28)

The sustained clock of back-to-back tensor-core work comes from one calibrated power W
(``gpumodel validate --conditions``, gpumodel.model.power): P = P_static + u x W x (f/f_max)^3.
Back to back, fp8 GEMMs run at a lower NVML clock than bf16's at the same shapes and the same
700 W (x0.95, H100 and H200), and the unseen fp8 GEMMs came out fast. This tries a weight per
dtype on u, P = P_static + u x weight x W x (f/f_max)^3, without changing the model: it wraps
``gpumodel.predict.tensor_activity`` for the kernels of one dtype. For each dtype it fits the
weight on the back-to-back GEMMs of that dtype (kernels of at least ``MIN_BACK_TO_BACK_S``) of
two conditions runs, an H200's and an H100's, each predicted with its own GPU's shipped
calibration: the weight whose in-workload predictions have the least squared log error,
pooled. The table says whether the weight improves the in-workload error on each GPU. The NVML
clocks over bf16's at the same shapes are printed beside it. They are not the weight: each
dtype's calibrated efficiency was measured in short bursts that already run partly throttled.

The unseen set (validation/unseen) is not read here.

usage: PYTHONPATH=. python validation/experiments/fp8_power_weight.py
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "validation" / "results"
#: (GPU, its conditions run), fitted together
RUNS = (
    ("h200-sxm", RESULTS / "h200-sxm" / "conditions-2026-11-28" / "conditions-measurements.json"),
    ("h100-sxm",
     RESULTS / "h100-sxm" / "conditions-pooled-2026-11-27" / "conditions-measurements.json"),
)  # fmt: skip
DTYPES = ("fp8", "fp16", "tf32")
GRID = [0.5 + 0.01 * i for i in range(201)]  # 0.5 .. 2.5


def back_to_back(path: Path, dtype: str) -> list[tuple[object, float, float]]:
    """(op, measured back-to-back seconds, NVML SM clock MHz) of ``dtype``'s long GEMMs."""
    from gpumodel.ops import from_row
    from gpumodel.validate.conditions import MIN_BACK_TO_BACK_S

    out = []
    for r in json.loads(path.read_text())["records"]:
        if (r["family"] == "gemm" and r["condition"] == "in-workload"
                and r["op"]["dtype"] == dtype and r["time_s"] >= MIN_BACK_TO_BACK_S):
            out.append((from_row(dict(r["op"])), r["time_s"], r["meta"]["sm_clock_mhz_median"]))
    return out


def log_errors(points, gpu_id: str, weight: float, dtype: str) -> list[float]:
    """log(predicted / measured) of the in-workload predictions, ``dtype``'s tensor activity
    times ``weight``."""
    import importlib

    import gpumodel as gm

    predict = importlib.import_module("gpumodel.predict")  # the module (gm.predict is a function)
    cal = gm.load_calibration(str(RESULTS / gpu_id / "calibration.yaml"))
    gpu = gm.get_gpu(gpu_id)
    plain = predict.tensor_activity

    def weighted(kw, gpu, time_s):
        u = plain(kw, gpu, time_s)
        return u * weight if any(p.dtype == dtype for p in kw.flops) else u

    predict.tensor_activity = weighted
    try:
        return [math.log(predict.predict_with_params(op, gpu, cal.parameters,
                                                     condition="in-workload").time_s / t)
                for op, t, _ in points]  # fmt: skip
    finally:
        predict.tensor_activity = plain


def median_pct(logs: list[float]) -> float:
    return 100 * statistics.median(abs(math.expm1(x)) for x in logs)


def fit(dtype: str) -> tuple[float, list[tuple[int, float, float]]]:
    """(the pooled weight, per run: (points, median error at weight 1, at the weight))."""
    runs = [(gpu_id, back_to_back(path, dtype)) for gpu_id, path in RUNS]

    def loss(w: float) -> float:
        return sum(x * x for gpu_id, pts in runs for x in log_errors(pts, gpu_id, w, dtype))

    best = round(min(GRID, key=loss), 2)
    return best, [(len(pts), median_pct(log_errors(pts, gpu_id, 1.0, dtype)),
                   median_pct(log_errors(pts, gpu_id, best, dtype))) for gpu_id, pts in runs]  # fmt: skip


def nvml_clock_ratio(path: Path, dtype: str) -> float | None:
    """Median NVML SM clock of ``dtype``'s back-to-back GEMMs over bf16's at the same shapes."""
    clocks = {}
    for r in json.loads(path.read_text())["records"]:
        if r["family"] == "gemm" and r["condition"] == "in-workload":
            o = r["op"]
            clocks[(o["dtype"], o["m"], o["n"], o["k"])] = r["meta"]["sm_clock_mhz_median"]
    ratios = [c / clocks[("bf16", *key[1:])] for key, c in clocks.items()
              if key[0] == dtype and ("bf16", *key[1:]) in clocks and key[1] >= 4096]  # fmt: skip
    return statistics.median(ratios) if ratios else None


def main() -> int:
    names = ", ".join(f"{p.relative_to(ROOT)} ({g}'s calibration)" for g, p in RUNS)
    print(f"fitted on: {names}")
    print("| dtype | weight | " + " | ".join(f"{g}: n, w = 1 -> fitted" for g, _ in RUNS)
          + " | improves both | NVML clock / bf16's (" + ", ".join(g for g, _ in RUNS) + ") |")  # fmt: skip
    print("|---|---:|" + "---|" * len(RUNS) + "---|---|")
    for dtype in DTYPES:
        weight, per_run = fit(dtype)
        better = weight != 1.0 and all(after < before for _, before, after in per_run)
        clocks = [nvml_clock_ratio(p, dtype) for _, p in RUNS]
        print(f"| {dtype} | {weight:.2f} | "
              + " | ".join(f"{n}, {b:.1f}% -> {a:.1f}%" for n, b, a in per_run)
              + f" | {'yes' if better else 'no'} | "
              + ", ".join("-" if c is None else f"{c:.3f}" for c in clocks) + " |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
