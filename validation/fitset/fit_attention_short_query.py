#!/usr/bin/env python3
"""Fit ``CUDNN_CACHE_CYCLES_PER_KEY`` and ``CUDNN_CACHE_BLOCKS_PER_SM`` (gpumodel/ops/attention.py):
cuDNN's walk over the keys when SDPA's default dispatch runs a few queries (2-128) against a KV
cache on Hopper.

The fit set: validation/results/h200-sxm/sdpa-short-query-2026-12-01
(experiments/sdpa_short_query_device.py): five shapes of no unseen grid at query lengths 1-128,
the default dispatch (cuDNN) and FlashAttention-2 forced, timed replayed from a CUDA graph.
Fitted on the default dispatch's points of two or more queries against
``gm.predict(..., condition="in-graph")`` with the H200's shipped calibration: per head-dim class
the cycles per key (scanned 5-60 in steps of 0.2) whose predictions have the smallest median
|log error|, for each resident-block count 1-3, keeping the count with the smallest error over
all classes. The flash points (the split-KV and one-split rules, written from flash_api.cpp and
not fitted here) are printed. The unseen short-query rows (family sdpa-short) are never read.

    PYTHONPATH=. python validation/fitset/fit_attention_short_query.py
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import gpumodel as gm  # noqa: E402
from gpumodel.calibration import default_calibration  # noqa: E402
from gpumodel.ops import attention  # noqa: E402

FIT_SET = ROOT / "validation/results/h200-sxm/sdpa-short-query-2026-12-01/sdpa-short-query.json"
CYCLES = [round(5 + 0.2 * i, 1) for i in range(276)]


def points(backend: str) -> list[tuple[gm.ops.Attention, float]]:
    out = []
    for r in json.loads(FIT_SET.read_text())["records"]:
        if r["backend"] != backend or "graph_s" not in r:
            continue
        s = r["shape"]
        impl = "flash" if backend == "FLASH_ATTENTION" else "sdpa"
        op = gm.ops.Attention(batch=s["batch"], heads=s["heads"], kv_heads=s["kv_heads"],
                              seq=s["seq_q"], kv_seq=s["kv_seq"], head_dim=s["head_dim"],
                              impl=impl)  # fmt: skip
        out.append((op, r["graph_s"]))
    return out


def median_log_error(data, gpu, cal) -> float:
    return statistics.median(
        abs(math.log(gm.predict(op, gpu, cal, condition="in-graph").time_s / t)) for op, t in data)


def head_class(d: int) -> int:
    return 64 if d <= 64 else 128 if d <= 128 else 256


def main() -> int:
    gpu = gm.get_gpu("h200")
    cal = default_calibration(gpu)
    shipped = dict(attention.CUDNN_CACHE_CYCLES_PER_KEY), attention.CUDNN_CACHE_BLOCKS_PER_SM
    data = [(op, t) for op, t in points("default") if op.seq > 1]
    best = None
    try:
        for per_sm in (1, 2, 3):
            attention.CUDNN_CACHE_BLOCKS_PER_SM = per_sm
            fitted = {}
            for cls in (64, 128, 256):
                sub = [(op, t) for op, t in data if head_class(op.head_dim) == cls]
                scores = {}
                for c in CYCLES:
                    attention.CUDNN_CACHE_CYCLES_PER_KEY[cls] = c
                    scores[c] = median_log_error(sub, gpu, cal)
                fitted[cls] = min(scores, key=scores.get)
                attention.CUDNN_CACHE_CYCLES_PER_KEY[cls] = fitted[cls]
            err = median_log_error(data, gpu, cal)
            print(f"blocks per SM {per_sm}: cycles per key {fitted}, median |log error| {err:.4f}")
            if best is None or err < best[0]:
                best = (err, per_sm, fitted)
    finally:
        attention.CUDNN_CACHE_CYCLES_PER_KEY.update(shipped[0])
        attention.CUDNN_CACHE_BLOCKS_PER_SM = shipped[1]
    print(f"fitted: CUDNN_CACHE_BLOCKS_PER_SM = {best[1]}, CUDNN_CACHE_CYCLES_PER_KEY = {best[2]}")
    print(f"shipped: CUDNN_CACHE_BLOCKS_PER_SM = {shipped[1]}, CUDNN_CACHE_CYCLES_PER_KEY = {shipped[0]}")
    for backend in ("default", "FLASH_ATTENTION"):
        for few in (False, True):
            sub = [(op, t) for op, t in points(backend) if (op.seq > 1) == few]
            print(f"{backend} {'2-128 queries' if few else 'one query'}: {len(sub)} points, "
                  f"median |log error| {median_log_error(sub, gpu, cal):.4f} (shipped)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
