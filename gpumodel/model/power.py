"""Sustained clock under a power limit, and the dirty-L2 write-back a kernel inherits.

Power of the SM array (CMOS dynamic power, P = a C V^2 f, with the supply voltage rising about
linearly with the clock over the DVFS range, so P_dyn ~ f^3; Weste & Harris, "CMOS VLSI
Design", ch. 5, and NVIDIA's GPU Boost: the clock is the highest whose power fits the limit):

    P(f) = P_static + e x B + u x W x (f / f_max)^3

    u  tensor-core activity of the kernel: its tensor FLOP rate at the maximum clock over the
       tensor roof at that clock (0 for memory-bound work, ~0.7 for a large cuBLAS GEMM)
    W  dynamic power of the whole SM array at full tensor activity and f_max (calibrated per
       architecture, stored per SM so it carries by SM count and clock^3)
    B  the kernel's DRAM traffic, bytes/s at the maximum clock; e the energy of moving a byte
       from DRAM to the SMs (``DRAM_ENERGY_J_PER_BYTE``: HBM, its PHY, L2 and the on-chip
       network; the memory clock does not move with the SM clock, so this term does not scale)

Back to back, the power controller holds P(f) <= power limit L, so the sustained clock is

    f = f_max x min(1, ((L - P_static - e x B) / (u x W))^(1/3))

and the kernel's compute time scales by f_max / f. Measured on an H100 (validation/results/
h100-sxm/conditions): large bf16/fp16/tf32/fp8 GEMMs run 13-20% slower back to back than in
the harness's short bursts, at 690-700 W of a 700 W limit; CUDA-core (fp32) GEMMs and
memory-bound copies stay at the maximum clock. Between the two, a GEMM that streams its weights
at full bandwidth while its tensor cores work (M = 96-512 on 30-470 MB of weights) reaches the
limit too: on an H200 such products ran at 1400-1700 MHz and 693 W back to back, 9-25% slower
than the tensor term alone predicts (validation/results/h200-sxm/gemm-midm2-2026-11-29). The
clock fitted this way is the *effective* one (the one time scales with): NVML reports lower SM
clocks still (1305-1530 MHz), because the harness's isolated calls already run partly throttled
and not all of a GEMM's time scales with the SM clock.

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
# Joules per DRAM byte a kernel streams, by architecture (``e`` above). Hopper: the median over
# the 49 points of the H200 mid-M GEMM fit set that ran below the limit at the maximum clock,
# (NVML power - P_static - u x W) / (DRAM bytes / time): 91 pJ/B (35-135), with W refitted
# beside it on the calibrations' back-to-back GEMMs (validation/fitset/fit_dram_power.py, data
# validation/results/h200-sxm/gemm-midm2-2026-11-29; the first pass, on the W fitted without
# it, gave 87). HBM3e's, with the L2 and the on-chip network; the H100's HBM3 is taken to match.
# Other architectures: unmeasured, 0 (the tensor term alone) until ``validate --conditions``
# fits their own (``PowerParams.dram_energy_j_per_byte``, which takes precedence).
DRAM_ENERGY_J_PER_BYTE: dict[str, float] = {"hopper": 91e-12}


def dram_power_w(energy_j_per_byte: float, bytes_per_s: Any) -> Any:
    """Power of a DRAM stream of ``bytes_per_s`` (a number or an array): e x B."""
    return energy_j_per_byte * bytes_per_s


# the least share of the limit left to the SMs beside a DRAM stream: the controller keeps the
# SMs clocked (a copy at full bandwidth never throttles), so the headroom never reaches zero
MIN_SM_HEADROOM_FRACTION = 0.05


def sustained_clock_ratio(
    activity: float,
    power_limit_w: float,
    static_power_w: float,
    full_power_w: float,
    memory_power_w: float = 0.0,
) -> float:
    """f / f_max for work of tensor activity ``activity`` (0..1) beside a DRAM stream drawing
    ``memory_power_w`` under ``power_limit_w``: min(1, ((L - P_static - P_mem) / (u x
    W))^(1/3)); 1 for work that draws no tensor power."""
    if activity <= 0 or full_power_w <= 0:
        return 1.0
    if power_limit_w - static_power_w <= 0:
        return 1.0  # a spec without a meaningful limit: no throttling modelled
    headroom = max(power_limit_w - static_power_w - memory_power_w,
                   MIN_SM_HEADROOM_FRACTION * power_limit_w)  # fmt: skip
    return min(1.0, (headroom / (activity * full_power_w)) ** (1.0 / POWER_CLOCK_EXPONENT))


def sustained_clock_ratio_array(
    activity: Any,
    power_limit_w: float,
    static_power_w: float,
    full_power_w: float,
    memory_power_w: Any = 0.0,
) -> Any:
    """``sustained_clock_ratio`` over numpy arrays of activities (and memory powers)."""
    import numpy as np

    u = np.asarray(activity, dtype=float)
    if full_power_w <= 0 or power_limit_w - static_power_w <= 0:
        return np.ones_like(u)
    headroom = np.maximum(power_limit_w - static_power_w - np.asarray(memory_power_w, dtype=float),
                          MIN_SM_HEADROOM_FRACTION * power_limit_w)  # fmt: skip
    with np.errstate(divide="ignore"):
        r = (headroom / (u * full_power_w)) ** (1.0 / POWER_CLOCK_EXPONENT)
    return np.where(u > 0, np.minimum(1.0, r), 1.0)


def power_draw_w(
    activity: float,
    clock_ratio: float,
    static_power_w: float,
    full_power_w: float,
    memory_power_w: float = 0.0,
) -> float:
    """P(f) = P_static + P_mem + u x W x (f / f_max)^3."""
    return (static_power_w + memory_power_w
            + activity * full_power_w * clock_ratio**POWER_CLOCK_EXPONENT)  # fmt: skip


def dirty_writeback_bytes(moved_bytes: float, l2_bytes: float, fraction: float) -> float:
    """Extra DRAM write bytes a kernel pays for the dirty lines it evicts:
    fraction x min(L2, bytes moved)."""
    if moved_bytes <= 0 or fraction <= 0:
        return 0.0
    return fraction * min(l2_bytes, moved_bytes)


def fit_full_power(
    activity: list[float],
    ratio: list[float],
    power_limit_w: float,
    static_power_w: float,
    memory_power_w: list[float] | None = None,
) -> float:
    """W minimising the squared log error of ``sustained_clock_ratio`` against measured speed
    ratios (isolated time / back-to-back time), each point beside its DRAM stream's power
    (``memory_power_w``, None: none), by a log-spaced search over W from the headroom to 50 x
    it (points that did not throttle count too: they bound W from above)."""
    headroom = power_limit_w - static_power_w
    mem = memory_power_w if memory_power_w is not None else [0.0] * len(activity)
    pts = [(u, r, m) for u, r, m in zip(activity, ratio, mem) if u > 0 and r > 0]
    if not pts or headroom <= 0:
        return 0.0

    def loss(w: float) -> float:
        return sum(
            math.log(sustained_clock_ratio(u, power_limit_w, static_power_w, w, m) / r) ** 2
            for u, r, m in pts
        )

    grid = [headroom * 50.0 ** (i / 2000) for i in range(2001)]
    return min(grid, key=loss)


__all__ = [
    "DRAM_ENERGY_J_PER_BYTE",
    "MIN_SM_HEADROOM_FRACTION",
    "POWER_CLOCK_EXPONENT",
    "dirty_writeback_bytes",
    "dram_power_w",
    "fit_full_power",
    "power_draw_w",
    "sustained_clock_ratio",
    "sustained_clock_ratio_array",
]
