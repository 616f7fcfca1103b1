"""Device-to-device cudaMemcpy of one buffer, 2 KB to 2 GB, cold and hot. It fits the copy
kernel family's efficiency and floor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpumodel.validate.cupy_engine import Context as _Context
from gpumodel.validate.cupy_engine import Dev as _Dev
from gpumodel.validate.cupy_engine import check as _check
from gpumodel.validate.families.base import Family, Group, kernel_families_fit, make_record
from gpumodel.validate.timing import log_sizes

if TYPE_CHECKING:
    pass


def copy_op(nbytes: int) -> dict[str, Any]:
    """Device-to-device copy of one buffer of ``nbytes`` (2 x nbytes move through memory)."""
    return {"op": "copy", "bytes": int(nbytes)}


def copy_sizes(quick: bool) -> list[int]:
    """Bytes per buffer of the cupy device-to-device copies (2 KB .. 2 GB)."""
    return log_sizes(4096, 1 << 30, 1)[::2] if quick else log_sizes(2048, 2 << 30, 2, multiple=16)


# --------------------------------------------------------------------------- measure


def _copy_point(ctx: _Context, size: int, top: int) -> list[dict[str, Any]]:
    cp = ctx.cupy
    rt = cp.cuda.runtime

    dev = _Dev(ctx)

    def make() -> tuple[Any, Any]:
        src = cp.empty(top // 4, dtype=cp.float32)
        dev.fill_uniform(src, 0.0, 1.0)
        return src, cp.empty(top // 4, dtype=cp.float32)

    src, dst = ctx.slot("copy", top, make)
    n = size // 4

    def fn() -> None:
        rt.memcpyAsync(
            dst.data.ptr,
            src.data.ptr,
            size,
            rt.memcpyDeviceToDevice,
            cp.cuda.get_current_stream().ptr,
        )

    dev.poison(dst[:n])
    fn()
    ctx.sync()
    _check(dev.count_ne(dst[:n], src[:n]) == 0, "copy differs from source")

    from gpumodel.validate.timing import time_cuda

    out = []
    for cache, flush in (("cold", ctx.flush()), ("hot", None)):
        t, spread, reps = time_cuda(fn, flush=flush, **ctx.reps)
        meta = {"moved_bytes": 2 * size, "cache": cache, "api": "cudaMemcpyAsync"}
        out.append(make_record("copy", copy_op(size), t, reps, spread, meta))
    return out


# --------------------------------------------------------------------------- fit


def _points(quick: bool) -> list[tuple[int, int]]:
    sizes = copy_sizes(quick)
    top = max(sizes)
    return [(s, top) for s in sizes]


COPY = Family(
    name="copy",
    engine="cupy",
    points=_points,
    label=lambda s, _top: f"copy {s} B",
    measure=_copy_point,
    fit=kernel_families_fit("copy"),
    fit_order=7.0,
    groups=(Group("copy (cudaMemcpy d2d)", lambda p: p.family == "copy", 10.0, None, order=5),),
)
