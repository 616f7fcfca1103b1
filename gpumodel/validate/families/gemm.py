"""GEMMs C[M,N] = A[M,K] @ B[K,N] in fp32, TF32, fp16, bf16 (through CuPy's cuBLAS, or PyTorch
where CuPy cannot multiply bf16) and fp8 (torch._scaled_mm): square, LLM projection and
misaligned shapes. It fits, per dtype, the large-shape efficiency, misalignment, the
weight-bound bandwidth of small M and the floor.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from gpumodel.errors import SpecError
from gpumodel.validate.cupy_engine import Context as _Context
from gpumodel.validate.cupy_engine import Dev as _Dev
from gpumodel.validate.cupy_engine import bits_to_float64
from gpumodel.validate.cupy_engine import check as _check
from gpumodel.validate.cupy_engine import compute_type as _cupy_compute_type
from gpumodel.validate.cupy_engine import rel_err as _rel_err
from gpumodel.validate.families.base import Family, Group, make_record

if TYPE_CHECKING:
    import numpy as np

    from gpumodel.calibrate import Point
    from gpumodel.calibration import CalibrationParams, GemmParams
    from gpumodel.specs import GPUSpec


GEMM_DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8")
# Norm-wise relative error allowed against the float64 reference, per GEMM dtype. fp32 is kept
# under TF32's typical ~3e-4 on purpose: a pass proves TF32 was really off.
GEMM_TOLERANCE = {"fp32": 5e-5, "tf32": 5e-3, "fp16": 5e-3, "bf16": 2e-2, "fp8": 3e-2}
LLM_PROJECTIONS = ((4096, 4096), (11008, 4096), (4096, 11008), (12288, 4096), (14336, 4096))


def gemm_op(m: int, n: int, k: int, dtype: str, transpose_b: bool = False) -> dict[str, Any]:
    op = {"op": "gemm", "m": int(m), "n": int(n), "k": int(k), "dtype": dtype}
    return {**op, "transpose_b": True} if transpose_b else op


# products whose B is stored transposed, as nn.Linear keeps its weight ([N, K]; x @ W.T), with a
# misaligned N: LM heads over odd vocabularies (GPT-2 medium's 50257 x 1024, a padded Llama-2
# vocabulary of 32001) at decode-to-prefill M; timed for the dtypes cuBLAS runs through CuPy/torch
LINEAR = "linear-misaligned"
LINEAR_DTYPES = ("fp32", "tf32", "fp16", "bf16")  # fp8's _scaled_mm always takes B transposed


def gemm_shapes(quick: bool) -> list[tuple[int, int, int, str]]:
    """(M, N, K, tag) GEMM shapes; C[M,N] = A[M,K] @ B[K,N], all row-major (``LINEAR``: B
    stored as its transpose, [N, K])."""
    if quick:
        squares = (1024, 4096, 8192)
        ms: tuple[int, ...] = (1, 16, 128, 1024, 4096)
        projections: tuple[tuple[int, int], ...] = ((4096, 4096), (14336, 4096))
        misaligned = [(2048, 50257, 768), (2048, 50304, 768), (4096, 4095, 4096)]
    else:
        squares = (256, 512, 1024, 2048, 3000, 4096, 6144, 8192, 16384)
        ms = tuple(1 << i for i in range(14))  # 1 .. 8192
        projections = LLM_PROJECTIONS
        misaligned = [
            (4096, 4095, 4096),
            (4096, 4097, 4096),
            (2048, 50257, 768),
            (2048, 50304, 768),
            (4096, 4096, 4095),
            (4096, 4096, 4097),
        ]
    linear_ms = (16, 1024) if quick else (1, 16, 64, 256, 1024, 4096)
    linear = [(m, n, k) for (n, k) in ((50257, 1024), (32001, 4096)) for m in linear_ms]
    out = [(s, s, s, "square") for s in squares]
    out += [(m, n, k, "llm") for (n, k) in projections for m in ms]
    out += [(m, n, k, "misaligned") for (m, n, k) in misaligned]
    out += [(m, n, k, LINEAR) for (m, n, k) in linear]
    return out


# --------------------------------------------------------------------------- measure


def _torch_importable() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def _measurable(points: list[tuple[Any, ...]], unavailable: list[dict[str, Any]]) -> list:
    """Without PyTorch, fp8 GEMMs (torch._scaled_mm) cannot run: dropped, and said so."""
    if _torch_importable() or not any(p[3] == "fp8" for p in points):
        return points
    unavailable.append(
        {
            "family": "gemm",
            "what": "fp8",
            "reason": "fp8 GEMMs run through torch._scaled_mm; PyTorch not importable",
        }
    )
    return [p for p in points if p[3] != "fp8"]


def _cupy_bf16(ctx: _Context) -> Any:
    """CuPy's bfloat16 dtype (through ml_dtypes) if CuPy can multiply it on this GPU, else None."""
    if ctx._cupy_bf16 is None:
        ctx._cupy_bf16 = False
        try:
            import ml_dtypes
            import numpy as np

            cp = ctx.cupy
            dev = _Dev(ctx)
            a = cp.empty((64, 64), dtype=ml_dtypes.bfloat16)
            dev.fill_uniform(a, -1.0, 1.0)
            c = cp.matmul(a, a)
            ah = bits_to_float64(cp.asnumpy(a).view(np.uint16), "bfloat16")
            ch = bits_to_float64(cp.asnumpy(c).view(np.uint16), "bfloat16")
            if _rel_err(ch, ah @ ah) < GEMM_TOLERANCE["bf16"]:
                ctx._cupy_bf16 = ml_dtypes.bfloat16
        except Exception:
            ctx._cupy_bf16 = False
    return ctx._cupy_bf16 or None


def _gemm_sample(m: int, n: int, count: int = 32) -> tuple[Any, Any]:
    import numpy as np

    rng = np.random.default_rng()
    return rng.integers(0, m, count), rng.integers(0, n, count)


def _gemm_point(ctx: _Context, m: int, n: int, k: int, dtype: str, tag: str) -> list[dict]:
    if dtype in ("fp32", "tf32", "fp16"):
        return _gemm_cupy(ctx, m, n, k, dtype, tag, None)
    if dtype == "bf16":
        bf16 = _cupy_bf16(ctx)
        if bf16 is not None:
            return _gemm_cupy(ctx, m, n, k, dtype, tag, bf16)
        if not _torch_importable():
            raise RuntimeError("CuPy cannot run bfloat16 GEMMs and PyTorch is not importable")
    return _gemm_torch(ctx, m, n, k, dtype, tag)


def _gemm_cupy(
    ctx: _Context, m: int, n: int, k: int, dtype: str, tag: str, bf16: Any
) -> list[dict[str, Any]]:
    import numpy as np

    cp = ctx.cupy
    np_dtype = {"fp32": np.float32, "tf32": np.float32, "fp16": np.float16}.get(dtype, bf16)
    itemsize = np.dtype(np_dtype).itemsize
    if dtype in ("fp32", "tf32"):
        _cupy_compute_type(ctx, tf32=(dtype == "tf32"))

    dev = _Dev(ctx)
    transposed = tag == LINEAR
    a = cp.empty((m, k), dtype=np_dtype)
    b = cp.empty((n, k) if transposed else (k, n), dtype=np_dtype)
    c = cp.empty((m, n), dtype=np_dtype)
    dev.fill_uniform(a, -1.0, 1.0)
    dev.fill_uniform(b, -1.0, 1.0)
    dev.poison(c)
    b_op = b.T if transposed else b  # a view: cuBLAS gets the transpose flag, nothing is copied

    def fn() -> None:
        cp.matmul(a, b_op, out=c)

    fn()
    ctx.sync()
    _check(dev.count_nonfinite(c) == 0, "unwritten outputs")
    ii, jj = _gemm_sample(m, n)
    kk = np.arange(k, dtype=np.int64)
    rows = dev.gather(a, ii[:, None] * k + kk[None, :]).reshape(len(ii), k)
    cols = dev.gather(b, jj[:, None] * k + kk[None, :] if transposed
                      else kk[None, :] * n + jj[:, None]).reshape(len(jj), k)  # fmt: skip
    got = dev.gather(c, ii * n + jj)
    ref = np.einsum("ik,ik->i", rows, cols)
    err = _rel_err(got, ref)
    _check(err <= GEMM_TOLERANCE[dtype], f"{dtype} rel err {err:.2e}")

    from gpumodel.validate.timing import time_cuda

    footprint = (m * k + k * n + m * n) * itemsize
    flush = ctx.cold(footprint)
    t, spread, reps = time_cuda(fn, flush=flush, **ctx.reps)
    meta = {
        "engine": "cupy",
        "shape_set": tag,
        "cache": "cold",
        "flushed": flush is not None,
        "rel_err": err,
    }
    return [make_record("gemm", gemm_op(m, n, k, dtype, transposed), t, reps, spread, meta)]


def _gemm_torch(
    ctx: _Context, m: int, n: int, k: int, dtype: str, tag: str
) -> list[dict[str, Any]]:
    import torch

    dev = "cuda"

    def rand(rows: int, cols: int) -> Any:
        return torch.rand(rows, cols, device=dev, dtype=torch.float32) * 2 - 1

    transposed = tag == LINEAR
    if dtype == "bf16":
        a = rand(m, k).to(torch.bfloat16)
        b = rand(n, k).to(torch.bfloat16).t() if transposed else rand(k, n).to(torch.bfloat16)
        c = torch.full((m, n), float("nan"), device=dev, dtype=torch.bfloat16)

        def fn() -> Any:
            return torch.mm(a, b, out=c)

        itemsize, out_size = 2, 2
        a_ref, b_ref = a, b
        extra: dict[str, Any] = {}
    elif dtype == "fp8":
        f8 = torch.float8_e4m3fn
        a = rand(m, k).to(f8)
        b = rand(n, k).to(f8).t()  # column-major B, as cuBLASLt's fp8 kernels want
        one = torch.ones((), device=dev, dtype=torch.float32)
        c = None

        def fn() -> Any:
            return torch._scaled_mm(
                a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True
            )

        itemsize, out_size = 1, 2
        a_ref, b_ref = a, b
        extra = {"fp8_format": "e4m3", "out_dtype": "bf16", "use_fast_accum": True}
    else:
        raise SpecError(dtype)

    res = fn()
    torch.cuda.synchronize()
    _check(bool(torch.isfinite(res.float()).all()), "non-finite or unwritten outputs")
    ii, jj = _gemm_sample(m, n)
    ii_t = torch.as_tensor(ii, device=dev)
    jj_t = torch.as_tensor(jj, device=dev)
    rows = a_ref.float()[ii_t].double()
    cols = b_ref.float()[:, jj_t].double()
    ref = (rows * cols.t()).sum(dim=1).cpu().numpy()
    got = res.float()[ii_t, jj_t].double().cpu().numpy()
    err = _rel_err(got, ref)
    _check(err <= GEMM_TOLERANCE[dtype], f"{dtype} rel err {err:.2e}")
    del res

    from gpumodel.validate.timing import time_torch

    footprint = (m * k + k * n) * itemsize + m * n * out_size
    flush = ctx.torch_flush() if footprint < 4 * ctx.l2_bytes else None
    t, spread, reps = time_torch(fn, flush=flush, **ctx.reps)
    meta = {
        "engine": "torch",
        "torch_version": str(torch.__version__),
        "shape_set": tag,
        "cache": "cold",
        "flushed": flush is not None,
        "rel_err": err,
        **extra,
    }
    return [make_record("gemm", gemm_op(m, n, k, dtype, transposed), t, reps, spread, meta)]


# --------------------------------------------------------------------------- fit


def _gemm_m(p: Point) -> int:
    return int(getattr(p.op, "m", 0))


def fit_gemm(
    dtype: str, pts: list[Point], gpu: GPUSpec, params: CalibrationParams
) -> CalibrationParams:
    """One dtype's GEMM parameters: large-shape efficiency, the weight-bound bandwidth of small
    M, the floor, the overlap exponent and (where misaligned shapes were measured) their
    efficiency."""
    from gpumodel.calibrate import fit_parameters, fit_vector
    from gpumodel.calibration import GemmParams
    from gpumodel.model.gemm import misaligned
    from gpumodel.ops.base import GemmShape

    def shape(p: Point) -> GemmShape:
        o = p.op
        return GemmShape(o.m, o.n, o.k, o.batch, o.dtype)  # type: ignore[attr-defined]

    bad = [p for p in pts if misaligned(shape(p))]
    has_bad = any(not p.op.transpose_b for p in bad)  # type: ignore[attr-defined]
    has_bad_t = any(p.op.transpose_b for p in bad)  # type: ignore[attr-defined]
    # misaligned x @ W.T at M > 1 (weight-bound at small M): its streaming rate, for the 16-bit
    # types whose kernels streamed slowly (fp32/TF32 ones kept the aligned rate within ~20%);
    # products with N off alignment are priced in whole tiles instead (model.gemm.
    # misaligned_rows), so only K-misaligned ones would fit it
    has_stream = dtype in ("fp16", "bf16") and any(
        p.op.transpose_b and p.op.m > 1 and "n" not in misaligned(shape(p))
        for p in bad  # type: ignore[attr-defined]
    )

    def build(x: np.ndarray) -> CalibrationParams:
        g = GemmParams(
            efficiency=float(min(1.2, math.exp(x[0]))),
            small_m_bandwidth_efficiency=float(min(1.2, math.exp(x[1]))),
            overhead_s=math.exp(x[2]),
            overlap_exponent=float(1.0 + math.exp(x[3])),
            misaligned_efficiency=float(min(1.2, math.exp(x[4]))) if has_bad else 1.0,
            misaligned_transposed_efficiency=float(min(1.2, math.exp(x[5]))) if has_bad_t else None,
            misaligned_transposed_stream=float(min(1.0, math.exp(x[6]))) if has_stream else None,
        )
        return params.model_copy(update={"gemm": {**params.gemm, dtype: g}})

    x0 = [math.log(0.75), math.log(0.8), math.log(8e-6), math.log(3.0), math.log(0.5)]
    x0 += [math.log(0.5)] if has_bad_t else []
    x0 += [math.log(0.5)] if has_stream else []
    x, loss = fit_vector(pts, gpu, build, x0)
    if has_bad_t:
        own = [p for p in bad if p.op.transpose_b]  # type: ignore[attr-defined]
        x = _restart_misaligned_transposed(x, loss, pts, own, gpu, build, has_stream)
    params = build(x)
    # M = 1 runs cuBLAS's GEMV kernels: their streaming rate, fitted on the M = 1 points alone
    # once the rest is fixed, at least the M > 1 rate (gpumodel.model.gemm.stream_factor)
    gemv = [p for p in pts if p.op.m == 1]  # type: ignore[attr-defined]
    if not gemv:
        return params
    fitted = params.gemm[dtype]

    def build_gemv(x: np.ndarray) -> CalibrationParams:
        rate = min(1.2, fitted.small_m_bandwidth_efficiency * (1 + math.exp(x[0])))
        g = fitted.model_copy(update={"gemv_bandwidth_efficiency": float(rate)})
        return params.model_copy(update={"gemm": {**params.gemm, dtype: g}})

    return fit_parameters(gemv, gpu, params, build_gemv, [math.log(0.1)])


# Starts for the misaligned x @ W.T pair (efficiency, streaming rate), as fractions.
MISALIGNED_T_STARTS = [(e, r) for e in (0.1, 0.25, 0.6) for r in (0.15, 0.3, 0.6)]


def _restart_misaligned_transposed(
    x: np.ndarray, loss: float, pts: list[Point], own: list[Point], gpu: GPUSpec, build: Any,
    has_stream: bool,
) -> np.ndarray:  # fmt: skip
    """The joint fit's vector, or a better one: the misaligned x @ W.T efficiency (entry 5)
    and, for the 16-bit types, streaming rate (entry 6) are refitted on ``own`` (the misaligned
    x @ W.T points of ``pts``) from ``MISALIGNED_T_STARTS``; where the best of them lowers the
    dtype's whole log loss by more than 2%, the vector is polished from there and kept if it
    stays lower.

    Why: the joint simplex has seven parameters and six fitted misaligned x @ W.T points; it
    can stop where the pair's efficiency sits above its 1.2 cap, a flat region, with the
    streaming rate alone pricing the shapes. Two H100 runs of near-identical data gave
    (0.114, 0.271) and (1.2, 0.151); the second priced the fitted 4096 x 50257 x 1024 bf16
    point 3.8x fast, its log loss 0.101 against 0.040 for the first run's pair
    (validation/results/h100-sxm/validate-2026-11-27-run9)."""
    import numpy as np

    from gpumodel.calibrate import fit_vector, measured_times, predict_points
    from gpumodel.fitting import log_loss

    width = 2 if has_stream else 1
    rest = x[:5]

    def pair_build(y: np.ndarray) -> Any:
        return build(np.concatenate([rest, y]))

    starts = {tuple(math.log(v) for v in start[:width]) for start in MISALIGNED_T_STARTS}
    fits = [fit_vector(own, gpu, pair_build, list(s)) for s in sorted(starts)]
    candidate = np.concatenate([rest, min(fits, key=lambda f: f[1])[0]])
    # the joint fit stands unless the pair alone improves on it by more than noise
    if log_loss(predict_points(pts, gpu, build(candidate)), measured_times(pts)) >= loss * 0.98:
        return x
    polished, polished_loss = fit_vector(pts, gpu, build, candidate)
    return polished if polished_loss < loss else x


def _fit_one_dtype(
    dtype: str, pts: list[Point], gpu: GPUSpec, params: CalibrationParams
) -> GemmParams:
    return fit_gemm(dtype, pts, gpu, params).gemm[dtype]


def fit(fam: dict[str, list[Point]], gpu: GPUSpec, params: CalibrationParams) -> CalibrationParams:
    """GEMM per dtype: each dtype's kernels are priced by its own parameters alone, so the
    dtypes are fitted independently, in worker processes where there are cores for them
    (gpumodel.parallel), and merged in dtype order."""
    from gpumodel.parallel import map_independent

    gemm_by_dtype: dict[str, list[Point]] = {}
    for p in fam.get("gemm", []):
        gemm_by_dtype.setdefault(p.op.dtype, []).append(p)  # type: ignore[attr-defined]
    dtypes = sorted(gemm_by_dtype)
    fitted = map_independent(_fit_one_dtype,
                             [(d, gemm_by_dtype[d], gpu, params) for d in dtypes])  # fmt: skip
    return params.model_copy(update={"gemm": {**params.gemm, **dict(zip(dtypes, fitted))}})


def _points(quick: bool) -> list[tuple[int, int, int, str, str]]:
    return [(m, n, k, dtype, tag) for dtype in GEMM_DTYPES for m, n, k, tag in gemm_shapes(quick)
            if tag != LINEAR or dtype in LINEAR_DTYPES]  # fmt: skip


def _misaligned(p: Point) -> bool:
    from gpumodel.model.gemm import misaligned
    from gpumodel.ops.base import GemmShape

    o = p.op
    return bool(misaligned(GemmShape(o.m, o.n, o.k, o.batch, o.dtype)))  # type: ignore[attr-defined]


GEMM = Family(
    name="gemm",
    engine="cupy",
    points=_points,
    label=lambda m, n, k, dtype, tag: f"gemm {dtype} {m}x{n}x{k}{' x@W.T' if tag == LINEAR else ''}",
    measure=_gemm_point,
    filter_points=_measurable,
    release=lambda ctx: _cupy_compute_type(ctx, None),
    fit=fit,
    fit_order=5,
    groups=(
        Group("gemm (M >= 512)", lambda p: p.family == "gemm" and _gemm_m(p) >= 512, 5.0, 15.0,
              order=1),
        Group("gemm (all shapes)", lambda p: p.family == "gemm", 5.0, 15.0, order=2),
        Group("gemm misaligned N or K (A @ B and x @ W.T)",
              lambda p: p.family == "gemm" and _misaligned(p), 10.0, None, order=2.5),
    ),
)  # fmt: skip
