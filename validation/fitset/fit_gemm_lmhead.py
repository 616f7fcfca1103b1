#!/usr/bin/env python3
"""Fit ``gpumodel.model.gemm.MISALIGNED_ROWS_SHARE`` on the odd-vocabulary LM-head fit set.

The set (``gemm_launches_device.py --set lmhead``): x @ W.T products, N odd (32001, 50277),
K = 512-4096, M = 1-512, bf16/fp16/TF32/fp32, GPU time per call. For each (dtype, N, K) series
one 128-row tile's time is the median of t(M) / ceil(M / 128) over M = 256, 384, 512; a
range's share is the median of t(M) / that tile time over the series' M in the range, made
non-decreasing in M (a product with more rows never takes less time).

The criterion is level-free: each series is compared in its own shape, predicted
t(M) / t(512) x measured t(512) against measured t(M), so neither a calibration's level nor
the GPU's enters. "Before" is today's shipped model in the same terms (the H100's calibration
carried to the H200 the set was measured on), "after" the fitted table.

usage: PYTHONPATH=. python validation/fitset/fit_gemm_lmhead.py [--check]
       --check: fail (exit 1) unless the shipped table is this fit's
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "validation/results/h200-sxm/gemm-lmhead-2026-11-28/gemm-lmhead.json"
GPU = "h200-sxm"
RANGES = (1, 2, 4, 8, 16, 32, 64)
TILE = 128
NORMAL = 512  # the M each series is levelled at


def series() -> dict[tuple[str, int, int], dict[int, float]]:
    out: dict[tuple[str, int, int], dict[int, float]] = defaultdict(dict)
    for p in json.loads(DATA.read_text())["points"]:
        out[(p["dtype"], p["N"], p["K"])][p["M"]] = p["gpu_s"]
    return out


def tile_time(t: dict[int, float]) -> float:
    return statistics.median(t[m] / math.ceil(m / TILE) for m in (256, 384, 512))


def fit() -> dict[str, tuple[tuple[int, float], ...]]:
    """The table: per dtype, (largest M, share of one tile) per range, non-decreasing."""
    shares: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for (dtype, _, _), t in series().items():
        tt = tile_time(t)
        for m, s in t.items():
            if m <= RANGES[-1]:
                top = next(r for r in RANGES if m <= r)
                shares[dtype][top].append(s / tt)
    table = {}
    for dtype, by in shares.items():
        run, rows = 0.0, []
        for top in RANGES:
            run = max(run, round(statistics.median(by[top]), 2))
            rows.append((top, run))
        table[dtype] = tuple(rows)
    return table


def level_free_errors(predict) -> list[float]:
    """|error| of predict(dtype, N, K, M) -> seconds in each series' own shape."""
    errs = []
    for (dtype, n, k), t in series().items():
        scale = t[NORMAL] / predict(dtype, n, k, NORMAL)
        errs += [abs(predict(dtype, n, k, m) * scale / t[m] - 1) for m in t]
    return errs


def model_predict(dtype: str, n: int, k: int, m: int) -> float:
    import gpumodel as gm
    from gpumodel.ops import Gemm

    cal = gm.load_calibration("h100-sxm", for_gpu=GPU)
    op = Gemm(m=m, n=n, k=k, dtype=dtype, transpose_b=True)
    return gm.predict(op, GPU, calibration=cal, condition="in-graph").time_s


def table_predict(table):
    def predict(dtype: str, n: int, k: int, m: int) -> float:
        if m > TILE // 2:
            return math.ceil(m / TILE) * n * k
        return n * k * next(s for top, s in table[dtype] if m <= top)

    return predict


def stats(errs: list[float]) -> str:
    errs = sorted(errs)
    p90 = errs[min(len(errs) - 1, int(0.9 * len(errs)))]
    return f"{100 * statistics.median(errs):.1f}% (p90 {100 * p90:.1f}%), n = {len(errs)}"


def main() -> int:
    from gpumodel.model.gemm import MISALIGNED_ROWS_SHARE

    table = fit()
    for dtype, rows in table.items():
        print(f'    "{dtype}": {rows},')
    print(f"the fitted table, level-free: {stats(level_free_errors(table_predict(table)))}")
    print(f"today's model, level-free:    {stats(level_free_errors(model_predict))}")
    if "--check" in sys.argv and table != MISALIGNED_ROWS_SHARE:
        print("the shipped MISALIGNED_ROWS_SHARE is not this fit", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
