"""``gpumodel batch FILE --gpu ID``: predict every op of a file, results in the same order."""

from __future__ import annotations

import typer

import gpumodel as gm
from gpumodel.cli._app import app, console, print_json


@app.command()
def batch(
    file: str = typer.Argument(
        ..., help="ops as .jsonl, .json, .yaml or .csv (an 'op' field per row)"
    ),
    gpu: str = typer.Option("h100", help="GPU id or alias"),
    calibration: str = typer.Option(None, help="'none', a calibration file, or a GPU id"),
    as_json: bool = typer.Option(False, "--json", help="full predictions as JSON"),
) -> None:
    """Predict many ops at once (vectorised for GEMM and elementwise rows)."""
    from gpumodel.batchio import read_rows
    from gpumodel.vectorised import predict_rows

    rows = read_rows(file)
    results = predict_rows(rows, gm.get_gpu(gpu), calibration)
    if as_json:
        print_json(results)
        return
    from rich.table import Table

    table = Table(title=f"{len(rows)} ops on {gpu}")
    for col in ("#", "op", "time", "bound", "AI (FLOP/B)"):
        table.add_column(col)
    for i, r in enumerate(results):
        table.add_row(str(i), r["op"], gm.format_time(r["time_s"]), r["bound"],
                      f"{r['arithmetic_intensity']:.3g}")  # fmt: skip
    console().print(table)
