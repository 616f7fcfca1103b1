"""The seed polynomial sweep: a custom kernel of degree k over n fp32 elements, with and without
FMA (families ``poly`` and ``poly_fma``). It fits the FP32 vector efficiency per instruction
mix, the compute/memory overlap exponent and the loaded DRAM latency.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from gpumodel.validate.cupy_engine import BLOCK
from gpumodel.validate.cupy_engine import Context as _Context
from gpumodel.validate.cupy_engine import Dev as _Dev
from gpumodel.validate.cupy_engine import check as _check
from gpumodel.validate.families.base import Family, Group, make_record
from gpumodel.validate.timing import log_ints

if TYPE_CHECKING:
    import numpy as np

    from gpumodel.calibrate import Point
    from gpumodel.calibration import CalibrationParams
    from gpumodel.specs import GPUSpec


def poly_op(k: int, n: int, *, fma: bool) -> dict[str, Any]:
    """Seed polynomial kernel over n elements, degree k: 2k FLOPs and 8 bytes per element."""
    return {
        "op": "kernel",
        "flops": 2 * k * n,
        "bytes": 8 * n,
        "bytes_written": 4 * n,
        "dtype": "fp32",
        "fma": bool(fma),
        "threads": n,
        "threads_per_block": BLOCK,
    }


def poly_points(quick: bool) -> list[tuple[int, int]]:
    """(k, n) points of the polynomial sweep."""
    if quick:
        return [(k, 1 << 24) for k in (1, 4, 16, 64, 256, 1000)]
    ks = log_ints(1, 1000, 28)  # 25 distinct k after rounding
    return [(k, n) for n in (1 << 20, 1 << 24, 1 << 26) for k in ks]


# --------------------------------------------------------------------------- measure


def _poly_point(ctx: _Context, k: int, n: int, fma: bool) -> list[dict[str, Any]]:
    import numpy as np

    cp = ctx.cupy

    dev = _Dev(ctx)

    def make() -> tuple[Any, Any]:
        a = cp.empty(n, dtype=cp.float32)
        dev.fill_uniform(a, 0.05, 0.9)  # 0 < x < 1: powers stay finite, sums non-zero
        return a, cp.empty(n, dtype=cp.float32)

    a, b = ctx.slot("poly", n, make)
    name = "compute_k_terms_fma" if fma else "compute_k_terms"
    kern = ctx.kernel("poly.cu", name)
    grid = ((n + BLOCK - 1) // BLOCK,)
    args = (a, b, np.int32(n), np.int32(k))

    def fn() -> None:
        kern(grid, (BLOCK,), args)

    dev.poison(b)
    fn()
    ctx.sync()
    _check(dev.count_nonfinite(b) == 0, "unwritten outputs")
    idx = np.random.default_rng().integers(0, n, 2048)
    x = dev.gather(a, idx)
    got = dev.gather(b, idx)
    ref = np.zeros_like(x)
    p = x.copy()
    for _ in range(k):
        ref += p
        p *= x
    err = float(np.max(np.abs(got - ref) / np.abs(ref)))
    _check(err <= 1e-5 + 2e-7 * k, f"max rel err {err:.2e}")

    from gpumodel.validate.timing import time_cuda

    t, spread, reps = time_cuda(fn, flush=ctx.cold(8 * n), **ctx.reps)
    family = "poly_fma" if fma else "poly"
    meta = {"k": k, "n": n, "cache": "cold", "max_rel_err": err}
    return [make_record(family, poly_op(k, n, fma=fma), t, reps, spread, meta)]


# --------------------------------------------------------------------------- fit


def fit(fam: dict[str, list[Point]], gpu: GPUSpec, params: CalibrationParams) -> CalibrationParams:
    """FP32 vector efficiency per instruction mix, the overlap exponent, and the loaded DRAM
    latency that limits the seed's one-load-per-thread kernel (Little's law)."""
    from gpumodel.calibrate import fit_parameters

    poly = fam.get("poly", []) + fam.get("poly_fma", [])
    if poly:

        def build_poly(x: np.ndarray) -> CalibrationParams:
            return params.model_copy(update={
                "compute_efficiency": {**params.compute_efficiency,
                                       "vector:fp32": float(min(1.2, math.exp(x[0]))),
                                       "vector:fp32:no-fma": float(min(1.2, math.exp(x[1])))},
                "overlap_exponent": float(1.0 + math.exp(x[2])),
                "loaded_dram_latency_s": float(math.exp(x[3])),
            })  # fmt: skip

        x0 = [math.log(0.8), math.log(0.8), math.log(3.0), math.log(6e-7)]
        params = fit_parameters(poly, gpu, params, build_poly, x0)
    return params


def adapt_op(op: Any, meta: dict[str, Any]) -> Any:
    """Records from before the harness stated ``bytes_written``: the polynomial kernel writes
    4 of its 8 bytes per element."""
    if op.op_name != "kernel" or op.bytes_written is not None:
        return op
    return op.model_copy(update={"bytes_written": op.bytes * 0.5})


def _family(fma: bool) -> Family:
    name = "poly_fma" if fma else "poly"
    return Family(
        name=name,
        engine="cupy",
        points=lambda quick: [(k, n, fma) for k, n in poly_points(quick)],
        label=lambda k, n, _fma: f"{name} k={k} n={n}",
        measure=_poly_point,
        fit=None if fma else fit,  # one fit over both families
        fit_order=4,
        adapt_op=adapt_op,
        groups=() if fma else (
            Group("polynomial (seed roofline sweep)",
                  lambda p: p.family in ("poly", "poly_fma"), 5.0, None, order=6),
        ),
    )  # fmt: skip


POLY = _family(False)
POLY_FMA = _family(True)
