"""Ops users describe; each knows its FLOPs, bytes and kernels.

``from_row({"op": "gemm", "m": 1, ...})`` builds an op from a batch-file row; elementwise
functions are their own op names (``{"op": "relu", "n": 1024}``).

The op classes are imported on first use (PEP 562): a command that predicts a GEMM does not
build the collective or attention models.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gpumodel.errors import SpecError

if TYPE_CHECKING:  # pragma: no cover - for type checkers and editors
    from gpumodel.ops.attention import Attention
    from gpumodel.ops.base import FlopPart, GemmShape, KernelWork, Op
    from gpumodel.ops.collectives import (
        COLLECTIVE_OPS,
        AllGather,
        AllReduce,
        AllToAll,
        Broadcast,
        Collective,
        ReduceScatter,
        SendRecv,
        collective_op,
    )
    from gpumodel.ops.matmul import Conv2d, Gemm, GroupedGemm
    from gpumodel.ops.simple import (
        ELEMENTWISE,
        AdamW,
        Copy,
        Elementwise,
        Embedding,
        ExpandCopy,
        HostTransfer,
        Kernel,
        LayerNorm,
        Reduction,
        RMSNorm,
        Softmax,
        StridedElementwise,
    )

# public name -> module that defines it
_LAZY = {
    "Attention": "gpumodel.ops.attention",
    **dict.fromkeys(["FlopPart", "GemmShape", "KernelWork", "Op"], "gpumodel.ops.base"),
    **dict.fromkeys(["COLLECTIVE_OPS", "AllGather", "AllReduce", "AllToAll", "Broadcast",
                     "Collective", "ReduceScatter", "SendRecv", "collective_op"],
                    "gpumodel.ops.collectives"),
    **dict.fromkeys(["Conv2d", "Gemm", "GroupedGemm"], "gpumodel.ops.matmul"),
    **dict.fromkeys(["ELEMENTWISE", "AdamW", "Copy", "Elementwise", "Embedding", "ExpandCopy",
                     "HostTransfer", "Kernel", "LayerNorm", "Reduction", "RMSNorm", "Softmax",
                     "StridedElementwise"], "gpumodel.ops.simple"),
}  # fmt: skip

# the built-in ops reachable from batch rows: op_name -> class name (checked against the classes
# by tests/test_public_api.py)
_BUILTIN = {
    "gemm": "Gemm", "conv2d": "Conv2d", "kernel": "Kernel", "reduction": "Reduction",
    "layernorm": "LayerNorm", "rmsnorm": "RMSNorm", "softmax": "Softmax",
    "attention": "Attention", "copy": "Copy", "expand_copy": "ExpandCopy",
    "host_transfer": "HostTransfer", "embedding": "Embedding", "elementwise": "Elementwise",
    "all_reduce": "AllReduce", "all_gather": "AllGather", "reduce_scatter": "ReduceScatter",
    "broadcast": "Broadcast", "all_to_all": "AllToAll", "send_recv": "SendRecv",
    "strided_elementwise": "StridedElementwise", "adamw": "AdamW",
    "grouped_gemm": "GroupedGemm",
}  # fmt: skip
# elementwise functions are op names of their own (gpumodel.ops.simple.ELEMENTWISE's keys,
# named here so that listing them builds no op class; a test holds the two equal)
ELEMENTWISE_NAMES = ("copy", "add", "mul", "relu", "exp", "silu", "gelu", "gelu_tanh")

__all__ = [
    "COLLECTIVE_OPS",
    "ELEMENTWISE",
    "ELEMENTWISE_NAMES",
    "AdamW",
    "AllGather",
    "AllReduce",
    "AllToAll",
    "Attention",
    "Broadcast",
    "Collective",
    "Conv2d",
    "Copy",
    "Elementwise",
    "Embedding",
    "ExpandCopy",
    "FlopPart",
    "Gemm",
    "GemmShape",
    "GroupedGemm",
    "HostTransfer",
    "Kernel",
    "KernelWork",
    "LayerNorm",
    "Op",
    "RMSNorm",
    "ReduceScatter",
    "Reduction",
    "SendRecv",
    "Softmax",
    "StridedElementwise",
    "collective_op",
    "from_row",
    "op_class",
    "op_names",
    "register",
    "registered_names",
]

_REGISTRY: dict[str, Any] = {}  # classes registered by users (and built-ins once loaded)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gpumodel.ops' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def register(cls: Any) -> Any:
    """Make an op class reachable from batch rows by its ``op_name``."""
    _REGISTRY[cls.op_name] = cls
    return cls


def registered_names() -> set[str]:
    """Names ``op_class`` knows: the built-in ops and any registered since."""
    return set(_BUILTIN) | set(_REGISTRY)


def op_names() -> list[str]:
    return sorted(registered_names() | set(ELEMENTWISE_NAMES))


def op_class(name: str) -> Any:
    """The op class registered under ``name`` (a built-in's module is imported on first use)."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    if name not in _BUILTIN:
        raise SpecError(f"unknown op '{name}'; known: {', '.join(op_names())}")
    cls = __getattr__(_BUILTIN[name])
    _REGISTRY[name] = cls
    return cls


def from_row(row: dict[str, Any]) -> Any:
    """Build an op from ``{"op": name, **fields}``; errors name the field."""
    if not isinstance(row, dict) or "op" not in row:
        raise SpecError('each op needs an \'op\' field naming it, e.g. {"op": "gemm", ...}')
    # None is "not given" (an empty CSV cell); an empty string is a value the field judges
    # (``--dtype ''`` is an error, not the default)
    fields = {k: v for k, v in row.items() if k != "op" and v is not None}
    name = str(row["op"]).strip().lower()
    if (name in ELEMENTWISE_NAMES and name != "copy") or (name == "copy" and "n" in fields):
        cls = op_class("elementwise")
        fields["op"] = name
    elif name in registered_names():
        cls = op_class(name)
    else:
        raise SpecError(f"unknown op '{row['op']}'; known: {', '.join(op_names())}")
    from pydantic import ValidationError

    try:
        return cls.model_validate(fields)
    except ValidationError as exc:
        from gpumodel.specs import format_validation_error

        raise SpecError(format_validation_error(exc, f"op {name}")) from None
