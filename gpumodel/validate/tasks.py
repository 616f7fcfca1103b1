"""The measurement loop every engine shares (gpumodel.validate.runner): run each task in order,
record what it measured, and record what could not be measured (with the reason) instead of
stopping the run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Progress = Callable[[str, int, int], None]


@dataclass
class Task:
    """One measurement: its family, a label for the progress bar, and the call that takes it."""

    family: str
    label: str
    fn: Callable[[], list[dict[str, Any]]]


def failure_reason(exc: BaseException) -> str:
    """One line, at most 300 characters, saying why a measurement could not be taken."""
    text = f"{type(exc).__name__}: {exc}".replace("\n", " ").strip()
    return text[:300]


def run_tasks(
    tasks: list[Task],
    unavailable: list[dict[str, Any]],
    progress: Progress | None,
    new_family: Callable[[str | None], None],
    resync: Callable[[], None],
    seconds: dict[str, float] | None = None,
) -> list[dict[str, Any]]:
    """Run ``tasks`` in order and return their records. ``new_family(previous)`` runs before
    the first task of each family (free the last family's buffers, restore its settings); a task
    that raises is appended to ``unavailable`` and the device is resynchronised. ``seconds``,
    where given, gains each family's wall seconds (added to what it holds)."""
    import time

    records: list[dict[str, Any]] = []
    total = len(tasks)
    current: str | None = None
    for i, task in enumerate(tasks):
        began = time.perf_counter()
        if task.family != current:
            new_family(current)
            current = task.family
        if progress is not None:
            progress(task.label, i, total)
        try:
            records += task.fn()
        except Exception as exc:
            unavailable.append(
                {"family": task.family, "what": task.label, "reason": failure_reason(exc)}
            )
            try:
                resync()
            except Exception:
                pass
        if seconds is not None:
            seconds[task.family] = seconds.get(task.family, 0.0) + time.perf_counter() - began
    if progress is not None:
        progress("done", total, total)
    return records
