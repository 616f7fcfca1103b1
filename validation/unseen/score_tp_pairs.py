#!/usr/bin/env python3
"""Score a paired tp-eager run (``multi_gpu_unseen.py --part tp-eager --paired``): per
tensor-parallel point, the median over its rounds of (its step / its one-GPU twin's, timed
seconds apart in the same process, so the host's drift between them is small) against the
model's ratio of the two steps, with the run's own host profile and the GPU's shipped
calibration. Scores only: nothing here is read by a fit.

    PYTHONPATH=. python validation/unseen/score_tp_pairs.py validation/results/steps-h200x2-tp-eager-run3
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import gpumodel as gm

KEY = ("workload", "phase", "batch", "seq")


def predicted(rec: dict, tp: int, host: Path) -> gm.InferenceResult:
    shape = {"context": rec["context"]} if rec["phase"] == "decode" else {"seq": rec["seq"]}
    return gm.predict_inference(rec["workload"], "h200-sxm", phase=rec["phase"],
                                batch=rec["batch"], runtime="hf-eager", kv_cache="concat", tp=tp,
                                host=str(host), **shape)  # fmt: skip


def main(run: Path) -> int:
    doc = json.loads((run / "steps-tp-eager.json").read_text())
    host = run / doc["host_profile"]
    twins = {tuple(r[k] for k in KEY): r for r in doc["records"] if not r.get("tp")}
    lines = ["| model | phase | batch x seq | measured ratio (rounds) | model | bound | error |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    errors = []
    for rec in doc["records"]:
        twin = twins.get(tuple(rec[k] for k in KEY))
        if rec.get("tp", 1) < 2 or twin is None or rec["status"] != "ok":
            continue
        ratios = [statistics.median(a) / statistics.median(b)
                  for a, b in zip(rec["steps_s"], twin["steps_s"])]  # fmt: skip
        tp_step, one = predicted(rec, rec["tp"], host), predicted(rec, 1, host)
        model, measured = tp_step.time_s / one.time_s, statistics.median(ratios)
        errors.append(model / measured - 1)
        lines.append(f"| {rec['workload']} | {rec['phase']} | {rec['batch']} x {rec['seq']} | "
                     f"{measured:.2f} ({', '.join(f'{x:.2f}' for x in ratios)}) | {model:.2f} | "
                     f"{tp_step.bound} | {100 * errors[-1]:+.1f}% |")  # fmt: skip
    lines.append(f"\n{len(errors)} points: median |error| "
                 f"{100 * statistics.median(abs(e) for e in errors):.1f}%")  # fmt: skip
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        print("usage: score_tp_pairs.py RUN_DIR", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(Path(sys.argv[1])))
