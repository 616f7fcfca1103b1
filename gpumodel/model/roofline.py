"""Roofline (Williams, Waterman & Patterson, CACM 2009) and the overlap of its two roofs."""

from __future__ import annotations

import math

# numpy is imported only for arrays: a scalar prediction (the CLI's) stays in plain floats


def _scalar(*values) -> bool:
    return all(isinstance(v, (int, float)) for v in values)


def arithmetic_intensity(flops, bytes_moved):
    """FLOPs per byte of DRAM traffic; infinite when no bytes move (pure compute)."""
    if _scalar(flops, bytes_moved):
        return float(flops) / float(bytes_moved) if bytes_moved > 0 else math.inf
    import numpy as np

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
    if _scalar(ai):
        return min(peak_flops, float(ai) * bandwidth_bytes_per_s)
    import numpy as np

    return np.minimum(peak_flops, np.asarray(ai, dtype=float) * bandwidth_bytes_per_s)


def overlap_time(compute_s, memory_s, exponent: float):
    """Time of a kernel whose compute and memory phases overlap imperfectly.

    ``(t_c^p + t_m^p)^(1/p)``: p = inf is the roofline's perfect overlap ``max(t_c, t_m)``,
    p = 1 no overlap ``t_c + t_m``. Near the ridge point both roofs are partly busy and
    measured kernels fall under both (seed 000's polynomial sweep); a finite p fitted by
    calibration captures that with one number per GPU instead of a constant per op.
    """
    if _scalar(compute_s, memory_s):  # the same arithmetic as the array form below
        tc, tm = float(compute_s), float(memory_s)
        if not math.isfinite(exponent):
            return max(tc, tm)
        big = max(tc, tm, 1e-300)
        return big * ((tc / big) ** exponent + (tm / big) ** exponent) ** (1.0 / exponent)
    import numpy as np

    tc = np.asarray(compute_s, dtype=float)
    tm = np.asarray(memory_s, dtype=float)
    if not np.isfinite(exponent):
        out = np.maximum(tc, tm)
    else:
        big = np.maximum(np.maximum(tc, tm), 1e-300)
        out = big * ((tc / big) ** exponent + (tm / big) ** exponent) ** (1.0 / exponent)
    return out if out.ndim else float(out)
