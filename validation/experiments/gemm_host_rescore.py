#!/usr/bin/env python3
"""Score the eager GEMM host rules on every committed unseen GEMM run (a score: the unseen data
fitted nothing; the rules were fitted on validation/results/h100-sxm/gemm-launches-2026-11-28).

The two rules of 2026-11-28 price one eager GEMM call's host time:
- ``scaled_mm``: an fp8 product is a ``torch._scaled_mm`` call, timed as such by host profiles
  measured since (older profiles stand in their ``matmul`` figure, so they score as before);
- split-K (``gpumodel.model.splitk``): where cuBLAS splits K, the call costs
  ``SPLIT_HOST_FACTOR`` x an unsplit one (its reduction's launch).

Each back-to-back eager GEMM of a run (condition ``in-workload``) is predicted with the H100's
shipped calibration (carried to the H200) and the host profile of the same device call, with
neither rule, with ``scaled_mm`` alone, and with both. Prints a markdown table per run: all
GEMMs, the launch-bound ones (the loop's measured host enqueue kept the GPU waiting), and the
fp8 ones.

    python validation/experiments/gemm_host_rescore.py [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validation" / "unseen"))

from evaluate import RESULTS, calibration, emit_report, kernel_op, stats_cell  # noqa: E402

import gpumodel as gm  # noqa: E402
from gpumodel.hostprofile import load_host  # noqa: E402
from gpumodel.model import splitk  # noqa: E402

VARIANTS = ("neither rule", "+ scaled_mm", "+ split-K (both)")
SUBSETS = ("all", "launch-bound", "fp8")


def errors(run: Path) -> dict[str, dict[str, list[float]]]:
    """{variant: {"all": errors, "launch-bound": errors, "fp8": errors}} of the run's eager
    GEMMs."""
    gpu = "h200" if "h200" in run.name else "h100"
    cal = calibration(f"{gpu}-sxm", "h100-sxm")
    hp = load_host(str(run / "host-before.yaml"))
    plain = hp.model_copy(update={"eager_op_s": hp.eager_op_s.model_copy(
        update={"scaled_mm": None})})  # fmt: skip
    gains = dict(splitk.SPLIT_GAIN)
    out: dict[str, dict[str, list[float]]] = {v: {w: [] for w in SUBSETS} for v in VARIANTS}
    recs = [r for r in json.loads((run / "unseen.json").read_text())["records"]
            if r["family"] == "gemm" and r["condition"] == "in-workload"]  # fmt: skip
    for variant in VARIANTS:
        splitk.SPLIT_GAIN.clear()  # the rule off: no dtype splits
        if variant == VARIANTS[2]:
            splitk.SPLIT_GAIN.update(gains)
        host = plain if variant == VARIANTS[0] else hp
        for r in recs:
            err = gm.predict(kernel_op(r), gpu, cal, host=host).time_s / r["time_s_median"] - 1
            out[variant]["all"].append(err)
            if r.get("launch_bound"):
                out[variant]["launch-bound"].append(err)
            if r["dtype"].startswith("fp8"):
                out[variant]["fp8"].append(err)
    splitk.SPLIT_GAIN.update(gains)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    lines = ["| run | GEMMs | n | " + " | ".join(VARIANTS) + " |", "|---|---|---:|---|---|---|"]
    for run in sorted(RESULTS.glob("unseen-h*-run*"), key=lambda p: (p.name[:11], int(
            p.name.rsplit("run", 1)[1]))):  # fmt: skip
        if not (run / "host-before.yaml").exists() or not (run / "unseen.json").exists():
            continue
        errs = errors(run)
        if not errs[VARIANTS[0]]["all"]:
            continue
        for which in SUBSETS:
            cells = " | ".join(stats_cell(errs[v][which]) for v in VARIANTS)
            lines.append(f"| {run.name} | {which} | {len(errs[VARIANTS[0]][which])} | {cells} |")
    text = ("Eager GEMMs back to back (in-workload) with the same call's host profile; median "
            "|error| (p90), signed median; H100 calibration (carried to the H200).\n\n"
            + "\n".join(lines) + "\n")  # fmt: skip
    return emit_report(text, args.out)


if __name__ == "__main__":
    sys.exit(main())
