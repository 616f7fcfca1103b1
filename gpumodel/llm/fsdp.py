"""FSDP2's host work in an eager (HF) training step (ZeRO-3 over dp > 1 ranks, ``fully_shard`` on
each decoder layer and on the model, as PyTorch's FSDP2 tutorial applies it).

Each FSDP unit (a sharded layer, and the root) runs Python hooks around its forward and
backward every micro-batch: the all-gather's copy-in, the all-gather, the split copies back
into the unsharded parameters, the reshard, and after the backward the chunk-cat, the
reduce-scatter and the copies into the sharded gradients, with per-parameter views, casts and
DTensor wrappers between them (a traced TinyLlama step: ``FSDP::pre_forward`` 1.6 ms a layer
profiled, ``RegisterPostBackward`` 26 ms, 45 all-gathers, 23 reduce-scatters, 297 casts;
validation/results/steps-h200x2-multi-gpu-run5-fsdp). The GPU work of those kernels is small
(NCCL 17 ms of a 236 ms profiled step); the host binds the step.

Priced as a host cost per unit and micro-batch, ``FSDP_UNIT_HOST_OPS`` times the host profile's
eager elementwise call, so it follows the host's speed. Fitted on the 14 FSDP2 points of two
2 x H200 VMs (steps-h200x2-multi-gpu-run4-fsdp, -run5-fsdp; validation/fitset/
fit_fsdp_unit_host.py: per point, the calls' worth at which the step is priced at its measured
median, every other term as shipped; the median of the points). The eager host it adds to is
priced with the training host factor and slowed as the slowest of the job's ranks runs it
(``ranks.rank_host``), so it is refitted with both: 570 with the three-VM factor (the VMs'
medians 597 and 559), 650 with the four-VM one of 2026-11-30 (662 and 629), 560 with the
slowest-rank factor of the same day (575 and 543); docs/multi-gpu.md gives its check on points
it was not fitted to.

Its memory (``memory.memory_of``), from where the peak of each step falls
(validation/experiments/fsdp_memory_phases_device.py, 2 x H200: each phase's peak and the blocks
alive at the step's peak, by who allocated them; validation/results/h200-sxm-x2/
fsdp-memory-phases-2026-11-29): the sharded gradients are allocated by the reduce-scatters as
the backward frees the activations and freed by ``zero_grad(set_to_none=True)``, so the peak
holds the larger of the two (``bf16``: at the backward's start, the activations; ``mixed``: at
its end, the fp32 gradients), plus ``unsharded_elements`` in the compute dtype, twice.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpumodel.hostprofile import HostProfile
    from gpumodel.llm.layers import Fusion
    from gpumodel.llm.models import ModelSpec

FSDP_UNIT_HOST_OPS = 560.0  # eager elementwise calls' worth of host per FSDP unit and micro-batch
# Bytes per parameter of (sharded weights, sharded gradients, optimizer states) under FSDP2's
# MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), the ``mixed`` policy as FSDP2 runs
# it: fp32 parameters (the optimizer's master), fp32 gradients, fp32 AdamW moments; bf16 copies
# exist only unsharded, a unit at a time. (Megatron's ``mixed`` keeps bf16 weights and grads
# beside an fp32 master: memory.POLICY_STATE_BYTES.) Measured: Llama-2-7B over 2 GPUs held 40.43
# GB between steps (13.48 x 3) and 13.48 GB more of gradients after the backward.
MIXED_STATE_BYTES = (4.0, 4.0, 8.0)


def is_fsdp(fusion: Fusion, zero: int, dp: int) -> bool:
    """An eager (HF, unfused) step over dp > 1 ranks with ZeRO-3: FSDP's per-unit hooks."""
    return fusion == "unfused" and zero == 3 and dp > 1


def unsharded_elements(spec: ModelSpec, tp: int = 1) -> float:
    """Parameters FSDP2 holds unsharded at a step's peak: the root unit's (embeddings, LM head,
    final norm; all-gathered for the forward and kept for the backward) and two layers' (the one
    computing and the one prefetched). Their unsharded gradients, before the reduce-scatter,
    take as much again. Measured at the peak (2 x H200, bf16 compute): Llama-2-7B 2.66 GB alive
    beside the activations or the gradients, this rule 2.67 (2 x 2 B x (262 M + 2 x 202 M));
    TinyLlama 0.87, the rule 0.88."""
    per_layer = spec.layer_params()
    root = spec.param_count() - spec.layers * per_layer
    return (root + 2 * per_layer) / tp


def fsdp_unit_host_s(host: HostProfile) -> float:
    """Host seconds of one FSDP unit's hooks and copies in one micro-batch on ``host``."""
    return FSDP_UNIT_HOST_OPS * host.cost_s("elementwise")


def with_unit_host(stage: Any, unit_s: Any) -> Any:
    """``stage`` (``training.StageTimes`` or the sweep's arrays of them) with each sharded layer's
    and the root's host work ``unit_s`` (a number, or an array over the sweep's points) added
    to its host path."""
    return replace(stage, layer_host_s=stage.layer_host_s + unit_s,
                   pre_host_s=stage.pre_host_s + unit_s)  # fmt: skip
