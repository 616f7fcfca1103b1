"""Elementwise ops (add, mul, relu, gelu, silu, exp, copy) and full reductions (sum) through
PyTorch, bf16 and fp32, 64K to 256M elements (families ``elementwise`` and ``reduction``,
scored together). Each fits its kernel families' bandwidth efficiency and floor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpumodel.errors import SpecError
from gpumodel.validate.families.base import Family, Group, kernel_families_fit, make_record
from gpumodel.validate.timing import log_sizes
from gpumodel.validate.torch_engine import Ctx as _Ctx
from gpumodel.validate.torch_engine import check_close as _check_close
from gpumodel.validate.torch_engine import dtype_of as _dtype
from gpumodel.validate.torch_engine import tolerance as _tol

if TYPE_CHECKING:
    from gpumodel.calibrate import Point


ELEMENTWISE_OPS = ("add", "mul", "relu", "gelu", "silu", "exp", "copy")


def elementwise_op(name: str, n: int, dtype: str) -> dict[str, Any]:
    if name not in ELEMENTWISE_OPS:
        raise SpecError(f"unknown elementwise op {name!r}")
    return {"op": name, "n": int(n), "dtype": dtype}


def reduction_op(n: int, dtype: str) -> dict[str, Any]:
    return {"op": "reduction", "n": int(n), "dtype": dtype}


def elements(quick: bool) -> list[int]:
    return [1 << 16, 1 << 20, 1 << 24, 1 << 28] if quick else log_sizes(1 << 16, 1 << 28, 1)[::2]


def elementwise_points(quick: bool) -> list[tuple[str, int, str]]:
    if quick:
        pts = [(name, n, "bf16") for name in ELEMENTWISE_OPS for n in (1 << 16, 1 << 22, 1 << 28)]
        pts += [(name, 1 << 26, "fp32") for name in ELEMENTWISE_OPS]
        return pts
    return [
        (name, n, dtype)
        for dtype in ("bf16", "fp32")
        for name in ELEMENTWISE_OPS
        for n in elements(False)
    ]


def reduction_points(quick: bool) -> list[tuple[int, str]]:
    return [(n, dtype) for dtype in ("bf16", "fp32") for n in elements(quick)]


# --------------------------------------------------------------------------- measure


def _elementwise_point(ctx: _Ctx, name: str, n: int, dtype: str) -> list[dict[str, Any]]:
    torch = ctx.torch
    import torch.nn.functional as F

    dt = _dtype(torch, dtype)
    a = torch.rand(n, device="cuda", dtype=dt) * 2 - 1
    b = torch.rand(n, device="cuda", dtype=dt) * 2 - 1
    c = torch.empty(n, device="cuda", dtype=dt)
    calls: dict[str, tuple[Callable[[], Any], Callable[[Any, Any], Any], int]] = {
        # name: (timed call, float64 reference on (a, b), tensors read + written)
        "add": (lambda: torch.add(a, b, out=c), lambda x, y: x + y, 3),
        "mul": (lambda: torch.mul(a, b, out=c), lambda x, y: x * y, 3),
        "relu": (lambda: torch.relu(a), lambda x, y: torch.relu(x), 2),
        "gelu": (lambda: F.gelu(a), lambda x, y: F.gelu(x), 2),
        "silu": (lambda: F.silu(a), lambda x, y: F.silu(x), 2),
        "exp": (lambda: torch.exp(a, out=c), lambda x, y: torch.exp(x), 2),
        "copy": (lambda: c.copy_(a), lambda x, y: x, 2),
    }
    fn, reference, tensors = calls[name]
    c.fill_(float("nan"))
    out = fn()
    torch.cuda.synchronize()
    idx = torch.randint(0, n, (4096,), device="cuda")
    err = _check_close(out[idx], reference(a[idx].double(), b[idx].double()), _tol(dtype), name)
    del out
    t, spread, reps = ctx.time(fn, tensors * n * a.element_size())
    meta = {"cache": "cold", "rel_err": err}
    return [make_record("elementwise", elementwise_op(name, n, dtype), t, reps, spread, meta)]


def _reduction_point(ctx: _Ctx, n: int, dtype: str) -> list[dict[str, Any]]:
    torch = ctx.torch
    dt = _dtype(torch, dtype)
    a = torch.rand(n, device="cuda", dtype=dt)  # positive: no cancellation in the check

    def fn() -> Any:
        return torch.sum(a)

    out = fn()
    torch.cuda.synchronize()
    ref = a.double().sum()
    tol = 1e-2 if dtype == "bf16" else 1e-4
    err = _check_close(out.reshape(1), ref.reshape(1), tol, "sum")
    t, spread, reps = ctx.time(fn, n * a.element_size())
    meta = {"cache": "cold", "rel_err": err}
    return [make_record("reduction", reduction_op(n, dtype), t, reps, spread, meta)]


# --------------------------------------------------------------------------- fit


def _ew(p: Point) -> bool:
    return p.family in ("elementwise", "reduction")


ELEMENTWISE = Family(
    name="elementwise",
    engine="torch",
    points=elementwise_points,
    label=lambda name, n, dtype: f"{name} {dtype} n={n}",
    measure=_elementwise_point,
    fit=kernel_families_fit("elementwise"),
    fit_order=7.1,
    groups=(Group("elementwise / reduction", _ew, 10.0, None, order=8),),
)
REDUCTION = Family(
    name="reduction",
    engine="torch",
    points=reduction_points,
    label=lambda n, dtype: f"sum {dtype} n={n}",
    measure=_reduction_point,
    fit=kernel_families_fit("reduction"),
    fit_order=7.2,
)
