"""``gpumodel roofline``: peaks, bandwidth and ridge points per dtype and unit; optional plot."""

from __future__ import annotations

from typing import Annotated

import typer

import gpumodel as gm
from gpumodel.cli._app import app, console, fail, print_json
from gpumodel.specs import DTYPES


def parse_op_text(text: str) -> gm.ops.Op:
    """'gemm:m=2048,n=4096,k=4096,dtype=bf16' -> Gemm(...)."""
    name, _, rest = text.partition(":")
    row: dict[str, object] = {"op": name.strip()}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = item.partition("=")
        if not eq:
            fail(f"--op {text!r}: expected key=value after '{name}:', got {item!r}")
        row[key.strip().replace("-", "_")] = _scalar(value.strip())
    return gm.ops.from_row(row)


def _scalar(value: str) -> object:
    low = value.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        number = float(value)
    except ValueError:
        return value
    return int(number) if number.is_integer() and "." not in value and "e" not in low else number


@app.command()
def roofline(
    gpu: str = typer.Option("h100", help="GPU id or alias"),
    dtype: str = typer.Option(None, help="only this dtype"),
    op: Annotated[
        list[str], typer.Option("--op", help="op to place: 'gemm:m=1,n=4096,k=4096'")
    ] = [],
    plot: str = typer.Option(None, help="write the roofline to FILE.png or FILE.svg"),
    calibration: str = typer.Option(None, help="'none', a file, or a GPU id"),
    as_json: bool = typer.Option(False, "--json"),
    as_csv: bool = typer.Option(False, "--csv", help="the table as CSV"),
) -> None:
    """Peaks, memory bandwidth and ridge points of a GPU per dtype and execution unit."""
    spec = gm.get_gpu(gpu)
    if dtype and dtype not in DTYPES:
        fail(f"unknown dtype '{dtype}'; known: {', '.join(DTYPES)}")
    bw = spec.memory_bandwidth_bytes_per_s
    rows = []
    for dt in DTYPES:
        for unit in ("tensor", "vector"):
            peak = spec.peak_flops(dt, unit)
            if peak and (dtype is None or dt == dtype):
                rows.append({"dtype": dt, "unit": unit, "peak_flops": peak,
                             "bandwidth_bytes_per_s": bw, "ridge_point": peak / bw})  # fmt: skip
    if dtype and not rows:  # an empty table is no answer (fuzz, 2026-11-30: fp4 on an H100)
        fail(f"{spec.id} has no {dtype} rate in its spec")
    if calibration is not None:  # checked even when no --op uses it (never silently ignored)
        from gpumodel.calibration import resolve

        resolve(calibration, spec)
    preds = [gm.predict(parse_op_text(t), spec, calibration) for t in op]
    if plot:
        _plot(spec, rows, preds, plot)
    if as_json:
        print_json({"gpu": spec.id, "roofs": rows, "ops": [p.to_dict() for p in preds]})
        return
    if as_csv:
        from gpumodel.cli.tables import write_records

        write_records([{"gpu": spec.id, **r} for r in rows])
        return
    from rich.table import Table

    fq = gm.format_quantity
    table = Table(title=f"{spec.name}: memory {fq(bw, 'B/s')}")
    for col in ("dtype", "unit", "peak", "ridge point (FLOP/B)"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["dtype"], r["unit"], fq(r["peak_flops"], "FLOP/s"), f"{r['ridge_point']:.1f}"
        )
    console().print(table)
    for p in preds:
        console().print(
            f"{p.op}: AI {p.arithmetic_intensity:.3g} FLOP/B, {p.bound}-bound, "
            f"{gm.format_time(p.time_s)}, {fq(p.achieved_flops, 'FLOP/s')}",
            highlight=False, markup=False,
        )  # fmt: skip
    if plot:
        console().print(f"wrote {plot}", highlight=False, markup=False)


def require_matplotlib():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        fail("plotting needs matplotlib: pip install 'gpumodel[plot]'")
    return plt


def _plot(spec: gm.GPUSpec, rows: list[dict], preds: list[gm.Prediction], path: str) -> None:
    import numpy as np

    plt = require_matplotlib()
    fig, ax = plt.subplots(figsize=(8, 5.5))
    ai = np.logspace(-2, 4, 400)
    for r in rows:
        ax.loglog(ai, np.minimum(r["peak_flops"], ai * r["bandwidth_bytes_per_s"]) / 1e12,
                  label=f"{r['unit']} {r['dtype']}")  # fmt: skip
    for p in preds:
        ax.scatter([p.arithmetic_intensity], [p.achieved_flops / 1e12], zorder=5)
        ax.annotate(p.op, (p.arithmetic_intensity, p.achieved_flops / 1e12), fontsize=7)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"Roofline: {spec.name}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    from gpumodel._io import save_figure

    save_figure(fig, path)
    plt.close(fig)
