"""Small numerical fitting tools (numpy only): Nelder-Mead, relative-error linear fits, stats."""

from __future__ import annotations

from collections.abc import Callable, Sequence

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
