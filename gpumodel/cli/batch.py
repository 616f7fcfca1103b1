"""``gpumodel batch FILE --gpu ID``: predict every op of a file, results in the same order."""

from __future__ import annotations

import typer

import gpumodel as gm
from gpumodel.cli._app import app, fail, print_json


@app.command()
def batch(
    file: str = typer.Argument(
        ..., help="ops as .jsonl, .json, .yaml or .csv (an 'op' field per row)"
    ),
    gpu: str = typer.Option("h100", help="GPU id or alias"),
    calibration: str = typer.Option(None, help="'none', a calibration file, or a GPU id"),
    as_json: bool = typer.Option(False, "--json", help="full predictions as JSON"),
    as_csv: bool = typer.Option(False, "--csv", help="one CSV row per op (raw values)"),
) -> None:
    """Predict many ops at once (vectorised for GEMM and elementwise rows)."""
    from gpumodel.batchio import read_rows
    from gpumodel.vectorised import predict_rows

    if as_json and as_csv:
        fail("pass --json or --csv, not both")
    rows = read_rows(file)
    results = predict_rows(rows, gm.get_gpu(gpu), calibration)
    if as_json:
        print_json(results)
        return
    from gpumodel.calibration import calibration_label, calibration_short, resolve
    from gpumodel.cli.tables import Table, show

    spec = gm.get_gpu(gpu)
    label = calibration_label(resolve(calibration, spec))
    keys = ["op", "time_s", "bound", "flops", "bytes", "arithmetic_intensity"]
    ft = gm.format_time
    table = Table(title=f"{len(rows):,} ops on {spec.id} ({calibration_short(label)})",
                  columns=["#", "op", "time", "bound", "AI (FLOP/B)"],
                  right={"#", "time", "AI (FLOP/B)"},
                  notes=[f"calibration {spec.id}: {label}"])  # fmt: skip
    if as_csv:
        table.csv_header = ["row", *keys]
        table.csv_rows = [[i, *(r[k] for k in keys)] for i, r in enumerate(results)]
    else:
        table.rows = [[str(i), r["op"], ft(r["time_s"]), r["bound"],
                       f"{r['arithmetic_intensity']:.3g}"] for i, r in enumerate(results)]  # fmt: skip
    show(table, as_csv)
