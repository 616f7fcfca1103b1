#!/usr/bin/env python3
"""Fit ``WIDE_HEAD_WORK_FACTOR`` (gpumodel/ops/attention.py): the work per product, over the
calibrated family's, of SDPA's fused kernels above head dim 128.

The fit set: validation/results/h200-sxm/sdpa-wide-head-2026-11-30 (experiments/
sdpa_wide_head_device.py): 10 shapes of no unseen grid, head dims 144-256, each backend forced
(flash, cuDNN, memory-efficient) and the default dispatch with an explicit mask (cuDNN's biased
kernel), forward and backward, bf16 (fp16 and fp32 on the memory-efficient kernel for a few).
One factor per kernel (``wide_head_work_key``), each scanned from 1 to 6 in steps of 0.01: the
factor whose predictions have the smallest median |log error| against the measured times (the
H200's shipped calibration, in-workload). The unseen SDPA rows (unseen-h200-run30 on) are never
read.

    PYTHONPATH=. python validation/fitset/fit_attention_wide_head.py
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
from gpumodel.ops.attention import WIDE_HEAD_WORK_FACTOR, wide_head_work_key  # noqa: E402

FIT_SET = ROOT / "validation/results/h200-sxm/sdpa-wide-head-2026-11-30/sdpa-wide-head.json"
FACTORS = [round(1.0 + 0.01 * i, 2) for i in range(501)]


def points() -> list[tuple[gm.ops.Attention, float]]:
    """(op, measured time) of each call: a masked call as the dense work its mask makes it
    (is_causal off; the mask carries the pattern), the default dispatch's unmasked calls left
    out (cuDNN's, timed again with the backend forced)."""
    out = []
    for r in json.loads(FIT_SET.read_text())["records"]:
        if "error" in r or (r["backend"] == "default" and not r["masked"]):
            continue
        impl = "cudnn" if r["backend"] == "default" else r["backend"]  # what the dispatch ran
        for backward, key in ((False, "forward_s"), (True, "backward_s")):
            op = gm.ops.Attention(**r["shape"], causal=r["causal"] and not r["masked"],
                                  dtype=r["dtype"], impl=impl, backward=backward,
                                  mask=r["masked"] or None)  # fmt: skip
            out.append((op, r[key]))
    return out


def key_of(op: gm.ops.Attention) -> str | None:
    return wide_head_work_key(op.impl, op.backward, op.dtype, bool(op.mask))


def median_log_error(data, gpu, cal) -> float:
    return statistics.median(
        abs(math.log(gm.predict(op, gpu, cal, condition="in-workload").time_s / t)) for op, t in data
    )


def main() -> int:
    gpu = gm.get_gpu("h200")
    cal = default_calibration(gpu)
    shipped = dict(WIDE_HEAD_WORK_FACTOR)
    data = points()
    fitted = {}
    for key in WIDE_HEAD_WORK_FACTOR:
        mine = [p for p in data if key_of(p[0]) == key]
        if not mine:
            fitted[key] = shipped[key]
            continue
        scores = {}
        for f in FACTORS:
            WIDE_HEAD_WORK_FACTOR[key] = f
            scores[f] = median_log_error(mine, gpu, cal)
        best = min(scores, key=scores.get)
        WIDE_HEAD_WORK_FACTOR[key] = fitted[key] = best
        errors = sorted(100 * (gm.predict(op, gpu, cal, condition="in-workload").time_s / t - 1)
                        for op, t in mine)  # fmt: skip
        print(f"{key}: {len(mine)} calls; 1.00: {100 * scores[1.0]:.1f}%, {best:.2f}: "
              f"{100 * scores[best]:.1f}% median |log error|; errors "
              + " ".join(f"{e:+.0f}%" for e in errors))
    print(f"fitted {fitted}\nshipped {shipped}")
    WIDE_HEAD_WORK_FACTOR.update(shipped)
    attention.WIDE_HEAD_WORK_FACTOR.update(shipped)
    return 0 if fitted == shipped else 1


if __name__ == "__main__":
    raise SystemExit(main())
