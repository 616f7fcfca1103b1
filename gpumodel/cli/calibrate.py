"""``gpumodel calibrate --trace STEP.json.gz``: fit a calibration to your own profiled step."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from gpumodel.cli._app import app, console, print_json

if TYPE_CHECKING:
    from gpumodel.calibration import Calibration
    from gpumodel.tracefit import TraceFit


@app.command("calibrate")
def calibrate_command(
    trace: Path = typer.Option(..., help="torch.profiler Chrome trace (.json or .json.gz)"),
    gpu: str = typer.Option(None, help="GPU id when the trace does not name its device"),
    model: str = typer.Option(
        None, help="LLM preset the trace ran (default: named from the trace's GEMM shapes)"
    ),
    step_ms: float = typer.Option(
        None,
        "--step-ms",
        help="step time measured WITHOUT the profiler (your logs), ms; read it before the "
        "profiler ran in that process, or with TEARDOWN_CUPTI=1 set: torch keeps CUPTI "
        "attached after profiling and later eager steps run 16-27% slower",
    ),
    host: str = typer.Option(
        None,
        help="host profile of the machine that recorded the trace (name or file; `gpumodel "
        "validate --host-only` measures it): without --step-ms its measured profiler cost "
        "per event is removed; an eager inference trace's host is taken at its speed, without "
        "--step-ms or with a GPU-bound one",
    ),
    batch: int = typer.Option(
        None,
        help="a trace of CUDA-graph replays (fused-graph, hf-static-compiled): the traced "
        "step's batch (with --context and --model: its GEMM and attention kernels are fitted)",
    ),
    context: int = typer.Option(
        None, help="... and its context, tokens (decode: the KV length; prefill: the prompt)"
    ),
    phase: str = typer.Option(None, help="... and its phase: decode (default) or prefill"),
    calibration: str = typer.Option(
        None,
        help="the base calibration the fit's family scales apply to: 'none' (the datasheet), a "
        "calibration file or a GPU id (default: the best found for the trace's GPU); a trace "
        "calibration lends its kernel parameters and keeps the scales this trace does not fit",
    ),
    out: Path = typer.Option(
        None,
        help="calibration file to write (default: TRACE-NAME.calibration.yaml here); its "
        "directory must exist; a symbolic link is written through (its target replaced)",
    ),
    as_json: bool = typer.Option(False, "--json", help="machine-readable summary"),
    max_input_mb: float = typer.Option(
        None, "--max-input-mb", help="read limit for the input file, MB (default 512)"
    ),
) -> None:
    """Fit kernel families, the host and the runtime to one profiled step; use the file with
    --calibration in predict, infer and plan (what-ifs: other batch, sequence, GPU)."""
    from gpumodel._io import input_limit_mb
    from gpumodel.tracecal import calibrate_from_trace

    target = _writable(out if out is not None else Path(_stem(trace) + ".calibration.yaml"))
    with input_limit_mb(max_input_mb):
        cal = calibrate_from_trace(trace, gpu=gpu, model=model, step_ms=step_ms, host=host,
                                   batch=batch, context=context, phase=phase,
                                   calibration=calibration)  # fmt: skip
    cal.save(target)
    if as_json:
        print_json({"calibration": str(target), **cal.trace.model_dump(mode="json")})  # type: ignore[union-attr]
        return
    render(cal, target)


def _writable(path: Path) -> Path:
    """The file ``--out`` names, checked before the fit (a fit can take seconds): its directory
    must exist (none is created: a typo in it is an error, not a new folder); a symbolic link is
    written through, its target replaced atomically and the link kept. Then a probe file in
    that directory: a place the checks pass but no file can be made (/proc) fails here."""
    import os
    import tempfile

    from gpumodel._io import OutputFileError, check_target

    if path.is_symlink():
        path = Path(os.path.realpath(path))  # (a dangling link: the file it names)
    path = check_target(path, "calibration")
    try:
        with tempfile.NamedTemporaryFile(dir=path.parent or ".", prefix=f".{path.name}.",
                                         suffix=".probe"):  # fmt: skip
            pass
    except OSError as exc:
        raise OutputFileError(f"{path}: cannot write the calibration there ("
                              f"{exc.strerror or exc}); nothing was written") from None  # fmt: skip
    return path


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".gz", ".json"):
        name = name.removesuffix(suffix)
    return name


def _host_line(fit: TraceFit) -> str:
    """The host per eager kernel: the trace's own, or (a trace of graph replays, whose host is
    a replay's) the host profile's, and why."""
    if fit.eager_host_from is None:
        return (f"  host per issued kernel: {fit.host_per_kernel_s * 1e6:.2f} us (the launches "
                "less a library's helper kernels inside one call, e.g. split-K reductions, plus "
                "graph replays)")  # fmt: skip
    n = fit.graph_launches_per_step
    replays = f"{n:.3g} graph replay{'' if n == 1 else 's'}"
    return (f"  host per step: {fit.profiler.host_step_s * 1e3:.3f} ms for {replays} (a "
            "replay's host, not an eager kernel's); eager kernels (a prefill, a training "
            f"step): {fit.host_per_kernel_s * 1e6:.2f} us each, from {fit.eager_host_from}")  # fmt: skip


def render(cal: Calibration, target: Path) -> None:
    from gpumodel.predict import span_text
    from gpumodel.tracecal import GRAPH_NOTE

    fit = cal.trace
    assert fit is not None
    out = console()
    p = fit.profiler
    sc = fit.self_check
    host_after = f"{p.host_step_s * 1e3:.3f} ms/step"
    graph = any(n.startswith(GRAPH_NOTE) for n in fit.notes)  # a graph trace, fitted by name
    if p.host_speed_factor != 1.0:  # the trace's host taken at the --host profile's speed
        host_after = (f"{p.host_step_s / p.host_speed_factor * 1e3:.3f} ms/step, "
                      f"x{p.host_speed_factor:.3g} to the --host profile's speed: {host_after}")  # fmt: skip
    lines = [
        f"{fit.trace_path}: {cal.device_name} ({fit.gpu_id}), runtime {fit.runtime}; "
        f"{fit.steps} steps, {fit.kernels_per_step:.0f} kernel launches and "
        f"{fit.graph_launches_per_step:.0f} graph launches per step",
        f"  evidence: {'; '.join(fit.runtime_evidence)}",
        *(f"  {n}" for n in fit.notes if n.startswith("model:")),
        f"  matched to modelled ops{' by name (GEMM, attention)' if graph else ''}: "
        f"{100 * fit.matched_fraction:.1f}% of the step's GPU time",
        f"  profiler's own host cost: {p.method}: {p.per_event_s * 1e6:.2f} us x "
        f"{p.events_per_step:.0f} events = {p.removed_per_step_s * 1e3:.3f} ms/step removed "
        f"(host {p.profiled_host_step_s * 1e3:.3f} -> {host_after})",
        _host_line(fit),
        *(
            [
                f"  peak memory (allocator): {fit.peak_allocated_bytes / 1e9:.2f} GB allocated, "
                f"{(fit.peak_reserved_bytes or 0) / 1e9:.2f} GB reserved"
            ]
            if fit.peak_allocated_bytes is not None
            else []
        ),
        "  fitted families (measured / predicted GPU time per step, scale, and the predicted "
        "kernels it was fitted on: outside them the scale fades to 1):",
    ]
    width = max([28, *(len(f.key) for f in fit.families)])  # the keys in one column
    for f in fit.families:
        mark = "" if f.fitted else "  (too small to fit; base kept)"
        if f.fitted and f.span_lo_s is not None and f.span_hi_s is not None:
            # where the scale holds: outside these kernel times it fades to 1
            mark = f"  {span_text((f.span_lo_s, f.span_hi_s))}"
        lines.append(f"    {f.key:<{width}} {f.measured_s * 1e3:9.3f} ms / {f.predicted_s * 1e3:9.3f} ms"
                     f"  x{f.scale:.3f}{mark}")  # fmt: skip
    if fit.unmatched:
        lines.append("  not matched (largest first):")
        for u in fit.unmatched:
            lines.append(f"    {u['kernel'][:48]:<48} {u['s_per_step'] * 1e3:8.3f} ms/step  "
                         f"{u['reason']}"[:99])  # fmt: skip
    if "error_pct" in sc:
        lines.append(
            f"  fitted model on the traced step: {sc['step_predicted_s'] * 1e3:.3f} ms vs "
            f"{sc['step_measured_s'] * 1e3:.3f} ms measured without the profiler "
            f"({sc['error_pct']:+.1f}%)"
        )
    else:
        traced = sc.get("step_traced_s", sc["step_profiled_s"])
        lines.append(
            f"  fitted model on the traced step: {sc['step_predicted_s'] * 1e3:.3f} ms without "
            f"the profiler ({traced * 1e3:.3f} ms traced with it, the host's "
            f"ProfilerStep {sc['step_profiled_s'] * 1e3:.3f} ms; pass --step-ms with the "
            "unprofiled time to check it)"
        )
    lines += [f"  {n}" if n.startswith("warning:") else f"  note: {n}"
              for n in fit.notes if not n.startswith("model:")]  # fmt: skip
    lines.append(f"wrote {target}")
    for line in lines:
        out.print(line, highlight=False, markup=False, soft_wrap=True)


__all__ = ["calibrate_command"]
