"""Thread blocks of unequal work on a fixed number of SM slots: the tail effect.

The block scheduler hands blocks to SMs in launch order as slots free up (greedy list
scheduling). With equal blocks this is wave quantization (NVIDIA "Matrix Multiplication
Background"); with unequal blocks (causal attention: query tile i visits i+1 key tiles) the
last, heaviest blocks set the finish time. Efficiency = total work / (makespan x slots).
"""

from __future__ import annotations

import functools
import heapq
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from gpumodel.errors import SpecError

# Beyond this many blocks per slot the greedy schedule balances to within ~1%: skip simulating.
BALANCED_BLOCKS_PER_SLOT = 64
# the output tile that ``fill_efficiency`` counts in (a unit of parallel work, not a claim
# about the tile a library picks; count with gpumodel.model.quantization.tile_count)
FILL_TILE = 128


def fill_efficiency(tiles: int, sm_count: int, half_fill_tiles_per_sm: float) -> float:
    """Share of the full-machine rate a kernel with ``tiles`` output tiles reaches:
    tiles / (tiles + c x SMs), c the tiles per SM at which it runs at half rate (calibrated).

    Wave quantization alone (tiles / whole waves) predicts an fp32 cuDNN convolution with 16
    tiles on 132 SMs at 12% of its large-batch rate; it ran at 35-42% (split-K and smaller
    tiles keep more SMs busy), and the rate kept rising past one wave (0.3-0.5 of the fp32
    peak at 196 tiles, 0.4-0.6 at 784; H100, validate's ResNet-50 convolutions). A saturating
    curve in tiles per SM fits that and carries to other GPUs through their SM count."""
    if tiles <= 0 or sm_count <= 0 or half_fill_tiles_per_sm < 0:
        raise SpecError("fill_efficiency needs tiles and SMs > 0 and a non-negative half-fill")
    return tiles / (tiles + half_fill_tiles_per_sm * sm_count)


@dataclass(frozen=True)
class TileWork:
    """Work of the ``count`` thread blocks of one group, relative to a full block, held as a
    closed form (never a list as long as the user's size): block i does
    ``min(span, offset + (i + 1) * block) / span`` of a full block's work (causal attention:
    query tile i visits keys up to its last query), or all of it when ``span`` is None."""

    count: int
    block: int = 1
    offset: int = 0
    span: int | None = None

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def work(self, i: int) -> float:
        if self.span is None:
            return 1.0
        return min(self.span, self.offset + (i + 1) * self.block) / self.span

    def __iter__(self) -> Iterator[float]:
        return (self.work(i) for i in range(self.count))

    def total(self) -> float:
        """Sum of the blocks' work: the partial blocks form an arithmetic series, the rest are
        full."""
        if self.span is None:
            return float(self.count)
        # blocks i < j stop short of the span: offset + (i + 1) * block < span
        j = min(self.count, max(0, (self.span - self.offset - 1) // self.block))
        partial = (j * self.offset + self.block * j * (j + 1) // 2) / self.span
        return partial + (self.count - j)


def schedule_efficiency(tile_work: TileWork | Sequence[float], groups: int, slots: int) -> float:
    """Busy fraction of ``slots`` running ``groups`` repeats of ``tile_work`` in launch order.
    Simulates at most ``64 x slots`` blocks (a bound set by the GPU, not by the op's size)."""
    if slots <= 0 or not tile_work or groups <= 0:
        raise SpecError("schedule_efficiency needs slots, tiles and groups > 0")
    if isinstance(tile_work, TileWork):  # a value: its schedule is remembered
        return _tile_efficiency(tile_work, groups, slots)
    return _efficiency(tile_work, groups, slots)


@functools.lru_cache(maxsize=4096)
def _tile_efficiency(tile_work: TileWork, groups: int, slots: int) -> float:
    """``_efficiency`` of a TileWork, memoised: a pure function of its arguments, and the
    sweeps ask for the same causal-attention schedule on every GPU with as many SMs."""
    return _efficiency(tile_work, groups, slots)


def _efficiency(tile_work: TileWork | Sequence[float], groups: int, slots: int) -> float:
    blocks = len(tile_work) * groups
    # a TileWork sums in closed form; a plain sequence of block weights is summed
    total = (tile_work.total() if isinstance(tile_work, TileWork) else sum(tile_work)) * groups
    if blocks >= BALANCED_BLOCKS_PER_SLOT * slots:
        return 1.0
    works = list(tile_work)  # fewer than 64 x slots blocks (above), so a bounded list
    if min(works) == max(works):  # equal blocks: whole waves, no need to simulate
        return blocks / (-(-blocks // slots) * slots)
    # the first ``slots`` blocks start at once; each later one where a slot frees first
    order = itertools.chain.from_iterable(itertools.repeat(works, groups))
    finish = list(itertools.islice(order, slots))
    heapq.heapify(finish)
    replace = heapq.heapreplace
    for w in order:
        replace(finish, finish[0] + w)
    makespan = max(finish)
    return total / (makespan * slots)
