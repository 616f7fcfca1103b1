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
- host: on a step the host sets the pace of, DDP's autograd hooks and copies per gradient
  tensor and its per-step work (forward checks, the bucket all-reduce calls, the ranks waiting
  for each other at each bucket) add ``DDP_STEP_HOST_OPS + DDP_TENSOR_HOST_OPS x tensors`` eager
  elementwise calls' worth of host time (``ddp_host_s``);
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

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from gpumodel.llm.layers import stage_layers
from gpumodel.model import comm
from gpumodel.ops import Elementwise
from gpumodel.ops.collectives import AllReduce
from gpumodel.specs import BYTES_PER_ELEMENT

if TYPE_CHECKING:
    from gpumodel.hostprofile import HostProfile
    from gpumodel.llm._timing import Timer
    from gpumodel.llm.layers import Fusion
    from gpumodel.llm.models import ModelSpec

# DDP's host work per step and per gradient tensor, in eager elementwise calls' worth of the
# host the slowest rank runs (``ranks.rank_host``; so it follows the host's speed). Fitted on
# 2 x H200 (validation/experiments/ddp_host_device.py --interleave; validation/results/
# h200-sxm-x2/ddp-host-2026-11-30; validation/fitset/fit_ddp_host.py): 8 narrow HF models
# (Llama- and GPT-2-shaped, width 256, 8-24 layers, 75-292 gradient tensors, amp and bf16; none
# an unseen configuration), each step's time the slower rank's, DDP against the same module
# stepped without DDP, step by step in turn; least squares of the difference over the tensors,
# in units of the host profile measured in the same call (elementwise 7.49 us) x the 2-rank
# factor (1.09): 109 + 3.15 per tensor (0.9 ms + 25.7 us; residuals -2.1 to +3.5 ms on 3.5-11.9
# ms differences). Before the slowest-rank factor (2026-11-30): 118 + 3.43 of the bare profile.
DDP_STEP_HOST_OPS = 109.0
DDP_TENSOR_HOST_OPS = 3.15
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


def ddp_host_s(spec: ModelSpec, host: HostProfile, tp: int = 1, pp: int = 1) -> float:
    """Host seconds DDP adds to one rank's step on ``host``: its per-step work and the hooks and
    copies of each of the rank's gradient tensors (``parameter_elements``' list: exact for
    Llama-layout models; GPT-2's is 170 where HF holds 148, its q/k/v split and each LayerNorm's
    weight and bias as one, 0.6 ms high on the typical host)."""
    tensors = len(parameter_elements(spec, tp, pp))
    return (DDP_STEP_HOST_OPS + DDP_TENSOR_HOST_OPS * tensors) * host.cost_s("elementwise")


def with_ddp_host(stage: Any, ddp_s: Any) -> Any:
    """``stage`` (``training.StageTimes`` or the sweep's arrays of them) with DDP's host work
    ``ddp_s`` (a number, or an array over the sweep's points) on its host path, once a
    micro-batch."""
    return replace(stage, head_host_s=stage.head_host_s + ddp_s)


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
    out += layer * stage_layers(spec.layers, pp)
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
