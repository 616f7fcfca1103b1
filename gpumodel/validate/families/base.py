"""What a measured family is: the ``Family`` interface every module of this package fills in.

A family is one kind of measurement (GEMMs, streaming bandwidth, attention, ...) and owns all of
its parts in one module: the points it measures, how one point is measured on its engine, the
fit of the calibration parameters its measurements inform, the error groups the report scores
and any extra report lines. The runner (gpumodel.validate.runner), the fit
(gpumodel.calibrate.fit) and the reports read them through the registry
(gpumodel.validate.families), never by name.

Records are plain dicts (``make_record``)::

    {"family": str, "op": dict | None, "time_s": float, "repeats": int, "spread": float,
     "meta": dict}

This module imports nothing heavy (no pydantic, numpy, CuPy or torch): the device scripts load
the measurement side without the rest of the package.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpumodel.validate.tasks import Task

Record = dict[str, Any]


def kernel_families_fit(record_family: str) -> Callable[..., Any]:
    """The fit of a family whose records are fitted per kernel family alone (efficiency and floor
    per ``op.family``, ``gpumodel.calibrate.fit_kernel_families``): most row, copy and optimizer
    families."""

    def fit(fam: dict[str, list[Any]], gpu: Any, params: Any) -> Any:
        from gpumodel.calibrate import fit_kernel_families

        return fit_kernel_families(fam.get(record_family, []), gpu, params)

    return fit


# calibrate.Point -> whether it belongs to an error group
Selector = Callable[[Any], bool]


def make_record(
    family: str,
    op: dict[str, Any] | None,
    time_s: float,
    repeats: int,
    spread: float,
    meta: dict[str, Any],
) -> dict[str, Any]:
    return {
        "family": family,
        "op": op,
        "time_s": float(time_s),
        "repeats": int(repeats),
        "spread": float(spread),
        "meta": meta,
    }


@dataclass(frozen=True)
class Group:
    """An error group of the report: the held-out points ``select`` picks, scored against a
    median tolerance (and a p90 one where set). ``order`` places its row in the table."""

    name: str
    select: Selector
    median_pct: float | None
    p90_pct: float | None = None
    order: float = math.inf


@dataclass(frozen=True)
class Family:
    """One measured family. Every part but ``name`` is optional.

    Measuring (an engine's runner calls these, in registry order):
      ``engine``: "cupy", "torch" or "numpy" (the context ``measure`` receives; None: measured
      elsewhere, e.g. collectives by their own multi-process driver).
      ``points(quick)``: the argument tuples of ``measure``, in the order they are measured.
      ``label(*args)``: the progress label of a point. ``measure(ctx, *args)``: its records.
      ``filter_points(points, unavailable)``: drop points this machine cannot measure, saying
      why in ``unavailable``. ``release(ctx)``: undo the family's settings when it ends.
    Fitting (gpumodel.calibrate):
      ``fit(points_by_family, gpu, params) -> params``, run in ``fit_order``.
      ``fit_only``: its points are all used for fitting (measured constants, never scored).
      ``split_by_kernel``: its points alternate fit / held out per kernel family (an op whose
      size picks its kernel: a softmax row of 1024, 8192 or 50,257 columns), so that each
      kernel family has points to fit.
      ``constants(records, gpu) -> dict``: parameters measured directly (the fit starts there).
      ``adapt_row(row, meta)``: upgrade an older record's op row before it is built.
      ``adapt_op(op, meta)``: the op to predict (or a note string: reported, not fitted).
    Reporting: ``groups`` (error groups) and ``report(cal) -> lines`` under "## Result".
    """

    name: str
    engine: str | None = None
    points: Callable[[bool], list[tuple[Any, ...]]] | None = None
    label: Callable[..., str] | None = None
    measure: Callable[..., list[Record]] | None = None
    filter_points: Callable[[list[tuple[Any, ...]], list[Record]], list[tuple[Any, ...]]] | None = (
        None
    )
    release: Callable[[Any], None] | None = None
    fit: Callable[[dict[str, list[Any]], Any, Any], Any] | None = None
    fit_order: float = math.inf
    fit_only: bool = False
    split_by_kernel: bool = False
    constants: Callable[[Sequence[Record], Any], dict[str, float]] | None = None
    adapt_row: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None
    adapt_op: Callable[[Any, dict[str, Any]], Any] | None = None
    groups: tuple[Group, ...] = field(default=())
    report: Callable[[Any], list[str]] | None = None

    def plan(self, ctx: Any, unavailable: list[Record]) -> list[Task]:
        """The tasks that measure this family's points on ``ctx`` (its engine's context)."""
        if self.points is None or self.measure is None:
            return []
        points = self.points(ctx.quick)
        if self.filter_points is not None:
            points = self.filter_points(points, unavailable)
        label = self.label or (lambda *args: f"{self.name} {' '.join(map(str, args))}")
        measure = self.measure
        return [
            Task(self.name, label(*args), lambda args=args: measure(ctx, *args)) for args in points
        ]
