#!/usr/bin/env python3
"""Score the unseen training steps of every committed run with this checkout's model: per run
and policy, the median |error| of the step time and of the peak memory (scores only; nothing
fitted here). H100 runs use the H100's own calibration, H200 runs the H100's carried over (the
README's columns), each with the host profile of its own device call, as
``validation/unseen/evaluate.py`` predicts them. Prints a markdown table and, per GPU and
policy, the range of the runs' medians (what the README's training rows quote).

    PYTHONPATH=.:validation/unseen python validation/experiments/training_rescore.py [--out FILE]

Compare two models by running it in a worktree of each (``git worktree add``).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validation" / "unseen"))

from evaluate import RESULTS, calibration, emit_report, evaluate_steps  # noqa: E402

# the README's columns: each GPU's runs and the calibration they are predicted with
COLUMNS = {"h100-sxm": "h100-sxm own + host profile", "h200-sxm": "from h100-sxm + host profile"}


def run_medians() -> list[tuple[str, str, str, str, float, int]]:
    """(gpu, run, policy, metric, median |error|, points) of every committed training run."""

    def cal_for(gpu_id: str) -> list[tuple[str, object]]:
        if gpu_id == "h100-sxm":
            return [(f"{gpu_id} own", calibration(gpu_id))]
        return [("from h100-sxm", calibration(gpu_id, "h100-sxm"))]

    paths = sorted(RESULTS.glob("steps-h*/steps-train.json"), key=_run_order)
    rows = [r for r in evaluate_steps(paths, cal_for) if r["phase"] == "train"
            and r["calibration"] == COLUMNS.get(r["gpu"]) and r["error"] is not None]  # fmt: skip
    out = []
    for path in paths:
        mine = [r for r in rows if Path(r["source"]).parent.name == path.parent.name]
        for policy in sorted({r["policy"] for r in mine}):
            for metric in ("time", "peak memory"):
                errs = [abs(r["error"]) for r in mine if r["policy"] == policy
                        and r["metric"] == metric]  # fmt: skip
                if errs:
                    out.append((mine[0]["gpu"], path.parent.name, policy, metric,
                                statistics.median(errs), len(errs)))  # fmt: skip
    return out


def _run_order(path: Path) -> tuple[str, int]:
    name = path.parent.name
    gpu, _, run = name.removeprefix("steps-").partition("-run")
    return gpu, int(run) if run.isdigit() else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows = run_medians()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    lines = [f"Unseen training steps, this checkout's model (`{commit}`), per run and policy: "
             "median |error| (points). H100: its own calibration; H200: the H100's carried; "
             "host profile of each run's call.", "",
             "| GPU | run | policy | time | peak memory |", "|---|---|---|---:|---:|"]  # fmt: skip
    cells: dict[tuple[str, str, str], dict[str, str]] = {}
    spans: dict[tuple[str, str, str], list[float]] = {}
    for gpu, run, policy, metric, med, n in rows:
        cells.setdefault((gpu, run, policy), {})[metric] = f"{100 * med:.1f}% ({n})"
        spans.setdefault((gpu, policy, metric), []).append(med)
    for (gpu, run, policy), c in cells.items():
        lines.append(f"| {gpu} | {run} | {policy} | {c.get('time', '-')} | "
                     f"{c.get('peak memory', '-')} |")  # fmt: skip
    lines += ["", "| GPU | policy | metric | runs | range of the runs' medians | median |",
              "|---|---|---|---:|---|---:|"]  # fmt: skip
    for (gpu, policy, metric), meds in sorted(spans.items()):
        lines.append(f"| {gpu} | {policy} | {metric} | {len(meds)} | {100 * min(meds):.1f}-"
                     f"{100 * max(meds):.1f}% | {100 * statistics.median(meds):.1f}% |")  # fmt: skip
    return emit_report("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    sys.exit(main())
