"""Sustained clock under a power limit, and the dirty-L2 write-back a kernel inherits.

Power of the SM array (CMOS dynamic power, P = a C V^2 f, with the supply voltage rising about
linearly with the clock over the DVFS range, so P_dyn ~ f^3; Weste & Harris, "CMOS VLSI
Design", ch. 5, and NVIDIA's GPU Boost: the clock is the highest whose power fits the limit):

    P(f) = P_static + u x W x (f / f_max)^3

    u  tensor-core activity of the kernel: its tensor FLOP rate at the maximum clock over the
       tensor roof at that clock (0 for memory-bound work, ~0.7 for a large cuBLAS GEMM)
    W  dynamic power of the whole SM array at full tensor activity and f_max (calibrated per
       architecture, stored per SM so it carries by SM count and clock^3)

Back to back, the power controller holds P(f) <= power limit L, so the sustained clock is

    f = f_max x min(1, ((L - P_static) / (u x W))^(1/3))

and the kernel's compute time scales by f_max / f. Measured on an H100 (validation/results/
h100-sxm/conditions): large bf16/fp16/tf32/fp8 GEMMs run 13-20% slower back to back than in
the harness's short bursts, at 690-700 W of a 700 W limit; CUDA-core (fp32) GEMMs and
memory-bound copies stay at the maximum clock. The clock fitted this way is the *effective*
one (the one time scales with): NVML reports lower SM clocks still (1305-1530 MHz), because the
harness's isolated calls already run partly throttled and not all of a GEMM's time scales with
the SM clock.

Dirty L2: a kernel that follows one which wrote its output finds L2 full of dirty lines; every
line it brings in evicts one, and a dirty victim is written to DRAM first. It pays extra DRAM
writes of ``fraction x min(L2 size, bytes it moves)`` (fraction calibrated: not every victim is
dirty, and L2 keeps part of the lines), seen on an H100 as +20-25% on weight-streaming decode
GEMMs after a flush that writes versus one that reads.
"""

from __future__ import annotations

import math
from typing import Any

# P_dyn ~ C V^2 f with V ~ f across the DVFS range
POWER_CLOCK_EXPONENT = 3.0


def sustained_clock_ratio(
    activity: float, power_limit_w: float, static_power_w: float, full_power_w: float
) -> float:
    """f / f_max for work of tensor activity ``activity`` (0..1) under ``power_limit_w``:
    min(1, ((L - P_static) / (u x W))^(1/3)); 1 for work that draws no tensor power."""
    if activity <= 0 or full_power_w <= 0:
        return 1.0
    headroom = power_limit_w - static_power_w
    if headroom <= 0:
        return 1.0  # a spec without a meaningful limit: no throttling modelled
    return min(1.0, (headroom / (activity * full_power_w)) ** (1.0 / POWER_CLOCK_EXPONENT))


def sustained_clock_ratio_array(
    activity: Any, power_limit_w: float, static_power_w: float, full_power_w: float
) -> Any:
    """``sustained_clock_ratio`` over a numpy array of activities."""
    import numpy as np

    u = np.asarray(activity, dtype=float)
    headroom = power_limit_w - static_power_w
    if full_power_w <= 0 or headroom <= 0:
        return np.ones_like(u)
    with np.errstate(divide="ignore"):
        r = (headroom / (u * full_power_w)) ** (1.0 / POWER_CLOCK_EXPONENT)
    return np.where(u > 0, np.minimum(1.0, r), 1.0)


def power_draw_w(
    activity: float, clock_ratio: float, static_power_w: float, full_power_w: float
) -> float:
    """P(f) = P_static + u x W x (f / f_max)^3."""
    return static_power_w + activity * full_power_w * clock_ratio**POWER_CLOCK_EXPONENT


def dirty_writeback_bytes(moved_bytes: float, l2_bytes: float, fraction: float) -> float:
    """Extra DRAM write bytes a kernel pays for the dirty lines it evicts:
    fraction x min(L2, bytes moved)."""
    if moved_bytes <= 0 or fraction <= 0:
        return 0.0
    return fraction * min(l2_bytes, moved_bytes)


def fit_full_power(
    activity: list[float], ratio: list[float], power_limit_w: float, static_power_w: float
) -> float:
    """W minimising the squared log error of ``sustained_clock_ratio`` against measured speed
    ratios (isolated time / back-to-back time), by a log-spaced search over W from the headroom
    to 50 x it (points that did not throttle count too: they bound W from above)."""
    headroom = power_limit_w - static_power_w
    pts = [(u, r) for u, r in zip(activity, ratio) if u > 0 and r > 0]
    if not pts or headroom <= 0:
        return 0.0

    def loss(w: float) -> float:
        return sum(
            math.log(sustained_clock_ratio(u, power_limit_w, static_power_w, w) / r) ** 2
            for u, r in pts
        )

    grid = [headroom * 50.0 ** (i / 2000) for i in range(2001)]
    return min(grid, key=loss)


__all__ = [
    "POWER_CLOCK_EXPONENT",
    "dirty_writeback_bytes",
    "fit_full_power",
    "power_draw_w",
    "sustained_clock_ratio",
    "sustained_clock_ratio_array",
]
