"""Fits that do not depend on one another, run in worker processes.

The calibration fit is CPU work: a Nelder-Mead search per GEMM dtype and, for convolutions, one
whole family fit per candidate SM-fill constant. Those searches share nothing, so on a GPU
machine's many cores they run side by side; the parameters are the same either way, since each
search is the same deterministic computation whichever process runs it.

How many workers: ``GPUMODEL_FIT_WORKERS`` (a whole number >= 1, or ``auto`` for the cores this
process may use); unset, the library fits serially, because a worker process imports the caller's
main module, and a script without an ``if __name__ == "__main__":`` guard would run again in
each. ``gpumodel validate`` fits on the host's cores (``workers_scope("auto")``) without
touching the environment. Workers start by spawn, never fork: a forked child of a process that
holds a CUDA context or threads is unsafe.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from gpumodel.errors import SpecError

FIT_WORKERS_ENV = "GPUMODEL_FIT_WORKERS"
_scoped: ContextVar[int | None] = ContextVar("gpumodel_fit_workers", default=None)
T = TypeVar("T")


def available_cores() -> int:
    """Cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def parse_workers(value: str | int, what: str = FIT_WORKERS_ENV) -> int:
    """``auto`` -> the available cores; a whole number >= 1 as it is; anything else is a
    one-line SpecError naming ``what``."""
    text = str(value).strip().lower()
    if text == "auto":
        return available_cores()
    if not text.isdigit() or int(text) < 1 or int(text) > 4096:
        raise SpecError(f"{what}={value!r}: expected a whole number of workers (1-4096) or 'auto'")
    return int(text)


def _from_environment() -> int | None:
    """``GPUMODEL_FIT_WORKERS`` parsed, or None where it is unset or blank."""
    raw = os.environ.get(FIT_WORKERS_ENV)
    return parse_workers(raw) if raw is not None and raw.strip() else None


def fit_workers() -> int:
    """Workers for independent fits: the scoped value, else the environment's, else 1."""
    scoped = _scoped.get()
    if scoped is not None:
        return scoped
    env = _from_environment()
    return 1 if env is None else env


def check_fit_workers() -> None:
    """The boundary check: a bad ``GPUMODEL_FIT_WORKERS`` fails before any measuring."""
    fit_workers()


@contextmanager
def workers_scope(value: str | int) -> Iterator[int]:
    """Fit with ``value`` workers inside the block (``auto``: the host's cores); the
    environment variable, where set, wins, so a user can still ask for a serial fit."""
    env = _from_environment()
    n = parse_workers(value, "workers") if env is None else env
    token = _scoped.set(n)
    try:
        yield n
    finally:
        _scoped.reset(token)


def map_independent(fn: Callable[..., T], calls: Sequence[tuple[Any, ...]]) -> list[T]:
    """``[fn(*args) for args in calls]``, in that order, across up to ``fit_workers()`` spawned
    processes; ``fn`` and its arguments must pickle (a module-level function, plain data and
    pydantic models). Serial when one worker or one call."""
    workers = min(fit_workers(), len(calls))
    if workers <= 1:
        return [fn(*args) for args in calls]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [pool.submit(fn, *args) for args in calls]
        return [f.result() for f in futures]
