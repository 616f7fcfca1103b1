"""Streaming bandwidth: custom read, write, copy and triad kernels over fp32 arrays from 4 KB to
4 GB, each timed cold (L2 flushed) and hot. It fits the DRAM read and write efficiencies and
turnaround loss, the kernel floor, and the L2 bandwidth; its report line compares the
harness's copy kernel with cudaMemcpy.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from gpumodel.errors import SpecError
from gpumodel.validate.cupy_engine import BLOCK
from gpumodel.validate.cupy_engine import Context as _Context
from gpumodel.validate.cupy_engine import Dev as _Dev
from gpumodel.validate.cupy_engine import check as _check
from gpumodel.validate.families.base import Family, Group, make_record
from gpumodel.validate.timing import log_sizes

if TYPE_CHECKING:
    import numpy as np

    from gpumodel.calibrate import Point
    from gpumodel.calibration import CalibrationParams
    from gpumodel.specs import GPUSpec


BW_PATTERNS = ("read", "write", "copy", "triad")
BW_ARRAYS = {"read": 1, "write": 1, "copy": 2, "triad": 3}  # fp32 arrays each pattern touches

MB = 1e6


def bandwidth_counts(pattern: str, n: int) -> tuple[int, int]:
    """(FLOPs, bytes moved) of a streaming pattern over fp32 arrays of n elements each."""
    if pattern == "read":
        return n, 4 * n  # one add per element
    if pattern == "write":
        return 0, 4 * n
    if pattern == "copy":
        return 0, 8 * n
    if pattern == "triad":
        return 2 * n, 12 * n  # a = b + s*c: read b and c, write a
    raise SpecError(f"unknown bandwidth pattern {pattern!r}")


def bandwidth_written(pattern: str, n: int) -> int:
    """Bytes written by a streaming pattern over fp32 arrays of n elements (read writes none)."""
    return 0 if pattern == "read" else 4 * n


def bandwidth_op(pattern: str, n: int, threads: int) -> dict[str, Any]:
    flops, nbytes = bandwidth_counts(pattern, n)
    return {
        "op": "kernel",
        "flops": flops,
        "bytes": nbytes,
        "bytes_written": bandwidth_written(pattern, n),
        "dtype": "fp32",
        "fma": True,
        "threads": int(threads),
        "threads_per_block": BLOCK,
    }


def bandwidth_grid(n: int, sm_count: int, pattern: str = "copy") -> int:
    """Blocks for the grid-stride float4 kernels. Write, copy and triad get one thread per float4
    (the block scheduler then walks memory in order, as CuPy's elementwise kernels do): on an H100
    that copy ran at 1.00x cudaMemcpy d2d vs 0.94x for a grid of 8 blocks per SM
    (validation/results/h100-sxm/copy-kernel-variants.txt). Read keeps 8 x 256 threads per SM,
    the bound of its per-block partial sums."""
    vec = max(1, n // 4)
    blocks = math.ceil(vec / BLOCK)
    return max(1, min(blocks, sm_count * 8) if pattern == "read" else blocks)


def bandwidth_points(quick: bool) -> list[tuple[str, int]]:
    """(pattern, n elements per array) points: total bytes moved from 4 KB to 4 GB (1 GB quick),
    three points per octave (one every two octaves quick)."""
    totals = log_sizes(4096, 1 << 30, 1)[::2] if quick else log_sizes(4096, 4 << 30, 3)
    out = []
    for pattern in BW_PATTERNS:
        per = 4 * BW_ARRAYS[pattern]
        seen = set()
        for total in totals:
            n = max(4, round(total / per / 4) * 4)  # float4 granularity
            if n not in seen:
                seen.add(n)
                out.append((pattern, n))
    return out


# --------------------------------------------------------------------------- measure


def _bandwidth_point(ctx: _Context, pattern: str, n: int, n_max: int) -> list[dict[str, Any]]:
    import numpy as np

    cp = ctx.cupy
    dev = _Dev(ctx)

    def make() -> dict[str, Any]:
        arrays = [cp.empty(n_max, dtype=cp.float32) for _ in range(BW_ARRAYS[pattern])]
        for x in arrays:
            dev.fill_uniform(x, 0.0, 1.0)
        bufs = {
            "arrays": arrays,
            "partials": cp.zeros(ctx.sm_count * 8, dtype=cp.float32),
            "counter": cp.zeros(1, dtype=cp.uint32),
            "result": cp.zeros(1, dtype=cp.float32),
        }
        return bufs

    bufs = ctx.slot("bandwidth", pattern, make)
    arrs = [x[:n] for x in bufs["arrays"]]
    grid = (bandwidth_grid(n, ctx.sm_count, pattern),)
    n4 = np.int64(n // 4)
    kern = ctx.kernel("bandwidth.cu", f"bw_{pattern}")
    rng = np.random.default_rng()
    value = np.float32(rng.uniform(0.5, 2.0))
    if pattern == "read":
        args: tuple[Any, ...] = (arrs[0], n4, bufs["partials"], bufs["counter"], bufs["result"])
    elif pattern == "write":
        args = (arrs[0], n4, value)
    elif pattern == "copy":
        args = (arrs[0], arrs[1], n4)
    else:
        args = (arrs[0], arrs[1], arrs[2], value, n4)

    def fn() -> None:
        kern(grid, (BLOCK,), args)

    # poison the output, run once, check every element
    if pattern == "read":
        dev.poison(bufs["result"])
    elif pattern == "copy":
        dev.poison(arrs[1])
    else:
        dev.poison(arrs[0])
    fn()
    ctx.sync()
    if pattern == "read":
        ref = dev.sum64(arrs[0])
        got = float(cp.asnumpy(bufs["result"])[0])
        _check(abs(got - ref) <= 1e-4 * abs(ref), f"sum {got} vs {ref}")
    elif pattern == "write":
        _check(dev.count_ne_value(arrs[0], float(value)) == 0, "fill value not everywhere")
    elif pattern == "copy":
        _check(dev.count_ne(arrs[1], arrs[0]) == 0, "copy differs from source")
    else:
        err = dev.triad_err(arrs[0], arrs[1], arrs[2], float(value))
        _check(err <= 1e-6, f"triad max rel err {err:.2e}")

    from gpumodel.validate.timing import time_cuda

    _, nbytes = bandwidth_counts(pattern, n)
    op = bandwidth_op(pattern, n, grid[0] * BLOCK)
    out = []
    for cache, flush in (("cold", ctx.flush()), ("hot", None)):
        t, spread, reps = time_cuda(fn, flush=flush, **ctx.reps)
        meta = {
            "pattern": pattern,
            "working_set_bytes": nbytes,
            "cache": cache,
            "blocks": grid[0],
        }
        out.append(make_record("bandwidth", op, t, reps, spread, meta))
    return out


# --------------------------------------------------------------------------- fit


def fit(fam: dict[str, list[Point]], gpu: GPUSpec, params: CalibrationParams) -> CalibrationParams:
    """DRAM: the steady-state read and write efficiencies and the read/write turnaround loss
    from cold streams far larger than L2 (no floor, no cache effects), then the kernel family's
    floor from every cold stream; dram_efficiency (streams of unknown mix) = 1:1 mix. Then L2:
    hot repeated access over sets that fit -> L2 bandwidth, and how much of the cold floor is
    the first trip to DRAM (a kernel whose inputs sit in L2 skips it)."""
    from gpumodel.calibrate import fit_parameters

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
        params = fit_parameters(steady, gpu, params, build_dram, x0)
    if cold:

        def build_floor(x: np.ndarray) -> CalibrationParams:
            return params.model_copy(update={
                "family_overhead_s": {**params.family_overhead_s, "kernel": math.exp(x[0])},
                "reduction_tail_s": math.exp(x[1]),
            })  # fmt: skip

        params = fit_parameters(cold, gpu, params, build_floor, [math.log(5e-6), math.log(1e-6)])

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
        params = fit_parameters(hot, gpu, params, build_l2, x0)
    return params


def adapt_op(op: Any, meta: dict[str, Any]) -> Any:
    """Records from before the harness stated ``bytes_written``: read writes nothing; write,
    copy and triad write one array."""
    if op.op_name != "kernel" or op.bytes_written is not None:
        return op
    if meta.get("pattern") not in ("read", "write", "copy", "triad"):
        return op
    share = {"read": 0.0, "write": 1.0, "copy": 0.5, "triad": 1 / 3}[meta["pattern"]]
    return op.model_copy(update={"bytes_written": op.bytes * share})


# --------------------------------------------------------------------------- report


# the harness's own copy kernel should stream within 5% of cudaMemcpy device to device (issue)
COPY_CHECK_RATIO = 0.95


def copy_check(measurements: list[dict], l2_bytes: float) -> dict[str, float] | None:
    """Harness copy kernel vs cudaMemcpy d2d, bytes read + written per second over cold copies
    of at least 8 x L2 (steady DRAM streaming): medians over those sizes and the best of each.
    None when either was not measured."""
    import numpy as np

    floor = 8 * l2_bytes

    def rates(family: str) -> list[float]:
        out = []
        for r in measurements:
            meta = r.get("meta") or {}
            if r.get("family") != family or meta.get("cache") == "hot" or not r.get("time_s"):
                continue
            if family == "bandwidth" and meta.get("pattern") != "copy":
                continue
            moved = float(meta.get("moved_bytes") or r["op"]["bytes"])
            if moved >= floor:
                out.append(moved / r["time_s"])
        return out

    harness, memcpy = rates("bandwidth"), rates("copy")
    if not harness or not memcpy:
        return None
    return {
        "harness_median": float(np.median(harness)), "memcpy_median": float(np.median(memcpy)),
        "harness_best": max(harness), "memcpy_best": max(memcpy),
        "ratio": float(np.median(harness)) / max(memcpy),
    }  # fmt: skip


def copy_check_line(c: dict[str, float]) -> str:
    verdict = "ok" if c["ratio"] >= COPY_CHECK_RATIO else "MISSED"
    return (
        f"- harness check: copy kernel {c['harness_median'] / 1e9:.0f} GB/s (median over cold "
        f"copies >= 8 x L2; best {c['harness_best'] / 1e9:.0f}) vs cudaMemcpy d2d "
        f"{c['memcpy_median'] / 1e9:.0f} GB/s (best {c['memcpy_best'] / 1e9:.0f}): "
        f"{c['ratio']:.3f} of the best device copy (target >= {COPY_CHECK_RATIO}: {verdict})"
    )


def report(cal: Any) -> list[str]:
    check = copy_check(cal.measurements, float(cal.environment.get("l2_bytes") or 0))
    return [] if check is None else [copy_check_line(check)]


def _points(quick: bool) -> list[tuple[str, int, int]]:
    points = bandwidth_points(quick)
    max_n: dict[str, int] = {}
    for pattern, n in points:
        max_n[pattern] = max(max_n.get(pattern, 0), n)
    return [(pattern, n, max_n[pattern]) for pattern, n in points]


BANDWIDTH = Family(
    name="bandwidth",
    engine="cupy",
    points=_points,
    label=lambda pattern, n, _n_max: f"bandwidth {pattern} {BW_ARRAYS[pattern] * 4 * n} B",
    measure=_bandwidth_point,
    fit=fit,
    fit_order=2,
    adapt_op=adapt_op,
    groups=(
        Group("bandwidth (> 16 MB, DRAM)",
              lambda p: p.family == "bandwidth" and p.l2 == "cold" and p.op.bytes > 16 * MB,
              5.0, None, order=3),
        Group("bandwidth (4 KB - 4 GB)", lambda p: p.family == "bandwidth", 10.0, None, order=4),
    ),
    report=report,
)  # fmt: skip
