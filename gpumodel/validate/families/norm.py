"""Row normalisations through PyTorch: LayerNorm, RMSNorm and softmax (bf16), hidden 1024-8192,
64K to 256M elements. It fits per kernel family the bandwidth efficiency, the floor and the
elements per SM cycle of the issue-bound row kernels.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpumodel.errors import SpecError
from gpumodel.validate.families.base import Family, Group, kernel_families_fit, make_record
from gpumodel.validate.families.elementwise import elements as _elements
from gpumodel.validate.torch_engine import Ctx as _Ctx
from gpumodel.validate.torch_engine import check_close as _check_close

if TYPE_CHECKING:
    pass


NORM_OPS = ("layernorm", "rmsnorm", "softmax")


def norm_op(kind: str, rows: int, hidden: int, dtype: str = "bf16") -> dict[str, Any]:
    if kind == "softmax":
        return {"op": "softmax", "rows": int(rows), "cols": int(hidden), "dtype": dtype}
    if kind not in ("layernorm", "rmsnorm"):
        raise SpecError(f"unknown norm {kind!r}")
    return {"op": kind, "rows": int(rows), "hidden": int(hidden), "dtype": dtype}


def norm_points(quick: bool) -> list[tuple[str, int, int]]:
    """(kind, rows, hidden) points, total elements 64K .. 256M."""
    if quick:
        pts = [(kind, t // 4096, 4096) for kind in NORM_OPS for t in _elements(True)]
        pts += [(kind, (1 << 24) // h, h) for kind in NORM_OPS for h in (1024, 8192)]
        return pts
    return [
        (kind, t // h, h) for kind in NORM_OPS for h in (1024, 4096, 8192) for t in _elements(False)
    ]


# --------------------------------------------------------------------------- measure


def _norm_point(ctx: _Ctx, kind: str, rows: int, hidden: int) -> list[dict[str, Any]]:
    torch = ctx.torch
    import torch.nn.functional as F

    bf = torch.bfloat16
    x = torch.randn(rows, hidden, device="cuda", dtype=bf)
    weight = (1 + 0.1 * torch.randn(hidden, device="cuda")).to(bf)
    bias = (0.1 * torch.randn(hidden, device="cuda")).to(bf)
    if kind == "layernorm":

        def fn() -> Any:
            return F.layer_norm(x, (hidden,), weight, bias, 1e-5)

        def reference(xs: Any) -> Any:
            return F.layer_norm(xs, (hidden,), weight.double(), bias.double(), 1e-5)

    elif kind == "rmsnorm":

        def fn() -> Any:
            return F.rms_norm(x, (hidden,), weight, 1e-6)

        def reference(xs: Any) -> Any:
            return xs * torch.rsqrt(xs.pow(2).mean(-1, keepdim=True) + 1e-6) * weight.double()

    else:

        def fn() -> Any:
            return torch.softmax(x, dim=-1)

        def reference(xs: Any) -> Any:
            return torch.softmax(xs, dim=-1)

    out = fn()
    torch.cuda.synchronize()
    idx = torch.randint(0, rows, (min(rows, 16),), device="cuda")
    err = _check_close(out[idx], reference(x[idx].double()), 2e-2, kind)
    del out
    t, spread, reps = ctx.time(fn, 2 * 2 * rows * hidden)
    meta = {"cache": "cold", "rel_err": err}
    return [make_record("norm", norm_op(kind, rows, hidden), t, reps, spread, meta)]


# --------------------------------------------------------------------------- fit


NORM = Family(
    name="norm",
    engine="torch",
    points=norm_points,
    label=lambda kind, rows, hidden: f"{kind} {rows}x{hidden}",
    measure=_norm_point,
    fit=kernel_families_fit("norm"),
    fit_order=7.5,
    groups=(Group("layer/RMS norm, softmax", lambda p: p.family == "norm", 10.0, None, order=9),),
)
