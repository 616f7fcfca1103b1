"""Published kernel efficiencies per GPU generation (``specs/published/kernels.yaml``) and the
floor they put under a calibration carried from another generation.

A calibration fitted on one generation carries its *relative* efficiencies to another
(``gpumodel.calibration.transfer``); a kernel family whose efficiency is a property of the
kernel written for that generation (FlashAttention-2 on Ampere vs Hopper, cuBLAS's tiles)
may then predict a target slower than its own generation's kernels are published to run.
``apply_floors`` raises such a family's efficiency until the prediction at every published
point reaches the published fraction of the target's dense tensor peak; it never lowers one.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from gpumodel import _paths

# rounds of rescaling: the time is not exactly proportional to the efficiency (overlap with the
# memory time, the vector part of attention), so the scale is re-solved a few times
_ROUNDS = 8


@cache
def published_kernels() -> dict[str, Any]:
    """The shipped table, {architecture: {family: entry}}."""
    import yaml

    path = _paths.specs_dir() / "published" / "kernels.yaml"
    return yaml.safe_load(path.read_text()) if path.is_file() else {}


def _fractions(entry: dict[str, Any], dtype: str, gpu: Any, params: Any) -> list[float]:
    """Predicted achieved / dense tensor peak at the entry's points (isolated, as published)."""
    from gpumodel.ops import from_row
    from gpumodel.predict import predict_with_params

    out = []
    for row in entry["points"]:
        op = from_row({**row, "dtype": dtype})
        p = predict_with_params(op, gpu, params, condition="isolated")
        out.append(p.flops / p.time_s / gpu.peak_flops(dtype, "tensor"))
    return out


def apply_floors(params: Any, target: Any) -> tuple[Any, dict[str, float]]:
    """(params with every family of ``target``'s generation at or above its published
    fraction of peak at the published points, {family:dtype: scale applied}). GEMM first: the
    attention kernels' compute efficiency is built on it."""
    table = published_kernels().get(target.architecture, {})
    applied: dict[str, float] = {}
    for family in ("gemm", "attention"):
        entry = table.get(family)
        if entry is None:
            continue
        for dtype in entry["dtypes"]:
            if not target.peak_flops(dtype, "tensor"):
                continue
            scale = 1.0
            for _ in range(_ROUNDS):
                worst = min(_fractions(entry, dtype, target, params))
                if worst >= entry["fraction_of_peak"]:
                    break
                step = entry["fraction_of_peak"] / worst * (1 + 1e-6)  # land just above it
                params = _scaled(params, family, dtype, step)
                scale *= step
            if scale != 1.0:
                applied[f"{family}:{dtype}"] = scale
    return params, applied


def _scaled(params: Any, family: str, dtype: str, step: float) -> Any:
    if family == "gemm":
        g = params.gemm.get(dtype)
        if g is None:
            return params
        gemm = {**params.gemm, dtype: g.model_copy(update={"efficiency": g.efficiency * step})}
        return params.model_copy(update={"gemm": gemm})
    eff = dict(params.family_efficiency)
    eff[family] = eff.get(family, 1.0) * step
    return params.model_copy(update={"family_efficiency": eff})


__all__ = ["apply_floors", "published_kernels"]
