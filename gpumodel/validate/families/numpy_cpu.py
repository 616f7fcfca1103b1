"""The CPU families (engine "numpy", for CI without a GPU): a numpy stream copy (1 MiB to
32/128 MiB) and square fp32 matmuls (32 to 512/1024). They calibrate the ``cpu-numpy`` spec:
the copy fits the kernel family's bandwidth efficiency and floor, the matmul the fp32 GEMM
parameters."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpumodel.validate.families.base import Family, Group, kernel_families_fit

if TYPE_CHECKING:
    from gpumodel.calibrate import Point
    from gpumodel.calibration import CalibrationParams
    from gpumodel.specs import GPUSpec
    from gpumodel.validate.numpy_engine import Ctx


def stream_sizes(quick: bool) -> list[int]:
    return [2**p for p in range(20, 26 if quick else 28)]  # 1 MiB .. 32/128 MiB


def gemm_sizes(quick: bool) -> list[int]:
    return [32, 64, 128, 192, 256, 384, 512] + ([] if quick else [768, 1024])


# --------------------------------------------------------------------------- measure


def _stream_point(ctx: Ctx, nbytes: int) -> list[dict[str, Any]]:
    import numpy as np

    from gpumodel.validate.numpy_engine import time_host as _time

    rng = ctx.rng
    a = rng.random(nbytes // 4, dtype=np.float32)
    b = np.empty_like(a)
    t, n = _time(lambda a=a, b=b: np.copyto(b, a))
    if not np.array_equal(a, b):
        raise RuntimeError("numpy copy produced wrong data")
    return [{
        "family": "numpy_stream", "time_s": t, "repeats": n, "spread": 0.0,
        "op": {"op": "kernel", "flops": 0, "bytes": 2 * nbytes, "dtype": "fp32"},
        "meta": {"pattern": "copy", "working_set_bytes": 2 * nbytes},
    }]  # fmt: skip


def _gemm_point(ctx: Ctx, size: int) -> list[dict[str, Any]]:
    import numpy as np

    from gpumodel.validate.numpy_engine import time_host as _time

    rng = ctx.rng
    a = rng.random((size, size), dtype=np.float32)
    b = rng.random((size, size), dtype=np.float32)
    t, n = _time(lambda a=a, b=b: a @ b)
    ref = a[:4].astype(np.float64) @ b.astype(np.float64)
    if not np.allclose((a @ b)[:4], ref, rtol=1e-3):
        raise RuntimeError("numpy matmul produced wrong data")
    return [{
        "family": "numpy_gemm", "time_s": t, "repeats": n, "spread": 0.0,
        "op": {"op": "gemm", "m": size, "n": size, "k": size, "dtype": "fp32"}, "meta": {},
    }]  # fmt: skip


# --------------------------------------------------------------------------- fit


def fit_gemm(
    fam: dict[str, list[Point]], gpu: GPUSpec, params: CalibrationParams
) -> CalibrationParams:
    from gpumodel.validate.families.gemm import fit_gemm

    if fam.get("numpy_gemm"):
        params = fit_gemm("fp32", fam["numpy_gemm"], gpu, params)
    return params


NUMPY_STREAM = Family(
    name="numpy_stream",
    engine="numpy",
    points=lambda quick: [(s,) for s in stream_sizes(quick)],
    label=lambda _s: "numpy stream copy",
    measure=_stream_point,
    fit=kernel_families_fit("numpy_stream"),
    fit_order=7.9,
    groups=(Group("numpy stream", lambda p: p.family == "numpy_stream", 15.0, None, order=22),),
)
NUMPY_GEMM = Family(
    name="numpy_gemm",
    engine="numpy",
    points=lambda quick: [(s,) for s in gemm_sizes(quick)],
    label=lambda _s: "numpy matmul",
    measure=_gemm_point,
    fit=fit_gemm,
    fit_order=8,
    groups=(Group("numpy gemm", lambda p: p.family == "numpy_gemm", 15.0, None, order=21),),
)
