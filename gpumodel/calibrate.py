"""Measurements -> calibration: fit the time model's parameters, report leave-out error.

No GPU code here. Input records are what the runners produce::

    {"family": "gemm", "op": {"op": "gemm", "m": ..}, "time_s": 1.2e-4, "meta": {...}}

Every family is split in two halves by alternating points in size order; parameters are fitted
on one half ("fit") and errors are reported on the other ("held out"). The calibration written
to disk is the one fitted on the fit half, so the errors it carries are honest for it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpumodel.calibration import CalibrationParams, FamilyError, GemmParams, HostLinkParams
from gpumodel.errors import CalibrationError
from gpumodel.fitting import error_stats, fit_affine_relative, log_loss, nelder_mead
from gpumodel.ops import from_row
from gpumodel.ops.base import Op
from gpumodel.ops.matmul import LAYOUT_TRANSPOSE_FAMILY
from gpumodel.predict import predict_with_params
from gpumodel.specs import GPUSpec

MB = 1e6


@dataclass(frozen=True)
class Point:
    """One measured op, ready to predict."""

    family: str
    op: Op
    measured_s: float
    meta: dict[str, Any] = field(default_factory=dict)
    l2: str = "cold"


# Reported groups: name -> (selector, median tolerance %, p90 tolerance % or None).
# Tolerances are the targets the issues set for a calibrated H100.
def _gemm_m(p: Point) -> int:
    return int(getattr(p.op, "m", 0))


def _backward(p: Point) -> bool:
    return p.family == "attention" and bool(getattr(p.op, "backward", False))


GROUPS: dict[str, tuple[Callable[[Point], bool], float | None, float | None]] = {
    "gemm (M >= 512)": (lambda p: p.family == "gemm" and _gemm_m(p) >= 512, 5.0, 15.0),
    "gemm (all shapes)": (lambda p: p.family == "gemm", 5.0, 15.0),
    "bandwidth (> 16 MB, DRAM)": (
        lambda p: p.family == "bandwidth" and p.l2 == "cold" and p.op.bytes > 16 * MB, 5.0, None),
    "bandwidth (4 KB - 4 GB)": (lambda p: p.family == "bandwidth", 10.0, None),
    "copy (cudaMemcpy d2d)": (lambda p: p.family == "copy", 10.0, None),
    "polynomial (seed roofline sweep)": (lambda p: p.family in ("poly", "poly_fma"), 5.0, None),
    "host transfer": (lambda p: p.family == "host_transfer", 10.0, None),
    "elementwise / reduction": (lambda p: p.family in ("elementwise", "reduction"), 10.0, None),
    "layer/RMS norm, softmax": (lambda p: p.family == "norm", 10.0, None),
    "expand copy (repeat_kv)": (lambda p: p.family == "expand_copy", 10.0, None),
    "strided elementwise (casts, broadcasts)": (
        lambda p: p.family == "strided_elementwise", 10.0, None),
    "optimizer (fused AdamW)": (lambda p: p.family == "adamw", 10.0, None),
    "attention prefill (flash)": (
        lambda p: p.family == "attention" and p.meta.get("backend", "flash") == "flash"
        and getattr(p.op, "seq", 1) > 1 and not _backward(p), 10.0, None),
    "attention decode": (
        lambda p: p.family == "attention" and getattr(p.op, "seq", 1) == 1
        and p.meta.get("backend", "flash") == "flash", 10.0, None),
    "attention prefill (cuDNN)": (
        lambda p: p.family == "attention" and p.meta.get("backend") == "cudnn"
        and getattr(p.op, "seq", 1) > 1 and not _backward(p), 10.0, None),
    "attention backward (flash)": (
        lambda p: _backward(p) and p.meta.get("backend", "flash") == "flash", 10.0, None),
    "attention backward (cuDNN)": (
        lambda p: _backward(p) and p.meta.get("backend") == "cudnn", 10.0, None),
    "attention decode (cuDNN)": (
        lambda p: p.family == "attention" and p.meta.get("backend") == "cudnn"
        and getattr(p.op, "seq", 1) == 1, 10.0, None),
    "conv2d (cuDNN)": (lambda p: p.family == "conv2d" and p.op.dtype != "fp32", 10.0, None),
    "conv2d fp32 (cuDNN, CUDA cores)": (
        lambda p: p.family == "conv2d" and p.op.dtype == "fp32", 10.0, None),
    "numpy gemm": (lambda p: p.family == "numpy_gemm", 15.0, None),
    "numpy stream": (lambda p: p.family == "numpy_stream", 15.0, None),
}  # fmt: skip


def points_from_records(records: Iterable[dict[str, Any]]) -> tuple[list[Point], list[str]]:
    """Turn runner records into Points; records that name no op (latency probes) or an op this
    version cannot build are returned as skipped notes, never silently dropped."""
    points: list[Point] = []
    skipped: list[str] = []
    for r in records:
        if not r.get("op") or not r.get("time_s") or r["time_s"] <= 0:
            continue
        meta = r.get("meta") or {}
        row = dict(r["op"])
        if row.get("op") == "conv2d" and "layout" not in row:
            row["layout"] = meta.get("layout", "channels_last")  # records before the op said so
        try:
            op = from_row(row)
        except Exception as exc:
            skipped.append(f"{r.get('family')}: {r['op']} ({exc})")
            continue
        if r["family"] == "attention" and meta.get("backend") == "cudnn":
            op = op.model_copy(update={"impl": "cudnn"})  # records before the op said so
        elif meta.get("backend") not in (None, "flash", "cudnn") and r["family"] == "attention":
            skipped.append(f"attention backend {meta['backend']} (reported, not fitted)")
            continue
        l2 = "warm" if meta.get("cache") == "hot" else "cold"
        op = _with_write_mix(op, r["family"], meta)
        points.append(Point(r["family"], op, float(r["time_s"]), meta, l2))
    return points, skipped


# measured constants, not predictions: used for fitting only (reported as measured values)
FIT_ONLY = {"launch"}


def _with_write_mix(op: Op, family: str, meta: dict[str, Any]) -> Op:
    """Records from before the harness stated ``bytes_written``: the harness's own kernels have
    a known mix (read writes nothing; write, copy and triad write one array; the polynomial
    kernel writes 4 of its 8 bytes per element)."""
    if op.op_name != "kernel" or op.bytes_written is not None:  # type: ignore[attr-defined]
        return op
    if family == "bandwidth" and meta.get("pattern") in ("read", "write", "copy", "triad"):
        share = {"read": 0.0, "write": 1.0, "copy": 0.5, "triad": 1 / 3}[meta["pattern"]]
    elif family in ("poly", "poly_fma"):
        share = 0.5
    else:
        return op
    return op.model_copy(update={"bytes_written": op.bytes * share})  # type: ignore[attr-defined]


def split(points: list[Point]) -> tuple[list[Point], list[Point]]:
    """Alternate points within each family in order of work: even -> fit, odd -> held out."""
    fit: list[Point] = []
    held: list[Point] = []
    by_family: dict[str, list[Point]] = {}
    for p in points:
        if p.family in FIT_ONLY:
            fit.append(p)
            continue
        by_family.setdefault(_split_key(p), []).append(p)
    for group in by_family.values():
        group.sort(key=_work)
        if len(group) == 1:
            fit.append(group[0])
            continue
        fit += group[0::2]
        held += group[1::2]
    return fit, held


def _split_key(p: Point) -> str:
    """Points that differ only in size share a key: family, cache state, access pattern and the
    op's categorical fields (dtype, direction, pinned, causal, ...)."""
    categorical = [f"{k}={v}" for k, v in p.op.model_dump().items() if isinstance(v, (str, bool))]
    decode = getattr(p.op, "seq", None) == 1
    return "|".join([p.family, p.l2, str(p.meta.get("pattern", "")), str(decode), *categorical])


def _work(p: Point) -> float:
    op = p.op
    f = getattr(op, "flops", None)
    if isinstance(f, (int, float)):
        return float(f) + float(getattr(op, "bytes", 0))
    if hasattr(op, "m"):
        return float(op.m * op.n * op.k * getattr(op, "batch", 1))
    for name in ("n", "bytes", "rows", "seq", "batch"):
        if hasattr(op, name):
            return float(getattr(op, name)) * float(getattr(op, "hidden", getattr(op, "cols", 1)))
    return 0.0


def kernel_family(op: Op, gpu: GPUSpec) -> str:
    """The calibrated family of the kernel that runs ``op`` on ``gpu``: an op can run another
    kernel on some shapes (decode attention that fills the GPU: no split-KV)."""
    return op.kernels(gpu)[0].family or op.family


def predict_points(points: list[Point], gpu: GPUSpec, params: CalibrationParams) -> np.ndarray:
    # the harness times one call at a time after a clean L2: the isolated condition
    return np.array([predict_with_params(p.op, gpu, params, l2=p.l2, condition="isolated").time_s  # type: ignore[arg-type]
                     for p in points])  # fmt: skip


def _measured(points: list[Point]) -> np.ndarray:
    return np.array([p.measured_s for p in points])


def _fit_family(
    points: list[Point],
    gpu: GPUSpec,
    base: CalibrationParams,
    build: Callable[[np.ndarray], CalibrationParams],
    x0: list[float],
) -> CalibrationParams:
    """Minimise the log error of ``points`` over the parameter vector that ``build`` maps."""
    if not points:
        return base
    meas = _measured(points)

    def loss(x: np.ndarray) -> float:
        try:
            return log_loss(predict_points(points, gpu, build(x)), meas)
        except (ValueError, OverflowError):
            return 1e9

    best = nelder_mead(loss, x0, step=0.4, iterations=250)
    return build(best)


def fit(
    points: list[Point], gpu: GPUSpec, start: CalibrationParams | None = None
) -> CalibrationParams:
    """Fit every parameter the measured families inform, stage by stage, from ``start``
    (measured constants such as pointer-chase latencies) or the defaults."""
    fam: dict[str, list[Point]] = {}
    for p in points:
        fam.setdefault(p.family, []).append(p)
    params = start or CalibrationParams()

    # 1. empty-kernel GPU time (event-timed) and host launch cost
    launch = fam.get("launch", [])
    event = [p.measured_s for p in launch if p.meta.get("mode") == "event"]
    host = [p.measured_s for p in launch if p.meta.get("mode") == "back_to_back"]
    if event:
        params = params.model_copy(update={"kernel_overhead_s": float(np.median(event))})
    if host:
        params = params.model_copy(update={"launch_host_s": float(np.median(host))})

    # 2. DRAM: the steady-state read and write efficiencies and the read/write turnaround loss
    #    from cold streams far larger than L2 (no floor, no cache effects), then the kernel
    #    family's floor from every cold stream; dram_efficiency (streams of unknown mix) = 1:1 mix
    cold = [p for p in fam.get("bandwidth", []) if p.l2 == "cold"]
    steady = [p for p in cold if p.op.bytes >= 8 * gpu.l2_cache_bytes]
    if steady:

        def build_dram(x: np.ndarray) -> CalibrationParams:
            read, write = float(min(1.2, math.exp(x[0]))), float(min(1.2, math.exp(x[1])))
            turn = float(min(0.5, math.exp(x[2])))
            return params.model_copy(update={
                "dram_read_efficiency": read, "dram_write_efficiency": write,
                "dram_turnaround": turn, "dram_efficiency": 0.5 * (read + write) - turn,
            })  # fmt: skip

        x0 = [math.log(0.9), math.log(0.9), math.log(0.03)]
        params = _fit_family(steady, gpu, params, build_dram, x0)
    if cold:

        def build_floor(x: np.ndarray) -> CalibrationParams:
            return params.model_copy(update={
                "family_overhead_s": {**params.family_overhead_s, "kernel": math.exp(x[0])},
                "reduction_tail_s": math.exp(x[1]),
            })  # fmt: skip

        params = _fit_family(cold, gpu, params, build_floor, [math.log(5e-6), math.log(1e-6)])

    # 3. L2: hot repeated access over sets that fit -> L2 bandwidth, and how much of the cold
    #    floor is the first trip to DRAM (a kernel whose inputs sit in L2 skips it)
    hot = [
        p
        for p in fam.get("bandwidth", [])
        if p.l2 == "warm" and p.op.bytes < gpu.l2_cache_bytes / 2
    ]
    if hot:
        cold_floor = params.family_overhead_s.get("kernel", params.kernel_overhead_s or 0.0)

        def build_l2(x: np.ndarray) -> CalibrationParams:
            first = float(min(cold_floor * 0.9, math.exp(x[1])))
            return params.model_copy(update={
                "l2_bandwidth_bytes_per_s": math.exp(x[0]),
                "l2_hot_max_bytes": gpu.l2_cache_bytes / 2,
                "dram_first_load_s": first,
                "family_overhead_s": {**params.family_overhead_s, "kernel": cold_floor - first},
            })  # fmt: skip

        x0 = [math.log(3 * gpu.memory_bandwidth_bytes_per_s), math.log(2e-7)]
        params = _fit_family(hot, gpu, params, build_l2, x0)

    # 4. FP32 vector efficiency per instruction mix, the overlap exponent, and the loaded DRAM
    #    latency that limits the seed's one-load-per-thread kernel (Little's law)
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
        params = _fit_family(poly, gpu, params, build_poly, x0)

    # 5. GEMM per dtype: large-shape efficiency, misalignment, weight-bound bandwidth, floor
    gemm_by_dtype: dict[str, list[Point]] = {}
    for p in fam.get("gemm", []):
        gemm_by_dtype.setdefault(p.op.dtype, []).append(p)  # type: ignore[attr-defined]
    for dtype, pts in sorted(gemm_by_dtype.items()):
        params = _fit_gemm(dtype, pts, gpu, params)

    # 6. host <-> device copies: one affine fit per direction and memory kind
    params = _fit_host(fam.get("host_transfer", []), params)

    # 7. cudaMemcpy d2d and PyTorch op families: efficiency and floor per kernel family (an
    #    op's ``family``: attention vs attention_decode, convolutions per dtype, ...)
    for measured in ("copy", "elementwise", "reduction", "attention", "conv2d", "norm",
                     "expand_copy", "strided_elementwise", "adamw", "numpy_stream"):  # fmt: skip
        groups: dict[str, list[Point]] = {}
        for p in fam.get(measured, []):
            groups.setdefault(kernel_family(p.op, gpu), []).append(p)
        # NCHW convolutions are fitted last: their layout transposes wrap a compute kernel
        # whose family the channels-last points fit first
        for family, pts in sorted(
            groups.items(), key=lambda g: (g[0] == LAYOUT_TRANSPOSE_FAMILY, g[0])
        ):
            compute = family.startswith(("attention", "conv2d")) and family not in (
                "attention_decode", LAYOUT_TRANSPOSE_FAMILY)  # fmt: skip
            params = _fit_family_params(pts, gpu, params, family, compute)
    if fam.get("numpy_gemm"):
        params = _fit_gemm("fp32", fam["numpy_gemm"], gpu, params)
    return params


def _fit_family_params(
    pts: list[Point], gpu: GPUSpec, params: CalibrationParams, family: str, compute: bool
) -> CalibrationParams:
    """Per op family: bandwidth efficiency and fixed cost per kernel, plus a compute efficiency
    for families with compute-bound kernels (attention, convolution) and elements per
    SM-cycle for families whose kernels count their elements (issue-bound row ops and
    strided copies)."""
    issue_bound = any(k.elements for k in pts[0].op.kernels(gpu))

    def build(x: np.ndarray) -> CalibrationParams:
        update: dict[str, Any] = {
            "family_bandwidth_efficiency": {**params.family_bandwidth_efficiency,
                                            family: float(min(50.0, math.exp(x[0])))},
            "family_overhead_s": {**params.family_overhead_s, family: math.exp(x[1])},
        }  # fmt: skip
        if compute:
            update["family_efficiency"] = {**params.family_efficiency,
                                           family: float(min(2.0, math.exp(x[2])))}  # fmt: skip
        if issue_bound:
            update["family_elements_per_sm_cycle"] = {**params.family_elements_per_sm_cycle,
                                                      family: math.exp(x[-1])}  # fmt: skip
        return params.model_copy(update=update)

    x0 = [math.log(0.8), math.log(5e-6)]
    x0 += [math.log(0.8)] if compute else []
    x0 += [math.log(1.0)] if issue_bound else []
    return _fit_family(pts, gpu, params, build, x0)


def _fit_gemm(
    dtype: str, pts: list[Point], gpu: GPUSpec, params: CalibrationParams
) -> CalibrationParams:
    from gpumodel.model.gemm import misaligned
    from gpumodel.ops.base import GemmShape

    def shape(p: Point) -> GemmShape:
        o = p.op
        return GemmShape(o.m, o.n, o.k, o.batch, o.dtype)  # type: ignore[attr-defined]

    has_bad = any(misaligned(shape(p)) for p in pts)

    def build(x: np.ndarray) -> CalibrationParams:
        g = GemmParams(
            efficiency=float(min(1.2, math.exp(x[0]))),
            small_m_bandwidth_efficiency=float(min(1.2, math.exp(x[1]))),
            overhead_s=math.exp(x[2]),
            overlap_exponent=float(1.0 + math.exp(x[3])),
            misaligned_efficiency=float(min(1.2, math.exp(x[4]))) if has_bad else 1.0,
        )
        return params.model_copy(update={"gemm": {**params.gemm, dtype: g}})

    x0 = [math.log(0.75), math.log(0.8), math.log(8e-6), math.log(3.0), math.log(0.5)]
    return _fit_family(pts, gpu, params, build, x0)


def _fit_host(pts: list[Point], params: CalibrationParams) -> CalibrationParams:
    if not pts:
        return params
    update: dict[str, float] = {}
    overheads = []
    for direction in ("h2d", "d2h"):
        for pinned in (True, False):
            sel = [p for p in pts if p.op.direction == direction and p.op.pinned == pinned]  # type: ignore[attr-defined]
            if len(sel) < 2:
                continue
            a, c = fit_affine_relative([p.op.bytes for p in sel], [p.measured_s for p in sel])  # type: ignore[attr-defined]
            kind = "pinned" if pinned else "pageable"
            if c > 0:
                update[f"{direction}_{kind}_bytes_per_s"] = 1.0 / c
            update[f"{direction}_{kind}_overhead_s"] = a
            overheads.append(a)
    if overheads:
        update["overhead_s"] = float(np.median(overheads))
    return params.model_copy(update={"host": HostLinkParams(**update)})


def latency_parameters(records: Iterable[dict[str, Any]], l2_bytes: float) -> dict[str, float]:
    """DRAM and L2 load-to-use latency (cycles) from the pointer-chase records."""
    lat = [r for r in records if r.get("family") == "latency" and r.get("meta")]
    out: dict[str, float] = {}
    big = [r["meta"].get("cycles_per_load") for r in lat
           if r["meta"].get("working_set_bytes", 0) >= 8 * l2_bytes]  # fmt: skip
    mid = [r["meta"].get("cycles_per_load") for r in lat
           if 2e6 <= r["meta"].get("working_set_bytes", 0) <= l2_bytes / 4]  # fmt: skip
    big = [c for c in big if c]
    mid = [c for c in mid if c]
    if big:
        out["dram_latency_cycles"] = float(np.median(big))
    if mid:
        out["l2_latency_cycles"] = float(np.median(mid))
    return out


def evaluate(
    points: list[Point], gpu: GPUSpec, params: CalibrationParams
) -> dict[str, FamilyError]:
    """Per reported group: calibrated and datasheet error on ``points``."""
    if not points:
        return {}
    calibrated = predict_points(points, gpu, params)
    datasheet = predict_points(points, gpu, CalibrationParams())
    meas = _measured(points)
    out: dict[str, FamilyError] = {}
    for name, (select, tol_median, _tol_p90) in GROUPS.items():
        idx = [i for i, p in enumerate(points) if select(p)]
        if not idx:
            continue
        stats = error_stats(calibrated[idx], meas[idx])
        ds = error_stats(datasheet[idx], meas[idx])
        out[name] = FamilyError(
            n=stats["n"], median_abs_pct=stats["median_abs_pct"], p90_abs_pct=stats["p90_abs_pct"],
            bias_pct=stats["bias_pct"], datasheet_median_abs_pct=ds["median_abs_pct"],
            tolerance_pct=tol_median,
        )  # fmt: skip
    return out


def failures(errors: dict[str, FamilyError]) -> list[str]:
    """Groups whose held-out error exceeds their tolerance (median, and p90 where set)."""
    out = []
    for name, e in errors.items():
        _, tol_median, tol_p90 = GROUPS[name]
        if tol_median is not None and e.median_abs_pct > tol_median:
            out.append(f"{name}: median {e.median_abs_pct:.1f}% > {tol_median:g}%")
        if tol_p90 is not None and e.p90_abs_pct > tol_p90:
            out.append(f"{name}: p90 {e.p90_abs_pct:.1f}% > {tol_p90:g}%")
    return out


def calibrate(
    records: list[dict[str, Any]], gpu: GPUSpec
) -> tuple[CalibrationParams, dict[str, FamilyError], list[str]]:
    """Fit on half of each family, evaluate on the other half. Returns (params, errors, notes)."""
    points, skipped = points_from_records(records)
    if not points:
        raise CalibrationError("no usable measurements to calibrate from")
    fit_pts, held = split(points)
    # pointer-chase latencies are measured constants the fit builds on (Little's-law limits)
    latencies = CalibrationParams(**latency_parameters(records, gpu.l2_cache_bytes))
    params = fit(fit_pts, gpu, latencies)
    return params, evaluate(held, gpu, params), skipped


# Targets for a calibration carried to another GPU (issue: hardware-aware time model)
TRANSFER_TOLERANCE_PCT = {"gemm (M >= 512)": 10.0, "bandwidth (> 16 MB, DRAM)": 10.0,
                          "bandwidth (4 KB - 4 GB)": 10.0}  # fmt: skip


def transfer_errors(
    records: list[dict[str, Any]], gpu: GPUSpec, params: CalibrationParams
) -> tuple[dict[str, FamilyError], list[str]]:
    """Score a calibration transferred from another GPU on every measurement of ``gpu`` (none is
    used for fitting). Returns per-group errors (tolerances: TRANSFER_TOLERANCE_PCT) and the
    groups that miss them."""
    points, _ = points_from_records(records)
    errors = {
        name: e.model_copy(update={"tolerance_pct": TRANSFER_TOLERANCE_PCT.get(name)})
        for name, e in evaluate(points, gpu, params).items()
    }
    fails = [
        f"{name}: median {e.median_abs_pct:.1f}% > {e.tolerance_pct:g}%"
        for name, e in errors.items()
        if e.tolerance_pct is not None and e.median_abs_pct > e.tolerance_pct
    ]
    return errors, fails
