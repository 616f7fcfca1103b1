"""Small numerical fitting tools (numpy only): Nelder-Mead, relative-error linear fits, stats."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


def nelder_mead(
    f: Callable[[np.ndarray], float],
    x0: Sequence[float],
    step: float = 0.3,
    iterations: int = 300,
    tol: float = 1e-7,
) -> np.ndarray:
    """Minimise ``f`` from ``x0`` with the Nelder-Mead simplex (Nelder & Mead 1965;
    standard coefficients reflection 1, expansion 2, contraction 0.5, shrink 0.5)."""
    x0 = np.asarray(x0, dtype=float)
    n = len(x0)
    simplex = [x0] + [x0 + step * np.eye(n)[i] for i in range(n)]
    values = [f(x) for x in simplex]
    for _ in range(iterations):
        order = np.argsort(values)
        simplex = [simplex[i] for i in order]
        values = [values[i] for i in order]
        if abs(values[-1] - values[0]) < tol:
            break
        centroid = np.mean(simplex[:-1], axis=0)
        worst = simplex[-1]
        reflected = centroid + (centroid - worst)
        fr = f(reflected)
        if fr < values[0]:
            expanded = centroid + 2.0 * (centroid - worst)
            fe = f(expanded)
            simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
        elif fr < values[-2]:
            simplex[-1], values[-1] = reflected, fr
        else:
            contracted = centroid + 0.5 * (worst - centroid)
            fc = f(contracted)
            if fc < values[-1]:
                simplex[-1], values[-1] = contracted, fc
            else:
                best = simplex[0]
                simplex = [best + 0.5 * (x - best) for x in simplex]
                values = [values[0]] + [f(x) for x in simplex[1:]]
    return simplex[int(np.argmin(values))]


def fit_affine_relative(x: Sequence[float], t: Sequence[float]) -> tuple[float, float]:
    """Fit ``t = a + c * x`` minimising the squared *relative* error sum(((a + c x - t)/t)^2),
    so microsecond and second measurements weigh alike. Returns (a, c), both clipped >= 0."""
    x = np.asarray(x, dtype=float)
    t = np.asarray(t, dtype=float)
    w = 1.0 / t
    design = np.stack([w, x * w], axis=1)
    (a, c), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    if a < 0:  # no fixed cost: refit through the origin
        a, c = 0.0, float(np.sum(x * w * 1) / np.sum((x * w) ** 2))
    if c < 0:
        a, c = float(np.median(t)), 0.0
    return float(a), float(c)


@dataclass(frozen=True)
class CopyCurve:
    """A host<->device copy's time: ``overhead_s + bytes / bytes_per_s``, and above
    ``large_min_bytes`` (when set) the whole copy at ``large_bytes_per_s``."""

    overhead_s: float
    bytes_per_s: float
    large_min_bytes: float | None = None
    large_bytes_per_s: float | None = None

    def time_s(self, nbytes: float) -> float:
        large = self.large_min_bytes is not None and nbytes > self.large_min_bytes
        rate = self.large_bytes_per_s if large and self.large_bytes_per_s else self.bytes_per_s
        return self.overhead_s + nbytes / rate


# a copy is link-bound (its rate can be read from it) once it takes this many times the
# smallest copy's time; below, its time is mostly the fixed cost
LINK_BOUND_FACTOR = 5.0
# a slower large-copy rate is kept only where it is at least this much slower per byte
LARGE_RATE_STEP = 1.25


def fit_copy_curve(
    sizes: Sequence[float], times: Sequence[float], step: bool = True
) -> CopyCurve | None:
    """Fit a copy's time against its size: the rate from the link-bound copies (medians of their
    per-byte cost, so that the largest copies, which are the steadiest, set it rather than the
    microsecond ones whose fixed cost jitters), the fixed cost as the median residual of the
    others, and a step to a slower rate where the per-byte cost of every larger link-bound copy
    is at least ``LARGE_RATE_STEP`` times the smaller ones' (a pageable source too large to
    stay in the host's caches between copies: measured 13-16 GB/s up to 32 MB, 7-9 GB/s from
    64 MB on H100 and H200 VMs, validation/results/h200-sxm/host-copy-method-2026-11-27).
    ``step=False`` fits one rate: a pinned copy is DMA from memory the driver already holds,
    with no CPU copy to fall out of the caches (one slow 256 MB pinned copy on an H100 VM had
    made a step of one point at 128 MB). Too few link-bound copies: the relative-error affine
    fit. None without two sizes."""
    pts = sorted((float(b), float(t)) for b, t in zip(sizes, times) if b > 0 and t > 0)
    if len({b for b, _ in pts}) < 2:
        return None
    t_min = min(t for _, t in pts)
    link = [(b, t) for b, t in pts if t >= LINK_BOUND_FACTOR * t_min]
    floor = [(b, t) for b, t in pts if t < LINK_BOUND_FACTOR * t_min]
    if len(link) < 2 or not floor:
        a, c = fit_affine_relative([b for b, _ in pts], [t for _, t in pts])
        return CopyCurve(overhead_s=a, bytes_per_s=1.0 / c) if c > 0 else None
    overhead = float(np.median([t for _, t in floor]))
    split, per_byte, large = len(link), 0.0, None
    for _ in range(100):  # fixed cost and rates settle within a few rounds
        before = overhead
        cost = [max(t - overhead, 0.0) / b for b, t in link]
        split = len(link)
        for j in range(1, len(link) if step else 1):
            small, big = float(np.median(cost[:j])), min(cost[j:])
            if small > 0 and big >= LARGE_RATE_STEP * small and max(cost[:j]) < min(cost[j:]):
                split = j
                break
        per_byte = float(np.median(cost[:split]))
        large = float(np.median(cost[split:])) if split < len(link) else None
        overhead = max(float(np.median([t - b * per_byte for b, t in floor])), 0.0)
        if abs(overhead - before) <= 1e-12:
            break
    if per_byte <= 0:
        return None
    if large is None:
        return CopyCurve(overhead_s=overhead, bytes_per_s=1.0 / per_byte)
    return CopyCurve(overhead_s=overhead, bytes_per_s=1.0 / per_byte,
                     large_min_bytes=link[split - 1][0], large_bytes_per_s=1.0 / large)  # fmt: skip


def error_stats(predicted: Sequence[float], measured: Sequence[float]) -> dict[str, float]:
    """Median and p90 of |pred - meas| / meas in percent, and the signed median bias."""
    p = np.asarray(predicted, dtype=float)
    m = np.asarray(measured, dtype=float)
    rel = (p - m) / m * 100.0
    return {
        "n": len(m),
        "median_abs_pct": float(np.median(np.abs(rel))) if len(m) else float("nan"),
        "p90_abs_pct": float(np.percentile(np.abs(rel), 90)) if len(m) else float("nan"),
        "bias_pct": float(np.median(rel)) if len(m) else float("nan"),
    }


def log_loss(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Mean absolute log ratio: symmetric in over- and under-prediction, and robust (an L1
    loss fits the median point, as the reported error is a median; one odd kernel, such as a
    convolution cuDNN runs on another path, does not drag the whole family)."""
    r = np.log(np.maximum(predicted, 1e-30) / measured)
    return float(np.mean(np.abs(r)))
