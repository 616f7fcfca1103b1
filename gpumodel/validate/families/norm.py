"""Row normalisations through PyTorch: LayerNorm, RMSNorm and softmax, hidden 1024-8192 (and
softmax over the longer rows of its shared-memory and three-read kernels, 10K-128K columns), 64K
to 256M elements, in bf16 and in fp32 (autocast runs norms and softmax in fp32: an amp training
step's layer norms and its loss's log-softmax). It fits per kernel family (fp32 apart:
``layernorm:fp32``, ...) the bandwidth efficiency, the floor and the elements per SM cycle of
the issue-bound row kernels.
"""

from __future__ import annotations

from typing import Any

from gpumodel.errors import SpecError
from gpumodel.validate.families.base import Family, Group, make_record
from gpumodel.validate.families.elementwise import elements as _elements
from gpumodel.validate.torch_engine import Ctx as _Ctx
from gpumodel.validate.torch_engine import check_close as _check_close
from gpumodel.validate.torch_engine import dtype_of as _dtype_of

NORM_OPS = ("layernorm", "rmsnorm", "softmax")
NORM_DTYPES = ("bf16", "fp32")


def norm_op(kind: str, rows: int, hidden: int, dtype: str = "bf16") -> dict[str, Any]:
    if kind == "softmax":
        return {"op": "softmax", "rows": int(rows), "cols": int(hidden), "dtype": dtype}
    if kind not in ("layernorm", "rmsnorm"):
        raise SpecError(f"unknown norm {kind!r}")
    return {"op": kind, "rows": int(rows), "hidden": int(hidden), "dtype": dtype}


# Softmax rows past the register kernel's 9,216 columns (``Softmax.row_kernel``): in shared
# memory (``softmax:long-rows:smem``: bf16 to 24,504 columns, fp32 to 12,255) and read three
# times (``softmax:long-rows:spill``: past shared memory, or of an odd length: a vocabulary's
# logits), each its own family
SOFTMAX_COLUMNS = {"bf16": (12288, 16384, 24504, 32000, 50257, 128256),
                   "fp32": (10240, 12000, 16384, 50257, 128256)}  # fmt: skip


def norm_points(quick: bool) -> list[tuple[str, int, int, str]]:
    """(kind, rows, hidden, dtype) points, total elements 64K .. 256M, bf16 and fp32."""
    if quick:
        pts = [(kind, t // 4096, 4096, "bf16") for kind in NORM_OPS for t in _elements(True)]
        pts += [(kind, (1 << 24) // h, h, "bf16") for kind in NORM_OPS for h in (1024, 8192)]
        pts += [(kind, (1 << 24) // 1024, 1024, "fp32") for kind in NORM_OPS]
        pts += [("softmax", (1 << 24) // 50257, 50257, dtype) for dtype in NORM_DTYPES]
        pts += [("softmax", (1 << 24) // 16384, 16384, "bf16")]
        return pts
    pts = [
        (kind, t // h, h, dtype)
        for dtype in NORM_DTYPES
        for kind in NORM_OPS
        for h in (1024, 4096, 8192)
        for t in _elements(False)
    ]
    return pts + [
        ("softmax", t // cols, cols, dtype)
        for dtype in NORM_DTYPES
        for cols in SOFTMAX_COLUMNS[dtype]
        for t in _elements(False)
        if t >= cols
    ]


# --------------------------------------------------------------------------- measure


def _norm_point(
    ctx: _Ctx, kind: str, rows: int, hidden: int, dtype: str = "bf16"
) -> list[dict[str, Any]]:
    torch = ctx.torch
    import torch.nn.functional as F

    dt = _dtype_of(torch, dtype)
    x = torch.randn(rows, hidden, device="cuda", dtype=dt)
    weight = (1 + 0.1 * torch.randn(hidden, device="cuda")).to(dt)
    bias = (0.1 * torch.randn(hidden, device="cuda")).to(dt)
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
    t, spread, reps = ctx.time(fn, 2 * x.element_size() * rows * hidden)
    meta = {"cache": "cold", "rel_err": err}
    return [make_record("norm", norm_op(kind, rows, hidden, dtype), t, reps, spread, meta)]


# --------------------------------------------------------------------------- fit


def fit(fam: dict[str, list[Any]], gpu: Any, params: Any) -> Any:
    """Per kernel family; the fp32 families take the plain copy's measured bandwidth as their
    memory roof (``fit_kernel_families``' ``memory_roof``) and fit their per-element rate:
    PyTorch's fp32 layer norm over 1024 columns ran 15 us at 4096 rows on an H100 (the
    training fit set's GPT-2 medium traces) and 18.4 us on an H200 timed alone (15 us less the
    launch latency): the same on both, so bound by per-element work, not by HBM. Fitted freely,
    the H200's points alone explained it as 57% of its HBM bandwidth, which carried to the
    H100 priced it 38% slow."""
    from gpumodel.calibrate import fit_kernel_families, kernel_family

    pts = fam.get("norm", [])
    fp32 = {kernel_family(p.op, gpu) for p in pts if p.op.dtype == "fp32"}
    return fit_kernel_families(pts, gpu, params, memory_roof=dict.fromkeys(fp32, "copy"))


def _norm(p: Any) -> bool:
    return p.family == "norm"


NORM = Family(
    name="norm",
    engine="torch",
    points=norm_points,
    label=lambda kind, rows, hidden, dtype: f"{kind} {rows}x{hidden} {dtype}",
    measure=_norm_point,
    fit=fit,
    fit_order=7.5,
    split_by_kernel=True,
    groups=(
        Group("layer/RMS norm, softmax", lambda p: _norm(p) and p.op.dtype != "fp32", 10.0, None,
              order=9),
        Group("layer/RMS norm, softmax (fp32)", lambda p: _norm(p) and p.op.dtype == "fp32", 10.0,
              None, order=9.1),
    ),
)
