"""The numpy (CPU) engine: the same measure -> fit -> report pipeline with numpy kernels, so CI
exercises it end to end without a GPU. It calibrates the ``cpu-numpy`` spec. Its context holds
the run's random generator (seeded: one stream of numbers over the whole run)."""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


def device_info() -> dict[str, str]:
    return {
        "device_name": f"CPU ({platform.machine()}, numpy {np.__version__})",
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def time_host(
    fn: Callable[[], object], target_s: float = 0.02, max_repeats: int = 25
) -> tuple[float, int]:
    """(median seconds, repeats) of ``fn`` after one warm-up call: at least 3 repeats, more
    until ``target_s`` has passed (at most ``max_repeats``)."""
    fn()  # warm-up
    times = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < target_s and len(times) < max_repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), len(times)


@dataclass
class Ctx:
    quick: bool
    rng: Any


def start(quick: bool) -> Ctx:
    return Ctx(quick=quick, rng=np.random.default_rng(0))


def release(ctx: Ctx) -> None:
    pass


def sync(ctx: Ctx) -> None:
    pass


def close(ctx: Ctx) -> None:
    pass
