"""Attention: PyTorch's scaled_dot_product_attention (bf16, head dim 128, and 64 for some prefill
shapes) with the flash, cuDNN, memory-efficient and math backends, prefill (causal and not; as
HF trains and prefills: grouped K/V heads, dropout 0.1) and decode (GQA), fp32 prefill on the
memory-efficient kernel (the only fused one that takes it), and the backward of the fused
prefill calls. It fits per kernel family (prefill,
decode, backward, per backend) the compute and bandwidth efficiency and the floor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpumodel.validate.families.base import Family, Group, make_record
from gpumodel.validate.torch_engine import Ctx as _Ctx
from gpumodel.validate.torch_engine import check_close as _check_close

if TYPE_CHECKING:
    from gpumodel.calibrate import Point
    from gpumodel.calibration import CalibrationParams
    from gpumodel.specs import GPUSpec


ATTN_BACKENDS = ("flash", "cudnn", "efficient", "math")
FUSED_BACKENDS = ("flash", "cudnn", "efficient")  # one kernel each way: fitted
HEAD_DIM = 128


def attention_op(
    batch: int,
    heads: int,
    seq: int,
    head_dim: int,
    causal: bool,
    kv_heads: int,
    kv_seq: int,
    impl: str = "flash",
    dropout: bool = False,
    dtype: str = "bf16",
) -> dict[str, Any]:
    extra = {"dropout": True} if dropout else {}
    return {
        "op": "attention",
        "batch": int(batch),
        "heads": int(heads),
        "seq": int(seq),
        "head_dim": int(head_dim),
        "dtype": dtype,
        "causal": bool(causal),
        "impl": impl,
        "kv_heads": int(kv_heads),
        "kv_seq": int(kv_seq),
        **extra,
    }


@dataclass(frozen=True)
class AttnPoint:
    phase: str  # "prefill" | "decode"
    batch: int
    heads: int
    seq: int
    kv_heads: int
    kv_seq: int
    causal: bool
    backend: str
    head_dim: int = HEAD_DIM
    dropout: float = 0.0  # SDPA's dropout_p
    dtype: str = "bf16"  # fp32: the memory-efficient kernel's 3xTF32 products

    def op(self) -> dict[str, Any]:
        return attention_op(
            self.batch,
            self.heads,
            self.seq,
            self.head_dim,
            self.causal,
            self.kv_heads,
            self.kv_seq,
            self.backend if self.backend in FUSED_BACKENDS else "flash",
            dropout=self.dropout > 0,
            dtype=self.dtype,
        )


_MATH_MAX_SCORES = 1 << 30  # math backend materialises B*H*S*KVS scores: cap its memory/time


def attention_points(quick: bool) -> list[AttnPoint]:
    if quick:
        prefill = [(1, 32, 1024), (1, 32, 4096), (1, 32, 16384), (8, 16, 2048)]
        prefill_d64 = [(1, 16, 4096), (8, 16, 1024)]
        decode = [(b, kvs, kvh) for b in (1, 32) for kvs in (2048, 32768) for kvh in (8,)]
    else:
        prefill = (
            [(1, 32, s) for s in (512, 1024, 2048, 4096, 8192, 16384)]
            + [(1, 16, s) for s in (1024, 4096, 16384)]
            + [(4, 32, s) for s in (512, 2048, 8192)]
            + [(8, 16, s) for s in (512, 1024, 2048, 4096)]
            + [(8, 32, s) for s in (1024, 4096)]
        )
        # head dim 64 (GPT-2, BERT, ViT): the exponentials are twice the share of the work
        prefill_d64 = [(1, 16, s) for s in (1024, 4096, 16384)] + [
            (8, 16, s) for s in (512, 2048)
        ]
        decode = [
            (b, kvs, kvh) for b in (1, 8, 32) for kvs in (512, 2048, 8192, 32768) for kvh in (32, 8)
        ]
    out = []
    for b, h, s in prefill:
        for causal in (True, False):
            for backend in ATTN_BACKENDS:
                if backend == "math" and b * h * s * s > _MATH_MAX_SCORES:
                    continue
                out.append(AttnPoint("prefill", b, h, s, h, s, causal, backend))
    for b, h, s in prefill_d64:
        for causal in (True, False):
            for backend in FUSED_BACKENDS:
                out.append(AttnPoint("prefill", b, h, s, h, s, causal, backend, head_dim=64))
    # training and prefill as HF runs them: causal, grouped K/V heads (Llama), and dropout 0.1
    # (GPT-2's attn_pdrop); (batch, heads, kv heads, seq, head dim)
    gqa = [(1, 32, 8, 2048, 128), (4, 12, 4, 2048, 128), (2, 16, 8, 2048, 64),
           (8, 16, 4, 1024, 64)]  # fmt: skip
    drop = [(4, 16, 16, 1024, 64), (8, 12, 12, 1024, 64), (16, 12, 12, 512, 64),
            (2, 16, 16, 2048, 64), (1, 32, 32, 2048, 128), (4, 32, 32, 1024, 128)]  # fmt: skip
    if quick:
        gqa, drop = gqa[:1], drop[:2]
    for b, h, kvh, s, d in gqa:
        for backend in FUSED_BACKENDS:
            out.append(AttnPoint("prefill", b, h, s, kvh, s, True, backend, head_dim=d))
    for b, h, kvh, s, d in drop:
        for backend in FUSED_BACKENDS:
            out.append(AttnPoint("prefill", b, h, s, kvh, s, True, backend, head_dim=d,
                                 dropout=0.1))  # fmt: skip
    for b, kvs, kvh in decode:
        for backend in ATTN_BACKENDS:
            out.append(AttnPoint("decode", b, 32, 1, kvh, kvs, False, backend))
    # fp32 tensors, which only the memory-efficient kernel takes (its own family, ``:fp32``):
    # (batch, heads, seq, head dim)
    fp32 = [(1, 32, 2048, 128), (4, 16, 1024, 64)] if quick else [
        (1, 32, 1024, 128), (1, 32, 4096, 128), (8, 16, 1024, 128), (4, 16, 2048, 64),
        (16, 12, 512, 64)]  # fmt: skip
    for b, h, s, d in fp32:
        for causal in (True, False):
            out.append(AttnPoint("prefill", b, h, s, h, s, causal, "efficient", head_dim=d,
                                 dtype="fp32"))  # fmt: skip
    return out


# --------------------------------------------------------------------------- measure


def _attention_point(ctx: _Ctx, p: AttnPoint) -> list[dict[str, Any]]:
    torch = ctx.torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
    }[p.backend]
    d = p.head_dim
    bf = torch.float32 if p.dtype == "fp32" else torch.bfloat16
    q = torch.randn(p.batch, p.heads, p.seq, d, device="cuda", dtype=bf)
    k = torch.randn(p.batch, p.kv_heads, p.kv_seq, d, device="cuda", dtype=bf)
    v = torch.randn(p.batch, p.kv_heads, p.kv_seq, d, device="cuda", dtype=bf)
    gqa = p.kv_heads != p.heads
    kwargs: dict[str, Any] = {"is_causal": p.causal}
    if gqa:
        kwargs["enable_gqa"] = True
    if p.dropout:
        kwargs["dropout_p"] = p.dropout

    def fn() -> Any:
        return F.scaled_dot_product_attention(q, k, v, **kwargs)

    with sdpa_kernel([backend]):
        out = fn()
        torch.cuda.synchronize()
        errs = []
        if p.dropout:  # a random mask: check it against the same call without one, which the
            # float64 reference below then checks
            plain = F.scaled_dot_product_attention(q, k, v, **{**kwargs, "dropout_p": 0.0})
            errs.append(_dropout_check(out, plain, p.dropout))
            out = plain
        # reference for a few query rows of the first and last head, float64
        rows = torch.randperm(p.seq, device="cuda")[:64]
        for h in (0, p.heads - 1):
            kvh = h // (p.heads // p.kv_heads)
            qh = q[0, h, rows].double()
            kh = k[0, kvh].double()
            vh = v[0, kvh].double()
            scores = qh @ kh.t() / d**0.5
            if p.causal:
                cols = torch.arange(p.kv_seq, device="cuda")
                scores = scores.masked_fill(cols[None, :] > rows[:, None], float("-inf"))
            ref = torch.softmax(scores, dim=-1) @ vh
            errs.append(_check_close(out[0, h, rows], ref, 2e-2, f"attention head {h}"))
        del out
        size = 4 if p.dtype == "fp32" else 2
        footprint = size * d * (2 * p.batch * p.heads * p.seq + 2 * p.batch * p.kv_heads * p.kv_seq)
        t, spread, reps = ctx.time(fn, footprint)
    meta = {
        "backend": p.backend,
        "phase": p.phase,
        "cache": "cold",
        "rel_err": max(errs),
        "torch_version": str(torch.__version__),
    }
    records = [make_record("attention", p.op(), t, reps, spread, meta)]
    if p.phase == "prefill" and p.backend in FUSED_BACKENDS:
        records.append(_attention_backward(ctx, p, q, k, v, kwargs, backend, footprint))
    return records


def _dropout_check(out: Any, plain: Any, p: float) -> float:
    """The output of a call with dropout ``p`` against the same call without: dropped scores
    are rescaled by 1 / (1 - p), so the mean magnitude stays within a few percent (0.1 allowed)
    while the values differ (a kernel that ignored dropout_p would be timed as if it had one).
    Returns the relative change of the mean magnitude."""
    diff = float((out.float() - plain.float()).abs().mean() / plain.float().abs().mean())
    drift = abs(float(out.float().abs().mean() / plain.float().abs().mean()) - 1.0)
    if not diff > 0.01 or not drift < 0.1:
        raise ValueError(f"attention dropout {p}: output changed by {diff:.3g} on average, its "
                         f"mean magnitude by {drift:.3g}")  # fmt: skip
    return drift


def _attention_backward(ctx: _Ctx, p: AttnPoint, q: Any, k: Any, v: Any, kwargs: dict,
                        backend: Any, footprint: int) -> dict[str, Any]:  # fmt: skip
    """The backward kernel of the same call: dQ, dK, dV for a random dO (autograd.grad on a
    retained graph, so no gradient accumulation is timed); checked against the math backend."""
    torch = ctx.torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    qs, ks, vs = (x.detach().requires_grad_(True) for x in (q, k, v))
    with sdpa_kernel([backend]):
        out = F.scaled_dot_product_attention(qs, ks, vs, **kwargs)
    dout = torch.randn_like(out)

    def fn() -> Any:
        return torch.autograd.grad(out, (qs, ks, vs), dout, retain_graph=True)

    with sdpa_kernel([backend]):
        dq = fn()[0]
    # reference: the first 64 query rows of two heads of the first sequence against every key
    # (a row's dQ needs only its own q and dO and all of K, V; is_causal aligns top-left)
    rows = (slice(0, 1), slice(0, 2), slice(0, 64))
    if p.dropout:  # the mask is the forward's random draw: no reference to hold dQ to
        if not bool(torch.isfinite(dq).all()) or not float(dq.abs().mean()) > 0:
            raise ValueError("attention backward with dropout: dQ is not finite or all zero")
        err = 0.0
    else:
        kvh = 2 if p.kv_heads == p.heads else 1
        with sdpa_kernel([SDPBackend.MATH]):
            qr = q[rows].detach().double().requires_grad_(True)
            kr, vr = (x[:1, :kvh].detach().double() for x in (k, v))
            ref_out = F.scaled_dot_product_attention(qr, kr, vr,
                                                     **{**kwargs, "enable_gqa": kvh == 1})  # fmt: skip
            (ref,) = torch.autograd.grad(ref_out, (qr,), dout[rows].double())
        err = _check_close(dq[rows], ref, 3e-2, "attention backward dQ")
    with sdpa_kernel([backend]):
        t, spread, reps = ctx.time(fn, 2 * footprint)
    op = {**p.op(), "backward": True}
    meta = {"backend": p.backend, "phase": "backward", "cache": "cold", "rel_err": err}
    return make_record("attention", op, t, reps, spread, meta)


# --------------------------------------------------------------------------- fit


def _compute(family: str) -> bool:
    """Kernel families with compute-bound kernels (all but decode, which streams the cache)."""
    return family.startswith("attention") and family != "attention_decode"


# The one-split decode kernel's memory roof is the split-KV decode's (the same FlashAttention-2
# code streaming K/V, memory-bound): fitted free, every one-split point's padded tiles do the same
# 128 FLOP per byte, so its time fits a bandwidth as well as a compute rate and the H100's fit
# took the memory one (1.21 x its DRAM efficiency), which carried to the H200's faster HBM as
# 18% less time where both GPUs ran the same (validate's records of each).
MEMORY_ROOFS = {"attention_decode:one-split": "attention_decode"}


def fit(fam: dict[str, list[Point]], gpu: GPUSpec, params: CalibrationParams) -> CalibrationParams:
    from gpumodel.calibrate import fit_kernel_families

    return fit_kernel_families(fam.get("attention", []), gpu, params, compute=_compute,
                               memory_roof=MEMORY_ROOFS)  # fmt: skip


def _backward(p: Point) -> bool:
    return p.family == "attention" and bool(getattr(p.op, "backward", False))


def adapt_op(op: Any, meta: dict[str, Any]) -> Any:
    """cuDNN records from before the op named its implementation; the math backend is
    reported, not fitted."""
    if meta.get("backend") == "cudnn":
        return op.model_copy(update={"impl": "cudnn"})  # records before the op said so
    if meta.get("backend") not in (None, *FUSED_BACKENDS):
        return f"attention backend {meta['backend']} (reported, not fitted)"
    return op


def _label(p: AttnPoint) -> str:
    return (
        f"attention {p.phase} {p.backend} b={p.batch} h={p.heads} "
        f"s={p.seq} kv={p.kv_heads}x{p.kv_seq}{' causal' if p.causal else ''}"
        f"{f' d={p.head_dim}' if p.head_dim != HEAD_DIM else ''}"
        f"{f' dropout={p.dropout:g}' if p.dropout else ''}"
        f"{f' {p.dtype}' if p.dtype != 'bf16' else ''}"
    )


def _attn(p: Point) -> bool:
    return p.family == "attention"


def _fp32(p: Point) -> bool:
    return getattr(p.op, "dtype", "bf16") in ("fp32", "tf32")


ATTENTION = Family(
    name="attention",
    engine="torch",
    points=lambda quick: [(p,) for p in attention_points(quick)],
    label=_label,
    measure=_attention_point,
    fit=fit,
    fit_order=7.3,
    adapt_op=adapt_op,
    groups=(
        Group("attention prefill (flash)",
              lambda p: _attn(p) and p.meta.get("backend", "flash") == "flash"
              and getattr(p.op, "seq", 1) > 1 and not _backward(p), 10.0, None, order=13),
        Group("attention decode",
              lambda p: _attn(p) and getattr(p.op, "seq", 1) == 1
              and p.meta.get("backend", "flash") == "flash", 10.0, None, order=14),
        Group("attention prefill (cuDNN)",
              lambda p: _attn(p) and p.meta.get("backend") == "cudnn"
              and getattr(p.op, "seq", 1) > 1 and not _backward(p), 10.0, None, order=15),
        Group("attention backward (flash)",
              lambda p: _backward(p) and p.meta.get("backend", "flash") == "flash", 10.0, None,
              order=16),
        Group("attention backward (cuDNN)",
              lambda p: _backward(p) and p.meta.get("backend") == "cudnn", 10.0, None, order=17),
        Group("attention decode (cuDNN)",
              lambda p: _attn(p) and p.meta.get("backend") == "cudnn"
              and getattr(p.op, "seq", 1) == 1, 10.0, None, order=18),
        Group("attention prefill (memory-efficient)",
              lambda p: _attn(p) and p.meta.get("backend") == "efficient" and not _fp32(p)
              and getattr(p.op, "seq", 1) > 1 and not _backward(p), 10.0, None, order=18.1),
        Group("attention decode (memory-efficient)",
              lambda p: _attn(p) and p.meta.get("backend") == "efficient"
              and getattr(p.op, "seq", 1) == 1, 10.0, None, order=18.2),
        Group("attention backward (memory-efficient)",
              lambda p: _backward(p) and p.meta.get("backend") == "efficient" and not _fp32(p),
              10.0, None, order=18.3),
        Group("attention prefill fp32 (memory-efficient)",
              lambda p: _attn(p) and _fp32(p) and not _backward(p), 15.0, None, order=18.4),
        Group("attention backward fp32 (memory-efficient)",
              lambda p: _backward(p) and _fp32(p), 15.0, None, order=18.5),
    ),
)  # fmt: skip
