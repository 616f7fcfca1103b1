"""The slowest rank paces an eager multi-GPU training step's host.

Every rank of a data-, tensor- or pipeline-parallel job is its own process issuing its own
kernels, and the ranks meet at each collective (DDP's buckets, FSDP's all-gathers, TP's
all-reduces, the pipeline's sends). Where the host sets the pace, a step therefore lasts as long
as its slowest rank's host, and one process's host time varies from step to step: the expected
slowest of ``n`` ranks is the typical one plus ``z_n`` spreads, ``z_n`` the expected largest of
``n`` standard normal draws (0.56 for 2, 1.03 for 4, 1.42 for 8: order statistics, e.g. David &
Nagaraja, *Order Statistics*, 3rd ed., table of expected normal order statistics).

``RANK_HOST_SPREAD`` is that spread, relative to the typical step: fitted on 2 x H200
(validation/fitset/fit_rank_host.py over validation/results/h200-sxm-x2/host-ranks-2026-11-30:
narrow HF models' host-bound steps in 2, 4 and 8 processes at once, each step started together;
per variant and round, the slowest process's median step over the median process's, less one,
over ``z_n``; the median of 24 such). The host profile ``gpumodel validate`` writes is one
process's typical step, so an eager step over ``n`` > 1 GPUs is priced on that profile slowed by
``1 + RANK_HOST_SPREAD x z_n``: 1.09 for 2 ranks, 1.16 for 4, 1.23 for 8. Measured up to 8
processes on one host; a larger job is priced at 8 ranks' figure (not measured beyond).
"""

from __future__ import annotations

import math
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpumodel.hostprofile import HostProfile

RANK_HOST_SPREAD = 0.16  # one process's eager step, relative spread from step to step
MEASURED_RANKS = 8  # the most processes measured at once (host-ranks-2026-11-30)


@cache
def expected_max_normal(n: int) -> float:
    """E[max of ``n`` independent standard normals]: the integral of x n phi(x) Phi(x)^(n-1)
    (midpoint rule over [-10, 10], 20,000 steps: 1e-9 of the tabulated values)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    steps, lo, hi = 20_000, -10.0, 10.0
    dx = (hi - lo) / steps
    total = 0.0
    for i in range(steps):
        x = lo + (i + 0.5) * dx
        phi = math.exp(-x * x / 2) / math.sqrt(2 * math.pi)
        total += x * n * phi * (0.5 * (1 + math.erf(x / math.sqrt(2)))) ** (n - 1)
    return total * dx


def slowest_rank_factor(ranks: int) -> float:
    """How much slower than one process's typical step the slowest of ``ranks`` ranks' hosts
    is (1 for one GPU; ``ranks`` above ``MEASURED_RANKS`` at that figure)."""
    if ranks <= 1:
        return 1.0
    return 1.0 + RANK_HOST_SPREAD * expected_max_normal(min(ranks, MEASURED_RANKS))


def rank_host(host: HostProfile | None, ranks: int) -> HostProfile | None:
    """``host`` as the slowest of ``ranks`` ranks runs it (itself for one GPU or no host)."""
    if host is None or ranks <= 1:
        return host
    return host.scaled(slowest_rank_factor(ranks))
