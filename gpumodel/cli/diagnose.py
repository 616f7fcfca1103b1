"""``gpumodel diagnose TRACE``: each op of a real profile against its speed of light, and the
step-level findings (idle gaps, launch-bound, pageable copies, tensor-core misses, fusion)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

import gpumodel as gm
from gpumodel.cli._app import app, console, print_json

if TYPE_CHECKING:
    from gpumodel.diagnose import DiagnoseReport


@app.command("diagnose")
def diagnose_command(
    trace: Path = typer.Argument(
        ..., help="torch.profiler Chrome trace (.json/.json.gz) or nsys cuda_gpu_kern_sum CSV"
    ),
    gpu: str = typer.Option(None, help="GPU id when the trace does not name its device"),
    top: int = typer.Option(20, help="ops to list, by recoverable time"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output (schema v3)"),
    as_csv: bool = typer.Option(False, "--csv", help="the per-op table as CSV"),
    plot: Path = typer.Option(
        None, help="draw measured vs speed of light and the roofline to FILE.png"
    ),
    calibration: str = typer.Option(None, help="'none' for datasheet only, a file, or a GPU id"),
    html: Path = typer.Option(None, "--html", help="also write a self-contained HTML report"),
    max_input_mb: float = typer.Option(
        None, "--max-input-mb", help="read limit for the input file, MB (default 512)"
    ),
    step_ms: float = typer.Option(
        None, "--step-ms", help="the step time measured without the profiler (your logs), ms: "
        "takes the profiler's own host cost out exactly (else it is estimated)",
    ),
    host: str = typer.Option(
        None, "--host", help="host profile (name or file) of the machine that recorded the "
        "trace: its measured profiler cost per event",
    ),
) -> None:
    """Place every kernel of a profile against its roofline and name what holds the step back."""
    from gpumodel._io import input_limit_mb
    from gpumodel.diagnose import diagnose

    with input_limit_mb(max_input_mb):
        report = diagnose(trace, gpu=gpu, calibration=calibration, top=top, step_ms=step_ms,
                          host=host)  # fmt: skip
    if plot is not None:
        from gpumodel.diagnose.plot import plot_report

        plot_report(report, plot)
    if html is not None:
        from gpumodel.report import write_report

        write_report("diagnose", report, html, trace=trace)
    if as_json:
        print_json(report.to_dict())
        return
    if as_csv:
        from gpumodel.cli.tables import write_records

        ops = report.to_dict().get("ops", [])
        write_records([{"gpu": report.gpu.name, "calibration": report.calibration, **o}
                       for o in ops])  # fmt: skip
        return
    render(report)
    for written in (plot, html):
        if written is not None:
            console().print(f"wrote {written}", highlight=False, markup=False)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def _shapes(shapes: list[list[int]]) -> str:
    return " ".join("[" + ",".join(str(d) for d in s) + "]" for s in shapes[:3])


def render(report: DiagnoseReport) -> None:
    from rich.table import Table

    out = console()
    st = report.steps
    head = (f"{report.source.path or 'trace'}: {report.gpu.name}"
            + (f" ({report.gpu.device_name})" if report.gpu.device_name else "")
            + f"; calibration: {report.calibration}")  # fmt: skip
    out.print(head, highlight=False, markup=False)
    step = f"step {gm.format_time(st.step_time_s)} ({st.source}, {st.count} step(s))"
    if st.gpu_utilization_pct is not None:
        step += (f"; GPU busy {gm.format_time(st.gpu_busy_s or 0.0)}, idle "
                 f"{gm.format_time(st.gpu_idle_s or 0.0)} per step ({st.gpu_utilization_pct:.0f}% "
                 f"utilised), {st.kernels_per_step:.0f} kernels per step")  # fmt: skip
    out.print(step, highlight=False, markup=False)
    unprof, prof = st.unprofiled_step_time_s, report.profiler
    if unprof is not None and prof is not None and st.step_time_s - unprof > 1e-3 * st.step_time_s:
        how = (f"solved from --step-ms ({prof.per_event_s * 1e6:.3g} us an event)"
               if prof.method.startswith("step-ms") else
               f"at {prof.per_event_s * 1e6:.3g} us each, the "
               f"{prof.method.removesuffix(' (no --step-ms given)')}: pass --step-ms, the step "
               "time from your logs, for the exact figure")  # fmt: skip
        span = st.unprofiled_step_range_s
        if span is not None:
            from gpumodel.tracecal import PROFILER_EVENT_SPREAD_S as lo_hi

            how += (f"; {gm.format_time(span[0])} - {gm.format_time(span[1])} at "
                    f"{lo_hi[1] * 1e6:.3g} - {lo_hi[0] * 1e6:.3g} us, the p90 - p10 of traced "
                    "machines")  # fmt: skip
        out.print(f"without the profiler: {gm.format_time(unprof)} per step "
                  f"({prof.events_per_step:.0f} recorded events a step, {how}); the findings "
                  "and Amdahl below are for this step", highlight=False, markup=False)  # fmt: skip

    table = Table(title="Per-op speed of light (sorted by recoverable time, whole trace)")
    for col, just in (("op", "left"), ("phase", "left"), ("shapes", "left"), ("dtype", "left"),
                      ("calls", "right"), ("measured ms", "right"), ("model ms", "right"),
                      ("SoL ms", "right"), ("SoL %", "right"), ("bound", "left"),
                      ("recoverable ms", "right")):  # fmt: skip
        table.add_column(col, justify=just)  # type: ignore[arg-type]
    for r in report.ops:
        table.add_row(
            r.name, r.phase, _shapes(r.shapes), r.dtype, str(r.count), _ms(r.measured_s),
            _ms(r.predicted_s),
            _ms(r.sol_per_call_s * r.count if r.sol_per_call_s is not None else None),
            f"{r.sol_pct:.0f}" if r.sol_pct is not None else "-",
            r.bound or f"unmapped: {r.reason}", _ms(r.recoverable_s) if r.mapped else "-",
        )  # fmt: skip
    if report.ops_omitted.count:
        table.add_row(f"... {report.ops_omitted.count} more", "", "", "", "",
                      _ms(report.ops_omitted.measured_s), "", "", "", "", "")  # fmt: skip
    out.print(table)

    if report.findings:
        # a kernel summary (Nsight) or a trace without steps: its totals are the trace's
        per = "per step" if report.steps.source.startswith("ProfilerStep") else "whole trace"
        out.print(f"Findings ({per}):", style="bold")
    else:
        out.print("No step-level finding above 1% of the step.", highlight=False)
    for i, f in enumerate(report.findings, 1):
        cost = (f"{f.recoverable_s * 1e3:.2f} ms ({f.pct_of_step:.0f}% of the step)"
                if f.recoverable_s is not None and f.pct_of_step is not None
                else "not quantified")  # fmt: skip
        out.print(f"{i}. [{f.kind}] {f.title}: {cost}", highlight=False, markup=False)
        for e in f.evidence:
            out.print(f"     {e}", highlight=False, markup=False)
        out.print(f"     fix: {f.fix}", highlight=False, markup=False)

    a = report.amdahl
    if a.per_finding:
        out.print("Amdahl: step time if fixed", style="bold")
        for e in a.per_finding:
            sp = f"{e.speedup:.2f}x" if e.speedup is not None else "-"
            out.print(f"  {e.kind}: {gm.format_time(e.step_time_s)} ({sp})", highlight=False,
                      markup=False)  # fmt: skip
        sp = f"{a.all_fixed_speedup:.2f}x" if a.all_fixed_speedup is not None else "-"
        out.print(f"  all of them: {gm.format_time(a.all_fixed_step_time_s)} ({sp}); {a.note}",
                  highlight=False, markup=False)  # fmt: skip
    if a.speed_of_light_step_s is not None:
        # the ops as traced: a fix above that changes their precision (fp32 -> TF32) can beat it
        out.print(f"  every mapped op at its speed of light, no idle: "
                  f"{gm.format_time(a.speed_of_light_step_s)} per step (the ops as traced, "
                  "at their own precision)", highlight=False, markup=False)  # fmt: skip
    for n in report.notes:
        out.print(f"note: {n}", highlight=False, markup=False)


__all__ = ["diagnose_command", "render"]
