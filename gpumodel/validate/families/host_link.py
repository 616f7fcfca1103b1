"""Host <-> device copies (cudaMemcpyAsync), pinned and pageable, both directions, 4 KB to 1 GB.
It fits a copy curve per direction and memory kind (gpumodel.fitting.fit_copy_curve): a fixed
cost plus bytes over the link's rate, and a slower rate for large pageable sources.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpumodel.errors import SpecError
from gpumodel.validate.cupy_engine import Context as _Context
from gpumodel.validate.cupy_engine import Dev as _Dev
from gpumodel.validate.cupy_engine import check as _check
from gpumodel.validate.families.base import Family, Group, make_record
from gpumodel.validate.timing import log_sizes

if TYPE_CHECKING:
    from gpumodel.calibrate import Point
    from gpumodel.calibration import CalibrationParams
    from gpumodel.fitting import CopyCurve
    from gpumodel.specs import GPUSpec


def host_transfer_op(nbytes: int, direction: str, pinned: bool) -> dict[str, Any]:
    if direction not in ("h2d", "d2h"):
        raise SpecError(f"direction must be h2d or d2h, not {direction!r}")
    return {
        "op": "host_transfer",
        "bytes": int(nbytes),
        "direction": direction,
        "pinned": bool(pinned),
    }


def host_transfer_sizes(quick: bool) -> list[int]:
    if quick:
        return [4096, 1 << 16, 1 << 20, 16 << 20, 256 << 20]
    return log_sizes(4096, 1 << 30, 1, multiple=16)


# --------------------------------------------------------------------------- measure


def _host_point(
    ctx: _Context, size: int, direction: str, pinned: bool, top: int
) -> list[dict[str, Any]]:
    import numpy as np

    cp = ctx.cupy
    rt = cp.cuda.runtime

    util = _Dev(ctx)

    def make() -> tuple[Any, Any, Any]:
        dev = cp.empty(top // 4, dtype=cp.float32)
        util.fill_uniform(dev, 0.0, 1.0)
        if pinned:
            mem = cp.cuda.alloc_pinned_memory(top)
            host = np.frombuffer(mem, dtype=np.float32, count=top // 4)
        else:
            mem = None
            host = np.empty(top // 4, dtype=np.float32)
        dev.get(out=host)  # touches every page; random, non-zero contents
        return dev, host, mem

    dev, host, _mem = ctx.slot("host", (top, pinned), make)
    stream = cp.cuda.get_current_stream()
    n = size // 4
    if direction == "h2d":
        dst, src, kind = dev.data.ptr, host.ctypes.data, rt.memcpyHostToDevice
        util.poison(dev[:n])  # host[:n] holds random data since make()
    else:
        dst, src, kind = host.ctypes.data, dev.data.ptr, rt.memcpyDeviceToHost
        util.fill_uniform(dev[:n], 0.0, 1.0)
        host[:n] = np.nan
    ctx.sync()

    def fn() -> None:
        rt.memcpyAsync(dst, src, size, kind, stream.ptr)

    fn()
    ctx.sync()
    rng = np.random.default_rng()
    idx = rng.integers(0, n, 1024)
    dev_vals = util.gather(dev, idx)
    _check(bool(np.array_equal(dev_vals, host[idx].astype(np.float64))), f"{direction} differs")
    if direction == "d2h":
        _check(not bool(np.isnan(host[:n]).any()), "unwritten host bytes")
    else:
        _check(util.count_nonfinite(dev[:n]) == 0, "unwritten device bytes")

    from gpumodel.validate.timing import time_cuda

    reps = dict(ctx.reps)
    if size >= 256 << 20:
        reps["min_repeats"] = 3
    # Pageable copies block the host (staged through a driver buffer): no spin kernel ahead.
    t, spread, n_rep = time_cuda(fn, use_spin=pinned, **reps)
    meta = {"timer": "cuda_event", "api": "cudaMemcpyAsync"}
    return [
        make_record(
            "host_transfer", host_transfer_op(size, direction, pinned), t, n_rep, spread, meta
        )
    ]


# --------------------------------------------------------------------------- fit


def copy_curve_fields(direction: str, pinned: bool, curve: CopyCurve) -> dict[str, float]:
    """The ``HostLinkParams`` fields of one direction and memory kind's fitted copy curve."""
    key = f"{direction}_{'pinned' if pinned else 'pageable'}"
    out = {f"{key}_bytes_per_s": curve.bytes_per_s, f"{key}_overhead_s": curve.overhead_s}
    if curve.large_min_bytes is not None and curve.large_bytes_per_s is not None:
        out[f"{key}_large_min_bytes"] = curve.large_min_bytes
        out[f"{key}_large_bytes_per_s"] = curve.large_bytes_per_s
    return out


def fit_host(pts: list[Point], params: CalibrationParams) -> CalibrationParams:
    import numpy as np

    from gpumodel.calibration import HostLinkParams
    from gpumodel.fitting import fit_copy_curve

    if not pts:
        return params
    update: dict[str, float] = {}
    overheads = []
    for direction in ("h2d", "d2h"):
        for pinned in (True, False):
            sel = [p for p in pts if p.op.direction == direction and p.op.pinned == pinned]  # type: ignore[attr-defined]
            curve = fit_copy_curve([p.op.bytes for p in sel], [p.measured_s for p in sel],  # type: ignore[attr-defined]
                                   step=not pinned)
            if curve is None:
                continue
            update.update(copy_curve_fields(direction, pinned, curve))
            overheads.append(curve.overhead_s)
    if overheads:
        update["overhead_s"] = float(np.median(overheads))
    return params.model_copy(update={"host": HostLinkParams(**update)})


def fit(fam: dict[str, list[Point]], gpu: GPUSpec, params: CalibrationParams) -> CalibrationParams:
    return fit_host(fam.get("host_transfer", []), params)


def _points(quick: bool) -> list[tuple[int, str, bool, int]]:
    sizes = host_transfer_sizes(quick)
    top = max(sizes)
    return [
        (s, direction, pinned, top)
        for pinned in (True, False)
        for direction in ("h2d", "d2h")
        for s in sizes
    ]


def _label(s: int, direction: str, pinned: bool, _top: int) -> str:
    kind = "pinned" if pinned else "pageable"
    return f"{direction} {kind} {s} B"


HOST_TRANSFER = Family(
    name="host_transfer",
    engine="cupy",
    points=_points,
    label=_label,
    measure=_host_point,
    fit=fit,
    fit_order=6,
    groups=(Group("host transfer", lambda p: p.family == "host_transfer", 10.0, None, order=7),),
)
