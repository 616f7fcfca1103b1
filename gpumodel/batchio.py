"""Read ops from JSONL, YAML or CSV files (an ``op`` field per row) for ``gpumodel batch``.

JSONL and CSV are streamed one line at a time (:func:`iter_rows`: constant memory, whatever the
file's size); JSON and YAML are whole documents, read within the input limit (gpumodel._io).
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from gpumodel._io import iter_lines, loads_json, max_input_bytes, read_text, read_yaml
from gpumodel.errors import SpecError

FORMATS = (".jsonl", ".ndjson", ".json", ".yaml", ".yml", ".csv")


def iter_rows(path: str | Path) -> Iterator[dict[str, Any]]:
    """Rows of a batch file, in order. Format from the suffix: .jsonl/.json, .yaml/.yml, .csv."""
    for _, row in located_rows(path):
        yield row


def located_rows(path: str | Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, row) for each row of a batch file: ``FILE:LINE`` (JSONL, CSV) or ``FILE: row N``
    (a .json or .yaml list), what an error about the row names."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise SpecError(
            f"{path}: unknown batch format '{suffix}'; use .jsonl, .json, .yaml or .csv"
        )
    if suffix in (".jsonl", ".ndjson"):
        for number, line in iter_lines(path, "batch file"):
            if line.strip():
                row = loads_json(line, path, "row", line=number)
                yield f"{path}:{number}", _mapping(row, f"{path}:{number}")
    elif suffix == ".csv":
        yield from _csv_rows(path)
    else:
        # a .json/.yaml batch is parsed whole (~10x its size in memory): bounded like YAML,
        # and the message points to JSONL, which streams (a 200 MB .json hit MemoryError)
        if suffix == ".json":
            text = read_text(path, "batch file (use .jsonl for a large batch: it streams)",
                             max_input_bytes(yaml=True))  # fmt: skip
            # an empty file holds no rows, as an empty .jsonl or .csv does
            rows = loads_json(text, path, "batch file") if text.strip() else []
        else:
            rows = read_yaml(path, "batch file (use .jsonl for a large batch: it streams)")
            rows = [] if rows is None else rows  # an empty YAML document
        if isinstance(rows, dict) and "ops" in rows:
            rows = rows["ops"]
        if not isinstance(rows, list):
            raise SpecError(f"{path}: expected a list of rows, each a mapping with an 'op' field")
        for number, row in enumerate(rows, 1):
            yield f"{path}: row {number}", _mapping(row, f"{path}: row {number}")


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """All rows of a batch file as a list (see :func:`iter_rows` to stream them)."""
    return list(iter_rows(path))


def chunks(rows: Iterator[dict[str, Any]], size: int = 4096) -> Iterator[list[dict[str, Any]]]:
    """``rows`` in lists of at most ``size`` (what ``gpumodel batch`` predicts at once)."""
    while chunk := list(islice(rows, size)):
        yield chunk


def _mapping(row: Any, where: str) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise SpecError(f"{where}: expected a mapping with an 'op' field")
    return row


def _csv_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    lines = (line for _, line in iter_lines(path, "batch file"))
    try:
        reader = csv.DictReader(lines)
        for row in reader:
            where = f"{path}:{reader.line_num}"
            if None in row:
                raise SpecError(f"{where}: more cells than the header has columns")
            yield where, {k.strip(): _cell(v) for k, v in row.items() if k is not None}
    except csv.Error as exc:
        raise SpecError(f"{path}: not valid CSV ({exc})") from None


def _cell(value: str | None) -> Any:
    if value is None or value.strip() == "":
        return None
    v = value.strip()
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    if len(v) > 100:  # no number is this long: keep the text; the op's field check names it
        return v
    try:
        number = float(v)
    except ValueError:
        return v
    if not v.isascii():  # float() reads Arabic-Indic and other Unicode digits: not a CSV number
        return v
    return int(number) if number.is_integer() and not any(c in v for c in ".eE") else number
