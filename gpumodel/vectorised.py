"""Vectorised predictions for capacity-planning sweeps: millions of GEMM/elementwise shapes per
second with numpy, the same model as ``predict`` (a test holds the two equal).

    t = gm.sweep("gemm", "h100", m=np.arange(1, 8193), n=4096, k=4096, dtype="bf16")["time_s"]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gpumodel._validators import MAX_BYTES, MAX_FLOPS, check_array, check_dtype
from gpumodel.calibration import CalibrationParams, resolve
from gpumodel.errors import SpecError, UnsupportedError
from gpumodel.model import gemm as gemm_model
from gpumodel.model.roofline import arithmetic_intensity, overlap_time
from gpumodel.ops import ELEMENTWISE, from_row
from gpumodel.ops.base import matmul_unit, vector_unit
from gpumodel.ops.matmul import gemm_bytes, output_bytes_per_element
from gpumodel.predict import (
    bandwidth_efficiency,
    check_condition,
    compute_efficiency,
    kernel_overhead,
    power_watts,
    predict,
    reads_dram,
)
from gpumodel.specs import BYTES_PER_ELEMENT, GPUSpec, get_gpu

BOUNDS = np.array(["memory", "compute", "launch"])


def sweep(
    op: str,
    gpu: GPUSpec | str,
    calibration: Any = None,
    *,
    condition: str = "in-workload",
    l2: str = "cold",
    **params: Any,
) -> dict[str, np.ndarray]:
    """Predict ``op`` ('gemm', an elementwise name, or 'kernel') over broadcast arrays of its
    numeric fields. Returns arrays: time_s, flops, bytes, arithmetic_intensity, bound.
    ``condition`` and ``l2`` as for ``predict`` (in-workload: the sustained clock; l2 "cold"
    or "dirty": the write-back of a writing flush's lines; "warm" is predict's only).

    ``kernel`` sweeps take no launch geometry, so the Little's-law limit of ``predict`` (which
    needs ``threads``) does not apply here."""
    check_condition(condition, l2)
    if l2 == "warm":
        raise UnsupportedError("sweep prices l2='cold' or 'dirty'; use predict for l2='warm'")
    gpu = get_gpu(gpu)
    cal = resolve(calibration, gpu)
    p = cal.parameters if cal else CalibrationParams()
    if op == "gemm":
        dtype = params.pop("dtype", "bf16")
        check_dtype(dtype)
        m, n, k, batch = np.broadcast_arrays(
            *(check_array(params.pop(x, 1 if x == "batch" else None), x)
              for x in ("m", "n", "k", "batch"))
        )  # fmt: skip
        unit, dt = matmul_unit(gpu, dtype)
        flops = 2.0 * m * n * k * batch
        nbytes = gemm_bytes(m, n, k, batch, dtype)
        # cuBLAS-calibrated GEMM efficiency replaces the unit's (as in predict.kernel_time)
        rate = gpu.peak_flops(dt, unit) * gemm_model.efficiency_array(m, n, k, dtype, gpu, p)
        family = "gemm"
        written = batch * m * n * output_bytes_per_element(dtype)
        bw_eff = bandwidth_efficiency(p, family, dtype, np.minimum(1.0, written / nbytes))
    elif op in ELEMENTWISE or op == "kernel":
        dtype = check_dtype(params.pop("dtype", "bf16" if op != "kernel" else "fp32"))
        if op == "kernel":
            flops, nbytes = np.broadcast_arrays(
                check_array(params.pop("flops"), "flops", whole=False, ge=0, le=MAX_FLOPS),
                check_array(params.pop("bytes"), "bytes", whole=False, ge=0, le=MAX_BYTES),
            )
            fma = params.pop("fma", True)
            written = None  # a described kernel's read/write mix is not known
        else:
            per, inputs = ELEMENTWISE[op]
            n = check_array(params.pop("n"), "n")
            flops = per * n
            nbytes = (inputs + 1) * n * BYTES_PER_ELEMENT[dtype]
            written = n * BYTES_PER_ELEMENT[dtype]
            fma = True
        unit, dt = vector_unit(gpu, dtype)
        family = "kernel" if op == "kernel" else "elementwise"
        rate = gpu.peak_flops(dt, unit) * compute_efficiency(p, unit, dt, fma)
        rate = rate * (1.0 if fma else 0.5) * p.family_efficiency.get(family, 1.0)
        mix = None if written is None else np.minimum(1.0, written / nbytes)
        bw_eff = bandwidth_efficiency(p, family, None, mix)
    else:
        raise SpecError(f"sweep supports 'gemm', 'kernel' and {', '.join(ELEMENTWISE)}; got {op!r}")
    if params:
        raise SpecError(f"sweep {op}: unknown parameter(s) {', '.join(params)}")
    t_compute = flops / rate
    t_memory = nbytes / (gpu.memory_bandwidth_bytes_per_s * bw_eff)
    exponent = p.overlap_exponent or math.inf
    fitted_gemm = p.gemm.get(dtype) if family == "gemm" else None
    if fitted_gemm is not None and fitted_gemm.overlap_exponent:
        exponent = fitted_gemm.overlap_exponent
    t_core = np.asarray(overlap_time(t_compute, t_memory, exponent))
    overhead, _ = kernel_overhead(p, family, fitted_gemm)
    if l2 == "dirty" and p.dirty_l2_writeback_fraction:  # as predict.dirty_l2_bytes
        dirty = p.dirty_l2_writeback_fraction * np.minimum(gpu.l2_cache_bytes, nbytes)
        t_memory = t_memory + dirty / (gpu.memory_bandwidth_bytes_per_s * bw_eff)
        t_core = np.asarray(overlap_time(t_compute, t_memory, exponent))
    # as predict.kernel_time: cold inputs wait a DRAM round trip before the first loads return
    t_floor = overhead + np.where(reads_dram(nbytes, written), p.dram_first_load_s or 0.0, 0.0)
    if condition == "in-workload":  # as predict.in_workload_time
        t_compute = _sustained(p, gpu, unit, dt, flops, t_floor + t_core, t_compute)
        t_core = np.asarray(overlap_time(t_compute, t_memory, exponent))
    bound = np.where(t_floor >= t_core, 2, np.where(t_compute >= t_memory, 1, 0))
    return {
        "time_s": t_floor + t_core,
        "flops": flops,
        "bytes": nbytes,
        "arithmetic_intensity": np.asarray(arithmetic_intensity(flops, nbytes)),
        "bound": BOUNDS[bound],
    }


def _sustained(
    p: CalibrationParams, gpu: GPUSpec, unit: str, dtype: str, flops: np.ndarray,
    isolated_s: np.ndarray, t_compute: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """Compute time at the sustained clock (predict.sustained_clock over arrays)."""
    from gpumodel.model.power import sustained_clock_ratio_array
    from gpumodel.sol import max_clock_peak_flops

    watts = power_watts(p, gpu)
    if watts is not None and unit == "tensor":
        roof = max_clock_peak_flops(gpu, dtype, "tensor") or math.inf
        with np.errstate(divide="ignore", invalid="ignore"):
            u = np.minimum(1.0, np.where(isolated_s > 0, flops / (isolated_s * roof), 0.0))
        t_compute = t_compute / sustained_clock_ratio_array(u, gpu.tdp_watts, *watts)
    return t_compute


_VECTOR_FIELDS = {"gemm": ("m", "n", "k", "batch"), "elementwise": ("n",)}


def predict_rows(
    rows: list[dict[str, Any]], gpu: GPUSpec, calibration: Any = None,
    condition: str = "in-workload",
) -> list[dict]:  # fmt: skip
    """Predict batch-file rows in order: GEMM and elementwise rows through ``sweep`` (grouped by
    op and dtype), everything else through ``predict``, all under ``condition``. Each result:
    op, time_s, bound, flops, bytes, arithmetic_intensity."""
    check_condition(condition)
    results: list[dict | None] = [None] * len(rows)
    groups: dict[tuple[str, str], list[int]] = {}
    for i, row in enumerate(rows):
        op = from_row(row)  # validates every row, whatever path predicts it
        name = str(row["op"]).lower()
        simple = name == "gemm" or (name in ELEMENTWISE and op.op_name == "elementwise")
        if simple and set(row) <= {"op", "dtype", *_VECTOR_FIELDS.get(op.op_name, ())}:
            groups.setdefault((name, getattr(op, "dtype", "")), []).append(i)
            continue
        p = predict(op, gpu, calibration, condition=condition)  # type: ignore[arg-type]
        results[i] = {"op": p.op, "time_s": p.time_s, "bound": p.bound, "flops": p.flops,
                      "bytes": p.bytes, "arithmetic_intensity": p.arithmetic_intensity}  # fmt: skip
    for (name, dtype), idx in groups.items():
        fields = _VECTOR_FIELDS["gemm" if name == "gemm" else "elementwise"]
        arrays = {f: np.array([rows[i].get(f, 1) for i in idx], dtype=float) for f in fields}
        out = sweep(name, gpu, calibration, dtype=dtype, condition=condition, **arrays)
        for j, i in enumerate(idx):
            label = (
                f"{name}({', '.join(f'{f}={int(arrays[f][j])}' for f in fields)}, dtype={dtype})"
            )
            results[i] = {
                "op": label, "time_s": float(out["time_s"][j]), "bound": str(out["bound"][j]),
                "flops": float(out["flops"][j]), "bytes": float(out["bytes"][j]),
                "arithmetic_intensity": float(out["arithmetic_intensity"][j]),
            }  # fmt: skip
    return results  # type: ignore[return-value]
