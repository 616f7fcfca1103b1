"""Vectorised predictions for capacity-planning sweeps: millions of GEMM/elementwise shapes per
second with numpy, the same model as ``predict`` (a test holds the two equal).

    t = gm.sweep("gemm", "h100", m=np.arange(1, 8193), n=4096, k=4096, dtype="bf16")["time_s"]
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from gpumodel._validators import MAX_BYTES, MAX_FLOPS, check_array, check_bool, check_dtype
from gpumodel.calibration import CalibrationParams, resolve
from gpumodel.errors import SpecError, UnsupportedError
from gpumodel.model import gemm as gemm_model
from gpumodel.model.roofline import arithmetic_intensity, overlap_time
from gpumodel.model.scheduling import (
    BALANCED_BLOCKS_PER_SLOT,
    TileWork,
    fill_efficiency,
    schedule_efficiency,
)
from gpumodel.ops import ELEMENTWISE, from_row
from gpumodel.ops.base import (
    GemmShape,
    KernelWork,
    MixedKernels,
    Op,
    is_array,
    matmul_unit,
    vector_unit,
)
from gpumodel.ops.matmul import fp8_promotion_flops, gemm_bytes, output_bytes_per_element
from gpumodel.predict import (
    bandwidth_efficiency,
    calibrated_family,
    check_condition,
    compute_efficiency,
    core_overlap,
    dram_power,
    empty_kernel_s,
    floor_ops,
    graph_floor_s,
    kernel_overhead,
    power_watts,
    predict,
    reads_dram,
    resident,
    serial_loop_s,
    sol_floor_s,
    sol_l2_held_bytes,
    stream_floor,
    tensor_dtype,
    tensor_roof_time,
)
from gpumodel.sol import roof_time_s
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
    ``condition`` and ``l2`` as for ``predict`` (in-workload: the sustained clock; in-graph:
    that and the reference host's replayed-graph launch floor; l2 "cold"
    or "dirty": the write-back of a writing flush's lines; "warm" is predict's only).

    ``kernel`` sweeps take no launch geometry, so the Little's-law limit of ``predict`` (which
    needs ``threads``) does not apply here."""
    check_condition(condition, l2)
    if l2 == "warm":
        raise UnsupportedError("sweep prices l2='cold' or 'dirty'; use predict for l2='warm'")
    if not isinstance(op, str):
        raise SpecError(f"sweep takes an op name ('gemm', 'kernel' or {', '.join(ELEMENTWISE)})")
    gpu = get_gpu(gpu)
    cal = resolve(calibration, gpu)
    p = cal.parameters if cal else CalibrationParams()
    shape: GemmShape | None = None  # a GEMM's, for its overlap
    extra_s: Any = 0.0  # an fp8 GEMM's accumulator promotion (Gemm.fast_accum=False)
    if op == "gemm":
        dtype = params.pop("dtype", "bf16")
        check_dtype(dtype)
        transpose_b = params.pop("transpose_b", False)
        if not isinstance(transpose_b, bool):
            raise SpecError(f"sweep gemm: transpose_b must be true or false, got {transpose_b!r}")
        # as Gemm(fast_accum=False): fp8's accumulators promoted on the CUDA cores
        promoted = check_bool(params.pop("fast_accum", True), "fast_accum") is False
        if promoted and dtype != "fp8":
            raise SpecError(f"sweep gemm: fast_accum applies to fp8 products; this one is {dtype}")
        m, n, k, batch = _broadcast(
            *(check_array(params.pop(x, 1 if x == "batch" else None), x)
              for x in ("m", "n", "k", "batch"))
        )  # fmt: skip
        unit, dt = matmul_unit(gpu, dtype)
        flops = 2.0 * m * n * k * batch
        nbytes = gemm_bytes(m, n, k, batch, dtype)
        # cuBLAS-calibrated GEMM efficiency replaces the unit's (as in predict.kernel_time)
        rate = gpu.peak_flops(dt, unit) * gemm_model.efficiency_array(
            m, n, k, dtype, gpu, p, transpose_b=transpose_b, batch=batch, cublas=True
        )
        family = "gemm"
        written = batch * m * n * output_bytes_per_element(dtype)
        bw_eff = bandwidth_efficiency(p, family, dtype, np.minimum(1.0, written / nbytes))
        shape = GemmShape(m, n, k, batch, dtype, transpose_b=transpose_b, cublas=True)
        bw_eff = bw_eff * gemm_model.stream_factor(shape, p.gemm.get(dtype))
        if promoted:  # as predict.kernel_time's vector part of a kernel without FMAs
            vunit, vdt = vector_unit(gpu, "fp32")
            add_rate = gpu.peak_flops(vdt, vunit) * compute_efficiency(p, vunit, vdt, False) * 0.5
            extra_s = fp8_promotion_flops(m, n, k, batch) / add_rate
    elif op in ELEMENTWISE or op == "kernel":
        dtype = check_dtype(params.pop("dtype", "bf16" if op != "kernel" else "fp32"))
        if op == "kernel":
            flops, nbytes = _broadcast(
                check_array(params.pop("flops"), "flops", whole=False, ge=0, le=MAX_FLOPS),
                check_array(params.pop("bytes"), "bytes", whole=False, ge=0, le=MAX_BYTES),
            )
            if np.any(((nbytes > 0) & (nbytes < 1)) | ((nbytes == 0) & (flops > 0))):
                raise SpecError("sweep kernel: a kernel with FLOPs moves at least 1 byte, and a "
                                "byte count is 0 or at least 1")  # fmt: skip
            fma = check_bool(params.pop("fma", True), "fma")
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
    t_compute = flops / rate + extra_s
    t_memory = nbytes / (gpu.memory_bandwidth_bytes_per_s * bw_eff)
    fitted_gemm = p.gemm.get(dtype) if family == "gemm" else None
    exponent, rows = core_overlap(p, fitted_gemm, shape)
    overhead, _ = kernel_overhead(p, family, fitted_gemm)
    if l2 == "dirty" and p.dirty_l2_writeback_fraction:  # as predict.dirty_l2_bytes
        dirty = p.dirty_l2_writeback_fraction * np.minimum(gpu.l2_cache_bytes, nbytes)
        t_memory = t_memory + dirty / (gpu.memory_bandwidth_bytes_per_s * bw_eff)
    parts = [(unit, dt, flops)]
    if op == "gemm" and promoted:
        parts.append((vunit, vdt, fp8_promotion_flops(m, n, k, batch)))
    # as predict.kernel_time's speed-of-light floor, in the L2 state priced
    t_sol = roof_time_s(parts, nbytes, gpu, l2_held_bytes=sol_l2_held_bytes(gpu, l2))
    t_core = np.maximum(_core_time(t_compute, t_memory, exponent, rows), t_sol)
    # as predict.kernel_time: cold inputs wait a DRAM round trip before the first loads return
    t_floor = overhead + np.where(reads_dram(nbytes, written), p.dram_first_load_s or 0.0, 0.0)
    if condition != "isolated":  # as predict.in_workload_time
        t_compute = _sustained(p, gpu, unit, dt, flops, nbytes, t_floor + t_core, t_compute)
        t_core = np.maximum(_core_time(t_compute, t_memory, exponent, rows), t_sol)
    if condition == "in-graph":  # as predict.kernel_time (after the clock), the reference host's
        from gpumodel.hostprofile import REFERENCE_GRAPH_KERNEL_S

        empty_s = empty_kernel_s(p)
        t_floor = t_floor - overhead + graph_floor_s(overhead, REFERENCE_GRAPH_KERNEL_S, empty_s)
    bound = np.where(t_floor >= t_core, 2, np.where(t_compute >= t_memory, 1, 0))
    return {
        "time_s": t_floor + t_core,
        "flops": flops,
        "bytes": nbytes,
        "arithmetic_intensity": np.asarray(arithmetic_intensity(flops, nbytes)),
        "bound": BOUNDS[bound],
    }


def _core_time(t_compute: Any, t_memory: Any, exponent: float, rows: Any) -> np.ndarray:
    """Compute and memory overlapped as predict.kernel_time does: the fitted exponent, or the
    larger of the two where ``rows`` (gemm.misaligned_rows: a whole tile's time, its loads
    included)."""
    return np.where(rows, np.maximum(t_compute, t_memory),
                    np.asarray(overlap_time(t_compute, t_memory, exponent)))  # fmt: skip


def _sustained(
    p: CalibrationParams, gpu: GPUSpec, unit: str, dtype: str, flops: np.ndarray,
    nbytes: np.ndarray, isolated_s: np.ndarray, t_compute: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """Compute time at the sustained clock (predict.sustained_clock over arrays)."""
    from gpumodel.model.power import sustained_clock_ratio_array
    from gpumodel.sol import max_clock_peak_flops

    watts = power_watts(p, gpu, dtype)
    if watts is not None and unit == "tensor":
        roof = max_clock_peak_flops(gpu, dtype, "tensor") or math.inf
        with np.errstate(divide="ignore", invalid="ignore"):
            u = np.minimum(1.0, np.where(isolated_s > 0, flops / (isolated_s * roof), 0.0))
            traffic = np.where(isolated_s > 0, nbytes / isolated_s, 0.0)
        mem_w = dram_power(p, gpu, np.minimum(traffic, gpu.memory_bandwidth_bytes_per_s))
        t_compute = t_compute / sustained_clock_ratio_array(u, gpu.tdp_watts, *watts, mem_w)
    return t_compute


_VECTOR_FIELDS = {"gemm": ("m", "n", "k", "batch"), "elementwise": ("n",)}


def predict_rows(
    rows: list[dict[str, Any]], gpu: GPUSpec, calibration: Any = None,
    condition: str = "in-workload", first: int = 0,
) -> list[dict]:  # fmt: skip
    """Predict batch-file rows in order: GEMM and elementwise rows through ``sweep`` (grouped by
    op and dtype), everything else through ``predict``, all under ``condition``. Each result:
    op, time_s, bound, flops, bytes, arithmetic_intensity. ``first``: the number of
    ``rows[0]`` in the whole batch (``gpumodel batch`` counts from 0): a bad row's error names
    it."""
    check_condition(condition)
    results: list[dict | None] = [None] * len(rows)
    groups: dict[tuple[str, str], list[int]] = {}
    for i, row in enumerate(rows):
        try:
            op = from_row(row)  # validates every row, whatever path predicts it
        except (SpecError, UnsupportedError) as exc:
            raise type(exc)(f"op #{first + i}: {exc}") from None
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


# --- kernels of ops built over arrays of sizes (the LLM sweeps) -------------------------------


class ScalarOnly(MixedKernels):
    """An op the array path does not time (a host transfer, a trace-fitted family scale): the
    sweep times it point by point, without splitting the points first."""


def _schedule_array(kw: KernelWork, slots: int, n: int) -> np.ndarray:
    """``schedule_efficiency`` of ``kw``'s blocks for each point: closed form where the
    blocks are equal, the scalar function once per distinct tiling otherwise."""
    tw = kw.tile_work
    assert tw is not None
    groups = np.broadcast_to(np.asarray(kw.tile_groups), (n,))
    if tw.span is None:  # equal blocks: whole waves
        blocks = tw.count * groups
        waves = blocks / (-(-blocks // slots) * slots)
        return np.where(blocks >= BALANCED_BLOCKS_PER_SLOT * slots, 1.0, waves)
    fields = (tw.count, tw.offset, tw.span, groups)
    keys = np.stack([np.broadcast_to(np.asarray(v), (n,)) for v in fields], axis=1)
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    effs = [schedule_efficiency(TileWork(c, tw.block, o, s), g, slots)
            for c, o, s, g in uniq.tolist()]  # fmt: skip
    return np.array(effs)[inverse.ravel()]


def _kernel_array(
    kw: KernelWork, gpu: GPUSpec, params: CalibrationParams, family: str, l2: str, n: int,
    clock_ratio: Any = 1.0,
) -> tuple[np.ndarray, float]:  # fmt: skip
    """``predict.kernel_time`` (isolated) of one kernel whose sizes are arrays over ``n``
    points: (time of each point, its "launch floor" term). Same terms in the same order."""
    t_compute: Any = 0.0
    fam_compute = params.family_efficiency.get(family, 1.0)
    for part in kw.flops:
        peak = gpu.peak_flops(part.dtype, part.unit)
        if not peak:
            raise UnsupportedError(f"{gpu.id} has no {part.unit} {part.dtype} rate in its spec")
        rate = peak * 0.5 if part.unit == "vector" and not kw.fma else peak
        eff: Any = compute_efficiency(params, part.unit, part.dtype, kw.fma)
        if kw.gemm is not None and part is kw.flops[0]:
            g = kw.gemm
            eff = gemm_model.efficiency_array(g.m, g.n, g.k, g.dtype, gpu, params, tile_m=g.tile_m,
                                              tile_n=g.tile_n, tile_k=g.tile_k,
                                              needs_alignment=g.needs_alignment,
                                              transpose_b=g.transpose_b,
                                              transpose_a=g.transpose_a, batch=g.batch,
                                              cublas=g.cublas)  # fmt: skip
        if kw.tile_work is not None and np.all(kw.tile_work.count) and part is kw.flops[0]:
            eff = eff * _schedule_array(kw, gpu.sm_count * kw.tile_blocks_per_sm, n)
        half_fill = params.conv_half_fill_tiles_per_sm
        if kw.output_tiles and half_fill and part is kw.flops[0]:
            eff = eff * fill_efficiency(kw.output_tiles, gpu.sm_count, half_fill)
        if fam_compute != 1.0 and family != "gemm":
            eff = eff * fam_compute
        t_compute = t_compute + np.asarray(part.flops, dtype=float) / (rate * eff * clock_ratio)
    rate_issue = params.family_elements_per_sm_cycle.get(family)
    issue = kw.elements is not None and bool(rate_issue) and bool(np.all(kw.elements))
    if kw.elements is not None and rate_issue and not issue and np.any(kw.elements):
        raise MixedKernels("issue-bound for some points only")
    if issue:
        t_issue = kw.elements / (gpu.sm_count * gpu.boost_clock_hz * rate_issue) / clock_ratio
        t_compute = t_compute + t_issue
    nbytes = np.asarray(kw.bytes, dtype=float)
    ws = nbytes if kw.working_set_bytes is None else np.asarray(kw.working_set_bytes, dtype=float)
    in_l2 = (ws <= (params.l2_hot_max_bytes or gpu.l2_cache_bytes / 2)) if l2 == "warm" else False
    written = None if kw.bytes_written is None else np.asarray(kw.bytes_written, dtype=float)
    mix = None
    if written is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            mix = np.where(nbytes > 0, np.minimum(1.0, written / nbytes), 0.0)
    gemm_dtype = kw.gemm.dtype if kw.gemm is not None else None
    dram = gpu.memory_bandwidth_bytes_per_s * bandwidth_efficiency(params, family, gemm_dtype, mix)
    if kw.gemm is not None and family == "gemm":
        dram = dram * gemm_model.stream_factor(kw.gemm, params.gemm.get(gemm_dtype))  # type: ignore[arg-type]
    dram = dram * kw.bandwidth_fraction  # as predict.memory_bandwidth
    bandwidth = (np.where(in_l2, params.l2_bandwidth_bytes_per_s, dram)
                 if params.l2_bandwidth_bytes_per_s else dram + 0.0 * nbytes)  # fmt: skip
    t_memory = nbytes / bandwidth
    limit = _latency_limit(kw, gpu, params, in_l2, nbytes)
    if limit is not None and kw.bytes_in_flight_per_thread:
        chained = (nbytes - (0.0 if written is None else written) if kw.chained_read_bytes is None
                   else np.asarray(kw.chained_read_bytes, dtype=float))  # fmt: skip
        t_memory = np.where(nbytes > 0, np.maximum(t_memory, chained / limit), t_memory)
    elif limit is not None:
        t_memory = np.where((nbytes > 0) & (limit < bandwidth), nbytes / limit, t_memory)
    if l2 == "dirty" and params.dirty_l2_writeback_fraction:  # as predict.dirty_l2_bytes
        dirty = params.dirty_l2_writeback_fraction * np.minimum(gpu.l2_cache_bytes, nbytes)
        t_memory = t_memory + dirty / dram
    fitted_gemm = (
        params.gemm.get(gemm_dtype) if gemm_dtype is not None and family == "gemm" else None
    )
    p, rows = core_overlap(params, fitted_gemm, kw.gemm, issue or kw.pipelined)
    t_core = np.maximum(np.maximum(_core_time(t_compute + 0.0 * nbytes, t_memory, p, rows),
                                   serial_loop_s(kw, gpu)),
                        sol_floor_s(kw, gpu, l2, clock_ratio))  # as predict.kernel_time
    overhead, _ = kernel_overhead(params, family, fitted_gemm)
    launch_floor = kw.launches * overhead
    t_floor: Any = launch_floor
    if params.dram_first_load_s:
        t_floor = t_floor + np.where(reads_dram(nbytes, written) & ~np.asarray(in_l2),
                                     params.dram_first_load_s, 0.0)  # fmt: skip
    if written is not None and params.reduction_tail_s:
        t_floor = t_floor + np.where((written == 0) & (nbytes > 0), params.reduction_tail_s, 0.0)
    return t_floor + t_core, launch_floor


def _latency_limit(
    kw: KernelWork, gpu: GPUSpec, params: CalibrationParams, in_l2: Any, nbytes: np.ndarray
) -> np.ndarray | None:
    """``predict.latency_limited_bandwidth`` over the points (None where it does not apply)."""
    if kw.threads is None or not kw.threads_per_block or gpu.sm_limits is None:
        return None
    from gpumodel.model.littles_law import dram_latency_s, l2_latency_s, sustained_bandwidth
    from gpumodel.model.occupancy import has_rules

    if not has_rules(gpu):
        return None
    threads, _ = resident(kw, gpu)
    per_thread = kw.bytes_in_flight_per_thread or nbytes / np.asarray(kw.threads)
    latency = np.where(in_l2, l2_latency_s(gpu, params)[0], dram_latency_s(gpu, params)[0])
    return sustained_bandwidth(threads * per_thread, latency)


def _kernel_in_workload(
    kw: KernelWork, gpu: GPUSpec, params: CalibrationParams, family: str, l2: str, n: int,
    activity: Any = None, dram: Any = None,
) -> tuple[np.ndarray, float]:  # fmt: skip
    """``predict.in_workload_time`` over the points: the compute at the sustained clock, of
    the kernel's own tensor activity and DRAM traffic or of ``activity`` and ``dram`` (a
    step's averages, bytes/s, per point)."""
    iso, floor = _kernel_array(kw, gpu, params, family, l2, n)
    watts = power_watts(params, gpu, tensor_dtype(kw))
    if watts is None or not kw.flops:
        return iso, floor
    from gpumodel.model.power import sustained_clock_ratio_array

    if activity is not None:  # as predict.sustained_clock: every kernel that computes
        total = sum(np.asarray(p.flops, dtype=float) for p in kw.flops)
        u = np.broadcast_to(np.asarray(activity, dtype=float), (n,))
        mem_w = dram_power(params, gpu, np.asarray(0.0 if dram is None else dram))
        ratio = np.where(np.broadcast_to(total, (n,)) > 0,
                         sustained_clock_ratio_array(u, gpu.tdp_watts, *watts, mem_w), 1.0)  # fmt: skip
        if np.all(ratio == 1.0):
            return iso, floor
        return _kernel_array(kw, gpu, params, family, l2, n, clock_ratio=ratio)[0], floor
    roof = np.asarray(tensor_roof_time(kw, gpu), dtype=float)  # as predict.tensor_activity
    with np.errstate(divide="ignore", invalid="ignore"):
        u = np.where(iso > 0, np.minimum(1.0, roof / iso), 0.0)
        traffic = np.where(iso > 0, np.asarray(kw.bytes, dtype=float) / iso, 0.0)
    traffic = np.minimum(traffic, gpu.memory_bandwidth_bytes_per_s)  # as predict.sustained_clock
    ratio = sustained_clock_ratio_array(u, gpu.tdp_watts, *watts,
                                        dram_power(params, gpu, traffic))  # fmt: skip
    if np.all(ratio == 1.0):
        return iso, floor
    return _kernel_array(kw, gpu, params, family, l2, n, clock_ratio=ratio)[0], floor


def _take(op: Op, idx: np.ndarray) -> Op:
    """The points ``idx`` of an op built over arrays."""
    return op.model_copy(update={k: v[idx] for k, v in op.__dict__.items() if is_array(v)})


def halves(op: Op, n: int) -> list[tuple[np.ndarray, Op]]:
    """The ``n`` points of an op built over arrays as two parts, (indices, the op at those
    points): how a caller whose points run different kernels (MixedKernels) splits them until
    each part runs one kind."""
    first = np.arange(n) < n // 2
    return [(idx, _take(op, idx)) for idx in (np.flatnonzero(first), np.flatnonzero(~first))]


def op_kernel_times(
    op: Op, gpu: GPUSpec, params: CalibrationParams, n: int, *, l2: str = "cold",
    condition: str = "in-workload", stream_floor_s: float | None = None, activity: Any = None,
    dram: Any = None, stream_empty_s: float | None = None,
) -> list[tuple[np.ndarray, int, str]]:  # fmt: skip
    """Each kernel of ``op`` (built over arrays of ``n`` points: ``ops.base.build``) as
    (its time at every point, its launches, its name): what ``predict(op).kernels`` gives
    point by point, the family floor included, then (``stream_floor_s``)
    ``_timing.in_stream`` (``stream_empty_s``: its ``empty_s``). Points that run different
    kernels are split and joined again (the name is the first points' kernel's); MixedKernels when their kernels differ in number or
    launches (the sweep then times them one by one). ``activity``, ``dram``: as ``predict``'s
    ``activity`` and ``dram_bytes_per_s``, one value or one per point."""
    try:
        return _op_kernels(
            op, gpu, params, n, l2, condition, stream_floor_s, activity, dram, stream_empty_s
        )
    except ScalarOnly:
        raise
    except MixedKernels:
        if n < 2:
            raise

    def part(value: Any, idx: np.ndarray) -> Any:
        return value if value is None or np.ndim(value) == 0 else np.asarray(value)[idx]

    parts = [(idx, op_kernel_times(half, gpu, params, len(idx), l2=l2, condition=condition,
                                   stream_floor_s=stream_floor_s, activity=part(activity, idx),
                                   dram=part(dram, idx), stream_empty_s=stream_empty_s))
             for idx, half in halves(op, n)]  # fmt: skip
    (ia, ka), (ib, kb) = parts
    if [x[1] for x in ka] != [x[1] for x in kb]:
        raise MixedKernels("the points of this op run different kernels")
    out = []
    for (ta, launches, name), (tb, _, _) in zip(ka, kb):
        t = np.empty(n)
        t[ia], t[ib] = ta, tb
        out.append((t, launches, name))
    return out


def _op_kernels(
    op: Op, gpu: GPUSpec, params: CalibrationParams, n: int, l2: str, condition: str,
    stream_floor_s: float | None, activity: Any = None, dram: Any = None,
    stream_empty_s: float | None = None,
) -> list[tuple[np.ndarray, int, str]]:  # fmt: skip
    if params.family_time_scale:
        raise ScalarOnly("trace-fitted family scales: timed point by point")
    op = op.on(gpu)
    work = op.kernels(gpu)
    out = []
    floors = []
    for k in work:
        if k.transfer:
            raise ScalarOnly("host transfers: timed point by point")
        fam = calibrated_family(k.family or op.family, params)
        if condition == "in-workload":
            t, floor = _kernel_in_workload(k, gpu, params, fam, l2, n, activity, dram)
        else:
            t, floor = _kernel_array(k, gpu, params, fam, l2, n)
        _check_array_work(op, k, n)
        # ``repeats`` identical kernels: one priced, times the count (its floor term one's)
        out.append(np.broadcast_to(t * k.repeats if k.repeats != 1 else t, (n,)).astype(float))
        floors.append(floor)
    lower = floor_ops(op, gpu)
    if lower and out:
        floor = np.maximum.reduce([
            np.broadcast_to(sum(t for t, _, _ in op_kernel_times(
                f, gpu, params, n, l2=l2, condition=condition, activity=activity, dram=dram)),
                (n,)) for f in lower])  # fmt: skip
        times = np.stack(out)
        gap = floor - times.sum(axis=0)
        slowest = np.argmax(times, axis=0)
        grow = gap > 0
        times[slowest[grow], np.flatnonzero(grow)] += gap[grow]
        out = list(times)
    launches = [k.launches * k.repeats for k in work]
    if stream_floor_s is not None:  # as _timing.in_stream: the isolated floor replaced
        out = [np.maximum(0.0, t - f) + nl * stream_floor(f / nl, stream_floor_s, stream_empty_s)
               if f > 0 and nl else t for t, f, nl in zip(out, floors, launches)]  # fmt: skip
    names = [k.name if k.repeats == 1 else f"{k.name} x {k.repeats:,}" for k in work]
    return list(zip(out, launches, names))


def _check_array_work(op: Op, k: KernelWork, n: int) -> None:
    flops = sum((np.asarray(p.flops, dtype=float) for p in k.flops), np.zeros(n))
    if np.any(flops > MAX_FLOPS) or np.any(np.asarray(k.bytes) > MAX_BYTES):
        raise SpecError(f"{op.op_name}: {k.name} exceeds the sizes any kernel has "
                        "(docs/hardening.md#bounds)")  # fmt: skip


def _broadcast(*arrays: Any) -> list[Any]:
    """numpy's broadcast of the swept axes, a mismatch of lengths as a one-line error."""
    try:
        return np.broadcast_arrays(*arrays)
    except ValueError:
        shapes = " x ".join(str(a.shape) for a in arrays)
        raise SpecError(f"sweep: the value lists do not broadcast together ({shapes})") from None
