"""Ops users describe; each knows its FLOPs, bytes and kernels.

``from_row({"op": "gemm", "m": 1, ...})`` builds an op from a batch-file row; elementwise
functions are their own op names (``{"op": "relu", "n": 1024}``).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from gpumodel.errors import SpecError
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
from gpumodel.ops.matmul import Conv2d, Gemm
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

__all__ = [
    "COLLECTIVE_OPS",
    "ELEMENTWISE",
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
]

_REGISTRY: dict[str, type[Op]] = {}


def register(cls: type[Op]) -> type[Op]:
    """Make an op class reachable from batch rows by its ``op_name``."""
    _REGISTRY[cls.op_name] = cls
    return cls


for _cls in (Gemm, Conv2d, Kernel, Reduction, LayerNorm, RMSNorm, Softmax, Attention, Copy,
             ExpandCopy, HostTransfer, Embedding, Elementwise, AllReduce, AllGather, ReduceScatter,
             Broadcast, AllToAll, SendRecv, StridedElementwise, AdamW):  # fmt: skip
    register(_cls)


def op_names() -> list[str]:
    return sorted(set(_REGISTRY) | set(ELEMENTWISE))


def op_class(name: str) -> type[Op]:
    """The op class registered under ``name``."""
    if name not in _REGISTRY:
        raise SpecError(f"unknown op '{name}'; known: {', '.join(op_names())}")
    return _REGISTRY[name]


def from_row(row: dict[str, Any]) -> Op:
    """Build an op from ``{"op": name, **fields}``; errors name the field."""
    if not isinstance(row, dict) or "op" not in row:
        raise SpecError('each op needs an \'op\' field naming it, e.g. {"op": "gemm", ...}')
    # None is "not given" (an empty CSV cell); an empty string is a value the field judges
    # (``--dtype ''`` is an error, not the default)
    fields = {k: v for k, v in row.items() if k != "op" and v is not None}
    name = str(row["op"]).strip().lower()
    if (name in ELEMENTWISE and name != "copy") or (name == "copy" and "n" in fields):
        cls: type[Op] = Elementwise
        fields["op"] = name
    elif name in _REGISTRY:
        cls = _REGISTRY[name]
    else:
        raise SpecError(f"unknown op '{row['op']}'; known: {', '.join(op_names())}")
    try:
        return cls.model_validate(fields)
    except ValidationError as exc:
        from gpumodel.specs import format_validation_error

        raise SpecError(format_validation_error(exc, f"op {name}")) from None
