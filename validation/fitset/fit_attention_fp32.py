#!/usr/bin/env python3
"""Fit ``FAST_F32_WORK_FACTOR`` (gpumodel/ops/attention.py): the TF32 products, at the 16-bit
kernel's calibrated rate, that SDPA's memory-efficient kernel spends per fp32 product.

The fit set: validation/results/h200-sxm/sdpa-dtypes-2026-11-30 (experiments/
sdpa_dtypes_device.py): 10 shapes of no unseen grid (9 since head dims above 128 have their own
rule, fit_attention_wide_head.py, fitted after this one), each timed in fp32 and in bf16 with the
memory-efficient backend forced, forward and forward + backward. One factor per kernel (the
forward up to head dim 64, the forward above, the backward), each fitted to the
ratio fp32 / bf16 time of each shape and pass, not to the times: the 16-bit family's own error
at a shape (its calibration's) cancels, so what is fitted is the fp32 kernel alone. Scanned from
1 to 3 in steps of 0.05, the factor whose predicted ratios have the smallest median |log error|
against the measured ones (the H200's shipped calibration, in-workload). The unseen SDPA rows
(unseen-h200-run27) are never read.

    PYTHONPATH=. python validation/fitset/fit_attention_fp32.py
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
from gpumodel.ops.attention import (  # noqa: E402
    FAST_F32_WORK_FACTOR,
    WIDE_HEAD_DIM,
    fast_f32_work_key,
)

FIT_SET = ROOT / "validation/results/h200-sxm/sdpa-dtypes-2026-11-30/sdpa-dtypes.json"
FACTORS = [round(1.0 + 0.05 * i, 2) for i in range(41)]


def pairs() -> list[tuple[dict, float, bool]]:
    """(shape with causal, measured fp32 / bf16 time, backward) for each shape and pass."""
    recs = json.loads(FIT_SET.read_text())["records"]
    by = {(json.dumps(r["shape"]), r["causal"], r["mode"]): r for r in recs}
    out = []
    for (shape, causal, mode), r in by.items():
        if mode != "fp32 efficient" or "forward_s" not in r:
            continue
        if json.loads(shape)["head_dim"] > WIDE_HEAD_DIM:  # fit_attention_wide_head.py's
            continue
        b = by[(shape, causal, "bf16 efficient")]
        shp = {**json.loads(shape), "causal": causal}
        out.append((shp, r["forward_s"] / b["forward_s"], False))
        # the backward alone: forward + backward less the forward
        out.append((shp, (r["forward_backward_s"] - r["forward_s"])
                    / (b["forward_backward_s"] - b["forward_s"]), True))  # fmt: skip
    return out


def predicted_ratio(shape: dict, backward: bool, gpu, cal) -> float:
    def time_s(dtype: str) -> float:
        op = gm.ops.Attention(**shape, dtype=dtype, impl="efficient", backward=backward)
        return gm.predict(op, gpu, cal, condition="in-workload").time_s

    return time_s("fp32") / time_s("bf16")


def median_log_error(factor: float, data, gpu, cal) -> float:
    return statistics.median(abs(math.log(predicted_ratio(s, bw, gpu, cal) / m))
                             for s, m, bw in data)  # fmt: skip


def main() -> int:
    gpu = gm.get_gpu("h200")
    cal = default_calibration(gpu)
    shipped = dict(attention.FAST_F32_WORK_FACTOR)
    fitted = {}
    for key in FAST_F32_WORK_FACTOR:
        backward = key == "backward"
        data = [p for p in pairs()
                if fast_f32_work_key(p[2], p[0]["head_dim"]) == key]  # fmt: skip
        scores = {}
        for f in FACTORS:
            attention.FAST_F32_WORK_FACTOR[key] = f
            scores[f] = median_log_error(f, data, gpu, cal)
        best = min(scores, key=scores.get)
        fitted[key] = round(best, 2)
        attention.FAST_F32_WORK_FACTOR[key] = best
        print(f"{key}: {len(data)} ratios (fp32 / bf16 time); median |log error| of the ratio "
              + ", ".join(f"{f:.2f}: {100 * scores[f]:.1f}%" for f in sorted({1.0, 2.0, best, 3.0})))
        for s, m, _ in data:
            p = predicted_ratio(s, backward, gpu, cal)
            print(f"  {s}: measured {m:.2f}x, predicted {p:.2f}x")
    print(f"fitted {fitted}; shipped {shipped}")
    attention.FAST_F32_WORK_FACTOR.update(shipped)
    return 0 if fitted == shipped else 1


if __name__ == "__main__":
    raise SystemExit(main())
