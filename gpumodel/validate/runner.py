"""The measurement driver: run every registered family of one engine, in registry order.

``run(engine, families, quick, progress) -> (records, unavailable)``. An engine is a module
with ``start(quick)`` (its context, or the unavailable rows saying why there is none),
``release(ctx)`` (between families), ``sync(ctx)`` (after a failed point) and ``close(ctx)``
(after the run): gpumodel.validate.cupy_engine, torch_engine and numpy_engine. Each family
plans its points (``Family.plan``), the shared task loop (tasks.run_tasks) measures them and
records what could not be measured instead of stopping.
"""

from __future__ import annotations

import importlib
from typing import Any

from gpumodel.validate.families import by_name, registry
from gpumodel.validate.tasks import Progress, Task, run_tasks

ENGINES = ("cupy", "torch", "numpy")


def run(
    engine: str,
    families: set[str] | None = None,
    quick: bool = False,
    progress: Progress | None = None,
    seconds: dict[str, float] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Measure the selected families of ``engine`` (all of them when None; other engines'
    names are ignored). Raises DeviceError where the engine needs a GPU it cannot find (CuPy);
    an engine that is merely absent (PyTorch) is reported in ``unavailable``. ``seconds``
    gains each family's wall seconds (tasks.run_tasks)."""
    if engine not in ENGINES:
        from gpumodel.errors import SpecError

        raise SpecError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    selected = [
        f for f in registry() if f.engine == engine and (families is None or f.name in families)
    ]
    if not selected:
        return [], []
    eng = importlib.import_module(f"gpumodel.validate.{engine}_engine")
    ctx = eng.start(quick)
    if isinstance(ctx, list):
        return [], ctx
    unavailable: list[dict[str, Any]] = []
    tasks: list[Task] = []
    for fam in selected:
        tasks += fam.plan(ctx, unavailable)

    def new_family(previous: str | None) -> None:
        eng.release(ctx)
        done = by_name(previous)
        if done is not None and done.release is not None:
            done.release(ctx)

    try:
        records = run_tasks(tasks, unavailable, progress, new_family, lambda: eng.sync(ctx),
                            seconds)
    finally:
        eng.close(ctx)
    return records, unavailable
