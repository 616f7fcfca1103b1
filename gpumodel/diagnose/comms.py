"""NCCL kernels in a trace: which collective each is, its size, and how much of it the step's
compute does not hide.

A distributed PyTorch job's trace holds one ``ncclKernel_*`` / ``ncclDevKernel_*`` kernel per
collective call, on NCCL's own stream. What it moved is read, in order, from:

* the kernel's own arguments (PyTorch >= 2.3 copies them there), else
* the ``record_param_comms`` operator that launched it (PyTorch >= 2.0),

both as ``Collective name``, ``In msg nelems``, ``Out msg nelems``, ``Group size`` and
``dtype`` (PyTorch's ``torch/csrc/distributed/c10d/ParamCommsUtils``); without them the kernel
is named but not priced. The size is nccl-tests' (``gpumodel.ops.collectives``): each rank's
buffer for all-reduce and broadcast, the gathered output for all-gather, the input before
scattering for reduce-scatter.

A traced NCCL kernel runs from its start on this rank to the end of the collective: it holds
the transfer, and also the wait for the slowest rank to join. Its model time is the collective
replayed without the eager call (``in_graph``): NCCL's latency and the link's bus bandwidth.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import ValidationError

from gpumodel.diagnose.mapping import Mapped
from gpumodel.diagnose.parse import CpuEvent, GpuEvent
from gpumodel.errors import GpumodelError
from gpumodel.ops import AllGather, AllReduce, AllToAll, Broadcast, ReduceScatter, SendRecv
from gpumodel.ops.collectives import Collective

FAMILY = "collective"
# GPUs per node assumed for a process group larger than one node: the trace does not say
# where its ranks sit (8: DGX/HGX nodes)
GPUS_PER_NODE = 8

# PyTorch's ``Collective name`` (and NCCL's kernel name) -> the gpumodel op; first match wins
_KINDS: tuple[tuple[tuple[str, ...], type[Collective]], ...] = (
    (("reduce_scatter", "reducescatter"), ReduceScatter),
    (("allreduce", "all_reduce"), AllReduce),
    (("allgather", "all_gather"), AllGather),
    (("alltoall", "all_to_all"), AllToAll),
    (("broadcast",), Broadcast),
    (("sendrecv", "send", "recv"), SendRecv),
)
# PyTorch's ``dtype`` argument (c10::ScalarType names) -> (dtype priced, bytes per element);
# integers move as the float of their size
_DTYPES: dict[str, tuple[str, int]] = {
    "Float": ("fp32", 4), "BFloat16": ("bf16", 2), "Half": ("fp16", 2), "Double": ("fp64", 8),
    "Long": ("fp64", 8), "Int": ("fp32", 4), "Short": ("fp16", 2), "Byte": ("int8", 1),
    "Char": ("int8", 1), "Bool": ("int8", 1), "Float8_e4m3fn": ("fp8", 1),
    "Float8_e5m2": ("fp8", 1),
}  # fmt: skip
_ARG_KEYS = ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype")


def is_nccl(kernel_name: str) -> bool:
    """Whether a GPU kernel is one of NCCL's (``ncclKernel_*``, ``ncclDevKernel_*``)."""
    return kernel_name.startswith("nccl")


def _kind(text: str) -> type[Collective] | None:
    low = text.lower()
    for keys, cls in _KINDS:
        if any(k in low for k in keys):
            return cls
    return None


def _params(kernel: GpuEvent, launcher: CpuEvent | None) -> dict[str, Any]:
    """The collective's recorded arguments: the kernel's own, else its record_param_comms."""
    if "In msg nelems" in kernel.args:
        return kernel.args
    node = launcher
    while node is not None:
        if node.name == "record_param_comms":
            return node.args
        node = node.parent
    return {}


def map_collective(
    kernel: GpuEvent, launcher: CpuEvent | None, world_size: int | None = None
) -> Mapped:
    """The collective an NCCL kernel ran (or, op None, why it cannot be priced)."""
    p = _params(kernel, launcher)
    name = str(p.get("Collective name") or "")
    cls = _kind(name) or _kind(kernel.name)
    label = f"nccl:{cls.collective}" if cls is not None else "nccl"
    if "barrier" in name.lower():
        return Mapped(op=None, family=FAMILY, label=label,
                      reason="a barrier: it waits for the other ranks; no data to price")  # fmt: skip
    if cls is None:
        return Mapped(op=None, family=FAMILY, label=label,
                      reason="an NCCL kernel of no known collective")  # fmt: skip
    if not all(k in p for k in _ARG_KEYS[1:]):
        return Mapped(op=None, family=FAMILY, label=label,
                      reason="no message sizes recorded (PyTorch >= 2.0 records them with the "
                             "collective's record_param_comms)")  # fmt: skip
    try:
        n_in, n_out, group = int(p["In msg nelems"]), int(p["Out msg nelems"]), int(p["Group size"])
    except (TypeError, ValueError):
        return Mapped(op=None, family=FAMILY, label=label, reason="message sizes not understood")
    dtype, size = _DTYPES.get(str(p["dtype"]), (None, 0))
    if dtype is None:
        return Mapped(op=None, family=FAMILY, label=label,
                      reason=f"dtype {p['dtype']!r} not understood")  # fmt: skip
    if group <= 0 and world_size:
        group = world_size
    nelems = {AllGather: n_out or n_in * group, ReduceScatter: n_in or n_out * group,
              SendRecv: max(n_in, n_out)}.get(cls, n_in)  # fmt: skip
    shapes = ((nelems,),)
    if group < 2 or nelems <= 0:
        return Mapped(op=None, family=FAMILY, label=label, shapes=shapes, dtype=dtype,
                      reason=f"{group} rank(s), {nelems} elements: nothing moves between GPUs")  # fmt: skip
    nodes = math.ceil(group / GPUS_PER_NODE)
    notes: tuple[str, ...] = ()
    if nodes > 1:
        notes = (f"{group} ranks taken as {nodes} nodes of {GPUS_PER_NODE} GPUs (the trace "
                 "does not say where they sit)",)  # fmt: skip
    try:
        op = cls(bytes=nelems * size, gpus=group, nodes=nodes, dtype=dtype, in_graph=True)
    except (ValidationError, GpumodelError) as exc:
        return Mapped(op=None, family=FAMILY, label=label, shapes=shapes, dtype=dtype,
                      reason=f"not priced: {str(exc).splitlines()[0]}")  # fmt: skip
    notes += (
        "a traced NCCL kernel runs beside compute and also waits for the slowest rank: "
        "what the step pays of it is the communication finding's exposed time",
    )
    return Mapped(op=op, family=FAMILY, dtype=dtype, shapes=shapes, notes=notes, label=label)


__all__ = ["FAMILY", "GPUS_PER_NODE", "is_nccl", "map_collective"]
