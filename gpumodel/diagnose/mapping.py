"""Map recorded PyTorch operators (name + input shapes/dtypes) to gpumodel ops.

Each rule reads the operator's arguments as ``torch.profiler`` records them with
``record_shapes=True``: ``Input Dims`` (one list per argument, ``[]`` for non-tensors, a list of
lists for a ``TensorList``), ``Input type`` (``c10::BFloat16``, ``float``, ``Scalar``, ...),
``Input Strides`` and ``Concrete Inputs`` (scalar arguments as strings: ``"[1, 1]"``,
``"True"``). Positions follow the ATen signatures (``native_functions.yaml``).

A rule returns a :class:`Mapped`: the gpumodel op to predict (or None with the reason it could
not be mapped), the op family, a display dtype, and a ``scale`` for backward kernels whose
work is a known multiple of the forward op's.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pydantic import ValidationError

from gpumodel.errors import GpumodelError
from gpumodel.model.gemm import ALIGN_ELEMENTS
from gpumodel.ops import (
    ELEMENTWISE,
    AdamW,
    Attention,
    Conv2d,
    Copy,
    Elementwise,
    Embedding,
    Gemm,
    GroupedGemm,
    HostTransfer,
    Kernel,
    LayerNorm,
    Op,
    Reduction,
    RMSNorm,
    Softmax,
    StridedElementwise,
)
from gpumodel.ops.attention import IMPL_DTYPES

# torch "Input type" -> (dtype name, bytes per element)
TORCH_DTYPES: dict[str, tuple[str, float]] = {
    "float": ("fp32", 4), "double": ("fp64", 8), "c10::Half": ("fp16", 2),
    "c10::BFloat16": ("bf16", 2), "c10::Float8_e4m3fn": ("fp8", 1),
    "c10::Float8_e5m2": ("fp8", 1), "c10::Float8_e4m3fnuz": ("fp8", 1),
    "c10::Float8_e5m2fnuz": ("fp8", 1), "c10::Float8_e8m0fnu": ("fp8", 1),
    "long int": ("int64", 8), "long": ("int64", 8), "int": ("int32", 4),
    "short int": ("int16", 2), "signed char": ("int8", 1), "unsigned char": ("uint8", 1),
    "bool": ("bool", 1), "c10::complex<float>": ("complex64", 8),
    "c10::complex<double>": ("complex128", 16), "c10::complex<c10::Half>": ("complex32", 4),
}  # fmt: skip
MODEL_DTYPES = {"fp64", "fp32", "fp16", "bf16", "fp8", "int8"}

# Kernel names that say whether an fp32 matrix product used TF32 tensor cores.
_TF32_KERNEL = re.compile(r"tf32|s1688|s16816|tensorop_s", re.I)
_FP32_KERNEL = re.compile(r"sgemm|simt|f32f32_f32f32|gemv|gemmSN|gemmk1", re.I)

BACKWARD_NORM_SCALE = 1.5  # reads dy and x, writes dx: 3 tensor passes against 2


@dataclass(frozen=True)
class TensorArg:
    dims: tuple[int, ...]
    dtype: str
    itemsize: float
    strides: tuple[int, ...] | None

    @property
    def numel(self) -> int:
        return math.prod(self.dims)

    @property
    def nbytes(self) -> float:
        return self.numel * self.itemsize



# the largest tensor size or stride a trace may state (2^53: exact in a JSON number)
_MAX_SIZE = 2**53


def _sizes(values: list[Any]) -> tuple[int, ...] | None:
    """``values`` as tensor sizes (or strides): whole numbers in [0, 2^53], else None."""
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return None
        if not (math.isfinite(v) and v == int(v) and 0 <= v <= _MAX_SIZE):
            return None
        out.append(int(v))
    return tuple(out)

class OpArgs:
    """Positional access to a recorded operator's arguments."""

    def __init__(self, args: dict[str, Any]):
        # the keys map_op_cached's key holds (_OP_ARG_KEYS): read no other
        self.dims: list[Any] = list(args.get("Input Dims") or [])
        self.types: list[Any] = list(args.get("Input type") or [])
        self.strides: list[Any] = list(args.get("Input Strides") or [])
        self.concrete: list[Any] = list(args.get("Concrete Inputs") or [])

    def _tensor(self, dims: Any, typ: Any, strides: Any) -> TensorArg | None:
        if typ not in TORCH_DTYPES or not isinstance(dims, list):
            return None
        shape = _sizes(dims)
        if shape is None:  # nested lists (a TensorList), or not sizes at all (NaN, text)
            return None
        name, size = TORCH_DTYPES[typ]
        st = _sizes(strides) if isinstance(strides, list) and strides else None
        if st is not None and len(st) != len(shape):
            st = None
        return TensorArg(shape, name, size, st)

    def tensor(self, i: int) -> TensorArg | None:
        if i >= len(self.dims) or i >= len(self.types):
            return None
        st = self.strides[i] if i < len(self.strides) else None
        return self._tensor(self.dims[i], self.types[i], st)

    def tensors(self) -> list[TensorArg]:
        return [t for i in range(len(self.dims)) if (t := self.tensor(i)) is not None]

    def tensor_lists(self) -> list[list[tuple[int, ...]]]:
        """Dims of each TensorList argument (dtypes are not recorded for list members)."""
        out = []
        for i, d in enumerate(self.dims):
            typ = self.types[i] if i < len(self.types) else ""
            if typ == "TensorList" or (isinstance(d, list) and d and isinstance(d[0], list)):
                out.append([tuple(int(x) for x in t) for t in d if isinstance(t, list)])
        return out

    def concrete_str(self, i: int) -> str | None:
        if i < len(self.concrete) and self.concrete[i] not in ("", None):
            return str(self.concrete[i])
        return None

    def flag(self, i: int) -> bool | None:
        v = self.concrete_str(i)
        return None if v is None else v.strip().lower() in ("true", "1")

    def ints(self, i: int) -> list[int] | None:
        v = self.concrete_str(i)
        if v is None:
            return None
        try:
            return [int(float(x)) for x in re.findall(r"-?\d+(?:\.\d*)?", v)]
        except ValueError:
            return None

    def shapes(self) -> tuple[tuple[int, ...], ...]:
        """Dims of the tensor arguments, for grouping and display."""
        return tuple(t.dims for t in self.tensors())


@dataclass(frozen=True)
class Mapped:
    """What a recorded operator is to the time model."""

    op: Op | None
    family: str
    dtype: str = ""
    shapes: tuple[tuple[int, ...], ...] = ()
    scale: float = 1.0
    notes: tuple[str, ...] = ()
    reason: str | None = None  # why op is None
    # matrix products: (dimension, size, leading stride) of each operand dimension that must be
    # a multiple of 16 bytes for the tensor-core path, and whether an fp32 product ran as TF32
    leading: tuple[tuple[str, int, int], ...] = ()
    tf32: bool | None = None
    # elementwise: output shape and DRAM traffic, used to find and price fusible chains
    out_dims: tuple[int, ...] | None = None
    out_numel: int | None = None
    read_bytes: float = 0.0
    write_bytes: float = 0.0
    flops: float = 0.0
    elem_dtype: str = "bf16"
    label: str | None = None  # display label when op.label() says less than it could

    @property
    def mapped(self) -> bool:
        return self.op is not None

    def misaligned(self) -> dict[str, int]:
        """Dimensions (name -> size) whose leading stride misses 16-byte alignment."""
        if not isinstance(self.op, Gemm):
            return {}
        align = ALIGN_ELEMENTS.get(self.op.dtype, 8)
        return {dim: size for dim, size, ld in self.leading if ld % align}


def unmapped(family: str, reason: str, args: OpArgs | None = None, dtype: str = "") -> Mapped:
    return Mapped(op=None, family=family, reason=reason, dtype=dtype,
                  shapes=args.shapes() if args else ())  # fmt: skip


Rule = Callable[[str, OpArgs, Sequence[str]], Mapped]
RULES: dict[str, tuple[str, Rule]] = {}


def rule(family: str, *names: str) -> Callable[[Rule], Rule]:
    def deco(fn: Rule) -> Rule:
        for n in names:
            RULES[n] = (family, fn)
        return fn

    return deco


def family_of(name: str) -> str | None:
    """The family of a recorded operator name, or None when no rule knows it."""
    if name in RULES:
        return RULES[name][0]
    if name.startswith("aten::_foreach_"):
        return "foreach"
    return None


def map_op(name: str, args: dict[str, Any], kernel_names: Sequence[str] = ()) -> Mapped:
    """Map one recorded operator to a gpumodel op (or say why not). A function of the name,
    the four recorded argument lists ``OpArgs`` reads and the kernel names alone: a trace
    repeats the same call every step, so ``map_op_cached`` maps each distinct one once."""
    a = OpArgs(args)
    if "Input Dims" not in args:
        return unmapped(family_of(name) or "other",
                        "no shapes recorded: record with record_shapes=True")  # fmt: skip
    fam = family_of(name)
    if fam is None:
        return unmapped("other", "no gpumodel op for this operator", a, _first_dtype(a))
    fn = RULES[name][1] if name in RULES else _foreach
    try:
        return fn(name, a, kernel_names)
    except (ValidationError, GpumodelError, ValueError, IndexError, ZeroDivisionError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return unmapped(fam, f"shapes not understood ({msg})", a, _first_dtype(a))


def map_op_cached(
    cache: dict[str, Mapped], name: str, args: dict[str, Any], kernel_names: Sequence[str] = ()
) -> Mapped:
    """``map_op`` through ``cache`` (one per trace): a ~50 MB trace of 50 steps maps ~15,000
    operators of which a few hundred differ. ``Mapped`` is frozen, so sharing it is safe."""
    # ... (never in JSON) stands for an absent key, which map_op tells from a null one
    key = repr((name, *(args.get(k, ...) for k in _OP_ARG_KEYS), *kernel_names))
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = map_op(name, args, kernel_names)
    return hit


_OP_ARG_KEYS = ("Input Dims", "Input type", "Input Strides", "Concrete Inputs")


def _first_dtype(a: OpArgs) -> str:
    ts = a.tensors()
    return ts[0].dtype if ts else ""


def _model_dtype(dtype: str) -> str:
    return dtype if dtype in MODEL_DTYPES else "fp32"


# ---------------------------------------------------------------------------------------------
# matrix products


def _tf32_from_kernels(kernel_names: Sequence[str]) -> bool | None:
    if any(_TF32_KERNEL.search(k) for k in kernel_names):
        return True
    if any(_FP32_KERNEL.search(k) for k in kernel_names):
        return False
    return None


def _leading(t: TensorArg, rows: str, cols: str) -> list[tuple[str, int, int]]:
    """The dimension whose stride is an operand's leading dimension (row- or column-major)."""
    r, c = t.dims[-2], t.dims[-1]
    if r == 1 or c == 1:
        return []
    if t.strides is None or len(t.strides) < 2:
        return [(cols, c, c)]
    s0, s1 = t.strides[-2], t.strides[-1]
    if s1 == 1:
        return [(cols, c, s0)]
    if s0 == 1:
        return [(rows, r, s1)]
    return [(cols, c, s0)]


def _gemm(
    a: TensorArg,
    b: TensorArg,
    kernel_names: Sequence[str],
    m: int,
    n: int,
    k: int,
    batch: int,
    b_is_weight_nk: bool = False,
) -> Mapped:
    dtype = a.dtype
    tf32: bool | None = None
    label = dtype
    notes: list[str] = []
    if dtype == "fp32":
        tf32 = _tf32_from_kernels(kernel_names)
        label = {True: "tf32", False: "fp32 (TF32 off)", None: "fp32 (TF32 unknown)"}[tf32]
    if dtype not in MODEL_DTYPES:
        return Mapped(op=None, family="gemm", dtype=dtype, shapes=(a.dims, b.dims),
                      reason=f"{dtype} matrix products are not modelled")  # fmt: skip
    op_dtype = "tf32" if tf32 else dtype
    lead_a = _leading(a, "m", "k")
    # B stored as its transpose: a weight [N, K] used as B^T, or a column-major view
    lead_b = _leading(b, "n", "k") if b_is_weight_nk else _leading(b, "k", "n")
    transpose_b = b_is_weight_nk or any(d == "k" for d, _, _ in lead_b)
    # A stored as its transpose (a weight gradient's dY.T): its rows are M long
    transpose_a = any(d == "m" for d, _, _ in lead_a)
    lead = [*lead_a, *lead_b, ("n", n, n)]  # the output C[m, n] is written row-major
    return Mapped(
        op=Gemm(
            m=m,
            n=n,
            k=k,
            batch=batch,
            dtype=op_dtype,  # type: ignore[arg-type]
            transpose_b=transpose_b,
            transpose_a=transpose_a,
        ),
        family="gemm",
        dtype=label,
        shapes=(a.dims, b.dims),
        leading=tuple(dict.fromkeys(lead)),
        tf32=tf32,
        notes=tuple(notes),
    )


# torch._scaled_mm(self, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum)
_SCALED_MM_FAST_ACCUM = 7


@rule("gemm", "aten::mm", "aten::addmm", "aten::_scaled_mm", "aten::addmm_")
def _mm(name: str, a: OpArgs, kn: Sequence[str]) -> Mapped:
    i = 1 if name.startswith("aten::addmm") else 0
    x, w = a.tensor(i), a.tensor(i + 1)
    if x is None or w is None or len(x.dims) != 2 or len(w.dims) != 2:
        return unmapped("gemm", "expected two 2-D matrices", a, _first_dtype(a))
    (m, k), (_, n) = x.dims, w.dims
    mapped = _gemm(x, w, kn, m, n, k, 1)
    # an fp8 product recorded with use_fast_accum=False (PyTorch's default) promotes its
    # accumulators (Gemm.fast_accum); not recorded: priced as fast accumulation, as validate is
    op = mapped.op
    fast = a.flag(_SCALED_MM_FAST_ACCUM) if name == "aten::_scaled_mm" else None
    if isinstance(op, Gemm) and op.dtype == "fp8" and fast is False:
        return replace(mapped, op=op.model_copy(update={"fast_accum": False}))
    return mapped


@rule("gemm", "aten::_grouped_mm")
def _grouped_mm(name: str, a: OpArgs, kn: Sequence[str]) -> Mapped:
    """``torch._grouped_mm(x [S, K], w [E, K, N], offs [E])``: HF transformers 5's experts (and
    in their backward ``(x.T [K, S], dY [S, N], offs [E])``, the weights' gradient). The
    trace gives the slots S and the experts E, not the tokens and top_k: priced as S one-expert
    tokens (the same rows; the expected active experts up to 6% fewer than S / k tokens' of k
    distinct experts each, at S = 2, 8 experts; 2% at S = 16)."""
    x, w, offs = a.tensor(0), a.tensor(1), a.tensor(2)
    if x is not None and x.dtype not in MODEL_DTYPES:
        return unmapped("gemm", f"{x.dtype} grouped products are not modelled", a, x.dtype)
    if x is not None and w is not None and len(x.dims) == 2 and len(w.dims) == 3:
        (slots, k), (experts, _, n) = x.dims, w.dims
        op = GroupedGemm(tokens=max(1, slots), experts=experts, top_k=1, n=n, k=k, dtype=x.dtype)  # type: ignore[arg-type]
        return Mapped(op=op, family="gemm", dtype=x.dtype, shapes=(x.dims, w.dims))
    if (x is not None and w is not None and offs is not None and len(x.dims) == 2
            and len(w.dims) == 2 and len(offs.dims) == 1):  # fmt: skip
        # the weights' gradient in training: x.T [K, S] @ dY [S, N] per expert -> [E, K, N]
        (k, slots), (_, n), (experts,) = x.dims, w.dims, offs.dims
        op = GroupedGemm(tokens=max(1, slots), experts=experts, top_k=1, n=n, k=k,
                         dtype=x.dtype, weight_grad=True)  # type: ignore[arg-type]  # fmt: skip
        return Mapped(op=op, family="gemm", dtype=x.dtype, shapes=(x.dims, w.dims))
    return unmapped("gemm", "expected rows [S, K] and experts' weights [E, K, N] (or, for the "
                    "weights' gradient, [K, S], [S, N] and offsets [E])", a, _first_dtype(a))  # fmt: skip


@rule("gemm", "aten::bmm", "aten::baddbmm")
def _bmm(name: str, a: OpArgs, kn: Sequence[str]) -> Mapped:
    i = 1 if name == "aten::baddbmm" else 0
    x, w = a.tensor(i), a.tensor(i + 1)
    if x is None or w is None or len(x.dims) != 3 or len(w.dims) != 3:
        return unmapped("gemm", "expected two 3-D batches of matrices", a, _first_dtype(a))
    (bsz, m, k), (_, _, n) = x.dims, w.dims
    return _gemm(x, w, kn, m, n, k, bsz)


@rule("gemm", "aten::matmul")
def _matmul(name: str, a: OpArgs, kn: Sequence[str]) -> Mapped:
    x, w = a.tensor(0), a.tensor(1)
    if x is None or w is None or not x.dims or not w.dims:
        return unmapped("gemm", "expected two tensors", a, _first_dtype(a))
    xd, wd = list(x.dims), list(w.dims)
    if len(xd) == 1:
        xd = [1, *xd]
    if len(wd) == 1:
        wd = [*wd, 1]
    if len(wd) == 2:
        m, k, n, batch = math.prod(xd[:-1]), xd[-1], wd[-1], 1
    else:
        lead_x, lead_w = xd[:-2], wd[:-2]
        width = max(len(lead_x), len(lead_w))
        lead_x = [1] * (width - len(lead_x)) + lead_x
        lead_w = [1] * (width - len(lead_w)) + lead_w
        batch = math.prod(max(p, q) for p, q in zip(lead_x, lead_w))
        m, k, n = xd[-2], xd[-1], wd[-1]
    return _gemm(x, w, kn, m, n, k, batch)


@rule("gemm", "aten::linear")
def _linear(name: str, a: OpArgs, kn: Sequence[str]) -> Mapped:
    x, w = a.tensor(0), a.tensor(1)
    if x is None or w is None or len(w.dims) != 2 or not x.dims:
        return unmapped("gemm", "expected input [*, K] and weight [N, K]", a, _first_dtype(a))
    n, k = w.dims
    m = math.prod(x.dims[:-1]) if len(x.dims) > 1 else 1
    return _gemm(x, w, kn, m, n, k, 1, b_is_weight_nk=True)


# ---------------------------------------------------------------------------------------------
# convolution

# name -> argument positions: (stride, padding, dilation, transposed, groups, allow_tf32)
_CONV_ARGS: dict[str, tuple[int | None, ...]] = {
    "aten::conv2d": (3, 4, 5, None, 6, None),
    "aten::convolution": (3, 4, 5, 6, 8, None),
    "aten::_convolution": (3, 4, 5, 6, 8, 12),
    "aten::cudnn_convolution": (3, 2, 4, None, 5, 8),
    "aten::convolution_backward": (4, 5, 6, 7, 9, None),
}


@rule("conv", *_CONV_ARGS)
def _conv(name: str, a: OpArgs, kn: Sequence[str]) -> Mapped:
    backward = name == "aten::convolution_backward"
    x, w = (a.tensor(1), a.tensor(2)) if backward else (a.tensor(0), a.tensor(1))
    if x is None or w is None:
        return unmapped("conv", "input or weight shape missing", a, _first_dtype(a))
    shapes = (x.dims, w.dims)
    if len(x.dims) != 4 or len(w.dims) != 4:
        return Mapped(op=None, family="conv", dtype=x.dtype, shapes=shapes,
                      reason=f"{len(x.dims) - 2}-D convolution: only 2-D is modelled")  # fmt: skip
    i_stride, i_pad, i_dil, i_tr, i_groups, i_tf32 = _CONV_ARGS[name]

    def pair(i: int | None, default: int) -> tuple[int, int]:
        v = a.ints(i) if i is not None else None
        if not v:
            return default, default
        return (v[0], v[-1]) if len(v) > 1 else (v[0], v[0])

    stride, pad, dil = pair(i_stride, 1), pair(i_pad, -1), pair(i_dil, 1)
    groups = (a.ints(i_groups) or [1])[0] if i_groups is not None else 1
    transposed = a.flag(i_tr) if i_tr is not None else False
    nb, c, h, wd = x.dims
    o, _, kh, kw = w.dims
    notes = []
    if pad[0] < 0:
        pad = (kh // 2, kw // 2)
        notes.append(f"padding not recorded: assumed {pad[0]} (same)")
    why = None
    if transposed:
        why = "transposed convolution is not modelled"
    elif groups != 1:
        why = f"grouped convolution (groups={groups}) is not modelled"
    elif kh != kw or stride[0] != stride[1] or pad[0] != pad[1]:
        why = "non-square kernel, stride or padding is not modelled"
    elif dil != (1, 1):
        why = f"dilated convolution (dilation={dil[0]}) is not modelled"
    if why:
        return Mapped(op=None, family="conv", dtype=x.dtype, shapes=shapes, reason=why)
    dtype, tf32 = x.dtype, None
    label = dtype
    if dtype == "fp32":
        tf32 = _tf32_from_kernels(kn)
        if tf32 is None and i_tf32 is not None:
            tf32 = a.flag(i_tf32)
        label = {True: "tf32", False: "fp32 (TF32 off)", None: "fp32 (TF32 unknown)"}[tf32]
    if dtype not in MODEL_DTYPES:
        return Mapped(op=None, family="conv", dtype=dtype, shapes=shapes,
                      reason=f"{dtype} convolution is not modelled")  # fmt: skip
    op = Conv2d(batch=nb, in_channels=c, out_channels=o, height=h, width=wd, kernel=kh,
                stride=stride[0], padding=pad[0],
                dtype="tf32" if tf32 else dtype)  # type: ignore[arg-type]  # fmt: skip
    scale = 1.0
    if backward:
        mask = [s.strip() == "True" for s in (a.concrete_str(10) or "").strip("[]").split(",")]
        grads = sum(mask[:2]) if len(mask) >= 2 else 2
        scale = float(max(grads, 1))
        notes.append(f"backward: {grads} products (input and weight gradients) of the forward size")
    return Mapped(op=op, family="conv", dtype=label, shapes=shapes, scale=scale,
                  notes=tuple(notes), tf32=tf32)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# attention

# name -> (index of q, layout, index of is_causal or custom_mask_type, backward)
_ATTN: dict[str, tuple[int, str, int | None, bool]] = {
    "aten::scaled_dot_product_attention": (0, "bhsd", 5, False),
    "aten::_scaled_dot_product_flash_attention": (0, "bhsd", 4, False),
    "aten::_scaled_dot_product_flash_attention_for_cpu": (0, "bhsd", 4, False),
    "aten::_scaled_dot_product_efficient_attention": (0, "bhsd", 6, False),
    "aten::_scaled_dot_product_cudnn_attention": (0, "bhsd", 6, False),
    "aten::_scaled_dot_product_fused_attention_overrideable": (0, "bhsd", 5, False),
    "aten::_flash_attention_forward": (0, "bshd", 8, False),
    "aten::_efficient_attention_forward": (0, "bshd", 9, False),
    "aten::_scaled_dot_product_flash_attention_backward": (1, "bhsd", 11, True),
    "aten::_scaled_dot_product_efficient_attention_backward": (1, "bhsd", 11, True),
    "aten::_scaled_dot_product_cudnn_attention_backward": (1, "bhsd", 14, True),
    "aten::_flash_attention_backward": (1, "bshd", 11, True),
    "aten::_efficient_attention_backward": (1, "bshd", 14, True),
}


# where each of those records its dropout_p (native_functions.yaml)
_ATTN_DROPOUT: dict[str, int] = {
    "aten::scaled_dot_product_attention": 4, "aten::_scaled_dot_product_flash_attention": 3,
    "aten::_scaled_dot_product_efficient_attention": 5,
    "aten::_scaled_dot_product_cudnn_attention": 5,
    "aten::_scaled_dot_product_fused_attention_overrideable": 4,
    "aten::_flash_attention_forward": 7, "aten::_efficient_attention_forward": 8,
    "aten::_scaled_dot_product_flash_attention_backward": 10,
    "aten::_scaled_dot_product_efficient_attention_backward": 9,
    "aten::_scaled_dot_product_cudnn_attention_backward": 13,
    "aten::_flash_attention_backward": 10, "aten::_efficient_attention_backward": 11,
}  # fmt: skip

# a fused attention kernel on 16-bit tensor cores, by name: cuDNN's ..._wgmma_f16_...,
# FlashAttention's and xFormers' template arguments (cutlass::bfloat16_t, half_t, bf16, fp16)
_HALF_KERNEL = re.compile(r"f16|bfloat16|half", re.I)

_EFFICIENT = ("aten::_scaled_dot_product_efficient_attention",
              "aten::_efficient_attention_forward",
              "aten::_scaled_dot_product_efficient_attention_backward",
              "aten::_efficient_attention_backward")  # fmt: skip


@rule("attention", *_ATTN)
def _attention(name: str, a: OpArgs, kn: Sequence[str]) -> Mapped:
    qi, layout, ci, backward = _ATTN[name]
    q, k = a.tensor(qi), a.tensor(qi + 1)
    if q is None or k is None or len(q.dims) != 4 or len(k.dims) != 4:
        return unmapped("attention", "expected 4-D query and key", a, _first_dtype(a))
    if layout == "bhsd":
        (b, h, s, d), (_, hk, sk, _) = q.dims, k.dims
    else:
        (b, s, h, d), (_, sk, hk, _) = q.dims, k.dims
    notes = []
    causal = False
    if ci is not None:
        raw = a.concrete_str(ci)
        if raw is None:
            notes.append("causal flag not recorded: assumed not causal")
        elif "mask_type" in name or name.startswith("aten::_efficient_attention"):
            causal = raw.strip() not in ("0", "0.")
        else:
            causal = raw.strip().lower() == "true"
    if causal and s > sk:
        causal = False
        notes.append("causal with more queries than keys: treated as not causal")
    mask = name == "aten::scaled_dot_product_attention" and a.tensor(3) is not None
    if mask:
        notes.append("explicit attention mask: dense (non-causal) work, cuDNN's biased kernel")
    if q.dtype not in MODEL_DTYPES or q.dtype not in IMPL_DTYPES["efficient"]:
        # fp64 runs SDPA's math path (its matmuls and softmax are the trace's own ops); no SDPA
        # kernel takes 8-bit tensors
        return unmapped("attention", f"{q.dtype} attention is not modelled", a, q.dtype)
    dtype = q.dtype
    if dtype == "fp32" and any(_HALF_KERNEL.search(k) for k in kn):
        # torch.autocast records SDPA with the fp32 inputs it then casts: the kernel says
        dtype = "bf16"
        notes.append("fp32 inputs run as a 16-bit kernel (autocast): priced in bf16")
    # the kernel that ran, by its name: cuDNN's (what torch's SDPA runs first on an H100, H200
    # or B200, gpumodel.ops.attention.CUDNN_SDPA_PREFERRED_CC, and what the LLM step model then
    # prices), xFormers' CUTLASS kernels behind the memory-efficient backend (an explicit mask,
    # fp32: fmha_cutlassF/B), else FlashAttention's
    cudnn = any("cudnn" in k.lower() for k in kn)
    efficient = not cudnn and (name in _EFFICIENT
                               or any("fmha_cutlass" in k.lower() for k in kn))  # fmt: skip
    # flash and cuDNN take 16-bit tensors only: fp32 SDPA runs the memory-efficient kernel
    efficient = efficient or (not cudnn and dtype not in IMPL_DTYPES["flash"])
    # FlashAttention-2 takes no explicit mask: where it would run, a masked call runs the
    # memory-efficient kernel (gpumodel.llm.layers.masked_kernel)
    efficient = efficient or (not cudnn and mask)
    impl = "cudnn" if cudnn else "efficient" if efficient else "flash"
    dropout = False
    di = _ATTN_DROPOUT.get(name)
    raw = a.concrete_str(di) if di is not None else None
    if raw is not None:
        try:
            dropout = float(raw) > 0
        except ValueError:
            notes.append(f"dropout_p not understood ({raw!r}): assumed 0")
    op = Attention(batch=b, heads=h, seq=s, head_dim=d, dtype=dtype,  # type: ignore[arg-type]
                   causal=causal, kv_heads=hk, kv_seq=sk, impl=impl, backward=backward,
                   dropout=dropout, mask=mask)  # fmt: skip
    if impl != "flash":
        notes.append({"cudnn": "cuDNN's kernel", "efficient": "the memory-efficient backend "
                      "(xFormers' kernel)"}[impl] + ": priced as its own family")  # fmt: skip
    if dropout:
        notes.append("dropout: the kernel draws a random mask per score (its own family)")
    return Mapped(op=op, family="attention", dtype=dtype, shapes=(q.dims, k.dims),
                  notes=tuple(notes))  # fmt: skip


# ---------------------------------------------------------------------------------------------
# norms and softmax

_NORMS: dict[str, tuple[type[Op], int, int | None, bool]] = {
    # name -> (op class, input index, weight index, backward)
    "aten::layer_norm": (LayerNorm, 0, 2, False),
    "aten::native_layer_norm": (LayerNorm, 0, 2, False),
    "aten::native_layer_norm_backward": (LayerNorm, 1, 5, True),
    "aten::rms_norm": (RMSNorm, 0, 2, False),
    "aten::_fused_rms_norm": (RMSNorm, 0, 2, False),
    "aten::_fused_rms_norm_backward": (RMSNorm, 1, 4, True),
}


@rule("norm", *_NORMS)
def _norm(name: str, a: OpArgs, kn: Sequence[str]) -> Mapped:
    cls, xi, wi, backward = _NORMS[name]
    x = a.tensor(xi)
    if x is None or not x.dims:
        return unmapped("norm", "input shape missing", a, _first_dtype(a))
    shape = a.ints(xi + 1)
    w = a.tensor(wi) if wi is not None else None
    if shape:
        hidden = math.prod(shape)
    elif w is not None and w.dims:
        hidden = w.numel
    else:
        hidden = x.dims[-1]
    rows = x.numel // hidden
    dtype = _model_dtype(x.dtype)
    op = cls(rows=rows, hidden=hidden, dtype=dtype)  # type: ignore[call-arg]
    scale, notes = 1.0, ()
    if backward and w is not None and w.dims:
        scale = cls.backward_traffic  # dx, then the weight gradient: dy and x read again
        notes = (f"backward: dx (reads dy and x, writes dx), then the weight gradient (reads dy "
                 f"and x again): {scale:g}x the forward traffic",)  # fmt: skip
    elif backward:
        scale = BACKWARD_NORM_SCALE
        notes = ("backward: reads dy and x, writes dx: 1.5x the forward traffic",)
    return Mapped(op=op, family="norm", dtype=x.dtype, shapes=a.shapes(), scale=scale,
                  notes=notes)  # fmt: skip


_SOFTMAX = {
    "aten::softmax": (0, 1, False), "aten::_softmax": (0, 1, False),
    "aten::log_softmax": (0, 1, False), "aten::_log_softmax": (0, 1, False),
    "aten::_softmax_backward_data": (1, 2, True), "aten::_log_softmax_backward_data": (1, 2, True),
    "aten::_safe_softmax": (0, 1, False),
}  # fmt: skip


@rule("softmax", *_SOFTMAX)
def _softmax(name: str, a: OpArgs, kn: Sequence[str]) -> Mapped:
    xi, di, backward = _SOFTMAX[name]
    x = a.tensor(xi)
    if x is None or not x.dims:
        return unmapped("softmax", "input shape missing", a, _first_dtype(a))
    dim = (a.ints(di) or [-1])[0]
    cols = x.dims[dim] if -len(x.dims) <= dim < len(x.dims) else x.dims[-1]
    op = Softmax(rows=x.numel // cols, cols=cols, dtype=_model_dtype(x.dtype))  # type: ignore[arg-type]
    if not backward:
        return Mapped(op=op, family="softmax", dtype=x.dtype, shapes=a.shapes())
    if op.reads_per_element == 1:
        scale, what = BACKWARD_NORM_SCALE, "reads dy and y, writes dx"
    # rows read off chip (validation/results/h200-sxm/softmax-rows-2026-11-28: backward over
    # forward, median of 14 shapes 1.07 for log_softmax, of 10 shapes 1.75 for softmax)
    elif "log_softmax" in name:  # the row's sum of dy, then dy and y again, dx written
        scale, what = 4 / 4, "reads dy, then dy and y again, writes dx (the row read off chip)"
    else:  # an elementwise dy * y kernel first, then the same four passes over it
        scale, what = 7 / 4, ("dy * y in its own kernel (3 passes), then the row's sum and dx "
                              "(4 passes; the row read off chip)")  # fmt: skip
    return Mapped(op=op, family="softmax", dtype=x.dtype, shapes=a.shapes(), scale=scale,
                  notes=(f"backward: {what}: {scale:g}x the forward traffic",))  # fmt: skip


# ---------------------------------------------------------------------------------------------
# elementwise, reductions, copies

# recorded name (without aten:: and trailing _) -> (closest gpumodel elementwise op, FLOPs/element)
_ELEMENTWISE: dict[str, tuple[str, float]] = {
    **dict.fromkeys(("add", "sub", "rsub"), ("add", 1.0)),
    **dict.fromkeys(("mul", "div", "true_divide"), ("mul", 1.0)),
    **dict.fromkeys(
        ("neg", "abs", "clamp", "clamp_min", "clamp_max", "relu", "threshold", "leaky_relu",
         "hardtanh", "sign", "maximum", "minimum", "where", "masked_fill", "lt", "gt", "le", "ge",
         "eq", "ne", "logical_not", "logical_and", "logical_or", "bitwise_not", "square"),
        ("relu", 1.0)),
    **dict.fromkeys(
        ("exp", "exp2", "log", "log2", "log1p", "expm1", "sqrt", "rsqrt", "tanh", "sigmoid", "pow",
         "reciprocal", "erf", "sin", "cos"),
        ("exp", 1.0)),
    "silu": ("silu", 4.0),
    "gelu": ("gelu", 8.0),
    **dict.fromkeys(("copy", "fill", "zero", "clone", "contiguous", "_to_copy", "to"), ("copy", 0.0)),
    "native_dropout": ("mul", 3.0),
    "native_dropout_backward": ("mul", 1.0),
    "gelu_backward": ("gelu", 10.0),
    "silu_backward": ("silu", 6.0),
    "threshold_backward": ("relu", 1.0),
    **dict.fromkeys(("tanh_backward", "sigmoid_backward"), ("mul", 2.0)),
    **dict.fromkeys(("addcmul", "addcdiv", "lerp"), ("add", 2.0)),
}  # fmt: skip
_REDUCTIONS = (
    "sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "norm", "linalg_vector_norm",
    "var", "std", "var_mean", "std_mean", "prod", "all", "any", "logsumexp", "cumsum",
)  # fmt: skip


# PyTorch's elementwise launchers (aten/src/ATen/native/cuda/CUDALoops.cuh): contiguous operands
# of one dtype get ``vectorized_elementwise_kernel``; contiguous operands that need a cast get
# ``unrolled_elementwise_kernel``; other layouts get the offset-computing
# ``elementwise_kernel<128, 4>``. The cast and the legacy kernel over broadcast or transposed
# operands are the families validate measures as ``strided_elementwise:cast`` and ``:broadcast``
# (1.3-2.3 TB/s in H100 training traces, where a vectorised kernel streams at ~3 TB/s). A legacy
# kernel whose operands are the output's flat layout or single elements (``x / t`` of a 0-dim
# tensor ``t``) iterates one dimension and streams: priced as a vectorised kernel.
_NON_VECTORISED = re.compile(
    r"at::native::(?:\(anonymous namespace\)::)?(unrolled_)?elementwise_kernel\b"
)


def _contiguous(t: TensorArg) -> bool:
    """Row-major dense (or strides not recorded)."""
    if t.strides is None:
        return True
    expect = 1
    for d, s in zip(reversed(t.dims), reversed(t.strides), strict=True):
        if d != 1 and s != expect:
            return False
        expect *= d
    return True


def _strided_kind(kernel_names: Sequence[str], ts: Sequence[TensorArg],
                  out_dims: tuple[int, ...]) -> str | None:  # fmt: skip
    """``"cast"`` or ``"broadcast"`` when the op ran PyTorch's non-vectorised elementwise kernel
    (by its recorded name) over operands that do not stream as one flat array, else None."""
    for k in kernel_names:
        m = _NON_VECTORISED.search(k)
        if m is None:
            continue
        if m.group(1):
            return "cast"
        flat = all(t.numel == 1 or (t.dims == out_dims and _contiguous(t)) for t in ts)
        return None if flat else "broadcast"
    return None


def _base(name: str) -> str:
    base = name.removeprefix("aten::")
    return base[:-1] if base.endswith("_") and not base.endswith("__") else base


def _broadcast(dims: list[tuple[int, ...]]) -> tuple[int, ...]:
    width = max((len(d) for d in dims), default=0)
    out = []
    for i in range(width):
        sizes = [d[len(d) - width + i] for d in dims if len(d) - width + i >= 0]
        out.append(max(sizes) if sizes else 1)
    return tuple(out)


@rule("elementwise", *(f"aten::{n}" for n in _ELEMENTWISE), *(f"aten::{n}_" for n in _ELEMENTWISE))
def _elementwise(name: str, a: OpArgs, kn: Sequence[str]) -> Mapped:
    base = _base(name)
    close, fpe = _ELEMENTWISE[base]
    ts = a.tensors()
    if not ts:
        return unmapped("elementwise", "no tensor argument recorded", a)
    inplace = name.endswith("_")
    out_dims = _broadcast([t.dims for t in ts])
    if base == "copy":  # copy_(self=dst, src): reads src, writes dst
        dst, src = ts[0], (ts[1] if len(ts) > 1 else ts[0])
        reads, writes, out_dims = src.nbytes, dst.nbytes, dst.dims
        out_dtype = dst.dtype
    elif base in ("fill", "zero"):
        reads, writes, out_dims = 0.0, ts[0].nbytes, ts[0].dims
        out_dtype = ts[0].dtype
    else:
        reads = sum(t.nbytes for t in ts)
        big = [t for t in ts if t.dims] or ts
        out_size = max(t.itemsize for t in big)
        out_dtype = next(t.dtype for t in big if t.itemsize == out_size)
        if inplace:
            out_size, out_dtype, out_dims = ts[0].itemsize, ts[0].dtype, ts[0].dims
        writes = math.prod(out_dims) * out_size
        if base == "native_dropout":
            writes += math.prod(out_dims)  # the bool mask
    n = math.prod(out_dims)
    if n == 0:
        return unmapped("elementwise", "empty tensor", a, out_dtype)
    dtype = _model_dtype(out_dtype)
    same = all(t.dtype == out_dtype and t.numel == n for t in ts)
    n_inputs = ELEMENTWISE[close][1]
    simple = (same and out_dtype in MODEL_DTYPES and base not in ("copy", "fill", "zero",
              "native_dropout") and len(ts) == n_inputs and fpe == ELEMENTWISE[close][0])  # fmt: skip
    kind = _strided_kind(kn, ts, out_dims)
    if kind is not None:  # priced per element, as the non-vectorised kernel runs
        simple = False
        op: Op = StridedElementwise(kind=kind, n=n, bytes_per_element=(reads + writes) / n,  # type: ignore[arg-type]
                                    written_per_element=writes / n, dtype=dtype)  # fmt: skip
    elif simple:
        op = Elementwise(op=close, n=n, dtype=dtype)  # type: ignore[arg-type]
    else:
        op = Kernel(flops=fpe * n, bytes=reads + writes, dtype=dtype)  # type: ignore[arg-type]
    label = None if simple else (f"{'elementwise' if kind is None else 'strided ' + kind}"
                                 f"({close}-like, n={n}, bytes={reads + writes:.0f}, "
                                 f"dtype={dtype})")  # fmt: skip
    return Mapped(op=op, family="elementwise", dtype=out_dtype, shapes=a.shapes(),
                  out_dims=out_dims, out_numel=n, read_bytes=reads, write_bytes=writes,
                  flops=fpe * n, elem_dtype=dtype, label=label)  # fmt: skip


@rule("reduction", *(f"aten::{n}" for n in _REDUCTIONS))
def _reduction(name: str, a: OpArgs, kn: Sequence[str]) -> Mapped:
    x = a.tensor(0)
    if x is None:
        return unmapped("reduction", "input shape missing", a)
    if x.numel == 0:
        return unmapped("reduction", "empty tensor", a, x.dtype)
    if x.dtype in MODEL_DTYPES:
        op: Op = Reduction(n=x.numel, dtype=x.dtype)  # type: ignore[arg-type]
    else:
        op = Kernel(flops=float(x.numel), bytes=x.nbytes, dtype="fp32")
    return Mapped(op=op, family="reduction", dtype=x.dtype, shapes=a.shapes())


@rule("embedding", "aten::embedding", "aten::embedding_dense_backward")
def _embedding(name: str, a: OpArgs, kn: Sequence[str]) -> Mapped:
    if name == "aten::embedding":
        w, idx = a.tensor(0), a.tensor(1)
        if w is None or idx is None or len(w.dims) != 2:
            return unmapped("embedding", "expected weight [V, H] and indices", a)
        tokens, hidden, dtype = idx.numel, w.dims[1], w.dtype
    else:
        g, idx = a.tensor(0), a.tensor(1)
        if g is None or idx is None or not g.dims:
            return unmapped("embedding", "expected grad [..., H] and indices", a)
        tokens, hidden, dtype = idx.numel, g.dims[-1], g.dtype
    op = Embedding(tokens=tokens, hidden=hidden, dtype=_model_dtype(dtype))  # type: ignore[arg-type]
    notes = ("backward: scatter-add of the gathered rows",) if "backward" in name else ()
    return Mapped(op=op, family="embedding", dtype=dtype, shapes=a.shapes(), notes=notes)


# foreach (multi-tensor) ops: ``_foreach_add_(self: TensorList, other: TensorList)``
_FOREACH_FLOPS = {"addcmul": 2.0, "addcdiv": 2.0, "lerp": 2.0, "sqrt": 1.0, "norm": 2.0}


def _foreach(name: str, a: OpArgs, kn: Sequence[str]) -> Mapped:
    lists = a.tensor_lists()
    if not lists or not lists[0]:
        return unmapped("foreach", "tensor lists not recorded", a)
    size = next((t.itemsize for t in a.tensors()), None)
    typ = next((t for t in a.types if t in TORCH_DTYPES), None)
    if size is None and typ is None:  # list members' dtypes are not recorded: the kernel's
        typ = _foreach_kernel_dtype(kn)  # functor names the element type
    if size is None:
        size = TORCH_DTYPES[typ][1] if typ else 4.0
    first = sum(math.prod(d) for d in lists[0])
    reads = sum(sum(math.prod(d) for d in lst) for lst in lists) * size
    base = name.removeprefix("aten::_foreach_").rstrip("_")
    writes = 0.0 if base == "norm" else first * size
    fpe = _FOREACH_FLOPS.get(base, 1.0)
    op = Kernel(flops=fpe * first, bytes=reads + writes, dtype="fp32")
    return Mapped(op=op, family="foreach", dtype=f"{len(lists[0])} tensors",
                  shapes=((first,),), notes=(f"{len(lists[0])} tensors per list",))  # fmt: skip


_FOREACH_FUNCTOR = re.compile(r"Functor<\s*(c10::BFloat16|c10::Half|float|double)\s*,")


def _foreach_kernel_dtype(kernel_names: Sequence[str]) -> str | None:
    """``multi_tensor_apply_kernel<..., BinaryOpListAlphaFunctor<c10::BFloat16, 2, 2, 0>, ...>``
    -> ``c10::BFloat16``: the element type of the lists (None when no kernel says)."""
    for k in kernel_names:
        m = _FOREACH_FUNCTOR.search(k)
        if m:
            return m.group(1)
    return None


_FUSED_ADAM_FLOPS = 15.0  # moments, bias correction, sqrt, divide, decay, update per element


@rule("optimizer", "aten::_fused_adamw_", "aten::_fused_adam_", "aten::_fused_sgd_")
def _fused_optimizer(name: str, a: OpArgs, kn: Sequence[str]) -> Mapped:
    lists = [lst for lst in a.tensor_lists() if lst]
    if not lists:
        return unmapped("optimizer", "tensor lists not recorded", a)
    size = 4.0 if not a.types or "float" in a.types else 2.0
    return fused_optimizer(name, lists[0], size, len(lists))


def fused_optimizer(
    name: str, params: Sequence[tuple[int, ...]], element_bytes: float, lists: int = 4,
    source: str = "",
) -> Mapped:  # fmt: skip
    """A fused optimizer call (``aten::_fused_adamw_``: one ``multi_tensor_apply`` pass over its
    lists) on the parameter tensors ``params`` of ``element_bytes`` each: Adam reads params,
    grads, exp_avg and exp_avg_sq and writes all but the grads (PyTorch FusedAdamKernel.cu), SGD
    reads params and grads and writes the params. ``lists``: the tensor lists the call was given
    (at most the 4 read)."""
    n = sum(math.prod(d) for d in params)
    adam = "adam" in name
    streams = min(lists, 4 if adam else 2)
    note = f"{len(params)} parameter tensors, {n} elements" + (f" ({source})" if source else "")
    if adam and streams == 4:
        # the calibrated fused-AdamW families (validate's ``adamw``: fp32 and 16-bit states),
        # as the step model prices them
        op: Op = AdamW.for_states(n, element_bytes)
        if element_bytes != 4:
            note += f", {element_bytes:g} B states"
        return Mapped(op=op, family="optimizer", dtype="", shapes=((n,),), notes=(note,))
    writes = (3 if adam else 1) * n * element_bytes
    op = Kernel(flops=(_FUSED_ADAM_FLOPS if adam else 2.0) * n,
                bytes=streams * n * element_bytes + writes, dtype="fp32")  # fmt: skip
    return Mapped(op=op, family="optimizer", dtype="", shapes=((n,),), notes=(note,))


# torch.profiler records a TensorList's shapes but not its element type
CAT_ASSUMED_ELEMENT_BYTES = 2  # bf16/fp16, the dtype of the KV caches and activations it joins


# torch.cat's kernels (aten/src/ATen/native/cuda/Shape.cu): the generic CatArrayBatchedCopy
# (non-contiguous inputs: rotate_half's halves of the transposed q) computes offsets per
# element; its _contig / _aligned / _vectorized variants stream
_GENERIC_CAT = re.compile(r"CatArrayBatchedCopy<")


@rule("copy", "aten::cat")
def _cat(name: str, a: OpArgs, kn: Sequence[str]) -> Mapped:
    """``torch.cat``: every input read once and written once into the output (HF's dynamic
    KV cache grows this way every decode step); on the generic kernel priced per element:
    ``StridedElementwise(kind="cat")`` for two halves of one shape (RoPE's rotate_half),
    ``kind="view_cat"`` for the rest (a sliding cache's slice view, a tensor joined to an empty
    one: 1.5x the work per element in H200 traces of HF Mistral-7B and Phi-3)."""
    lists = [lst for lst in a.tensor_lists() if lst]
    if not lists:
        return unmapped("copy", "tensor lists not recorded", a)
    elements = sum(math.prod(d) for d in lists[0])
    size = CAT_ASSUMED_ELEMENT_BYTES
    op: Op = Copy(bytes=float(elements * size))
    if elements and any(_GENERIC_CAT.search(k) for k in kn):
        halves = len(lists[0]) == 2 and list(lists[0][0]) == list(lists[0][1])
        op = StridedElementwise(kind="cat" if halves else "view_cat", n=elements,
                                bytes_per_element=2 * size, written_per_element=size)  # fmt: skip
    return Mapped(op=op, family="copy",
                  shapes=tuple(tuple(d) for d in lists[0]),
                  notes=(f"{len(lists[0])} tensors joined, {elements} elements at an assumed "
                         f"{CAT_ASSUMED_ELEMENT_BYTES} bytes (a tensor list's type is not "
                         "recorded)",))  # fmt: skip


# ---------------------------------------------------------------------------------------------
# GPU memory activities (not operators): memcpy and memset

_MEMCPY = re.compile(r"Memcpy\s+(HtoD|DtoH|DtoD|HtoH|PtoP)", re.I)


def map_memory(name: str, kind: str, args: dict[str, Any]) -> Mapped:
    """A ``gpu_memcpy`` / ``gpu_memset`` activity as a HostTransfer, Copy or memset kernel."""
    nbytes = args.get("bytes")
    if not isinstance(nbytes, (int, float)) or nbytes <= 0:
        return Mapped(op=None, family="transfer", reason="copy size not recorded")
    shapes = ((int(nbytes),),)
    if kind == "memset":
        return Mapped(op=Kernel(flops=0, bytes=float(nbytes), dtype="fp32"), family="memset",
                      shapes=shapes)  # fmt: skip
    m = _MEMCPY.search(name)
    direction = m.group(1).upper() if m else ""
    if direction in ("HTOD", "DTOH"):
        pinned = "pageable" not in name.lower()
        op: Op = HostTransfer(bytes=float(nbytes), direction="h2d" if direction == "HTOD" else "d2h",
                              pinned=pinned)  # fmt: skip
        return Mapped(op=op, family="transfer", dtype="pinned" if pinned else "pageable",
                      shapes=shapes)  # fmt: skip
    if direction in ("DTOD", "PTOP"):
        return Mapped(op=Copy(bytes=float(nbytes)), family="copy", shapes=shapes)
    return Mapped(op=None, family="transfer", shapes=shapes,
                  reason="host-to-host copy: not on the GPU")  # fmt: skip


@dataclass
class ChainCost:
    """Bytes and FLOPs of an elementwise chain done as one fused pass."""

    reads: float = 0.0
    writes: float = 0.0
    flops: float = 0.0
    dtype: str = "bf16"
    members: list[Mapped] = field(default_factory=list)

    def add(self, m: Mapped) -> None:
        if self.members:
            prev = self.members[-1]
            self.reads += max(
                m.read_bytes - prev.write_bytes, 0.0
            )  # the intermediate stays on chip
        else:
            self.reads += m.read_bytes
            self.dtype = m.elem_dtype
        self.writes = m.write_bytes
        self.flops += m.flops
        self.members.append(m)

    def fused_op(self) -> Kernel:
        return Kernel(flops=self.flops, bytes=self.reads + self.writes,
                      dtype=self.dtype)  # type: ignore[arg-type]  # fmt: skip


__all__ = [
    "MODEL_DTYPES",
    "RULES",
    "TORCH_DTYPES",
    "ChainCost",
    "Mapped",
    "OpArgs",
    "TensorArg",
    "family_of",
    "fused_optimizer",
    "map_memory",
    "map_op",
]
