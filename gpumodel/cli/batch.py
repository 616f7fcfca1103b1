"""``gpumodel batch FILE --gpu ID``: predict every op of a file, results in the same order.

Rows are read, predicted and written a chunk at a time (``CHUNK`` rows), so memory stays flat
whatever the file's size and the first rows appear before the last are read: a 100,000-row
table, CSV or JSON takes about a second (benchmarks/bench_batch_output.py). JSONL and CSV are
read line by line; .json and .yaml are whole documents, read at once. A bad row stops the
command with one line and exit code 2 after the rows before it have been written.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

import typer

import gpumodel as gm
from gpumodel.cli._app import app, fail

CHUNK = 8192
MAX_LINE_CHARS = 1_000_000
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
        help="in-workload (back to back: the power-limited sustained clock) or isolated (one call)",
    ),
) -> None:
    """Predict many ops at once (vectorised for GEMM and elementwise rows). Rows stream out
    as they are predicted: any file size runs in constant memory.

    Example: gpumodel batch ops.jsonl --gpu h100 --condition isolated
    """
    from gpumodel.calibration import calibration_label, resolve
    from gpumodel.vectorised import predict_rows

    if as_json and as_csv:
        fail("pass --json or --csv, not both")
    if condition not in ("in-workload", "isolated"):
        fail(f"--condition must be in-workload or isolated, got {condition!r}")
    spec = gm.get_gpu(gpu)
    label = calibration_label(resolve(calibration, spec))
    predicted = (
        (start, predict_rows(chunk, spec, calibration, condition)) for start, chunk in _chunks(file)
    )
    if as_json:
        _write_json(predicted)
    elif as_csv:
        _write_csv(predicted, spec.id, label)
    else:
        _write_table(predicted, spec.id, label)


def _chunks(path: str) -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """(index of the first row, rows) for each run of ``CHUNK`` rows of the file."""
    rows = _iter_rows(path)
    start = 0
    while chunk := list(islice(rows, CHUNK)):
        yield start, chunk
        start += len(chunk)


def _iter_rows(path: str) -> Iterator[dict[str, Any]]:
    """The file's rows one at a time. gpumodel.batchio's streaming reader when it has one
    (the bounded reader of #20); until then JSONL and CSV are streamed here, line by line."""
    from gpumodel import batchio

    if hasattr(batchio, "iter_rows"):
        return batchio.iter_rows(path)
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in (".jsonl", ".ndjson"):
        return _jsonl_rows(p)
    if suffix == ".csv":
        return _csv_rows(p)
    return iter(batchio.read_rows(p))


def _lines(path: Path) -> Iterator[str]:
    """The file's lines; one longer than ``MAX_LINE_CHARS`` (no row is: /dev/zero, a binary
    blob) stops with an error instead of filling memory."""
    try:
        with path.open(encoding="utf-8", newline="") as f:
            for number, line in enumerate(iter(lambda: f.readline(MAX_LINE_CHARS + 1), ""), 1):
                if len(line) > MAX_LINE_CHARS:
                    fail(f"{path}:{number}: line longer than {MAX_LINE_CHARS:,} characters")
                yield line
    except OSError as exc:
        fail(f"{path}: cannot read ({exc.strerror})")
    except UnicodeDecodeError:
        fail(f"{path}: not UTF-8 text")


def _jsonl_rows(path: Path) -> Iterator[dict[str, Any]]:
    for number, line in enumerate(_lines(path), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, ValueError) as exc:
            fail(f"{path}:{number}: not valid JSON ({getattr(exc, 'msg', exc)})")
        if not isinstance(row, dict):
            fail(f"{path}:{number}: expected a mapping with an 'op' field")
        yield row


def _csv_rows(path: Path) -> Iterator[dict[str, Any]]:
    import csv

    from gpumodel.batchio import _cell

    try:
        for number, row in enumerate(csv.DictReader(_lines(path)), 2):
            if None in row:
                fail(f"{path}:{number}: more cells than the header has columns")
            yield {k.strip(): _cell(v) for k, v in row.items()}
    except csv.Error as exc:
        fail(f"{path}: not valid CSV ({exc})")


def _write_json(predicted: Iterator[tuple[int, list[dict]]]) -> None:
    """One JSON array, laid out as ``json.dumps(all_rows, indent=2)`` would be."""
    out = sys.stdout
    n = 0
    for _, results in predicted:
        for r in results:
            text = json.dumps(r, indent=2).replace("\n", "\n  ")
            out.write(("[\n  " if n == 0 else ",\n  ") + text)
            n += 1
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
