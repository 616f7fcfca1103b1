#!/usr/bin/env python3
"""Fit ``CUDNN_DECODE_WIDE_BANDWIDTH`` (gpumodel/ops/attention.py): the share of the calibrated
decode family's DRAM rate that cuDNN's decode kernel reaches above head dim 128.

The fit set: validation/results/h200-sxm/sdpa-decode-2026-12-01 (experiments/
sdpa_decode_device.py): one query per sequence against a KV cache, shapes of no unseen grid,
head dims 64-256, each SDPA backend, timed replayed from a CUDA graph (GPU time, no launch gaps).
Fitted on the cuDNN points above head dim 128 against ``gm.predict(..., condition="in-graph")``
with the H200's shipped calibration: scanned from 0.5 to 1.0 in steps of 0.01, the fraction whose
predictions have the smallest median |log error|. The other backends' and head dims' errors are
printed, not fitted. The unseen SDPA rows are never read.

    PYTHONPATH=. python validation/fitset/fit_attention_decode.py
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

FIT_SET = ROOT / "validation/results/h200-sxm/sdpa-decode-2026-12-01/sdpa-decode.json"
IMPLS = {"FLASH_ATTENTION": "flash", "EFFICIENT_ATTENTION": "efficient", "CUDNN_ATTENTION": "cudnn"}
FRACTIONS = [round(0.5 + 0.01 * i, 2) for i in range(51)]


def points() -> list[tuple[gm.ops.Attention, float]]:
    """(the op, its measured GPU time) for every forced-backend record that ran."""
    out = []
    for r in json.loads(FIT_SET.read_text())["records"]:
        if r["backend"] not in IMPLS or "graph_s" not in r:
            continue
        s = r["shape"]
        op = gm.ops.Attention(batch=s["batch"], heads=s["heads"], seq=1, kv_seq=s["kv_seq"],
                              kv_heads=s["kv_heads"], head_dim=s["head_dim"],
                              impl=IMPLS[r["backend"]])  # fmt: skip
        out.append((op, r["graph_s"]))
    return out


def log_errors(data, gpu, cal) -> list[float]:
    return [math.log(gm.predict(op, gpu, cal, condition="in-graph").time_s / t) for op, t in data]


def main() -> int:
    gpu = gm.get_gpu("h200")
    cal = default_calibration(gpu)
    shipped = attention.CUDNN_DECODE_WIDE_BANDWIDTH
    data = points()
    wide = [(op, t) for op, t in data if op.impl == "cudnn" and op.head_dim > attention.WIDE_HEAD_DIM]
    scores = {}
    for f in FRACTIONS:
        attention.CUDNN_DECODE_WIDE_BANDWIDTH = f
        scores[f] = statistics.median(abs(e) for e in log_errors(wide, gpu, cal))
    best = min(scores, key=scores.get)
    attention.CUDNN_DECODE_WIDE_BANDWIDTH = best
    print(f"{len(wide)} cuDNN points above head dim 128; median |log error| at 1.00: "
          f"{100 * scores[1.0]:.1f}%, at {best:.2f}: {100 * scores[best]:.1f}%")
    groups: dict[tuple[str, bool], list[float]] = {}
    for (op, _t), e in zip(data, log_errors(data, gpu, cal), strict=True):
        groups.setdefault((op.impl, op.head_dim > attention.WIDE_HEAD_DIM), []).append(e)
    for (impl, is_wide), errs in sorted(groups.items()):
        print(f"  {impl:9s} head dim {'> 128' if is_wide else '<= 128'}: {len(errs)} points, "
              f"median |log error| {100 * statistics.median(abs(e) for e in errs):.1f}%, "
              f"signed {100 * statistics.median(errs):+.1f}%")
    print(f"fitted {best}; shipped {shipped}")
    attention.CUDNN_DECODE_WIDE_BANDWIDTH = shipped
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
