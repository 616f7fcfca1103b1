#!/usr/bin/env python3
"""Fit ``DDP_STEP_HOST_OPS`` and ``DDP_TENSOR_HOST_OPS`` (gpumodel/llm/ddp.py): DDP's host work per
step and per gradient tensor, in eager elementwise calls of the host the slowest rank runs.

The fit set: validation/results/h200-sxm-x2/ddp-host-2026-11-30/ddp-host-interleaved.json
(validation/experiments/ddp_host_device.py --interleave): 8 narrow HF models on 2 x H200, the
module stepped with and without DDP step by step in turn, each step's time the slower rank's.
Least squares of the difference of the medians (DDP - plain) over the parameter tensors, in
units of the elementwise call of the host profile measured in the same call (``host-after.yaml``)
slowed as the model slows a 2-rank step's host (``ranks.slowest_rank_factor(2)``: both sides of
the difference are the slower rank's). The unseen multi-GPU runs are never read.

    PYTHONPATH=. python validation/fitset/fit_ddp_host.py
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import gpumodel as gm  # noqa: E402
from gpumodel.llm import ddp  # noqa: E402
from gpumodel.llm.ranks import slowest_rank_factor  # noqa: E402

FIT_SET = ROOT / "validation/results/h200-sxm-x2/ddp-host-2026-11-30"


def differences() -> tuple[list[int], list[float], float]:
    """(tensors, DDP - plain seconds, the call's elementwise host seconds) per model and policy."""
    doc = json.loads((FIT_SET / "ddp-host-interleaved.json").read_text())
    elementwise = gm.load_host(str(FIT_SET / "host-after.yaml")).cost_s("elementwise")
    tensors, added = [], []
    for a, b in zip(*doc["ranks"]):

        def slower(mode: str, a=a, b=b) -> float:
            return statistics.median(max(x, y) for x, y in zip(a["modes"][mode]["wall_s"],
                                                               b["modes"][mode]["wall_s"]))  # fmt: skip

        tensors.append(a["tensors"])
        added.append(slower("ddp") - slower("plain"))
    return tensors, added, elementwise


def fit() -> tuple[float, float]:
    tensors, added, elementwise = differences()
    unit = elementwise * slowest_rank_factor(2)
    design = np.stack([np.ones(len(tensors)), np.asarray(tensors, dtype=float)], axis=1)
    step, per_tensor = np.linalg.lstsq(design, np.asarray(added) / unit, rcond=None)[0]
    return round(float(step)), round(float(per_tensor), 2)


def main() -> int:
    step, per_tensor = fit()
    print(f"DDP_STEP_HOST_OPS = {step:g} (shipped {ddp.DDP_STEP_HOST_OPS:g}); "
          f"DDP_TENSOR_HOST_OPS = {per_tensor:g} (shipped {ddp.DDP_TENSOR_HOST_OPS:g})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
