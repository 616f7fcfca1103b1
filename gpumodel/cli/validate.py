"""``gpumodel validate``: measure this machine's GPU, calibrate, report the model's own error.

Exit codes: 0 all families within tolerance; 1 some family's held-out error exceeds its
tolerance (so it can gate CI on GPU runners); 2 bad input or no GPU.
"""

from __future__ import annotations

from pathlib import Path

import typer

from gpumodel.cli._app import app, console, fail, print_json, split_list


@app.command()
def validate(
    backend: str = typer.Option("cupy", help="cupy (NVIDIA GPU) or numpy (CPU, for CI)"),
    quick: bool = typer.Option(False, "--quick", help="fewer points (< 1 min on an H100)"),
    gpu: str = typer.Option(None, help="spec id to calibrate (default: from the device name)"),
    families: str = typer.Option(None, help="only these families, comma-separated"),
    out: str = typer.Option(None, help="calibration file (default: the user cache)"),
    report: str = typer.Option(None, help="directory for report.md (and validation.png)"),
    plot: bool = typer.Option(False, "--plot", help="draw measured vs predicted into --report"),
    from_measurements: str = typer.Option(
        None,
        help="re-fit from saved measurements instead of measuring: a raw measurements JSON or "
        "a calibration YAML (it carries its run's measurements)",
    ),
    calibration_from: str = typer.Option(
        None, help="score another GPU's calibration, transferred, on these measurements (no fit)"
    ),
    collectives: bool = typer.Option(False, "--collectives", help="measure NCCL collectives"),
    occupancy: bool = typer.Option(
        False, "--occupancy", help="check the occupancy model against the CUDA runtime"
    ),
    as_json: bool = typer.Option(False, "--json"),
    no_progress: bool = typer.Option(False, "--no-progress"),
) -> None:
    """Measure kernels on the local GPU, fit the model, report held-out error per family."""
    from gpumodel.calibration import user_calibration_path
    from gpumodel.validate.pipeline import run_validate, write_outputs
    from gpumodel.validate.report import HEADER, error_rows

    _check_targets(out, report)  # before any measuring: a bad path fails in a second, not later
    if collectives or occupancy:
        _extra_checks(collectives, occupancy, report, out, as_json, from_measurements)
        return
    if calibration_from:
        _transfer_check(calibration_from, backend, quick, gpu, from_measurements, report, as_json)
        return
    fam = set(split_list(families)) or None
    with _progress(disabled=no_progress or as_json) as progress:
        cal, fails, skipped = run_validate(backend, quick, gpu, fam, progress, from_measurements)
    target = Path(out) if out else user_calibration_path(cal.gpu_id)
    written = write_outputs(cal, target, Path(report) if report else None, plot, skipped, fails)
    if as_json:
        print_json({"calibration": str(target), "errors": {k: v.model_dump() for k, v in
                    cal.errors.items()}, "failures": fails, "written": [str(w) for w in written]})  # fmt: skip
    else:
        from rich.table import Table

        table = Table(title=f"validation: {cal.device_name} ({cal.gpu_id}), held-out error")
        for h in HEADER:
            table.add_column(h)
        for row in error_rows(cal):
            table.add_row(*row)
        out_console = console()
        out_console.print(table)
        for w in written:
            out_console.print(f"wrote {w}", highlight=False, markup=False)
        for f in fails:
            out_console.print(f"FAIL {f}", highlight=False, markup=False)
    if fails:
        raise typer.Exit(1)


class _progress:
    """A rich progress bar fed by the runners' (task, done, total) callback."""

    def __init__(self, disabled: bool):
        self.disabled = disabled

    def __enter__(self):
        if self.disabled:
            return None
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("{task.description:<32}"), BarColumn(),
                            TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                            transient=False)  # fmt: skip
        self.bar.__enter__()
        self.tasks: dict[str, int] = {}

        def update(task: str, done: int, total: int) -> None:
            if task not in self.tasks:
                self.tasks[task] = self.bar.add_task(task, total=total)
            self.bar.update(self.tasks[task], completed=done, total=total)

        return update

    def __exit__(self, *exc) -> None:
        if not self.disabled:
            self.bar.__exit__(*exc)


def _check_targets(out: str | None, report: str | None) -> None:
    """--out must be a writable file path, --report a directory (or one that can be made)."""
    from gpumodel._io import OutputFileError, check_target

    if out:
        check_target(Path(out), "calibration (--out)") if Path(out).parent.exists() else None
    if report:
        path = Path(report)
        if path.exists() and not path.is_dir():
            raise OutputFileError(f"{path}: --report must be a directory, not a file")
        if path.is_dir():
            check_target(path / "report.md", "report")


def _extra_checks(
    collectives: bool,
    occupancy: bool,
    report: str | None,
    out: str | None,
    as_json: bool,
    from_measurements: str | None = None,
) -> None:
    """The multi-GPU and occupancy checks (separate runners, separate outputs). With --out, the
    fitted collective parameters are merged into that calibration file; with
    --from-measurements, the collectives are re-fitted from a saved
    ``collectives_measurements.json`` instead of measured (no GPU needed)."""
    out_dir = Path(report or ".")
    results: dict = {}
    if from_measurements and (occupancy or not collectives):
        fail("--from-measurements with --collectives re-fits saved collectives; "
             "the occupancy check always runs on the GPU")  # fmt: skip
    if occupancy:
        from gpumodel.validate.device_info import device_info
        from gpumodel.validate.occupancy_check import run_occupancy_check
        from gpumodel.validate.pipeline import gpu_for_device_name

        info = device_info()
        spec = gpu_for_device_name(str(info.get("device_name") or info.get("name")))
        results["occupancy"] = run_occupancy_check(spec)
    if collectives:
        from gpumodel.validate.collectives_runner import refit, run_collectives_validation

        merge = out if out and Path(out).is_file() else None
        if from_measurements:
            if not Path(from_measurements).is_file():
                fail(f"no such measurements file: {from_measurements}")
            results["collectives"] = refit(from_measurements, out_dir, calibration_file=merge)
        else:
            results["collectives"] = run_collectives_validation(out_dir, calibration_file=merge)
    if as_json:
        print_json(results)
    else:
        for name, result in results.items():
            summary = {k: v for k, v in result.items() if not isinstance(v, (list, dict))}
            console().print(f"{name}: {summary}", highlight=False, markup=False)
    failed = results.get("occupancy", {}).get("n_mismatches", 0) or (
        results.get("collectives", {}).get("passed") is False
    )
    if failed:
        raise typer.Exit(1)


def _transfer_check(
    source: str, backend: str, quick: bool, gpu: str | None, from_measurements: str | None,
    report: str | None, as_json: bool,
) -> None:  # fmt: skip
    """Predict this GPU's measurements from a transferred calibration and report the error."""
    import gpumodel as gm
    from gpumodel.calibrate import transfer_errors
    from gpumodel.calibration import atomic_write_text
    from gpumodel.validate.pipeline import gpu_for_device_name, load_or_measure
    from gpumodel.validate.report import transfer_markdown

    info, records, _ = load_or_measure(backend, quick, from_measurements)
    spec = gm.get_gpu(gpu) if gpu else gpu_for_device_name(str(info.get("device_name", "")))
    cal = gm.load_calibration(source, for_gpu=spec)
    errors, fails = transfer_errors(records, spec, cal.parameters)
    if report:
        out = Path(report)
        from gpumodel._io import make_dir

        make_dir(out, "report directory")
        atomic_write_text(out / "transfer-report.md", transfer_markdown(cal, info, errors, fails))
    if as_json:
        print_json({"errors": {k: v.model_dump() for k, v in errors.items()}, "failures": fails,
                    "calibration": cal.label})  # fmt: skip
    else:
        from rich.table import Table

        table = Table(title=f"{spec.id} predicted from {cal.label}: error on all measurements")
        for h in (
            "family",
            "n",
            "datasheet median",
            "transferred median",
            "transferred p90",
            "bias",
        ):
            table.add_column(h)
        for name, e in errors.items():
            table.add_row(name, str(e.n), f"{e.datasheet_median_abs_pct:.1f}%",
                          f"{e.median_abs_pct:.1f}%", f"{e.p90_abs_pct:.1f}%", f"{e.bias_pct:+.1f}%")  # fmt: skip
        console().print(table)
        for f in fails:
            console().print(f"FAIL {f}", highlight=False, markup=False)
    if fails:
        raise typer.Exit(1)
