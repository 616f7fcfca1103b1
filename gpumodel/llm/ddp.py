"""PyTorch ``DistributedDataParallel`` as an eager (HF) training step runs it (ZeRO 0, dp > 1).

DDP's reducer (torch/csrc/distributed/c10d/reducer.cpp) groups the gradients into buckets in
reverse order of ``model.parameters()``, closing a bucket once it holds ``bucket_cap_mb`` = 25 MiB
(a tensor larger than that fills one alone; the first bucket closes at 1 MiB), and as each
gradient is ready copies it into its bucket scaled by 1/dp (``at::mul_out``: one elementwise
kernel per parameter tensor on the compute stream). A full bucket's all-reduce starts on NCCL's
stream while the backward goes on. What that costs a step, beyond one all-reduce of all
gradients overlapped with the backward:

- ``copy_s``: the per-tensor scaled copies into the buckets (read the gradient, write the bucket);
- ``comm_s``: one eager all-reduce per bucket (each pays the collective's floor), not one of all
  the bytes;
- ``tail_s``: the last bucket (the embedding's gradient, ready last) reduces after the backward;
- ``contention_s``: while its all-reduces overlap the backward, NCCL's kernels hold
  ``channels`` of the GPU's SMs (24 ring channels on Hopper, one thread block each:
  ``comm.NCCL_RING_CHANNELS``), so the backward runs on the rest:
  ``min(comm_s, backward) x channels / SMs``.
- memory: the buckets stay allocated beside the gradients (``gradient_as_bucket_view`` False,
  DDP's default: "the saved memory size will be equal to the total gradients size" when it is
  True, torch.nn.parallel.DistributedDataParallel's documentation; ``memory.memory_of``).

``gm.data_parallel_step`` (``model/amdahl.py``, the ``dp-step`` command) is the generic form:
equal buckets of a byte count, on a timeline. Here the buckets are the model's own tensors
(TinyLlama's fp32 gradients: 90 buckets, not 4.4 GB / 25 MiB = 168), and the exposed time is
that timeline's closed-form bound, ``max(tail, comm - backward)`` (its last bucket, and all of
them queued from the backward's start), so that the vectorised sweeps can take it.

Checked on 2 x H200 (validation/results/steps-h200x2-multi-gpu-run1: measured on it; run 2
measured before this model was written, run 3 after it): docs/multi-gpu.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpumodel.model import comm
from gpumodel.ops import Elementwise
from gpumodel.ops.collectives import AllReduce
from gpumodel.specs import BYTES_PER_ELEMENT

if TYPE_CHECKING:
    from gpumodel.llm._timing import Timer
    from gpumodel.llm.layers import Fusion
    from gpumodel.llm.models import ModelSpec

BUCKET_CAP_BYTES = 25 * 2**20  # DistributedDataParallel(bucket_cap_mb=25), its default
FIRST_BUCKET_BYTES = 2**20  # torch.distributed's _DEFAULT_FIRST_BUCKET_BYTES: the first is 1 MiB


@dataclass(frozen=True)
class DdpSync:
    """One rank's DDP gradient sync (seconds, bytes); see the module docstring."""

    buckets: int
    tensors: int
    comm_s: float
    tail_s: float
    copy_s: float
    sm_share: float  # the SMs NCCL's channels hold: channels / SMs


def is_ddp(fusion: Fusion, zero: int, dp: int) -> bool:
    """An eager (HF, unfused) step over dp > 1 ranks without ZeRO: PyTorch DDP's buckets."""
    return fusion == "unfused" and zero == 0 and dp > 1


def parameter_elements(spec: ModelSpec, tp: int = 1, pp: int = 1) -> list[float]:
    """Elements of each parameter tensor of one GPU's slice, in ``model.parameters()`` order
    (HF's modules: embeddings, each layer's attention then MLP then norms, final norm, LM head;
    experts as HF 5 holds them, two stacked tensors per layer)."""
    h, d = spec.hidden, spec.head_dim
    attn = [h * spec.q_dim, h * spec.kv_dim, h * spec.kv_dim, spec.q_dim * h]
    if spec.bias or spec.qkv_bias:
        attn += [spec.q_dim, spec.kv_dim, spec.kv_dim] + ([h] if spec.bias else [])
    if spec.qk_norm:
        attn += [d, d]
    f = spec.ffn_hidden
    dense = [h * f, h * f, f * h] if spec.ffn_kind == "swiglu" else [h * f, f * h]
    if spec.bias:
        dense += [f] * (len(dense) - 1) + [h]
    if spec.moe is not None:
        e = spec.moe.experts
        mlp = [e * sum(dense[:-1]), e * dense[-1], h * e]  # gate_up, down, router
    else:
        mlp = dense
    norms = [spec.norm_params] * 2
    layer = [x / tp for x in attn + mlp] + norms
    out = [spec.embedding_params() / tp]
    out += layer * (spec.layers // pp)
    out += [spec.norm_params]
    if spec.lm_head_params():
        out.append(spec.lm_head_params() / tp)
    return out


def tensor_buckets(tensor_bytes: list[float], cap: float = BUCKET_CAP_BYTES,
                   first: float = FIRST_BUCKET_BYTES) -> list[float]:  # fmt: skip
    """DDP's buckets (bytes) in the order they fill: the tensors in reverse, a bucket closing once
    it holds ``first`` bytes (the first bucket) or ``cap`` (the others; torch.distributed's
    ``_compute_bucket_assignment_by_size`` with DDP's size limits)."""
    buckets, cur = [], 0.0
    for b in reversed(tensor_bytes):
        cur += b
        if cur >= (cap if buckets else first):
            buckets.append(cur)
            cur = 0.0
    if cur:
        buckets.append(cur)
    return buckets


def ddp_sync(spec: ModelSpec, timer: Timer, tp: int, pp: int, dp: int,
             grad_dtype: str) -> DdpSync:  # fmt: skip
    """The sync of one rank of ``dp``, gradients in ``grad_dtype``."""
    from gpumodel.llm._comm import placed
    from gpumodel.llm.layers import LayerOp

    grad_bytes_per = BYTES_PER_ELEMENT[grad_dtype]
    tensors = [n * grad_bytes_per for n in parameter_elements(spec, tp, pp)]
    buckets = tensor_buckets(tensors)

    def allreduce_s(nbytes: float) -> float:
        op = placed(AllReduce, nbytes, dp, grad_dtype, inner=tp)
        return timer.collective_time_s(LayerOp("dp_grad_sync", op, kind="comm"))

    copy_s = 0.0
    for nbytes in tensors:  # one scaled copy (mul_out: read one, write one) per gradient tensor
        op = Elementwise(op="copy", n=max(1, round(nbytes / grad_bytes_per)), dtype=grad_dtype)
        copy_s += sum(k.time_s for k in timer.kernels(LayerOp("ddp_bucket_copy", op)))
    ring = comm.nccl_ring_channels(timer.gpu.architecture)
    share = ring.count / timer.gpu.sm_count if ring else 0.0
    return DdpSync(buckets=len(buckets), tensors=len(tensors),
                   comm_s=sum(allreduce_s(b) for b in buckets), tail_s=allreduce_s(buckets[-1]),
                   copy_s=copy_s, sm_share=share)  # fmt: skip
