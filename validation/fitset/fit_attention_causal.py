#!/usr/bin/env python3
"""Fit ``ops.attention.CAUSAL_DIAGONAL_EXTRA_TILES``: per fused attention kernel (flash, cuDNN,
memory-efficient), the extra work, in 128 x 128 tiles of scores per query tile, that a causal
kernel spends on its diagonal tile.

For each candidate, set for every kernel at once, the attention family is refitted (in-process,
attention records only: the families' efficiencies absorb any overall factor) on each fit set;
each kernel's families are fitted apart, so each kernel's points depend on its own constant
only. Per kernel, the candidate with the least mean |log(predicted / measured)| over its
prefill and backward points of every fit set wins. The fit sets are validate's own
attention measurements: the H200's of 2026-11-28 (flash, cuDNN, memory-efficient; head dims 64
and 128) and the shipped H100 calibration's (flash and cuDNN, head dim 128). Nothing of the
unseen sets is read.

usage: GPUMODEL_FIT_WORKERS=1 python validation/fitset/fit_attention_causal.py [--check]
       (--check: exit 1 unless the shipped constant is the fit's choice)
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

FIT_SETS = (
    ROOT / "validation/results/h200-sxm/attention-2026-11-28/validate-attention.yaml",
    ROOT / "validation/results/h100-sxm/calibration.yaml",
)
CANDIDATES = tuple(0.25 * i for i in range(13))  # 0 to 3 tiles


def attention_records(path: Path) -> tuple[str, dict, list[dict]]:
    from gpumodel.calibration import read_calibration_file

    cal = read_calibration_file(path, measurements=True)
    recs = [r for r in cal.measurements if r["family"] == "attention"]
    return cal.gpu_id, cal.environment, recs


def log_errors(gpu: str, env: dict, records: list[dict]) -> dict[str, list[float]]:
    """Per kernel, |log(pred / meas)| of its prefill and backward points after refitting."""
    import gpumodel as gm
    from gpumodel.calibration import read_calibration_file
    from gpumodel.validate.pipeline import build_calibration

    cal, _ = build_calibration(gm.get_gpu(gpu), env, records, [], "cupy")
    with tempfile.TemporaryDirectory() as tmp:
        cal.save(Path(tmp) / "c.yaml")
        cal = read_calibration_file(Path(tmp) / "c.yaml")
    out: dict[str, list[float]] = {}
    for r in records:
        op = r["op"]
        if (r["meta"] or {}).get("backend") == "math" or op["seq"] == 1:
            continue
        pred = gm.predict(gm.ops.Attention(**{k: v for k, v in op.items() if k != "op"}), gpu,
                          calibration=cal, condition="isolated").time_s  # fmt: skip
        out.setdefault(op["impl"], []).append(abs(math.log(pred / r["time_s"])))
    return out


def mean_log_errors(extra: dict[str, float], sets: list | None = None) -> dict[str, float]:
    """Per kernel, the mean |log error| of its prefill and backward points over every fit set,
    with ``CAUSAL_DIAGONAL_EXTRA_TILES`` set to ``extra`` (restored after)."""
    import gpumodel.ops.attention as attention

    sets = sets or [attention_records(path) for path in FIT_SETS]
    shipped = attention.CAUSAL_DIAGONAL_EXTRA_TILES
    attention.CAUSAL_DIAGONAL_EXTRA_TILES = extra
    try:
        pooled: dict[str, list[float]] = {}
        for gpu, env, recs in sets:
            for impl, errs in log_errors(gpu, env, recs).items():
                pooled.setdefault(impl, []).extend(errs)
    finally:
        attention.CAUSAL_DIAGONAL_EXTRA_TILES = shipped
    return {impl: statistics.fmean(errs) for impl, errs in pooled.items()}


def main(argv: list[str]) -> int:
    import gpumodel.ops.attention as attention

    shipped = dict(attention.CAUSAL_DIAGONAL_EXTRA_TILES)
    sets = [attention_records(path) for path in FIT_SETS]
    scores: dict[str, dict[float, float]] = {impl: {} for impl in shipped}
    for extra in CANDIDATES:
        for impl, err in mean_log_errors(dict.fromkeys(shipped, extra), sets).items():
            scores[impl][extra] = err
        print(f"extra {extra:4.2f} tiles: mean |log error| "
              + ", ".join(f"{i} {100 * v[extra]:.2f}%" for i, v in scores.items()))  # fmt: skip
    best = {impl: min(v, key=v.__getitem__) for impl, v in scores.items()}
    print(json.dumps({"best": best, "shipped": shipped}))
    if "--check" in argv and best != shipped:
        print(f"shipped {shipped} is not the fit's {best}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
