#!/usr/bin/env python3
"""Fit ``CUDNN_MASK_UNALIGNED_BACKWARD_FACTOR`` (gpumodel/ops/attention.py): how much more work
cuDNN's masked backward does at an odd key length than at the even one.

The fit set: validation/results/h200-sxm/sdpa-mask-backward-2026-12-01 (experiments/
sdpa_mask_backward_device.py): shapes of no unseen grid at an even key length and the odd one
below it, each dense, causal and masked, forward and the backward alone. Fitted to the ratio
(masked / dense backward at the odd length) / (the same at the even length) of each shape at head
dims up to 128, not to the times: the cuDNN backward family's own error and the masked kernel's
even-length factor cancel. Scanned from 1 to 1.6 in steps of 0.01, the factor whose predicted
ratios have the smallest median |log error| against the measured ones (the H200's shipped
calibration, in-workload). The unseen SDPA rows are never read.

    PYTHONPATH=. python validation/fitset/fit_attention_mask_backward.py
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

FIT_SET = ROOT / "validation/results/h200-sxm/sdpa-mask-backward-2026-12-01/sdpa-mask-backward.json"
FACTORS = [round(1.0 + 0.01 * i, 2) for i in range(61)]


def shapes() -> list[tuple[dict, dict, float]]:
    """(even shape, odd shape, measured odd / even ratio of masked over dense backward)."""
    by = {(json.dumps(r["shape"]), r["mode"]): r["backward_s"]
          for r in json.loads(FIT_SET.read_text())["records"] if "backward_s" in r}  # fmt: skip
    out = []
    for key, mode in by:
        shape = json.loads(key)
        if mode != "masked" or shape["seq"] % 2 or shape["head_dim"] > attention.WIDE_HEAD_DIM:
            continue
        odd = {**shape, "seq": shape["seq"] - 1}
        k_odd = json.dumps(odd)
        ratio = ((by[(k_odd, "masked")] / by[(k_odd, "dense")])
                 / (by[(key, "masked")] / by[(key, "dense")]))  # fmt: skip
        out.append((shape, odd, ratio))
    return out


def predicted(shape: dict, gpu, cal) -> float:
    def t(mask: bool) -> float:
        op = gm.ops.Attention(**shape, impl="cudnn", backward=True, mask=mask or None)
        return gm.predict(op, gpu, cal, condition="in-workload").time_s

    return t(True) / t(False)


def main() -> int:
    gpu = gm.get_gpu("h200")
    cal = default_calibration(gpu)
    shipped = attention.CUDNN_MASK_UNALIGNED_BACKWARD_FACTOR
    data = shapes()
    scores = {}
    for f in FACTORS:
        attention.CUDNN_MASK_UNALIGNED_BACKWARD_FACTOR = f
        scores[f] = statistics.median(
            abs(math.log(predicted(odd, gpu, cal) / predicted(even, gpu, cal) / m))
            for even, odd, m in data)  # fmt: skip
    best = min(scores, key=scores.get)
    attention.CUDNN_MASK_UNALIGNED_BACKWARD_FACTOR = best
    print(f"{len(data)} shapes; median |log error| of the odd / even ratio: 1.00: "
          f"{100 * scores[1.0]:.1f}%, {best:.2f}: {100 * scores[best]:.1f}%")
    for even, odd, m in data:
        p = predicted(odd, gpu, cal) / predicted(even, gpu, cal)
        print(f"  {odd}: measured {m:.3f}x, predicted {p:.3f}x")
    print(f"fitted {best}; shipped {shipped}")
    attention.CUDNN_MASK_UNALIGNED_BACKWARD_FACTOR = shipped
    return 0 if best == shipped else 1


if __name__ == "__main__":
    raise SystemExit(main())
