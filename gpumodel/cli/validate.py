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
        "a calibration YAML (it carries its run's measurements); with --conditions, several "
        "machines' conditions-measurements.json, comma-separated, pool (median per point)",
    ),
    calibration_from: str = typer.Option(
        None, help="score another GPU's calibration, transferred, on these measurements (no fit)"
    ),
    collectives: bool = typer.Option(False, "--collectives", help="measure NCCL collectives"),
    occupancy: bool = typer.Option(
        False, "--occupancy", help="check the occupancy model against the CUDA runtime"
    ),
    conditions: bool = typer.Option(
        False,
        "--conditions",
        help="measure isolated vs in-workload (back to back, dirty L2; "
        "PyTorch kernels, do_bench check) and fit the sustained clock and dirty-L2 write-back",
    ),
    torch_families: bool = typer.Option(
        None,
        "--torch/--no-torch",
        help="also time PyTorch's kernels (matmul, bmm, _scaled_mm, conv2d, SDPA, host copies) "
        "isolated and back to back with SM clock and power, each also by do_bench, and fit "
        "the sustained clock (default: on when torch sees a CUDA GPU)",
    ),
    host_only: bool = typer.Option(
        False,
        "--host-only",
        help="only measure this machine's host side (torch) and write a "
        "host profile YAML (--host-out); no kernel validation",
    ),
    host: bool = typer.Option(
        None,
        "--host/--no-host",
        help="also measure the host side (default: on when torch sees a CUDA GPU)",
    ),
    host_out: str = typer.Option(
        None, help="host profile file (default: the user cache, hosts/<name>.yaml)"
    ),
    host_repeats: int = typer.Option(
        9,
        "--host-repeats",
        help="interleaved rounds of the host measurement (3-1000; ~3 s each on an H100 VM): "
        "more sample a drifting host over a longer window, for its medians and host_drift",
    ),
    host_window: float = typer.Option(
        60.0,
        "--host-window",
        help="seconds spent after the rounds timing only the HF models, the host's speed over "
        "a longer window (0-3600; 0: rounds only): a VM's vCPU speed changes within seconds, "
        "and the profile's figures are set to its median over rounds + window",
    ),
    as_json: bool = typer.Option(False, "--json"),
    as_csv: bool = typer.Option(False, "--csv", help="the error table as CSV"),
    no_progress: bool = typer.Option(False, "--no-progress"),
    html: str = typer.Option(None, "--html", help="also write a self-contained HTML report"),
) -> None:
    """Measure kernels on the local GPU, fit the model, report held-out error per family.

    Example: gpumodel validate --host-only --host-out host.yaml
    """
    if html and (collectives or occupancy or calibration_from or host_only):
        fail("--html reports a kernel validation (not --collectives, --occupancy, "
             "--calibration-from or --host-only)")  # fmt: skip
    if not 3 <= host_repeats <= 1000:
        fail(f"--host-repeats must be 3-1000, got {host_repeats}")
    if not 0 <= host_window <= 3600:  # also refuses NaN
        fail(f"--host-window must be 0-3600 seconds, got {host_window:g}")
    if host_only:
        _host_profile(host_out, as_json, no_progress, host_repeats, host_window)
        return
    from gpumodel.calibration import missed_calibration_path, user_calibration_path
    from gpumodel.validate.pipeline import (
        CARRIED_KEY,
        run_seconds,
        run_validate,
        timing_line,
        write_outputs,
    )
    from gpumodel.validate.report import HEADER, error_rows

    _check_targets(out, report, host_out)  # before any measuring: a bad path fails at once
    if conditions:
        _conditions(report, out, from_measurements, quick, as_json)
        return
    if collectives or occupancy:
        _extra_checks(collectives, occupancy, report, out, as_json, from_measurements)
        return
    if calibration_from:
        _transfer_check(calibration_from, backend, quick, gpu, from_measurements, report, as_json)
        return
    fam = set(split_list(families)) or None
    with _progress(disabled=no_progress or as_json or as_csv) as progress:
        # the fit's independent parts on the host's cores (GPUMODEL_FIT_WORKERS overrides)
        cal, fails, skipped = run_validate(backend, quick, gpu, fam, progress, from_measurements,
                                           workers="auto")  # fmt: skip
    # a fit that missed a tolerance does not become the default one unasked
    target = (Path(out) if out else missed_calibration_path(cal.gpu_id) if fails
              else user_calibration_path(cal.gpu_id))  # fmt: skip
    written = write_outputs(cal, target, Path(report) if report else None, plot, skipped, fails)
    if html:
        from gpumodel.report import write_report

        written.append(write_report("validate", cal, html))
    if as_json:
        print_json({"calibration": str(target), "errors": {k: v.model_dump() for k, v in
                    cal.errors.items()}, "failures": fails, "written": [str(w) for w in written],
                    "seconds": run_seconds(cal.environment)})  # fmt: skip
    elif as_csv:
        from gpumodel.cli.tables import write_csv

        write_csv(HEADER, error_rows(cal), notes=[f"wrote {w}" for w in written]
                  + [f"FAIL {f}" for f in fails])  # fmt: skip
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
        kept = cal.environment.get(CARRIED_KEY)
        if kept:
            out_console.print(f"kept as they were (not in the measurements): {kept}",
                              highlight=False, markup=False)  # fmt: skip
        for f in fails:
            out_console.print(f"FAIL {f}", highlight=False, markup=False)
        if fails and not out:
            out_console.print(f"not installed as {cal.gpu_id}'s default (a tolerance was missed): "
                              f"use it with --calibration {target}", highlight=False,
                              markup=False)  # fmt: skip
        timing = timing_line(cal.environment)
        if timing:
            out_console.print(timing, highlight=False, markup=False)
    if torch_families is None:
        torch_families = backend != "numpy" and from_measurements is None and _torch_sees_gpu()
    if torch_families:
        _conditions(report, str(target), None, quick, as_json, quiet=as_json or as_csv)
    if host is None:  # on by default where a kernel run happened on a GPU torch can see
        host = backend != "numpy" and from_measurements is None and _torch_sees_gpu()
    if host:
        _host_profile(host_out, as_json, no_progress, host_repeats, host_window)
    _exit_if_missed(fails)


def _torch_sees_gpu() -> bool:
    """True when torch is installed and sees a CUDA device (imports torch only if installed)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


def _host_profile(
    host_out: str | None, as_json: bool, no_progress: bool, repeats: int = 9, window_s: float = 60.0
) -> None:
    """Measure the host side with torch and write the host profile YAML."""
    from gpumodel.validate.host import (
        default_profile_path,
        measure_host_profile,
        write_host_profile,
    )

    quiet = no_progress or as_json
    say = None if quiet else (lambda m: console().print(m, highlight=False, markup=False))
    profile = measure_host_profile(repeats=repeats, progress=say, window_s=window_s)
    target = write_host_profile(profile, host_out or default_profile_path(profile["name"]))
    if as_json:
        print_json({"host_profile": str(target), "profile": profile})
        return
    out_console = console()
    ops = ", ".join(f"{k} {v * 1e6:.1f}" for k, v in profile["eager_op_s"].items() if v is not None)
    out_console.print(f"host {profile['name']}: {profile['cpu_model']}, {profile['cpu_cores']} "
                      f"cores, torch {profile['torch']}, {profile['gpu']}", highlight=False,
                      markup=False)  # fmt: skip
    out_console.print(f"eager op host us/call: {ops}", highlight=False, markup=False)
    layer = profile["hf_decoder_layer_s"]
    if layer is not None:
        out_console.print(f"HF decoder layer: {layer * 1e6:.0f} us host, "
                          f"{profile['hf_decoder_layer_kernels']} kernels", highlight=False,
                          markup=False)  # fmt: skip
    if profile["hf_model_layer_s"] is not None:
        out_console.print(f"HF model decode step: {profile['hf_model_step_s'] * 1e6:.0f} us of "
                          f"its own + {profile['hf_model_layer_s'] * 1e6:.0f} us per decoder "
                          "layer", highlight=False, markup=False)  # fmt: skip
    if profile["profiler_event_s"] is not None:
        out_console.print(f"torch.profiler: {profile['profiler_event_s'] * 1e6:.2f} us of host "
                          "per recorded event", highlight=False, markup=False)  # fmt: skip
    copies = profile.get("host_copy_s")
    if copies:
        each = ", ".join(f"{k.replace('_', ' ')} {v * 1e6:.1f}" for k, v in copies.items())
        out_console.print(f"4 KB host copies with their sync, us: {each} (predict host_transfer "
                          "--host uses them)", highlight=False, markup=False)  # fmt: skip
    if profile.get("sdpa_graph_build_s") is not None:
        out_console.print(f"cuDNN attention graph build: {profile['sdpa_graph_build_s'] * 1e3:.1f} "
                          "ms of host per new shape (infer --new-shapes)", highlight=False,
                          markup=False)  # fmt: skip
    if profile.get("host_drift") is not None:
        lo, hi = profile["host_drift"]
        out_console.print(f"host drift while measuring: the HF model's forward at x{lo:g} - "
                          f"x{hi:g} its median time (p10-p90; predictions give this range)",
                          highlight=False, markup=False)  # fmt: skip
    window = profile.get("method", {}).get("window") or {}
    if window.get("samples"):
        out_console.print(f"host speed over {window['seconds']:g} s more of the HF models: "
                          f"x{window['speed_factor']:g} the rounds' time (figures set to the "
                          "median over both)", highlight=False, markup=False)  # fmt: skip
    out_console.print(f"wrote {target}", highlight=False, markup=False)


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


def _check_targets(out: str | None, report: str | None, host_out: str | None = None) -> None:
    """--out must be a writable file path, --report a directory (or one that can be made)."""
    from gpumodel._io import InputFileError, OutputFileError, as_path, check_target

    for value, what in ((out, "--out"), (report, "--report"), (host_out, "--host-out")):
        if value:  # NUL bytes, over-long names: one line before any os call sees them
            try:
                as_path(value, what)
            except InputFileError as exc:
                raise OutputFileError(str(exc)) from None
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
    fitted collective parameters are merged into that calibration file, else the fit is saved
    where predictions find it (the user cache's ``calibrations/<gpu>-x<n>/``); with
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
        from gpumodel.validate.families.collectives import refit, run_collectives_validation

        merge = out if out and Path(out).is_file() else None
        if from_measurements:
            if not Path(from_measurements).is_file():
                fail(f"no such measurements file: {from_measurements}")
            results["collectives"] = refit(
                from_measurements,
                out_dir,
                calibration_file=merge,
                progress=None if as_json else print,
            )
        else:
            results["collectives"] = run_collectives_validation(
                out_dir, calibration_file=merge, progress=None if as_json else print
            )
        if merge is None:
            _install_system_calibration(results["collectives"], out_dir)
    if as_json:
        print_json(results)
    else:
        for name, result in results.items():
            summary = {k: v for k, v in result.items() if not isinstance(v, (list, dict))}
            summary.pop("found_by_predictions_at", None)
            console().print(f"{name}: {summary}", highlight=False, markup=False)
            if result.get("found_by_predictions_at"):
                console().print(f"saved where predictions find it: "
                                f"{result['found_by_predictions_at']}", highlight=False,
                                markup=False)  # fmt: skip
    missed = []
    if results.get("occupancy", {}).get("n_mismatches", 0):
        missed.append(f"occupancy: {results['occupancy']['n_mismatches']} mismatches")
    if results.get("collectives", {}).get("passed") is False:
        missed.append("collectives: outside their tolerance")
    _exit_if_missed(missed)


def _conditions(
    report: str | None, out: str | None, from_measurements: str | None, quick: bool,
    as_json: bool, quiet: bool = False,
) -> None:  # fmt: skip
    """Measure (or re-fit from a saved conditions-measurements.json) and merge the fitted
    in-workload parameters into --out when it names an existing calibration (``quiet``: after
    a full validate run that prints its own JSON/CSV)."""
    from gpumodel.validate.conditions import run_conditions

    files = split_list(from_measurements)
    if from_measurements is not None and not files:
        fail("--from-measurements names no file")
    for f in files:
        if not Path(f).is_file():
            fail(f"no such measurements file: {f}")
    if not files:
        try:
            import torch
        except ImportError:
            fail("--conditions measures PyTorch's kernels: install torch with CUDA")
        if not torch.cuda.is_available():
            fail("--conditions needs a CUDA GPU (or --from-measurements FILE to re-fit)")
    import sys

    if "cupy" in sys.modules:  # after a CuPy run: hand its pooled memory back before torch's
        sys.modules["cupy"].get_default_memory_pool().free_all_blocks()
    merge = out if out and Path(out).is_file() else None
    result = run_conditions(Path(report or "."), merge, files, quick)
    if quiet:
        return
    if as_json:
        print_json(result)
        return
    _print_conditions(result, report, merge)


def _print_conditions(result: dict, report: str | None, merge: str | None) -> None:
    c = console()
    from gpumodel.validate.conditions import power_summary

    c.print(f"conditions on {result['gpu']}: {power_summary(result)}, dirty-L2 write-back "
            f"fraction {result['dirty_l2_writeback_fraction']}", highlight=False, markup=False)  # fmt: skip
    for name, e in result["errors"].items():
        if e.get("n"):
            c.print(f"  {name}: n={e['n']} median {e['median_abs_pct']:.1f}% p90 "
                    f"{e['p90_abs_pct']:.1f}%", highlight=False, markup=False)  # fmt: skip
    c.print(f"wrote {Path(report or '.') / 'conditions-report.md'}"
            + (f"; merged into {merge}" if merge else ""), highlight=False, markup=False)  # fmt: skip


def _install_system_calibration(result: dict, out_dir: Path) -> None:
    """Copy the fit to the user cache (``calibrations/<gpu>-x<n>/``), where predictions of
    collectives on that GPU and system look first (gpumodel.calibration)."""
    from gpumodel.calibration import SYSTEM_FILE, atomic_write_text, user_system_calibration_path

    fitted = out_dir / SYSTEM_FILE
    if not result.get("params") or not fitted.is_file():
        return
    target = user_system_calibration_path(result["gpu"], int(result["world"]))
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target, fitted.read_text(encoding="utf-8"), replaces_input=True)
    result["written"] = [*result.get("written", []), str(target)]
    result["found_by_predictions_at"] = str(target)


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
    _exit_if_missed(fails)


def _exit_if_missed(missed: list[str]) -> None:
    """Exit 1 (not 2: the input was fine, the measurements missed) when a target was missed,
    with one line on stderr saying which, also under --json/--csv where stdout is data."""
    if missed:
        import sys

        more = f" (+{len(missed) - 1} more)" if len(missed) > 1 else ""
        print(f"validate: {len(missed)} target(s) missed: {missed[0]}{more}", file=sys.stderr)
        raise typer.Exit(1)
