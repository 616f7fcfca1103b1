"""Collectives as the LLM layers see them: a kind, an nccl-tests size and a GPU count.

Times come from ``gpumodel.ops.collectives`` (the collective model: alpha-beta terms, bus
bandwidth, calibration) through ``predict``. It is imported lazily, inside ``collective_time``,
so the LLM model has no import-time dependency on it. Until that module is importable the
fallback below applies: the NCCL-style ``time = alpha + S * factor / busbw`` (nccl-tests
``doc/PERFORMANCE.md``: factor ``2(n-1)/n`` for all-reduce, ``(n-1)/n`` for all-gather and
reduce-scatter) with busbw the per-direction NVLink bandwidth inside a node of up to 8 GPUs and
an assumed 50 GB/s per GPU (one 400 Gb/s NIC per GPU) across nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from gpumodel.calibration import Calibration
from gpumodel.prediction import KernelPrediction, Term
from gpumodel.specs import GPUSpec

CollectiveKind = Literal["all_reduce", "all_gather", "reduce_scatter"]

# Fallback constants (used only while gpumodel.ops.collectives is missing).
FALLBACK_ALPHA_S = {"intra": 10e-6, "inter": 20e-6}  # NCCL small-message floors, formulas.md §5
FALLBACK_INTER_NODE_BUSBW = 50e9  # 400 Gb/s per GPU, one NIC per GPU (HGX-style nodes)
GPUS_PER_NODE = 8


@dataclass(frozen=True)
class Collective:
    """One collective of ``bytes`` (nccl-tests size: the per-rank buffer) over ``gpus`` ranks."""

    kind: CollectiveKind
    bytes: float
    gpus: int
    dtype: str = "bf16"

    def label(self) -> str:
        return f"{self.kind}(bytes={self.bytes:.4g}, gpus={self.gpus}, dtype={self.dtype})"


def bus_factor(kind: CollectiveKind, n: int) -> float:
    """nccl-tests busbw factor: all-reduce ``2(n-1)/n``; all-gather, reduce-scatter ``(n-1)/n``."""
    return (2.0 if kind == "all_reduce" else 1.0) * (n - 1) / n


def collective_time(c: Collective, gpu: GPUSpec, calibration: Calibration | None) -> KernelPrediction:
    """Time of one collective, as a kernel prediction bound by the network."""
    if c.gpus <= 1 or c.bytes <= 0:
        return KernelPrediction(name=c.kind, time_s=0.0, bound="network", flops=0.0, bytes=0.0,
                                launches=0)  # fmt: skip
    try:
        from gpumodel.ops import collectives  # written in parallel; optional until it lands
    except ImportError:
        return _fallback(c, gpu)
    from gpumodel.predict import predict

    cls = {
        "all_reduce": collectives.AllReduce,
        "all_gather": collectives.AllGather,
        "reduce_scatter": collectives.ReduceScatter,
    }[c.kind]
    op = cls(bytes=c.bytes, gpus=c.gpus, dtype=c.dtype)
    p = predict(op, gpu, calibration if calibration is not None else "none")
    return KernelPrediction(
        name=c.kind, time_s=p.time_s, bound="network", flops=0.0, bytes=c.bytes, launches=1,
        terms=p.terms,
    )  # fmt: skip


def _fallback(c: Collective, gpu: GPUSpec) -> KernelPrediction:
    n = c.gpus
    nvlink = gpu.interconnect.nvlink if gpu.interconnect else None
    if n <= GPUS_PER_NODE and nvlink is not None:
        busbw, where, alpha = nvlink.per_direction_bytes_per_s, "NVLink per direction", "intra"
    elif n <= GPUS_PER_NODE and gpu.interconnect is not None:
        busbw, where, alpha = gpu.interconnect.pcie.per_direction_bytes_per_s, "PCIe", "intra"
    else:
        busbw, where, alpha = FALLBACK_INTER_NODE_BUSBW, "assumed 400 Gb/s NIC per GPU", "inter"
    a = FALLBACK_ALPHA_S[alpha]
    t_bw = c.bytes * bus_factor(c.kind, n) / busbw
    terms = (
        Term(name="latency (alpha)", value=a, note="fallback NCCL floor"),
        Term(name="bandwidth time", value=t_bw,
             note=f"S x {bus_factor(c.kind, n):.3g} / busbw ({where}); fallback until "
             "gpumodel.ops.collectives is available"),
    )  # fmt: skip
    return KernelPrediction(name=c.kind, time_s=a + t_bw, bound="network", flops=0.0,
                            bytes=c.bytes, launches=1, terms=terms)  # fmt: skip
