"""Roofline (Williams, Waterman & Patterson, CACM 2009) and the overlap of its two roofs."""

from __future__ import annotations

import numpy as np


def arithmetic_intensity(flops, bytes_moved):
    """FLOPs per byte of DRAM traffic; infinite when no bytes move (pure compute)."""
    flops = np.asarray(flops, dtype=float)
    bytes_moved = np.asarray(bytes_moved, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        ai = np.where(bytes_moved > 0, flops / np.where(bytes_moved > 0, bytes_moved, 1), np.inf)
    return ai if ai.ndim else float(ai)


def ridge_point(peak_flops: float, bandwidth_bytes_per_s: float) -> float:
    """AI* = peak / bandwidth: below it an op is memory-bound (Williams et al. 2009)."""
    return peak_flops / bandwidth_bytes_per_s


def attainable_flops(ai, peak_flops: float, bandwidth_bytes_per_s: float):
    """P = min(peak, AI * bandwidth) (Williams et al. 2009)."""
    return np.minimum(peak_flops, np.asarray(ai, dtype=float) * bandwidth_bytes_per_s)


def overlap_time(compute_s, memory_s, exponent: float):
    """Time of a kernel whose compute and memory phases overlap imperfectly.

    ``(t_c^p + t_m^p)^(1/p)``: p = inf is the roofline's perfect overlap ``max(t_c, t_m)``,
    p = 1 no overlap ``t_c + t_m``. Near the ridge point both roofs are partly busy and
    measured kernels fall under both (seed 000's polynomial sweep); a finite p fitted by
    calibration captures that with one number per GPU instead of a constant per op.
    """
    tc = np.asarray(compute_s, dtype=float)
    tm = np.asarray(memory_s, dtype=float)
    if not np.isfinite(exponent):
        out = np.maximum(tc, tm)
    else:
        big = np.maximum(np.maximum(tc, tm), 1e-300)
        out = big * ((tc / big) ** exponent + (tm / big) ** exponent) ** (1.0 / exponent)
    return out if out.ndim else float(out)
