"""Optimizer step: torch.optim.AdamW(fused=True).step() over 8 fp32 tensors, 1M to 512M
parameters. It fits the fused AdamW kernel family.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpumodel.validate.families.base import Family, Group, kernel_families_fit, make_record
from gpumodel.validate.torch_engine import Ctx as _Ctx
from gpumodel.validate.torch_engine import check_close as _check_close

if TYPE_CHECKING:
    pass


def adamw_points(quick: bool) -> list[int]:
    """Parameters of a fused AdamW step (8 fp32 tensors): 1M to 512M."""
    return [1 << 20, 1 << 28] if quick else [1 << p for p in (20, 22, 24, 26, 28, 29)]


# --------------------------------------------------------------------------- measure


def _adamw_point(ctx: _Ctx, params: int) -> list[dict[str, Any]]:
    """``torch.optim.AdamW(fused=True).step()`` over 8 fp32 tensors of ``params`` in all, each
    with a gradient; checked against the unfused (foreach=False) update of a copy."""
    torch = ctx.torch
    sizes = [params // 8] * 8
    ws = [torch.nn.Parameter(torch.randn(n, device="cuda")) for n in sizes]
    for w in ws:
        w.grad = torch.randn_like(w) * 1e-2
    opt = torch.optim.AdamW(ws, lr=1e-3, fused=True)
    ref = [torch.nn.Parameter(w.detach().clone()) for w in ws]
    for r, w in zip(ref, ws):
        r.grad = w.grad.clone()
    torch.optim.AdamW(ref, lr=1e-3, foreach=False).step()
    opt.step()
    torch.cuda.synchronize()
    err = _check_close(ws[0].detach()[:4096], ref[0].detach()[:4096].double(), 1e-5, "adamw")
    del ref
    t, spread, reps = ctx.time(opt.step, 28 * params)
    meta = {"cache": "cold", "rel_err": err, "tensors": 8}
    return [make_record("adamw", {"op": "adamw", "params": int(params)}, t, reps, spread, meta)]


# --------------------------------------------------------------------------- fit


ADAMW = Family(
    name="adamw",
    engine="torch",
    points=lambda quick: [(n,) for n in adamw_points(quick)],
    label=lambda n: f"fused AdamW {n} params",
    measure=_adamw_point,
    fit=kernel_families_fit("adamw"),
    fit_order=7.8,
    groups=(Group("optimizer (fused AdamW)", lambda p: p.family == "adamw", 10.0, None, order=12),),
)
