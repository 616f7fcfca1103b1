"""HF ``repeat_kv``: expanding a bf16 KV tensor over GQA groups of 2, 4 and 8 (expand + reshape,
which copies), outputs 2 MiB to 1 GiB. It fits the strided copy's kernel family.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpumodel.validate.families.base import Family, Group, kernel_families_fit, make_record
from gpumodel.validate.torch_engine import CheckError
from gpumodel.validate.torch_engine import Ctx as _Ctx

if TYPE_CHECKING:
    pass


def expand_copy_points(quick: bool) -> list[tuple[int, int, int, int, int]]:
    """(batch, kv_heads, repeat, length, head_dim) of HF ``repeat_kv`` copies: GQA groups of 2,
    4 and 8, outputs from 2 MiB to 1 GiB (bf16)."""
    sizes = ((1, 256), (1, 16384)) if quick else (
        (1, 256), (1, 2048), (8, 1024), (1, 16384), (8, 8192), (1, 131072))  # fmt: skip
    return [(b, 8, rep, length * 4 // rep, 128) for rep in (2, 4, 8) for b, length in sizes]


# --------------------------------------------------------------------------- measure


def _expand_copy_point(
    ctx: _Ctx, batch: int, kv: int, rep: int, length: int, dim: int
) -> list[dict[str, Any]]:
    """HF ``repeat_kv`` on a bf16 (batch, kv, length, dim) tensor: expand a new axis of size
    ``rep`` and reshape, which copies."""
    torch = ctx.torch
    x = torch.randn(batch, kv, length, dim, device="cuda", dtype=torch.bfloat16)

    def fn() -> Any:
        return (
            x[:, :, None, :, :]
            .expand(batch, kv, rep, length, dim)
            .reshape(batch, kv * rep, length, dim)
        )

    out = fn()
    if not bool(torch.equal(out, torch.repeat_interleave(x, rep, dim=1))):
        raise CheckError("repeat_kv: the expanded copy differs from repeat_interleave")
    del out
    n = batch * kv * rep * length * dim
    t, spread, reps = ctx.time(fn, 2 * n + 2 * n // rep)
    op = {"op": "expand_copy", "n": int(n), "repeat": int(rep), "dtype": "bf16"}
    meta = {"cache": "cold", "rel_err": 0.0, "shape": [batch, kv, rep, length, dim]}
    return [make_record("expand_copy", op, t, reps, spread, meta)]


# --------------------------------------------------------------------------- fit


EXPAND_COPY = Family(
    name="expand_copy",
    engine="torch",
    points=expand_copy_points,
    label=lambda b, kv, rep, length, dim: f"repeat_kv x{rep} {b}x{kv}x{length}x{dim}",
    measure=_expand_copy_point,
    fit=kernel_families_fit("expand_copy"),
    fit_order=7.6,
    groups=(
        Group("expand copy (repeat_kv)", lambda p: p.family == "expand_copy", 10.0, None,
              order=10),
    ),
)  # fmt: skip
