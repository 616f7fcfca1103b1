"""Collectives as the LLM layers use them, timed by the collective model (gpumodel.ops.collectives).

Sizes are nccl-tests sizes: the per-rank buffer for all-reduce (Megatron's tensor-parallel
all-reduce of the T x hidden activations; the data-parallel gradient all-reduce of each rank's
gradients). Placement: tensor parallelism stays inside a node; a data-parallel group of ``gpus``
ranks whose inner parallel dimensions use ``inner`` GPUs of each 8-GPU node spans
``gpus / (8 // inner)`` nodes (Megatron-LM's rank order: tensor innermost, then data).
"""

from __future__ import annotations

import math
from typing import Any

from gpumodel.ops.base import at_least, build
from gpumodel.ops.collectives import AllGather, AllReduce, Collective, ReduceScatter, SendRecv
from gpumodel.predict import predict
from gpumodel.prediction import KernelPrediction
from gpumodel.specs import GPUSpec

GPUS_PER_NODE = 8

__all__ = [
    "AllGather",
    "AllReduce",
    "Collective",
    "ReduceScatter",
    "SendRecv",
    "collective_kernel",
    "placed",
]


def placed(
    cls: type[Collective], nbytes: float, gpus: int, dtype: str, inner: int = 1
) -> Collective:
    """A collective over ``gpus`` ranks, each node holding ``8 // inner`` of them."""
    per_node = max(1, min(gpus, GPUS_PER_NODE // max(1, inner)))
    nodes = math.ceil(gpus / per_node)
    if gpus % nodes:
        nodes = 1 if gpus <= GPUS_PER_NODE else gpus  # irregular layouts: one rank per node
    return build(cls, bytes=at_least(nbytes, 1.0), gpus=gpus, dtype=dtype, nodes=nodes)


def collective_kernel(op: Collective, gpu: GPUSpec, calibration: Any) -> KernelPrediction:
    """The collective's predicted time as one network-bound kernel (one NCCL launch)."""
    p = predict(op, gpu, calibration if calibration is not None else "none")
    return KernelPrediction(
        name=op.op_name, time_s=p.time_s, bound=p.bound, flops=0.0, bytes=op.bytes,
        launches=1 if op.gpus > 1 else 0, terms=p.terms,
    )  # fmt: skip
