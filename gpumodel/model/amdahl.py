"""Amdahl's law and the data-parallel training step: what parallelises, what communicates.

Amdahl (1967), as in seed 000 and formulas.md §7: a fraction ``p`` of the work sped up ``n``
times gives ``speedup = 1 / ((1 - p) + p / n)``, ``efficiency = speedup / n``, and no number of
GPUs beats the limit ``1 / (1 - p)``.

The data-parallel step (``data_parallel_step``): every GPU runs forward and backward on its
share of the batch, then the gradients are all-reduced. Three ways to place the all-reduce:

* ``none``: after backward, one all-reduce of every gradient: ``compute + AR(G)``.
* ``perfect``: an upper bound on overlap: the all-reduce can run during all of backward (the
  forward pass produces no gradients, so it cannot hide communication):
  ``forward + max(backward, AR(G)) = max(compute, forward + AR(G))``.
* ``bucketed``: what PyTorch DDP does (Li et al., "PyTorch Distributed", VLDB 2020): gradients
  are packed into buckets of ``bucket_bytes`` (25 MB by default) in the order backward produces
  them; a bucket's all-reduce starts once its last gradient is ready and the previous bucket's
  all-reduce is done (one NCCL stream). Gradients are assumed to become ready at a uniform rate
  over backward; the last bucket's all-reduce is always exposed. Simulated bucket by bucket.

``perfect <= bucketed`` always (bucketing only adds per-bucket latency and waiting), and
``bucketed <= none`` whenever the per-bucket latency is small next to the backward time it
hides (the usual case; thousands of tiny buckets on a tiny model can make bucketing lose).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from gpumodel._validators import (
    MAX_BYTES,
    MAX_GPUS,
    MAX_SECONDS,
    _show,
    check_choice,
    check_int,
    check_number,
)
from gpumodel.errors import SpecError

OverlapMode = Literal["none", "perfect", "bucketed"]
Scaling = Literal["weak", "strong"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# ---------------------------------------------------------------------------------------------
# Amdahl


def amdahl_speedup(parallel_fraction, n):
    """``1 / ((1 - p) + p / n)`` (Amdahl 1967); vectorised over ``n`` (and ``p``)."""
    p = np.asarray(parallel_fraction, dtype=float)
    nn = np.asarray(n, dtype=float)
    _check_fraction(p)
    if np.any(nn <= 0):
        raise SpecError("the number of GPUs must be at least 1")
    out = 1.0 / ((1.0 - p) + p / nn)
    return out if out.ndim else float(out)


def _gpu_counts(n: Any) -> np.ndarray:
    """GPU counts as a float array: at least one, each finite within [1, 10**6]."""
    items = list(n) if isinstance(n, (list, tuple, np.ndarray)) else [n]
    if not items:
        raise SpecError("give at least one GPU count")
    return np.array([check_number(x, "GPU count", ge=1, le=MAX_GPUS) for x in items])


def _check_fraction(p: np.ndarray) -> None:
    if np.any(~np.isfinite(p)) or np.any(p < 0) or np.any(p > 1):
        raise SpecError(f"parallel fraction must be within [0, 1], got {p.tolist()}")


class AmdahlResult(_Frozen):
    """Speedup and efficiency of a workload with ``parallel_fraction`` p on ``gpus`` GPUs."""

    parallel_fraction: float
    gpus: tuple[float, ...]
    speedup: tuple[float, ...]
    efficiency: tuple[float, ...]
    limit: float  # 1 / (1 - p); inf when p = 1
    serial_s: float | None = None  # from measured times: the serial part
    parallel_s: float | None = None  # the parallelisable part, on one GPU
    time_s: tuple[float, ...] | None = None  # serial + parallel / n

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for i, n in enumerate(self.gpus):
            row: dict[str, Any] = {
                "gpus": n, "speedup": self.speedup[i], "efficiency": self.efficiency[i],
            }  # fmt: skip
            if self.time_s is not None:
                row["time_s"] = self.time_s[i]
            out.append(row)
        return out


def amdahl(parallel_fraction: float, n: float | Sequence[float]) -> AmdahlResult:
    """Amdahl's law for a parallel fraction ``p`` on ``n`` GPUs (a count or a list of counts).

    >>> r = amdahl(0.9, [2, 4, 8, 16]); [round(s, 2) for s in r.speedup]
    [1.82, 3.08, 4.71, 6.4]
    """
    p = check_number(parallel_fraction, "parallel fraction", ge=0, le=1)
    counts = _gpu_counts(n)
    s = np.atleast_1d(amdahl_speedup(p, counts))
    return AmdahlResult(
        parallel_fraction=p,
        gpus=tuple(float(x) for x in counts),
        speedup=tuple(float(x) for x in s),
        efficiency=tuple(float(x) for x in s / counts),
        limit=math.inf if p >= 1 else 1.0 / (1.0 - p),
    )


def amdahl_from_times(
    serial_s: float, parallel_s: float, n: float | Sequence[float]
) -> AmdahlResult:
    """Amdahl from measured times on one GPU: ``serial_s`` cannot be split, ``parallel_s`` can.

    ``p = parallel / (serial + parallel)``; the predicted time on n GPUs is
    ``serial + parallel / n``.
    """
    serial_s = check_number(serial_s, "serial time", ge=0, le=MAX_SECONDS)
    parallel_s = check_number(parallel_s, "parallel time", ge=0, le=MAX_SECONDS)
    if serial_s + parallel_s <= 0:
        raise SpecError("serial + parallel time must be positive")
    p = parallel_s / (serial_s + parallel_s)
    r = amdahl(p, n)
    times = tuple(serial_s + parallel_s / g for g in r.gpus)
    return r.model_copy(update={"serial_s": serial_s, "parallel_s": parallel_s, "time_s": times})


# ---------------------------------------------------------------------------------------------
# the data-parallel step

AllReduceTime = Callable[[float, int], float]  # (bytes, gpus) -> seconds


class BucketEvent(_Frozen):
    """One DDP bucket on the timeline (seconds from the start of the step)."""

    index: int
    bytes: float
    ready_s: float
    start_s: float
    end_s: float


class DPStep(_Frozen):
    """One data-parallel step on ``gpus`` GPUs under the three overlap modes."""

    gpus: int
    compute_s: float  # forward + backward on one GPU's share
    forward_s: float
    backward_s: float
    allreduce_s: float  # one all-reduce of all gradients
    bucketed_comm_s: float  # sum of the bucket all-reduces
    step_none_s: float
    step_perfect_s: float
    step_bucketed_s: float
    exposed_comm_bucketed_s: float  # step_bucketed - compute
    # the timeline per bucket, kept when there are at most MAX_BUCKET_EVENTS buckets
    buckets: tuple[BucketEvent, ...] = ()
    bucket_count: int = 0

    def step_s(self, mode: OverlapMode) -> float:
        return {"none": self.step_none_s, "perfect": self.step_perfect_s,
                "bucketed": self.step_bucketed_s}[mode]  # fmt: skip


class ScalingPoint(_Frozen):
    gpus: int
    step: DPStep
    speedup: dict[str, float]  # mode -> speedup vs one GPU
    efficiency: dict[str, float]  # mode -> speedup / gpus


class DPScaling(_Frozen):
    """Speedup and efficiency of a data-parallel step against GPU count."""

    scaling: Scaling
    grad_bytes: float
    bucket_bytes: float
    single_gpu_step_s: float
    points: tuple[ScalingPoint, ...]

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for pt in self.points:
            row: dict[str, Any] = {"gpus": pt.gpus, "compute_s": pt.step.compute_s,
                                   "allreduce_s": pt.step.allreduce_s}  # fmt: skip
            for mode in ("none", "bucketed", "perfect"):
                row[f"step_{mode}_s"] = pt.step.step_s(mode)  # type: ignore[arg-type]
                row[f"speedup_{mode}"] = pt.speedup[mode]
                row[f"efficiency_{mode}"] = pt.efficiency[mode]
            out.append(row)
        return out


def bucket_sizes(
    grad_bytes: float, bucket_bytes: float, first_bucket_bytes: float | None = None
) -> list[float]:
    """Gradient bytes per bucket in the order backward produces them (last layer first).

    PyTorch DDP caps buckets at ``bucket_cap_mb`` (25 MB) and, since 1.6, its first bucket at
    ``_DEFAULT_FIRST_BUCKET_BYTES`` (1 MiB) so communication starts early; pass
    ``first_bucket_bytes=2**20`` for that.
    """
    if grad_bytes <= 0:
        return []
    if bucket_bytes <= 0:
        raise SpecError("bucket size must be positive")
    sizes: list[float] = []
    left = float(grad_bytes)
    if first_bucket_bytes:
        first = min(left, float(first_bucket_bytes))
        sizes.append(first)
        left -= first
    full = int(left // bucket_bytes)
    sizes += [float(bucket_bytes)] * full
    rest = left - full * bucket_bytes
    if rest > 1e-9 * bucket_bytes:
        sizes.append(rest)
    return sizes


def simulate_buckets(
    forward_s: float,
    backward_s: float,
    sizes: Sequence[float],
    allreduce_time: Callable[[float], float],
) -> tuple[float, tuple[BucketEvent, ...]]:
    """The DDP timeline: bucket i is ready when backward has produced its bytes (uniform rate),
    its all-reduce starts at max(ready, previous end). Returns (step end, events)."""
    total = float(sum(sizes))
    events: list[BucketEvent] = []
    done = 0.0
    prev_end = 0.0
    for i, size in enumerate(sizes):
        done += size
        ready = forward_s + backward_s * (done / total)
        start = max(ready, prev_end)
        end = start + allreduce_time(size)
        events.append(BucketEvent(index=i, bytes=size, ready_s=ready, start_s=start, end_s=end))
        prev_end = end
    return max(forward_s + backward_s, prev_end), tuple(events)


def data_parallel_step(
    compute_s: float,
    grad_bytes: float,
    gpus: int,
    gpu: Any = None,
    *,
    bucket_bytes: float = 25e6,
    first_bucket_bytes: float | None = None,
    backward_fraction: float = 2 / 3,
    scaling: Scaling = "weak",
    allreduce_time: AllReduceTime | None = None,
    link: str = "auto",
    system: str | None = None,
    calibration: Any = None,
    dtype: str = "fp32",
) -> DPStep:
    """One data-parallel training step on ``gpus`` GPUs.

    ``compute_s``: forward + backward time of the per-GPU batch on one GPU (``weak`` scaling:
    each GPU keeps that batch, the global batch grows) or of the whole batch (``strong``:
    each GPU runs 1/gpus of it). ``backward_fraction``: backward's share of compute (~2/3:
    backward costs about twice forward's FLOPs). ``grad_bytes``: gradient bytes all-reduced
    per step (parameters x bytes per gradient element).

    The all-reduce time comes from ``allreduce_time(bytes, gpus)`` if given, else from
    ``gpumodel.predict(AllReduce(...), gpu, calibration)`` (alpha-beta model, NCCL's algorithm;
    ``calibration`` as ``predict`` takes it: None = the best calibration found, "none" = datasheet).
    """
    compute_s = check_number(compute_s, "compute time", ge=0, le=MAX_SECONDS)
    grad_bytes = check_number(grad_bytes, "gradient bytes", ge=0, le=MAX_BYTES)
    gpus = check_int(gpus, "gpus", ge=1, le=MAX_GPUS)
    backward_fraction = check_number(backward_fraction, "backward fraction", ge=0, le=1)
    # a bucket holds at least one byte (1e-9 B made 10^17 buckets and a 7.8 x 10^12 s step)
    bucket_bytes = check_number(bucket_bytes, "bucket size (bytes)", ge=1, le=MAX_BYTES)
    if first_bucket_bytes is not None:
        first_bucket_bytes = check_number(
            first_bucket_bytes, "first bucket size (bytes)", ge=1, le=MAX_BYTES
        )
    check_choice(scaling, "scaling", ("weak", "strong"))
    if allreduce_time is not None and not callable(allreduce_time):
        raise SpecError(
            f"allreduce_time must be a function (bytes, gpus) -> s, got {_show(allreduce_time)}"
        )
    ar = allreduce_time or _model_allreduce(gpu, link, system, calibration, dtype)
    per_gpu = compute_s / gpus if scaling == "strong" else compute_s
    fwd = per_gpu * (1 - backward_fraction)
    bwd = per_gpu * backward_fraction
    if gpus == 1 or grad_bytes == 0:
        t_ar = 0.0
        return DPStep(gpus=gpus, compute_s=per_gpu, forward_s=fwd, backward_s=bwd,
                      allreduce_s=0.0, bucketed_comm_s=0.0, step_none_s=per_gpu,
                      step_perfect_s=per_gpu, step_bucketed_s=per_gpu,
                      exposed_comm_bucketed_s=0.0)  # fmt: skip
    t_ar = ar(grad_bytes, gpus)
    runs = bucket_runs(grad_bytes, bucket_bytes, first_bucket_bytes)
    end, comm, events = simulate_bucket_runs(fwd, bwd, runs, lambda size: ar(size, gpus))
    return DPStep(
        gpus=gpus, compute_s=per_gpu, forward_s=fwd, backward_s=bwd, allreduce_s=t_ar,
        bucketed_comm_s=comm,
        step_none_s=per_gpu + t_ar,
        step_perfect_s=fwd + max(bwd, t_ar),
        step_bucketed_s=end,
        exposed_comm_bucketed_s=end - per_gpu,
        buckets=events, bucket_count=sum(n for _, n in runs),
    )  # fmt: skip


MAX_BUCKET_EVENTS = 10_000  # per-bucket timeline kept up to this many buckets


def bucket_runs(
    grad_bytes: float, bucket_bytes: float, first_bucket_bytes: float | None = None
) -> list[tuple[float, int]]:
    """:func:`bucket_sizes` as (size, count) runs (at most three): the first bucket, the full
    buckets, the remainder. 28 GB in 1-byte buckets is one run, not 28 x 10^9 list items."""
    if grad_bytes <= 0:
        return []
    if bucket_bytes <= 0:
        raise SpecError("bucket size must be positive")
    runs: list[tuple[float, int]] = []
    left = float(grad_bytes)
    if first_bucket_bytes:
        first = min(left, float(first_bucket_bytes))
        runs.append((first, 1))
        left -= first
    full = int(left // bucket_bytes)
    if full:
        runs.append((float(bucket_bytes), full))
    rest = left - full * bucket_bytes
    if rest > 1e-9 * bucket_bytes:
        runs.append((rest, 1))
    return runs


def simulate_bucket_runs(
    forward_s: float,
    backward_s: float,
    runs: Sequence[tuple[float, int]],
    allreduce_time: Callable[[float], float],
) -> tuple[float, float, tuple[BucketEvent, ...]]:
    """:func:`simulate_buckets` in closed form over runs of equal buckets: (step end, the sum
    of the bucket all-reduces, the per-bucket events when there are at most
    MAX_BUCKET_EVENTS buckets, else none).

    Within a run of n buckets of equal size b and all-reduce time t, bucket j is ready at
    r_j = r_0 + j d (d = backward x b / total: backward produces bytes at a uniform rate) and
    ends at e_j = max(e_{j-1}, r_j) + t. Unrolled, e_{n-1} = max(E + n t, max_j r_j + (n-j) t)
    with E the previous run's end; r_j + (n-j) t is linear in j, so its max is at j = 0 or
    j = n - 1: e_{n-1} = max(E + n t, r_0 + n t, r_{n-1} + t)."""
    count = sum(n for _, n in runs)
    if count <= MAX_BUCKET_EVENTS:
        sizes = [size for size, n in runs for _ in range(n)]
        end, events = simulate_buckets(forward_s, backward_s, sizes, allreduce_time)
        return end, sum(e.end_s - e.start_s for e in events), events
    total = float(sum(size * n for size, n in runs))
    done = prev_end = comm = 0.0
    for size, n in runs:
        t = allreduce_time(size)
        r0 = forward_s + backward_s * ((done + size) / total)
        done += size * n
        r_last = forward_s + backward_s * (done / total)
        prev_end = max(prev_end + n * t, r0 + n * t, r_last + t)
        comm += n * t
    return max(forward_s + backward_s, prev_end), comm, ()


def scaling_curve(
    compute_s: float,
    grad_bytes: float,
    gpu_counts: Sequence[int],
    gpu: Any = None,
    **kwargs: Any,
) -> DPScaling:
    """``data_parallel_step`` at each GPU count, with speedup and efficiency vs one GPU.

    Weak scaling (default): speedup = n x t(1) / t(n) (throughput), efficiency = t(1) / t(n).
    Strong scaling: speedup = t(1) / t(n), efficiency = speedup / n.
    """
    if isinstance(gpu_counts, (str, bytes, dict)) or not hasattr(gpu_counts, "__len__"):
        raise SpecError(f"gpu_counts must be a list of GPU counts, got {_show(gpu_counts)}")
    if not len(gpu_counts):
        raise SpecError("give at least one GPU count")
    gpu_counts = [check_int(n, "GPU count", ge=1, le=MAX_GPUS) for n in gpu_counts]
    # speedup is a ratio to one GPU's step: without compute that step is empty (0 / 0)
    check_number(compute_s, "compute time", gt=0, le=MAX_SECONDS)
    scaling = kwargs.get("scaling", "weak")
    t1 = data_parallel_step(compute_s, grad_bytes, 1, gpu, **kwargs).step_none_s
    points = []
    for n in gpu_counts:
        step = data_parallel_step(compute_s, grad_bytes, int(n), gpu, **kwargs)
        speed: dict[str, float] = {}
        eff: dict[str, float] = {}
        for mode in ("none", "perfect", "bucketed"):
            t = step.step_s(mode)  # type: ignore[arg-type]
            s = (n * t1 / t if scaling == "weak" else t1 / t) if t > 0 else math.inf
            speed[mode], eff[mode] = s, s / n
        points.append(ScalingPoint(gpus=int(n), step=step, speedup=speed, efficiency=eff))
    return DPScaling(
        scaling=scaling,
        grad_bytes=float(grad_bytes),
        bucket_bytes=float(kwargs.get("bucket_bytes", 25e6)),
        single_gpu_step_s=t1,
        points=tuple(points),
    )


def _model_allreduce(
    gpu: Any, link: str, system: str | None, calibration: Any, dtype: str
) -> AllReduceTime:
    """All-reduce time from gpumodel's collective model (imported here: model -> ops is the one
    place this module reaches up, and only when no ``allreduce_time`` is given)."""
    if gpu is None:
        raise SpecError("give a GPU (or an allreduce_time function) to price the all-reduce")
    from gpumodel.ops.collectives import AllReduce
    from gpumodel.predict import predict

    def time(nbytes: float, gpus: int) -> float:
        op = AllReduce(bytes=nbytes, gpus=gpus, link=link, system=system, dtype=dtype)  # type: ignore[arg-type]
        return predict(op, gpu, calibration).time_s

    return time


__all__ = [
    "AmdahlResult",
    "BucketEvent",
    "DPScaling",
    "DPStep",
    "ScalingPoint",
    "amdahl",
    "amdahl_from_times",
    "amdahl_speedup",
    "bucket_sizes",
    "data_parallel_step",
    "scaling_curve",
    "simulate_buckets",
]
