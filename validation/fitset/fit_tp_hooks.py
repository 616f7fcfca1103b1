#!/usr/bin/env python3
"""Fit ``HF_TP_HOOKS_OVER_ELEMENTWISE`` (gpumodel/llm/runtimes.py): the host time HF
transformers' tensor-parallel hooks add per sharded projection, over the host profile's eager
``elementwise`` op.

The fit set: validation/results/h200-sxm-x2/tp-eager-fit-2026-12-01 (``multi_gpu_unseen.py --part
tp-eager --paired``): Llama-3-8B hf-eager decode and prefill at tensor parallel 2 on 2 x H200,
each point's one-GPU twin timed on GPU 0 right after it in the same process, four rounds, and
the host profile measured first in the same call. Per host-bound point and round, the measured
ratio R = tensor-parallel step / its twin's (the host's drift cancels: the two are seconds
apart); the constant h makes the model's ratio R too:

    h = (R x predicted twin - predicted tp step at h=0) / (predicted at h=1 - predicted at h=0)

(the step is linear in h where the host sets it). The median of those, to two figures. Runs 1
and 3 of tp-eager are never read.

    PYTHONPATH=. python validation/fitset/fit_tp_hooks.py
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import gpumodel as gm  # noqa: E402
from gpumodel.llm import inference  # noqa: E402
from gpumodel.llm.runtimes import HF_TP_HOOKS_OVER_ELEMENTWISE  # noqa: E402

RUN = ROOT / "validation/results/h200-sxm-x2/tp-eager-fit-2026-12-01"


def predict(rec: dict, tp: int, hooks: float) -> gm.InferenceResult:
    """The record's step at ``tp`` with the hooks constant set to ``hooks``."""
    saved = inference.HF_TP_HOOKS_OVER_ELEMENTWISE
    inference.HF_TP_HOOKS_OVER_ELEMENTWISE = hooks
    try:
        shape = ({"context": rec["context"]} if rec["phase"] == "decode" else {"seq": rec["seq"]})
        return gm.predict_inference(
            rec["workload"], "h200-sxm", phase=rec["phase"], batch=rec["batch"], dtype="bf16",
            runtime="hf-eager", kv_cache="concat", tp=tp, gpus=tp,
            host=str(RUN / "host-tp-eager.yaml"), **shape)  # fmt: skip
    finally:
        inference.HF_TP_HOOKS_OVER_ELEMENTWISE = saved


def pairs() -> list[tuple[str, int, float]]:
    """(point, round, h) for every round of every host-bound tensor-parallel point."""
    recs = json.loads((RUN / "steps-tp-eager.json").read_text())["records"]
    key = ("phase", "batch", "seq")
    twins = {tuple(r[k] for k in key): r for r in recs if not r.get("tp")}
    out = []
    for rec in recs:
        if rec.get("tp") != 2 or rec["status"] != "ok":
            continue
        twin = twins[tuple(rec[k] for k in key)]
        tp2_0, tp2_1, tp1 = predict(rec, 2, 0.0), predict(rec, 2, 1.0), predict(rec, 1, 0.0)
        if tp2_0.bound != "host" or tp1.bound != "host":
            continue
        label = f"{rec['phase']} b{rec['batch']} s{rec['seq']}"
        for r, (a, b) in enumerate(zip(rec["steps_s"], twin["steps_s"])):
            ratio = statistics.median(a) / statistics.median(b)
            h = (ratio * tp1.time_s - tp2_0.time_s) / (tp2_1.time_s - tp2_0.time_s)
            out.append((label, r + 1, h))
    return out


def main() -> int:
    every = pairs()
    for label, r, h in every:
        print(f"{label:22s} round {r}: {h:6.2f}")
    value = float(f"{statistics.median(h for *_, h in every):.2g}")
    print(f"{len(every)} pairs; HF_TP_HOOKS_OVER_ELEMENTWISE = {value:g} "
          f"(shipped {HF_TP_HOOKS_OVER_ELEMENTWISE:g})")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
