"""``gpumodel report validate|diagnose|plan ... --out page.html``: self-contained HTML reports
(gpumodel.report). The same pages come from ``--html PATH`` on validate, diagnose, plan train
and plan serve."""

from __future__ import annotations

from pathlib import Path

import typer

from gpumodel.cli._app import app, console, fail, print_json

report_app = typer.Typer(
    help="Self-contained HTML reports (no network): a validate run, a trace, a plan.",
    no_args_is_help=True,
)
app.add_typer(report_app, name="report")

_OUT = typer.Option(..., "--out", help="the HTML file to write")
_JSON = typer.Option(False, "--json", help="print the page's data instead of a summary line")


def _finish(kind: str, source: object, out: Path, as_json: bool, **kw: object) -> None:
    from gpumodel.report import render, report_data
    from gpumodel.report._html import clean, write

    data = report_data(kind, source, **kw)
    path = write(out, render(data))
    if as_json:
        print_json(clean(data))
    else:
        console().print(f"wrote {path}", highlight=False, markup=False)


@report_app.command("validate")
def report_validate(
    calibration: str = typer.Argument(
        ...,
        help="calibration YAML written by `gpumodel validate` (it carries its measurements),"
        " or a GPU id for the one predictions use",
    ),
    out: Path = _OUT,
    as_json: bool = _JSON,
) -> None:
    """Measured vs predicted per family, error distributions, conditions, provenance."""
    from gpumodel.calibration import default_calibration, read_calibration_file
    from gpumodel.specs import get_gpu

    path = Path(calibration)
    if path.is_dir():  # a report folder (validate --report, validation/results/<gpu>/)
        found = [p for p in (path / "calibration.yaml", path / "calibration.yml") if p.is_file()]
        if not found:
            fail(f"{path} holds no calibration.yaml; give the file `gpumodel validate` wrote")
        path = found[0]
    elif not (path.suffix in (".yaml", ".yml") or path.exists()):
        found = default_calibration(get_gpu(calibration))
        if found is None or not found.origin:
            fail(f"no calibration found for {calibration}; run `gpumodel validate` there")
        path = Path(found.origin)
    cal = read_calibration_file(path, measurements=True)
    if not cal.measurements:
        fail(f"{path} carries no measurements to plot; use the file `gpumodel validate` wrote")
    _finish("validate", cal, out, as_json)


@report_app.command("diagnose")
def report_diagnose(
    trace: Path = typer.Argument(..., help="torch.profiler Chrome trace or nsys kernel CSV"),
    out: Path = _OUT,
    gpu: str = typer.Option(None, help="GPU id when the trace does not name its device"),
    top: int = typer.Option(20, help="ops to list, by recoverable time"),
    calibration: str = typer.Option(None, help="'none' for datasheet only, a file, or a GPU id"),
    step_ms: float = typer.Option(
        None, "--step-ms", help="the step time measured without the profiler, ms (as diagnose)"
    ),
    host: str = typer.Option(None, "--host", help="host profile of the tracing machine"),
    as_json: bool = _JSON,
) -> None:
    """The step's timeline, each op against its roofline, findings with predicted savings."""
    from gpumodel.diagnose import diagnose

    report = diagnose(trace, gpu=gpu, calibration=calibration, top=top, step_ms=step_ms,
                      host=host)  # fmt: skip
    _finish("diagnose", report, out, as_json, trace=trace)


@report_app.command("plan")
def report_plan(
    plan: Path = typer.Argument(..., help="saved output of `plan train|serve ... --json`"),
    out: Path = _OUT,
    as_json: bool = _JSON,
) -> None:
    """GPUs compared, cost, memory fit, the chosen configuration and the runners-up."""
    from gpumodel._io import read_json

    data = read_json(plan, "plan (save `plan ... --json`)")
    if not isinstance(data, dict) or not ({"options", "step"} & set(data)):
        fail(f"{plan} is not the output of `gpumodel plan train|serve --json`")
    from gpumodel.report import render, report_data

    try:
        render(report_data("plan", data))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        fail(f"{plan} is not the output of `gpumodel plan train|serve --json` ({exc!r} missing "
             "or malformed)")  # fmt: skip
    _finish("plan", data, out, as_json)
