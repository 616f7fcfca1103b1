"""Thread blocks of unequal work on a fixed number of SM slots: the tail effect.

The block scheduler hands blocks to SMs in launch order as slots free up (greedy list
scheduling). With equal blocks this is wave quantization (NVIDIA "Matrix Multiplication
Background"); with unequal blocks (causal attention: query tile i visits i+1 key tiles) the
last, heaviest blocks set the finish time. Efficiency = total work / (makespan x slots).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from gpumodel.errors import SpecError

# Beyond this many blocks per slot the greedy schedule balances to within ~1%: skip simulating.
BALANCED_BLOCKS_PER_SLOT = 64


def schedule_efficiency(tile_work: Sequence[float], groups: int, slots: int) -> float:
    """Busy fraction of ``slots`` running ``groups`` repeats of ``tile_work`` in launch order."""
    if slots <= 0 or not tile_work or groups <= 0:
        raise SpecError("schedule_efficiency needs slots, tiles and groups > 0")
    blocks = len(tile_work) * groups
    total = float(sum(tile_work)) * groups
    if blocks >= BALANCED_BLOCKS_PER_SLOT * slots:
        return 1.0
    if min(tile_work) == max(tile_work):  # equal blocks: whole waves, no need to simulate
        return blocks / (-(-blocks // slots) * slots)
    finish = [0.0] * min(slots, blocks)
    heapq.heapify(finish)
    for _ in range(groups):
        for w in tile_work:
            heapq.heapreplace(finish, finish[0] + w)
    makespan = max(finish)
    return total / (makespan * slots)
