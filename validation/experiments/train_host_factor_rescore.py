#!/usr/bin/env python3
"""Score the unseen training steps of every committed run with two sets of ``TRAIN_HOST_FACTOR``
(a score of a refit made on the fit set; nothing fitted here).

Each run's training records (``steps-*/steps-train.json``) are predicted as
``validation/unseen/evaluate.py`` predicts them: the GPU's own shipped calibration and the host
profile measured in the same device call (``host-train.yaml``). Prints, per run and pooled, the
median |error| (p90) and signed median of the step time, for all points and for the
host-bound ones (the narrow steps' share: GPT-2 at batch 4, TinyLlama at batch 1-2).

    python validation/experiments/train_host_factor_rescore.py \
        --before llama=1.38,gpt2=1.52,other=1.49 [--after FACTORS] [--out FILE]

FACTORS: comma-separated ``family=x`` (both policies) or ``family:policy=x`` (policy amp or
bf16) over the shipped table; --after defaults to the shipped factors.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validation" / "unseen"))

from evaluate import (  # noqa: E402
    RESULTS,
    calibration,
    emit_report,
    gpu_id_of,
    predict_step,
    stats_cell,
    steady_s,
)

import gpumodel.llm.training as training  # noqa: E402

HOST_BOUND = {("gpt2-small", 4), ("tinyllama-1.1b", 1), ("tinyllama-1.1b", 2)}


def factor_table(text: str | None) -> dict[tuple[str, str], float]:
    """The shipped ``TRAIN_HOST_FACTOR`` with ``text``'s entries (``llama=1.38`` or
    ``llama:amp=1.27``, comma-separated) put over it."""
    table = dict(training.TRAIN_HOST_FACTOR)
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, value = item.split("=")
        family, _, policy = key.strip().partition(":")
        for pol in (policy,) if policy else ("amp", "bf16"):
            table[(family, pol)] = float(value)
    return table


def errors(factors: dict[tuple[str, str], float]) -> dict[str, list[tuple[bool, float, str]]]:
    """Per run: (host-bound, predicted / measured - 1, policy) of each training point."""
    training.TRAIN_HOST_FACTOR.update(factors)
    out: dict[str, list[tuple[bool, float, str]]] = {}
    for path in sorted(RESULTS.glob("steps-h*/steps-train.json")):
        data = json.loads(path.read_text())
        if data.get("tiny") or not data.get("host_profile"):
            continue
        gpu = gpu_id_of(data.get("env") or {})
        cal = calibration(gpu)
        host = path.parent / data["host_profile"]
        for rec in data["records"]:
            if rec.get("phase") != "train" or not rec.get("step_s"):
                continue
            t = predict_step(rec, gpu, cal, host)[0]
            bound = (rec["workload"], rec["batch"]) in HOST_BOUND
            out.setdefault(path.parent.name, []).append(
                (bound, t / steady_s(rec) - 1, rec.get("policy") or "")
            )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="FACTORS to compare with")
    ap.add_argument("--after", default=None, help="FACTORS (default: the shipped ones)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    shipped, new = factor_table(args.before), factor_table(args.after)
    before, after = errors(shipped), errors(new)
    lines = [f"Training step time on the unseen runs, factors {_label(shipped)} -> "
             f"{_label(new)}: median |error| (p90), signed median.", "",
             "| run | n | all, before | all, after | host-bound, before | host-bound, after |",
             "|---|---:|---|---|---|---|"]  # fmt: skip
    for run in before:
        b, a = before[run], after[run]
        lines.append(f"| {run} | {len(b)} | {_cell(b)} | {_cell(a)} | {_cell(b, True)} | "
                     f"{_cell(a, True)} |")  # fmt: skip
    every_b = [p for pts in before.values() for p in pts]
    every_a = [p for pts in after.values() for p in pts]
    lines.append(f"| **pooled** | {len(every_b)} | {_cell(every_b)} | {_cell(every_a)} | "
                 f"{_cell(every_b, True)} | {_cell(every_a, True)} |")  # fmt: skip
    for policy in sorted({p for _, _, p in every_b}):
        pb = [x for x in every_b if x[2] == policy]
        pa = [x for x in every_a if x[2] == policy]
        lines.append(f"| pooled, `{policy}` | {len(pb)} | {_cell(pb)} | {_cell(pa)} | "
                     f"{_cell(pb, True)} | {_cell(pa, True)} |")  # fmt: skip
    text = "\n".join(lines) + "\n"
    return emit_report(text, args.out)


def _cell(points: list[tuple[bool, float, str]], host_bound: bool = False) -> str:
    return stats_cell([e for bound, e, _ in points if bound or not host_bound])


def _label(table: dict[tuple[str, str], float]) -> str:
    return "(" + ", ".join(f"{f}:{p} {v:g}" for (f, p), v in sorted(table.items())) + ")"


if __name__ == "__main__":
    sys.exit(main())
