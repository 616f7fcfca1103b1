"""Strided elementwise kernels: the casts, broadcasts and rotate_half's cat eager HF Llama runs
on PyTorch's non-vectorised path, over (tokens, 4096). It fits their kernel families.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpumodel.validate.families.base import Family, Group, kernel_families_fit, make_record
from gpumodel.validate.torch_engine import Ctx as _Ctx
from gpumodel.validate.torch_engine import check_close as _check_close

if TYPE_CHECKING:
    pass


# The eager HF Llama kernels PyTorch runs on its non-vectorised path, over (tokens, 4096):
# name -> (kind, bytes per element, bytes written per element)
STRIDED_CASES = {
    "to fp32 (cast)": ("cast", 6, 4),  # x.float() of bf16: unrolled_elementwise_kernel
    "rope q*cos (transposed view)": ("broadcast", 4, 2),  # bf16, cos broadcast over heads
    "norm x*rsqrt (fp32)": ("broadcast", 8, 4),  # fp32 rows times a per-row scalar
    "norm weight*x (bf16)": ("broadcast", 4, 2),  # weight broadcast over rows
    # rotate_half's torch.cat((-x2, x1), -1): -x2 is contiguous, x1 the transposed q's first
    # half (a non-contiguous view): CatArrayBatchedCopy's generic kernel
    "rope cat (rotate_half)": ("cat", 4, 2),
}


def strided_points(quick: bool) -> list[tuple[str, int]]:
    """(case, tokens) with hidden 4096: 1M to 134M elements."""
    tokens = (256, 32768) if quick else (256, 1024, 4096, 8192, 16384, 32768)
    return [(case, t) for case in STRIDED_CASES for t in tokens]


# --------------------------------------------------------------------------- measure


def _strided_point(ctx: _Ctx, case: str, tokens: int) -> list[dict[str, Any]]:
    """One of HF Llama's non-vectorised elementwise kernels, as eager PyTorch runs it."""
    torch = ctx.torch
    bf, hidden, heads = torch.bfloat16, 4096, 32
    kind, per, written = STRIDED_CASES[case]
    x = torch.randn(tokens, hidden, device="cuda", dtype=bf)
    if case.startswith("to fp32"):
        args: tuple = (x,)

        def fn() -> Any:
            return x.float()

        def ref(i: Any) -> Any:
            return x[i].double()

    elif case.startswith("rope cat"):
        q = x.view(1, tokens, heads, hidden // heads).transpose(1, 2)
        half = hidden // heads // 2
        x2n, x1 = -q[..., half:], q[..., :half]  # the neg is not timed
        args = (x2n, x1)

        def fn() -> Any:
            return torch.cat((x2n, x1), dim=-1)

        def ref(i: Any) -> Any:
            return torch.cat((x2n[:, :, i], x1[:, :, i]), dim=-1).double()

    elif case.startswith("rope"):
        q = x.view(1, tokens, heads, hidden // heads).transpose(1, 2)  # (1, heads, tokens, d)
        cos = torch.randn(1, 1, tokens, hidden // heads, device="cuda", dtype=bf)
        args = (q, cos)

        def fn() -> Any:
            return q * cos

        def ref(i: Any) -> Any:
            return q[:, :, i].double() * cos[:, :, i].double()

    elif case.startswith("norm x*rsqrt"):
        x32 = x.float()
        r = torch.rand(tokens, 1, device="cuda") + 0.5
        args = (x32, r)

        def fn() -> Any:
            return x32 * r

        def ref(i: Any) -> Any:
            return x32[i].double() * r[i].double()

    else:
        w = torch.randn(hidden, device="cuda", dtype=bf)
        args = (w, x)

        def fn() -> Any:
            return w * x

        def ref(i: Any) -> Any:
            return w.double() * x[i].double()

    out = fn()
    torch.cuda.synchronize()
    idx = torch.randint(0, tokens, (16,), device="cuda")
    got = out[:, :, idx] if case.startswith("rope") else out[idx]
    err = _check_close(got, ref(idx), 1e-2, case)
    del out, args
    n = tokens * hidden
    t, spread, reps = ctx.time(fn, int(n * per))
    op = {"op": "strided_elementwise", "kind": kind, "n": n, "bytes_per_element": per,
          "written_per_element": written, "dtype": "bf16"}  # fmt: skip
    meta = {"cache": "cold", "rel_err": err, "case": case}
    return [make_record("strided_elementwise", op, t, reps, spread, meta)]


# --------------------------------------------------------------------------- fit


STRIDED_ELEMENTWISE = Family(
    name="strided_elementwise",
    engine="torch",
    points=strided_points,
    label=lambda case, tokens: f"{case} {tokens}x4096",
    measure=_strided_point,
    fit=kernel_families_fit("strided_elementwise"),
    fit_order=7.7,
    groups=(
        Group("strided elementwise (casts, broadcasts)",
              lambda p: p.family == "strided_elementwise", 10.0, None, order=11),
    ),
)  # fmt: skip
