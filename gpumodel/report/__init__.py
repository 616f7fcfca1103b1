"""Self-contained HTML reports: a validate run, a diagnose of a trace, a plan.

    from gpumodel.report import write_report
    write_report("validate", calibration, "page.html")     # a Calibration with measurements
    write_report("diagnose", report, "page.html", trace="trace.json.gz")
    write_report("plan", plan, "page.html")                 # plan_serve(...) / plan_train(...)

One module per page kind (validate, diagnose, plan), a shared SVG helper (_svg) and page frame
(_html). A page loads nothing: styles and plots are inline, the data behind it is embedded as
``<script type="application/json" id="gpumodel-data">``. numpy and yaml only; no plotting library.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpumodel.errors import SpecError

KINDS = ("validate", "diagnose", "plan")


def report_data(kind: str, source: Any, **kw: Any) -> dict[str, Any]:
    """The data a page of ``kind`` shows (embedded in it; what ``gpumodel report --json``
    prints)."""
    _check_source(kind, source)
    if kind == "validate":
        from gpumodel.report.validate import validate_data

        return validate_data(source)
    if kind == "diagnose":
        from gpumodel.report.diagnose import diagnose_data

        return diagnose_data(source, kw.get("trace"))
    if kind == "plan":
        from gpumodel.report.plan import plan_data

        return plan_data(source)
    from gpumodel._validators import _show

    raise SpecError(f"unknown report kind {_show(kind)}; known: {', '.join(KINDS)}")


def _check_source(kind: str, source: Any) -> None:
    """The source each kind of page is drawn from, else one line (not a TypeError inside)."""
    from collections.abc import Mapping

    if kind == "validate":
        from gpumodel.calibration import Calibration

        ok, want = isinstance(source, Calibration), "a Calibration"
    elif kind == "diagnose":
        ok, want = hasattr(source, "to_dict") and hasattr(source, "ops"), "a DiagnoseReport"
    elif kind == "plan":
        data = source.to_dict() if hasattr(source, "to_dict") else source
        ok = isinstance(data, Mapping) and bool({"options", "step"} & set(data))
        want = "a plan (plan_serving / plan_training / search_training, or their --json)"
    else:
        return
    if not ok:
        raise SpecError(f"a {kind} report needs {want}, got {type(source).__name__}")


def render(data: dict[str, Any]) -> str:
    """HTML of a page from its data (``report_data``)."""
    kind = data.get("kind")
    if kind == "validate":
        from gpumodel.report.validate import validate_page

        return validate_page(data)
    if kind == "diagnose":
        from gpumodel.report.diagnose import diagnose_page

        return diagnose_page(data)
    if kind == "plan":
        from gpumodel.report.plan import plan_page

        return plan_page(data)
    from gpumodel._validators import _show

    raise SpecError(f"unknown report kind {_show(kind)}; known: {', '.join(KINDS)}")


def write_report(kind: str, source: Any, path: str | Path, **kw: Any) -> Path:
    """Write the page of ``kind`` for ``source`` to ``path`` (atomically); returns the path."""
    from gpumodel.report._html import write

    return write(path, render(report_data(kind, source, **kw)))


__all__ = ["KINDS", "render", "report_data", "write_report"]
