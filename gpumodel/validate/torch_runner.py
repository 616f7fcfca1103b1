"""Measurements taken through PyTorch: attention (SDPA backends), ResNet-50 convolutions,
normalisations, elementwise ops and reductions.

Same contract as cupy_runner: ``run(families, quick, progress) -> (records, unavailable)``,
records ``{"family", "op", "time_s", "repeats", "spread", "meta"}`` with ``op`` in gpumodel's
batch-row format (built by the pure ``*_op`` functions below). Without PyTorch (or without a
GPU it can see) ``run`` measures nothing and says why in ``unavailable``.

Timing: ``timing.time_torch`` (torch.cuda.Event on PyTorch's current stream, a busy-wait ahead
of each start event, median of adaptive repeats); working sets under 4x the L2 size are
flushed before each repeat, so every record is a cold-cache ("cold") measurement. Every point
is checked against a float64 reference computed through PyTorch on a sample of its output.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpumodel.errors import SpecError
from gpumodel.validate.cupy_runner import make_record
from gpumodel.validate.tasks import Progress, Task, run_tasks
from gpumodel.validate.timing import log_sizes

FAMILIES = (
    "attention",
    "conv2d",
    "norm",
    "expand_copy",
    "strided_elementwise",
    "elementwise",
    "reduction",
    "adamw",
)

ATTN_BACKENDS = ("flash", "cudnn", "math")
ELEMENTWISE_OPS = ("add", "mul", "relu", "gelu", "silu", "exp", "copy")
NORM_OPS = ("layernorm", "rmsnorm", "softmax")
HEAD_DIM = 128

# The distinct convolutions of ResNet-50 (torchvision v1.5: stride on the 3x3 of each stage's
# first block): (in_channels, out_channels, input height = width, kernel, stride, padding).
RESNET50_CONVS: tuple[tuple[int, int, int, int, int, int], ...] = (
    (3, 64, 224, 7, 2, 3),  # stem
    # stage 1, 56x56
    (64, 64, 56, 1, 1, 0),
    (64, 64, 56, 3, 1, 1),
    (64, 256, 56, 1, 1, 0),  # expand, also the downsample (stride 1)
    (256, 64, 56, 1, 1, 0),
    # stage 2
    (256, 128, 56, 1, 1, 0),
    (128, 128, 56, 3, 2, 1),
    (128, 512, 28, 1, 1, 0),
    (256, 512, 56, 1, 2, 0),  # downsample
    (512, 128, 28, 1, 1, 0),
    (128, 128, 28, 3, 1, 1),
    # stage 3
    (512, 256, 28, 1, 1, 0),
    (256, 256, 28, 3, 2, 1),
    (256, 1024, 14, 1, 1, 0),
    (512, 1024, 28, 1, 2, 0),  # downsample
    (1024, 256, 14, 1, 1, 0),
    (256, 256, 14, 3, 1, 1),
    # stage 4
    (1024, 512, 14, 1, 1, 0),
    (512, 512, 14, 3, 2, 1),
    (512, 2048, 7, 1, 1, 0),
    (1024, 2048, 14, 1, 2, 0),  # downsample
    (2048, 512, 7, 1, 1, 0),
    (512, 512, 7, 3, 1, 1),
)

TORCH_MISSING = {"family": "torch", "what": "all", "reason": "PyTorch not importable"}

# --------------------------------------------------------------------------- op builders


def attention_op(
    batch: int,
    heads: int,
    seq: int,
    head_dim: int,
    causal: bool,
    kv_heads: int,
    kv_seq: int,
    impl: str = "flash",
) -> dict[str, Any]:
    return {
        "op": "attention",
        "batch": int(batch),
        "heads": int(heads),
        "seq": int(seq),
        "head_dim": int(head_dim),
        "dtype": "bf16",
        "causal": bool(causal),
        "impl": impl,
        "kv_heads": int(kv_heads),
        "kv_seq": int(kv_seq),
    }


def conv2d_op(
    batch: int,
    in_channels: int,
    out_channels: int,
    height: int,
    width: int,
    kernel: int,
    stride: int,
    padding: int,
    dtype: str,
    layout: str = "channels_last",
) -> dict[str, Any]:
    return {
        "op": "conv2d",
        "batch": int(batch),
        "in_channels": int(in_channels),
        "out_channels": int(out_channels),
        "height": int(height),
        "width": int(width),
        "kernel": int(kernel),
        "stride": int(stride),
        "padding": int(padding),
        "dtype": dtype,
        "layout": layout,
    }


def norm_op(kind: str, rows: int, hidden: int, dtype: str = "bf16") -> dict[str, Any]:
    if kind == "softmax":
        return {"op": "softmax", "rows": int(rows), "cols": int(hidden), "dtype": dtype}
    if kind not in ("layernorm", "rmsnorm"):
        raise SpecError(f"unknown norm {kind!r}")
    return {"op": kind, "rows": int(rows), "hidden": int(hidden), "dtype": dtype}


def elementwise_op(name: str, n: int, dtype: str) -> dict[str, Any]:
    if name not in ELEMENTWISE_OPS:
        raise SpecError(f"unknown elementwise op {name!r}")
    return {"op": name, "n": int(n), "dtype": dtype}


def reduction_op(n: int, dtype: str) -> dict[str, Any]:
    return {"op": "reduction", "n": int(n), "dtype": dtype}


# --------------------------------------------------------------------------- point plans


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

    def op(self) -> dict[str, Any]:
        return attention_op(
            self.batch,
            self.heads,
            self.seq,
            HEAD_DIM,
            self.causal,
            self.kv_heads,
            self.kv_seq,
            "cudnn" if self.backend == "cudnn" else "flash",
        )


_MATH_MAX_SCORES = 1 << 30  # math backend materialises B*H*S*KVS scores: cap its memory/time


def attention_points(quick: bool) -> list[AttnPoint]:
    if quick:
        prefill = [(1, 32, 1024), (1, 32, 4096), (1, 32, 16384), (8, 16, 2048)]
        decode = [(b, kvs, kvh) for b in (1, 32) for kvs in (2048, 32768) for kvh in (8,)]
    else:
        prefill = (
            [(1, 32, s) for s in (512, 1024, 2048, 4096, 8192, 16384)]
            + [(1, 16, s) for s in (1024, 4096, 16384)]
            + [(4, 32, s) for s in (512, 2048, 8192)]
            + [(8, 16, s) for s in (512, 1024, 2048, 4096)]
            + [(8, 32, s) for s in (1024, 4096)]
        )
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
    for b, kvs, kvh in decode:
        for backend in ATTN_BACKENDS:
            out.append(AttnPoint("decode", b, 32, 1, kvh, kvs, False, backend))
    return out


def conv_points(
    quick: bool,
) -> list[tuple[tuple[int, int, int, int, int, int], int, str, str]]:
    """(shape, batch, dtype, layout) points: every ResNet-50 convolution in bf16 and TF32
    channels-last at four batches; PyTorch's default NCHW layout (where cuDNN's tensor-core
    kernels need layout transposes) and plain fp32 (CUDA cores, both layouts) at two."""
    if quick:
        pts = [(shape, 32, "bf16", "channels_last") for shape in RESNET50_CONVS]
        pts += [(shape, 128, "bf16", "channels_last") for shape in RESNET50_CONVS[::4]]
        pts += [(shape, 32, "tf32", "channels_last") for shape in RESNET50_CONVS[::3]]
        pts += [(shape, 32, "bf16", "nchw") for shape in RESNET50_CONVS[::3]]
        pts += [(shape, 32, "fp32", layout) for shape in RESNET50_CONVS[::4]
                for layout in ("nchw", "channels_last")]  # fmt: skip
        return pts
    pts = [
        (shape, batch, dtype, "channels_last")
        for dtype in ("bf16", "tf32")
        for shape in RESNET50_CONVS
        for batch in (1, 8, 32, 128)
    ]
    pts += [
        (shape, batch, dtype, layout)
        for dtype, layout in (("bf16", "nchw"), ("tf32", "nchw"),
                              ("fp32", "nchw"), ("fp32", "channels_last"))
        for shape in RESNET50_CONVS
        for batch in (8, 32)
    ]  # fmt: skip
    return pts


def _elements(quick: bool) -> list[int]:
    return [1 << 16, 1 << 20, 1 << 24, 1 << 28] if quick else log_sizes(1 << 16, 1 << 28, 1)[::2]


def norm_points(quick: bool) -> list[tuple[str, int, int]]:
    """(kind, rows, hidden) points, total elements 64K .. 256M."""
    if quick:
        pts = [(kind, t // 4096, 4096) for kind in NORM_OPS for t in _elements(True)]
        pts += [(kind, (1 << 24) // h, h) for kind in NORM_OPS for h in (1024, 8192)]
        return pts
    return [
        (kind, t // h, h) for kind in NORM_OPS for h in (1024, 4096, 8192) for t in _elements(False)
    ]


def expand_copy_points(quick: bool) -> list[tuple[int, int, int, int, int]]:
    """(batch, kv_heads, repeat, length, head_dim) of HF ``repeat_kv`` copies: GQA groups of 2,
    4 and 8, outputs from 2 MiB to 1 GiB (bf16)."""
    sizes = ((1, 256), (1, 16384)) if quick else (
        (1, 256), (1, 2048), (8, 1024), (1, 16384), (8, 8192), (1, 131072))  # fmt: skip
    return [(b, 8, rep, length * 4 // rep, 128) for rep in (2, 4, 8) for b, length in sizes]


# The eager HF Llama kernels PyTorch runs on its non-vectorised path, over (tokens, 4096):
# name -> (kind, bytes per element, bytes written per element)
STRIDED_CASES = {
    "to fp32 (cast)": ("cast", 6, 4),  # x.float() of bf16: unrolled_elementwise_kernel
    "rope q*cos (transposed view)": ("broadcast", 4, 2),  # bf16, cos broadcast over heads
    "norm x*rsqrt (fp32)": ("broadcast", 8, 4),  # fp32 rows times a per-row scalar
    "norm weight*x (bf16)": ("broadcast", 4, 2),  # weight broadcast over rows
}


def strided_points(quick: bool) -> list[tuple[str, int]]:
    """(case, tokens) with hidden 4096: 1M to 134M elements."""
    tokens = (256, 32768) if quick else (256, 1024, 4096, 8192, 16384, 32768)
    return [(case, t) for case in STRIDED_CASES for t in tokens]


def adamw_points(quick: bool) -> list[int]:
    """Parameters of a fused AdamW step (8 fp32 tensors): 1M to 512M."""
    return [1 << 20, 1 << 28] if quick else [1 << p for p in (20, 22, 24, 26, 28, 29)]


def elementwise_points(quick: bool) -> list[tuple[str, int, str]]:
    if quick:
        pts = [(name, n, "bf16") for name in ELEMENTWISE_OPS for n in (1 << 16, 1 << 22, 1 << 28)]
        pts += [(name, 1 << 26, "fp32") for name in ELEMENTWISE_OPS]
        return pts
    return [
        (name, n, dtype)
        for dtype in ("bf16", "fp32")
        for name in ELEMENTWISE_OPS
        for n in _elements(False)
    ]


def reduction_points(quick: bool) -> list[tuple[int, str]]:
    return [(n, dtype) for dtype in ("bf16", "fp32") for n in _elements(quick)]


# --------------------------------------------------------------------------- context


class _Ctx:
    def __init__(self, torch: Any, quick: bool):
        self.torch = torch
        self.quick = quick
        props = torch.cuda.get_device_properties(0)
        self.l2_bytes = int(getattr(props, "L2_cache_size", 50 << 20) or (50 << 20))
        clock_khz = getattr(props, "clock_rate", None)
        self.sm_clock_hz = float(clock_khz) * 1e3 if clock_khz else 2.0e9
        self._flush: Any = None

    @property
    def reps(self) -> dict[str, Any]:
        base = {"sm_clock_hz": self.sm_clock_hz}
        if self.quick:
            return {**base, "min_repeats": 5, "max_repeats": 30, "target_s": 0.01}
        return {**base, "min_repeats": 5, "max_repeats": 50, "target_s": 0.02}

    def cold(self, footprint_bytes: int) -> Callable[[], None] | None:
        if footprint_bytes >= 4 * self.l2_bytes:
            return None
        if self._flush is None:
            from gpumodel.validate.timing import torch_l2_flusher

            self._flush = torch_l2_flusher(self.l2_bytes)
        return self._flush

    def time(self, fn: Callable[[], Any], footprint_bytes: int) -> tuple[float, float, int]:
        from gpumodel.validate.timing import time_torch

        return time_torch(fn, flush=self.cold(footprint_bytes), **self.reps)


class CheckError(RuntimeError):
    """A measured point computed the wrong result; it is reported, never recorded."""


def _check_close(got: Any, ref: Any, tol: float, what: str) -> float:
    """Norm-wise relative error of ``got`` against the float64 ``ref``; CheckError above tol."""
    torch = _torch()
    got = got.double()
    if not bool(torch.isfinite(got).all()):
        raise CheckError(f"wrong result: {what}: non-finite output")
    denom = float(ref.norm()) or 1.0
    err = float((got - ref).norm()) / denom
    if err > tol:
        raise CheckError(f"wrong result: {what}: rel err {err:.2e} > {tol:.0e}")
    return err


def _torch() -> Any:
    import torch

    return torch


def _dtype(torch: Any, name: str) -> Any:
    return {"bf16": torch.bfloat16, "fp32": torch.float32, "tf32": torch.float32}[name]


def _tol(name: str) -> float:
    return {"bf16": 2e-2, "fp32": 2e-5, "tf32": 5e-3}[name]


# --------------------------------------------------------------------------- attention


def _attention_point(ctx: _Ctx, p: AttnPoint) -> list[dict[str, Any]]:
    torch = ctx.torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = {
        "flash": SDPBackend.FLASH_ATTENTION,
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "math": SDPBackend.MATH,
    }[p.backend]
    d = HEAD_DIM
    bf = torch.bfloat16
    q = torch.randn(p.batch, p.heads, p.seq, d, device="cuda", dtype=bf)
    k = torch.randn(p.batch, p.kv_heads, p.kv_seq, d, device="cuda", dtype=bf)
    v = torch.randn(p.batch, p.kv_heads, p.kv_seq, d, device="cuda", dtype=bf)
    gqa = p.kv_heads != p.heads
    kwargs: dict[str, Any] = {"is_causal": p.causal}
    if gqa:
        kwargs["enable_gqa"] = True

    def fn() -> Any:
        return F.scaled_dot_product_attention(q, k, v, **kwargs)

    with sdpa_kernel([backend]):
        out = fn()
        torch.cuda.synchronize()
        # reference for a few query rows of the first and last head, float64
        rows = torch.randperm(p.seq, device="cuda")[:64]
        errs = []
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
        footprint = 2 * d * (2 * p.batch * p.heads * p.seq + 2 * p.batch * p.kv_heads * p.kv_seq)
        t, spread, reps = ctx.time(fn, footprint)
    meta = {
        "backend": p.backend,
        "phase": p.phase,
        "cache": "cold",
        "rel_err": max(errs),
        "torch_version": str(torch.__version__),
    }
    records = [make_record("attention", p.op(), t, reps, spread, meta)]
    if p.phase == "prefill" and p.backend in ("flash", "cudnn"):
        records.append(_attention_backward(ctx, p, q, k, v, kwargs, backend, footprint))
    return records


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
    kvh = 2 if p.kv_heads == p.heads else 1
    with sdpa_kernel([SDPBackend.MATH]):
        qr = q[rows].detach().double().requires_grad_(True)
        kr, vr = (x[:1, :kvh].detach().double() for x in (k, v))
        ref_out = F.scaled_dot_product_attention(qr, kr, vr, **{**kwargs, "enable_gqa": kvh == 1})
        (ref,) = torch.autograd.grad(ref_out, (qr,), dout[rows].double())
    err = _check_close(dq[rows], ref, 3e-2, "attention backward dQ")
    with sdpa_kernel([backend]):
        t, spread, reps = ctx.time(fn, 2 * footprint)
    op = {**p.op(), "backward": True}
    meta = {"backend": p.backend, "phase": "backward", "cache": "cold", "rel_err": err}
    return make_record("attention", op, t, reps, spread, meta)


# --------------------------------------------------------------------------- conv2d


def _set_conv_tf32(torch: Any, on: bool) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.backends.cudnn.allow_tf32 = on


def _conv_point(
    ctx: _Ctx, shape: tuple[int, int, int, int, int, int], batch: int, dtype: str, layout: str
) -> list[dict[str, Any]]:
    torch = ctx.torch
    import torch.nn.functional as F

    cin, cout, hw, r, stride, pad = shape
    dt = _dtype(torch, dtype)
    _set_conv_tf32(torch, dtype == "tf32")
    fmt = torch.channels_last if layout == "channels_last" else torch.contiguous_format
    x = torch.randn(batch, cin, hw, hw, device="cuda", dtype=dt).to(memory_format=fmt)
    w = (torch.randn(cout, cin, r, r, device="cuda", dtype=dt) / (cin * r * r) ** 0.5).to(
        memory_format=fmt
    )

    def fn() -> Any:
        return F.conv2d(x, w, stride=stride, padding=pad)

    out = fn()
    torch.cuda.synchronize()
    ref = F.conv2d(x[:1].double(), w.double(), stride=stride, padding=pad)
    err = _check_close(out[:1], ref, _tol(dtype), "conv2d image 0")
    hout = out.shape[-1]
    esize = 2 if dtype == "bf16" else 4
    footprint = esize * (x.numel() + w.numel() + batch * cout * hout * hout)
    del out, ref
    t, spread, reps = ctx.time(fn, footprint)
    meta = {
        "layout": layout,
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "cache": "cold",
        "rel_err": err,
        "out_hw": int(hout),
    }
    op = conv2d_op(batch, cin, cout, hw, hw, r, stride, pad, dtype, layout)
    return [make_record("conv2d", op, t, reps, spread, meta)]


# --------------------------------------------------------------------------- norm


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


# --------------------------------------------------------------------------- strided elementwise


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


# --------------------------------------------------------------------------- AdamW


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


# --------------------------------------------------------------------------- expand copy


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


# --------------------------------------------------------------------------- elementwise


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


# --------------------------------------------------------------------------- run


def _tasks(ctx: _Ctx, selected: list[str]) -> list[Task]:
    q = ctx.quick
    tasks: list[Task] = []
    if "attention" in selected:
        for p in attention_points(q):
            label = (
                f"attention {p.phase} {p.backend} b={p.batch} h={p.heads} "
                f"s={p.seq} kv={p.kv_heads}x{p.kv_seq}{' causal' if p.causal else ''}"
            )
            tasks.append(Task("attention", label, lambda p=p: _attention_point(ctx, p)))
    if "conv2d" in selected:
        for shape, batch, dtype, layout in conv_points(q):
            cin, cout, hw, r, s, _ = shape
            label = f"conv2d {dtype} {layout} n={batch} {cin}->{cout} {hw}x{hw} k{r} s{s}"
            tasks.append(
                Task(
                    "conv2d",
                    label,
                    lambda sh=shape, b=batch, d=dtype, lay=layout: _conv_point(ctx, sh, b, d, lay),
                )
            )
    if "norm" in selected:
        for kind, rows, hidden in norm_points(q):
            tasks.append(
                Task(
                    "norm",
                    f"{kind} {rows}x{hidden}",
                    lambda k=kind, r=rows, h=hidden: _norm_point(ctx, k, r, h),
                )
            )
    if "expand_copy" in selected:
        for b, kv, rep, length, dim in expand_copy_points(q):
            tasks.append(
                Task(
                    "expand_copy",
                    f"repeat_kv x{rep} {b}x{kv}x{length}x{dim}",
                    lambda b=b, kv=kv, r=rep, n=length, d=dim: _expand_copy_point(
                        ctx, b, kv, r, n, d
                    ),
                )
            )
    if "strided_elementwise" in selected:
        for case, tokens in strided_points(q):
            tasks.append(
                Task(
                    "strided_elementwise",
                    f"{case} {tokens}x4096",
                    lambda c=case, t=tokens: _strided_point(ctx, c, t),
                )
            )
    if "adamw" in selected:
        for n in adamw_points(q):
            tasks.append(Task("adamw", f"fused AdamW {n} params", lambda n=n: _adamw_point(ctx, n)))
    if "elementwise" in selected:
        for name, n, dtype in elementwise_points(q):
            tasks.append(
                Task(
                    "elementwise",
                    f"{name} {dtype} n={n}",
                    lambda nm=name, n=n, d=dtype: _elementwise_point(ctx, nm, n, d),
                )
            )
    if "reduction" in selected:
        for n, dtype in reduction_points(q):
            tasks.append(
                Task(
                    "reduction",
                    f"sum {dtype} n={n}",
                    lambda n=n, d=dtype: _reduction_point(ctx, n, d),
                )
            )
    return tasks


def run(
    families: set[str] | None = None,
    quick: bool = False,
    progress: Progress | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Measure the selected torch families (all when None; other runners' names are ignored)."""
    selected = [f for f in FAMILIES if families is None or f in families]
    if not selected:
        return [], []
    try:
        import torch
    except Exception:
        return [], [dict(TORCH_MISSING)]
    if not torch.cuda.is_available():
        return [], [{"family": "torch", "what": "all", "reason": "PyTorch sees no CUDA GPU"}]

    ctx = _Ctx(torch, quick)
    prev_tf32 = torch.backends.cudnn.allow_tf32
    tasks = _tasks(ctx, selected)
    unavailable: list[dict[str, Any]] = []
    try:
        records = run_tasks(tasks, unavailable, progress,
                            lambda previous: torch.cuda.empty_cache(), torch.cuda.synchronize)  # fmt: skip
    finally:
        _set_conv_tf32(torch, prev_tf32)
        ctx._flush = None
        torch.cuda.empty_cache()
    return records, unavailable
