"""Optimizer step: torch.optim.AdamW(fused=True).step() over 8 tensors, 1M to 512M parameters,
fp32 (an amp or Megatron run's master states) and bf16 (a pure-bf16 run keeps weights, gradients
and moments in bf16). It fits the fused AdamW kernel families (``adamw``, ``adamw:16-bit``).
"""

from __future__ import annotations

from typing import Any

from gpumodel.ops.base import element_bytes
from gpumodel.validate.families.base import Family, Group, make_record
from gpumodel.validate.torch_engine import Ctx as _Ctx
from gpumodel.validate.torch_engine import check_close as _check_close
from gpumodel.validate.torch_engine import dtype_of as _dtype_of

ADAMW_DTYPES = ("fp32", "bf16")
# the fused step against the unfused one of the same dtype: bf16 rounds each state to 8 bits of
# mantissa (one step's update of a weight near 1 is below one bf16 ulp either way)
ADAMW_TOLERANCE = {"fp32": 1e-5, "bf16": 1e-2}


def adamw_points(quick: bool) -> list[tuple[int, str]]:
    """(parameters, dtype) of a fused AdamW step over 8 tensors: 1M to 512M, fp32 and bf16."""
    if quick:
        return [(1 << 20, "fp32"), (1 << 28, "fp32"), (1 << 26, "bf16")]
    return [(1 << p, dtype) for dtype in ADAMW_DTYPES for p in (20, 22, 24, 26, 28, 29)]


# --------------------------------------------------------------------------- measure


def _adamw_point(ctx: _Ctx, params: int, dtype: str = "fp32") -> list[dict[str, Any]]:
    """``torch.optim.AdamW(fused=True).step()`` over 8 tensors of ``params`` in all, each with
    a gradient; checked against the unfused (foreach=False) update of a copy."""
    torch = ctx.torch
    dt = _dtype_of(torch, dtype)
    sizes = [params // 8] * 8
    ws = [torch.nn.Parameter(torch.randn(n, device="cuda", dtype=dt)) for n in sizes]
    for w in ws:
        w.grad = torch.randn_like(w) * 1e-2
    opt = torch.optim.AdamW(ws, lr=1e-3, fused=True)
    ref = [torch.nn.Parameter(w.detach().clone()) for w in ws]
    for r, w in zip(ref, ws):
        r.grad = w.grad.clone()
    torch.optim.AdamW(ref, lr=1e-3, foreach=False).step()
    opt.step()
    torch.cuda.synchronize()
    err = _check_close(ws[0].detach()[:4096], ref[0].detach()[:4096].double(),
                       ADAMW_TOLERANCE[dtype], "adamw")  # fmt: skip
    del ref
    t, spread, reps = ctx.time(opt.step, 7 * element_bytes(dtype) * params)
    meta = {"cache": "cold", "rel_err": err, "tensors": 8}
    op = {"op": "adamw", "params": int(params), "dtype": dtype}
    return [make_record("adamw", op, t, reps, spread, meta)]


# --------------------------------------------------------------------------- fit


def fit(fam: dict[str, list[Any]], gpu: Any, params: Any) -> Any:
    """Per kernel family; the 16-bit kernel takes the fp32 kernel's fitted bandwidth as its
    memory roof and fits its per-element rate (``AdamW.kernels``): fitted freely, its bytes and
    its elements explain the same times, and only the roof tells how it carries to a GPU of
    other bandwidth (the H100 ran it at 0.60x the fp32 step's time, the H200 at 0.64x)."""
    from gpumodel.calibrate import fit_kernel_families

    return fit_kernel_families(fam.get("adamw", []), gpu, params,
                               memory_roof={"adamw:16-bit": "adamw"})  # fmt: skip


ADAMW = Family(
    name="adamw",
    engine="torch",
    points=adamw_points,
    label=lambda n, dtype: f"fused AdamW {n} params {dtype}",
    measure=_adamw_point,
    fit=fit,
    fit_order=7.8,
    groups=(Group("optimizer (fused AdamW)", lambda p: p.family == "adamw", 10.0, None, order=12),),
)
