#!/usr/bin/env python3
"""Score the unseen training steps of every committed run with the shipped ``TRAIN_HOST_FACTOR``
and with another set of factors (a score of a refit made on the fit set; nothing fitted here).

Each run's training records (``steps-*/steps-train.json``) are predicted as
``validation/unseen/evaluate.py`` predicts them: the GPU's own shipped calibration and the host
profile measured in the same device call (``host-train.yaml``). Prints, per run and pooled, the
median |error| (p90) and signed median of the step time, for all points and for the
host-bound ones (the narrow steps' share: GPT-2 at batch 4, TinyLlama at batch 1-2).

    python validation/experiments/train_host_factor_rescore.py --before 1.63,1.96,1.76 \
        --llama 1.38 --gpt2 1.52 --other 1.49 [--out FILE]
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


def errors(factors: tuple[float, float, float]) -> dict[str, list[tuple[bool, float]]]:
    """Per run: (host-bound, predicted / measured - 1) of each training point."""
    training.TRAIN_HOST_FACTOR.update(llama=factors[0], gpt2=factors[1])
    training.TRAIN_HOST_FACTOR_OTHER = factors[2]
    out: dict[str, list[tuple[bool, float]]] = {}
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
            out.setdefault(path.parent.name, []).append((bound, t / steady_s(rec) - 1))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--llama", type=float, required=True)
    ap.add_argument("--gpt2", type=float, required=True)
    ap.add_argument("--other", type=float, required=True)
    ap.add_argument(
        "--before",
        default=None,
        help="llama,gpt2,other factors to compare with (default: the shipped ones)",
    )
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    shipped = (training.TRAIN_HOST_FACTOR["llama"], training.TRAIN_HOST_FACTOR["gpt2"],
               training.TRAIN_HOST_FACTOR_OTHER)  # fmt: skip
    if args.before:
        shipped = tuple(float(x) for x in args.before.split(","))
    new = (args.llama, args.gpt2, args.other)
    before, after = errors(shipped), errors(new)
    lines = [f"Training step time on the unseen runs, factors (llama, gpt2, other) {shipped} "
             f"-> {new}: median |error| (p90), signed median.", "",
             "| run | n | all, before | all, after | host-bound, before | host-bound, after |",
             "|---|---:|---|---|---|---|"]  # fmt: skip
    pooled: dict[str, list[float]] = {"b": [], "a": [], "hb": [], "ha": []}
    for run in before:
        b, a = before[run], after[run]
        hb, ha = [e for h, e in b if h], [e for h, e in a if h]
        pooled["b"] += [e for _, e in b]
        pooled["a"] += [e for _, e in a]
        pooled["hb"] += hb
        pooled["ha"] += ha
        lines.append(f"| {run} | {len(b)} | {stats_cell([e for _, e in b])} | {stats_cell([e for _, e in a])} "
                     f"| {stats_cell(hb)} | {stats_cell(ha)} |")  # fmt: skip
    lines.append(f"| **pooled** | {len(pooled['b'])} | {stats_cell(pooled['b'])} | {stats_cell(pooled['a'])} "
                 f"| {stats_cell(pooled['hb'])} | {stats_cell(pooled['ha'])} |")  # fmt: skip
    text = "\n".join(lines) + "\n"
    return emit_report(text, args.out)


if __name__ == "__main__":
    sys.exit(main())
