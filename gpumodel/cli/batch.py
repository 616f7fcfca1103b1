"""``gpumodel batch FILE --gpu ID``: predict every op of a file, results in the same order."""

from __future__ import annotations

import sys

import typer

import gpumodel as gm
from gpumodel.cli._app import app, console


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
    from gpumodel.batchio import chunks, iter_rows
    from gpumodel.vectorised import predict_rows

    spec = gm.get_gpu(gpu)
    # rows are read, predicted and printed a chunk at a time: memory stays flat for any file
    start = 0
    for chunk in chunks(iter_rows(file)):
        results = predict_rows(chunk, spec, calibration)
        if as_json:
            _write_json_items(results, first=start == 0)
        else:
            _print_table(results, start, gpu)
        start += len(chunk)
    if as_json:
        sys.stdout.write("]\n" if start else "[]\n")


def _write_json_items(items: list[dict], first: bool) -> None:
    """Items of one JSON array, laid out as ``json.dumps(whole_list, indent=2)`` would."""
    import json
    import textwrap

    text = ",\n".join(textwrap.indent(json.dumps(r, indent=2), "  ") for r in items)
    sys.stdout.write(("[\n" if first else ",\n") + text + ("\n" if items else ""))


def _print_table(results: list[dict], start: int, gpu: str) -> None:
    from rich.table import Table

    title = f"{len(results)} ops on {gpu}" if start == 0 else f"ops {start}.. on {gpu}"
    table = Table(title=title)
    for col in ("#", "op", "time", "bound", "AI (FLOP/B)"):
        table.add_column(col)
    for i, r in enumerate(results, start):
        table.add_row(str(i), r["op"], gm.format_time(r["time_s"]), r["bound"],
                      f"{r['arithmetic_intensity']:.3g}")  # fmt: skip
    console().print(table)
