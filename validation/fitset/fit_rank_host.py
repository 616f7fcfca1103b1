#!/usr/bin/env python3
"""Fit ``RANK_HOST_SPREAD`` (gpumodel/llm/ranks.py): how much one process's eager step time
varies from step to step, from how much slower the slowest of n processes stepping at once is.

The fit set: validation/results/h200-sxm-x2/host-ranks-2026-11-30 (host_ranks_device.py): two
narrow HF models' host-bound steps in 2, 4 and 8 processes on one 2 x H200 host (with and without
an NCCL process group), each step started together, three rounds. Per variant, model and round:
``(slowest process's median step / median of the processes' medians - 1) / z_n``, ``z_n`` the
expected largest of n standard normals; the constant is the median of those, to 0.01. The
unseen multi-GPU runs are never read.

    PYTHONPATH=. python validation/fitset/fit_rank_host.py
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpumodel.llm.ranks import RANK_HOST_SPREAD, expected_max_normal  # noqa: E402

FIT_SET = ROOT / "validation/results/h200-sxm-x2/host-ranks-2026-11-30/host-ranks.json"


def spreads() -> list[tuple[str, str, int, float]]:
    """(variant, model, round, spread) for every multi-process record of the fit set."""
    doc = json.loads(FIT_SET.read_text())
    out = []
    for rec in doc["records"]:
        n = rec["processes"]
        if n < 2:
            continue
        for model, c in rec["cases"].items():
            slowest = c["median_slowest_s"] / c["median_of_process_medians_s"]
            out.append((rec["variant"], model, rec["round"], (slowest - 1) / expected_max_normal(n)))
    return out


def fit() -> tuple[float, list[tuple[str, str, int, float]]]:
    every = spreads()
    return round(statistics.median(s for *_, s in every), 2), every


def main() -> int:
    value, every = fit()
    by_variant: dict[str, list[float]] = {}
    for variant, _, _, s in every:
        by_variant.setdefault(variant, []).append(s)
    for variant, ss in by_variant.items():
        print(f"{variant}: {len(ss)} points, {min(ss):.3f}-{max(ss):.3f}, median "
              f"{statistics.median(ss):.3f}")  # fmt: skip
    print(f"RANK_HOST_SPREAD = {value:g} (shipped {RANK_HOST_SPREAD:g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
