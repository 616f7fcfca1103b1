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
2 x H200 VMs (steps-h200x2-multi-gpu-run4-fsdp, -run5-fsdp: the measured step less the priced
eager host and optimizer, per unit, over each VM's elementwise cost: 446-624, the two VMs'
medians 597 and 559); docs/multi-gpu.md gives its check on points it was not fitted to.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpumodel.hostprofile import HostProfile
    from gpumodel.llm.layers import Fusion

FSDP_UNIT_HOST_OPS = 570.0  # eager elementwise calls' worth of host per FSDP unit and micro-batch


def is_fsdp(fusion: Fusion, zero: int, dp: int) -> bool:
    """An eager (HF, unfused) step over dp > 1 ranks with ZeRO-3: FSDP's per-unit hooks."""
    return fusion == "unfused" and zero == 3 and dp > 1


def fsdp_unit_host_s(host: HostProfile) -> float:
    """Host seconds of one FSDP unit's hooks and copies in one micro-batch on ``host``."""
    return FSDP_UNIT_HOST_OPS * host.cost_s("elementwise")


def with_unit_host(stage: Any, unit_s: Any) -> Any:
    """``stage`` (``training.StageTimes`` or the sweep's arrays of them) with each sharded layer's
    and the root's host work ``unit_s`` (a number, or an array over the sweep's points) added
    to its host path."""
    return replace(stage, layer_host_s=stage.layer_host_s + unit_s,
                   pre_host_s=stage.pre_host_s + unit_s)  # fmt: skip
