"""``gpumodel batch FILE --gpu ID``: predict every op of a file, results in the same order.

Rows are read, predicted and written a chunk at a time (``CHUNK`` rows), so memory stays flat
whatever the file's size and the first rows appear before the last are read: a 100,000-row
table, CSV or JSON takes about a second (benchmarks/bench_batch_output.py). JSONL and CSV are
read line by line; .json and .yaml are whole documents, read at once within the input limit
(gpumodel._io; ``--max-input-mb`` raises it). A bad row stops the
command with one line and exit code 2 after the rows before it have been written.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from itertools import islice
from typing import Any

import typer

import gpumodel as gm
from gpumodel.cli._app import app, json_text

CHUNK = 8192
KEYS = ("op", "time_s", "bound", "flops", "bytes", "arithmetic_intensity")


@app.command()
def batch(
    file: str = typer.Argument(
        ..., help="ops as .jsonl, .json, .yaml or .csv (an 'op' field per row)"
    ),
    gpu: str = typer.Option("h100", help="GPU id or alias"),
    calibration: str = typer.Option(None, help="'none', a calibration file, or a GPU id"),
    as_json: bool = typer.Option(False, "--json", help="full predictions as JSON"),
    as_csv: bool = typer.Option(False, "--csv", help="one CSV row per op (raw values)"),
    condition: str = typer.Option(
        "in-workload",
        help="in-workload (back to back: the power-limited sustained clock), isolated (one call) "
        "or in-graph (in-workload, replayed from a CUDA graph)",
    ),
    max_input_mb: float = typer.Option(
        None, "--max-input-mb", help="read limit for the batch file, MB (default 512)"
    ),
) -> None:
    """Predict many ops at once (vectorised for GEMM and elementwise rows). Rows stream out
    as they are predicted: any file size runs in constant memory.

    Example: gpumodel batch ops.jsonl --gpu h100 --condition isolated
    """
    from gpumodel._io import input_limit_mb
    from gpumodel.calibration import calibration_label, resolve
    from gpumodel.vectorised import predict_rows

    spec = gm.get_gpu(gpu)
    label = calibration_label(resolve(calibration, spec))

    def predict_chunks() -> Iterator[tuple[int, list[dict]]]:
        for start, located in _chunks(file):
            chunk = [row for _, row in located]
            try:
                yield start, predict_rows(chunk, spec, calibration, condition, start)
            except gm.GpumodelError as exc:
                # the rows before the bad one are written first; the error names its line
                bad = _first_bad_row(chunk, spec, calibration, condition)
                if bad is None:  # no row alone (the condition, the calibration): as raised
                    raise
                if bad:
                    yield start, predict_rows(chunk[:bad], spec, calibration, condition, start)
                why = str(exc)
                why = why.split(": ", 1)[1] if why.startswith("op #") else why
                raise type(exc)(f"{located[bad][0]} (row #{start + bad}): {why}") from None

    predicted = predict_chunks()
    with input_limit_mb(max_input_mb):
        if as_json:
            _write_json(predicted)
        elif as_csv:
            _write_csv(predicted, spec.id, label)
        else:
            _write_table(predicted, spec.id, label)


def _chunks(path: str) -> Iterator[tuple[int, list[tuple[str, dict[str, Any]]]]]:
    """(index of the first row, (where, row) pairs) for each run of ``CHUNK`` rows of the file."""
    from gpumodel.batchio import located_rows

    rows = located_rows(path)
    start = 0
    while chunk := list(islice(rows, CHUNK)):
        yield start, chunk
        start += len(chunk)


def _first_bad_row(rows: list[dict[str, Any]], *args: Any) -> int | None:
    """Index of the first row ``predict_rows(rows, *args)`` refuses: the first whose op does
    not validate, else the first that does not price on its own (None where none alone does)."""
    from gpumodel.ops import from_row
    from gpumodel.vectorised import predict_rows

    try:
        predict_rows([], *args)  # the command's own options (the condition)
    except gm.GpumodelError:
        return None
    for check in (from_row, lambda row: predict_rows([row], *args)):
        for i, row in enumerate(rows):
            try:
                check(row)
            except gm.GpumodelError:
                return i
    return None


def _write_json(predicted: Iterator[tuple[int, list[dict]]]) -> None:
    """One JSON array, laid out as ``json.dumps(all_rows, indent=2)`` would be; closed even
    when a bad row stops it (stdout stays valid JSON: the rows before it; the error on
    stderr, exit 2)."""
    out = sys.stdout
    n = 0
    try:
        for _, results in predicted:
            for r in results:
                text = json_text(r).replace("\n", "\n  ")
                out.write(("[\n  " if n == 0 else ",\n  ") + text)
                n += 1
    finally:
        out.write("\n]\n" if n else "[]\n")


def _write_csv(predicted: Iterator[tuple[int, list[dict]]], gpu: str, label: str) -> None:
    import csv

    from gpumodel.cli.tables import csv_value

    w = csv.writer(sys.stdout, lineterminator="\n")
    w.writerow(["row", *KEYS])
    for start, results in predicted:
        w.writerows([i, *(csv_value(r[k]) for k in KEYS)] for i, r in enumerate(results, start))
    sys.stderr.write(f"# calibration {gpu}: {label}\n")


def _write_table(predicted: Iterator[tuple[int, list[dict]]], gpu: str, label: str) -> None:
    from gpumodel.calibration import calibration_short
    from gpumodel.cli.tables import Table, write_stream

    ft = gm.format_time
    t = Table(title=f"ops on {gpu} ({calibration_short(label)})",
              columns=["#", "op", "time", "bound", "AI (FLOP/B)"],
              right={"#", "time", "AI (FLOP/B)"})  # fmt: skip
    count = 0

    def cells() -> Iterator[list[list[str]]]:
        nonlocal count
        for start, results in predicted:
            count = start + len(results)
            yield [[str(i), r["op"], ft(r["time_s"]), r["bound"],
                    f"{r['arithmetic_intensity']:.3g}"] for i, r in enumerate(results, start)]  # fmt: skip

    write_stream(t, cells(), grow="op", notes=lambda: [f"{count:,} ops",
                                                        f"calibration {gpu}: {label}"])  # fmt: skip
