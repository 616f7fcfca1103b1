#!/usr/bin/env python3
"""Fit ``TRAIN_HOST_FACTOR`` (gpumodel/llm/training.py) on one or more training fit sets.

Each fit set's narrow 24-layer models (width 64: the GPU idles, the step is the host) give, per
point, the measured step over (traced kernels x the decoder-layer host per kernel of the host
profile measured in the same device call): the factor. The predicted host time is exactly
``factor x kernels x per-kernel``, so a point's factor is the shipped factor x measured / the
predicted host time. A family and policy's factor is the median over its points of every fit
set given (each VM's host profile prices its own points, so VMs of different speeds pool); the
other families' ("other") the median of all points of the policy. Fit data only: the unseen
training steps are never read.

    PYTHONPATH=. python validation/fitset/fit_host_factor.py validation/results/train-fitset-h100-clean \
        validation/results/train-fitset-h200-2026-11-28 validation/results/train-fitset-h100-2026-11-28 \
        validation/results/train-fitset-h200-2026-11-29

(``train-fitset-h100`` of 2026-11-24 ran after profiler sessions: superseded by the clean set.)
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

from evaluate_fitset import rows  # noqa: E402

from gpumodel.llm.training import TRAIN_HOST_FACTOR, traced_policy  # noqa: E402


def point_factors(data_dir: Path) -> list[tuple[str, str, int, float]]:
    """(family, policy, batch, factor) of each narrow point of one fit set (policy: the traced
    kernel set it ran, ``traced_policy``)."""
    out = []
    for r in rows(data_dir):
        if not r["narrow"]:
            continue
        family = "gpt2" if r["model"].startswith("gpt2") else "llama"
        policy = traced_policy(r["policy"])
        shipped = TRAIN_HOST_FACTOR[(family, policy)]
        out.append((family, policy, r["batch"], shipped * r["measured_s"] / r["host_s"]))
    return out


# the fit sets the shipped TRAIN_HOST_FACTOR is the fit of (four VMs: two H100, two H200)
FIT_SETS = ("train-fitset-h100-clean", "train-fitset-h200-2026-11-28",
            "train-fitset-h100-2026-11-28", "train-fitset-h200-2026-11-29")  # fmt: skip


def pool(data_dirs: list[Path]) -> dict[tuple[str, str], list[float]]:
    """Every narrow point's factor of the fit sets ``data_dirs`` by (family, policy), and by
    ("other", policy): all families' points of the policy."""
    pooled: dict[tuple[str, str], list[float]] = {}
    for d in data_dirs:
        for family, policy, _, f in point_factors(d):
            pooled.setdefault((family, policy), []).append(f)
            pooled.setdefault(("other", policy), []).append(f)
    return pooled


def fit(data_dirs: list[Path]) -> dict[tuple[str, str], float]:
    """The factors of the fit sets ``data_dirs``: the median of each key's points
    (``pool``), to two decimals (as shipped)."""
    return {k: round(statistics.median(fs), 2) for k, fs in pool(data_dirs).items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("data_dirs", nargs="+", type=Path)
    args = ap.parse_args()
    print("| fit set | family | policy | batch | factor |\n|---|---|---|---:|---:|")
    for d in args.data_dirs:
        if not (d / "host.yaml").exists():
            print(f"error: {d} has no host.yaml (the host profile of its call)", file=sys.stderr)
            return 2
        for family, policy, batch, f in point_factors(d):
            print(f"| {d.name} | {family} | {policy} | {batch} | {f:.3f} |")
    print("\n| family | policy | n | median | range | shipped |\n|---|---|---:|---:|---|---:|")
    for (family, policy), fs in sorted(pool(args.data_dirs).items()):
        print(f"| {family} | {policy} | {len(fs)} | {statistics.median(fs):.2f} | "
              f"{min(fs):.2f}-{max(fs):.2f} | {TRAIN_HOST_FACTOR.get((family, policy))} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
