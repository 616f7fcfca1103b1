"""Tables for the terminal and for spreadsheets: plain text that fits 100 columns, footnotes for
what does not belong in a cell (calibration files, price sources), and CSV of the same rows.

Plain text rather than rich's boxes: a 100,000-row ``batch`` table renders in well under a
second this way, and the width is under our control (``WIDTH``).
"""

from __future__ import annotations

import csv
import math
import sys
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

WIDTH = 100
GAP = "  "


@dataclass
class Table:
    """A table to show: display cells (strings) per row, right-aligned columns named in
    ``right``, footnotes below. ``csv_header`` / ``csv_rows`` (raw values, default the cells)
    are what ``--csv`` writes."""

    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    right: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    csv_header: list[str] | None = None
    csv_rows: list[list[Any]] | None = None

    def add(self, *cells: Any) -> None:
        self.rows.append([str(c) for c in cells])


def _fit(widths: list[int], width: int, cut: list[bool] | None = None) -> list[int]:
    """Column widths shrunk (widest first) until the row fits ``width``; only the columns
    ``cut`` allows (text: labels), never below 4 characters, the first (what each row is)
    last. Numbers are never cut: a table of very large ones runs wider than ``width``."""
    widths = list(widths)
    cut = [True] * len(widths) if cut is None else cut
    total = sum(widths) + len(GAP) * (len(widths) - 1)
    while total > width:
        others = [j for j in range(1, len(widths)) if cut[j] and widths[j] > 4]
        first = [0] if cut and cut[0] and widths[0] > 4 else []
        if not others and not first:
            break
        i = max(others, key=widths.__getitem__) if others else 0
        widths[i] -= 1
        total -= 1
    return widths


def _cell(text: str, w: int, right: bool) -> str:
    if len(text) > w:
        text = text[: w - 1] + "~"
    return text.rjust(w) if right else text.ljust(w)


def _blocks(widths: list[int], width: int) -> list[list[int]]:
    """The columns after the first in consecutive groups that each fit ``width`` beside the
    first (the row labels) at their natural widths (each column fits beside it alone)."""
    groups: list[list[int]] = [[]]
    used = widths[0]
    for i in range(1, len(widths)):
        need = len(GAP) + widths[i]
        if groups[-1] and used + need > width:
            groups.append([])
            used = widths[0]
        groups[-1].append(i)
        used += need
    return groups


def render_lines(t: Table, width: int = WIDTH) -> Iterable[str]:
    """The table as lines of at most ``width`` characters (cells too long are cut with '~';
    ``--csv`` and ``--json`` keep them whole). Where the row labels (the first column) would be
    cut and every other column fits beside them on its own, the other columns wrap instead:
    blocks of them, each beside the whole labels, nothing cut (a comparison of six GPUs showed
    'cal~' for two different rows); otherwise text is cut, the labels last."""
    n = len(t.columns)
    widths = [len(c) for c in t.columns]
    for row in t.rows:
        for i in range(n):
            widths[i] = max(widths[i], len(row[i]))
    right = [c in t.right for c in t.columns]
    fitted = _fit(widths, width, [not r for r in right])
    # wrap where it keeps every cell whole: each column fits beside the labels on its own
    wrap = (fitted[0] < widths[0] and n > 2
            and all(widths[0] + len(GAP) + w <= width for w in widths[1:]))  # fmt: skip
    blocks = _blocks(widths, width) if wrap else [list(range(1, n))]
    if t.title:
        yield from textwrap.wrap(t.title, width) or [""]
    for k, block in enumerate(blocks):
        cols = [0, *block]
        if len(blocks) > 1:
            fitted = _fit([widths[i] for i in cols], width, [not right[i] for i in cols])
            if k:
                yield ""
        ws = dict(zip(cols, fitted))
        yield GAP.join(_cell(t.columns[i], ws[i], right[i]) for i in cols).rstrip()
        yield GAP.join("-" * ws[i] for i in cols)
        for row in t.rows:
            yield GAP.join(_cell(row[i], ws[i], right[i]) for i in cols).rstrip()
    for note in t.notes:
        yield from textwrap.wrap(note, width, subsequent_indent="  ", break_on_hyphens=False)


def render(t: Table, width: int = WIDTH) -> str:
    return "\n".join(render_lines(t, width))


def write_table(t: Table, out: TextIO | None = None, chunk: int = 4096) -> None:
    """Print the table, writing rows in chunks (a large table streams out)."""
    out = out or sys.stdout
    buf: list[str] = []
    for line in render_lines(t):
        buf.append(line)
        if len(buf) >= chunk:
            out.write("\n".join(buf) + "\n")
            buf = []
    if buf:
        out.write("\n".join(buf) + "\n")


def write_stream(t: Table, chunks: Iterable[list[list[str]]], grow: str | None = None,
                 notes: Callable[[], list[str]] | None = None, out: TextIO | None = None,
                 width: int = WIDTH) -> None:  # fmt: skip
    """Print ``t`` with its rows arriving in chunks (constant memory: a chunk is written before
    the next is made). Column widths come from the first chunk; when more chunks follow, the
    room left in ``width`` goes to the ``grow`` column, and a later cell still too long is cut
    with '~'. ``notes`` is called after the last row (a count known only then)."""
    out = out or sys.stdout
    it = iter(chunks)
    failed: list[BaseException] = []  # a chunk that raised: the rows before it are written first

    def following() -> list[list[str]] | None:
        if failed:
            return None
        try:
            return next(it, None)
        except Exception as exc:
            failed.append(exc)
            return None

    first = following() or []
    second = following()
    widths = [len(c) for c in t.columns]
    for row in first:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    if second is not None:
        widths[0] = max(widths[0], 7)  # row numbers to 9,999,999
        if grow is not None:
            i = t.columns.index(grow)
            widths[i] += max(0, width - sum(widths) - len(GAP) * (len(widths) - 1))
    right = [c in t.right for c in t.columns]
    widths = _fit(widths, width, [not r for r in right])
    head = [*(textwrap.wrap(t.title, width) if t.title else []),
            GAP.join(_cell(c, w, r) for c, w, r in zip(t.columns, widths, right)).rstrip(),
            GAP.join("-" * w for w in widths)]  # fmt: skip
    out.write("\n".join(head) + "\n")
    chunk: list[list[str]] | None = first
    while chunk is not None:
        if chunk:
            out.write("\n".join(GAP.join(_cell(c, w, r) for c, w, r in zip(row, widths, right))
                                .rstrip() for row in chunk) + "\n")  # fmt: skip
        chunk, second = second, (following() if second is not None else None)
    if failed:
        raise failed[0]
    for note in [*t.notes, *(notes() if notes else [])]:
        out.write("\n".join(textwrap.wrap(note, width, subsequent_indent="  ",
                                          break_on_hyphens=False)) + "\n")  # fmt: skip


def csv_value(v: Any) -> Any:
    """CSV cell: NaN (no value) as empty, floats with full precision."""
    if isinstance(v, float) and math.isnan(v):
        return ""
    if isinstance(v, float):
        return repr(v)
    return v


def write_csv(header: Sequence[str], rows: Iterable[Sequence[Any]], out: TextIO | None = None,
              notes: Sequence[str] = ()) -> None:  # fmt: skip
    """CSV with a header row; ``notes`` (sources, calibrations) as trailing '# ' comment lines
    would break strict readers, so they go to stderr."""
    out = out or sys.stdout
    w = csv.writer(out, lineterminator="\n")
    w.writerow(header)
    for row in rows:
        w.writerow([csv_value(v) for v in row])
    for note in notes:
        sys.stderr.write(f"# {note}\n")


def show(t: Table, as_csv: bool = False) -> None:
    """Print ``t`` as text, or as CSV (raw values when the table has them)."""
    if as_csv:
        write_csv(t.csv_header or t.columns, t.csv_rows if t.csv_rows is not None else t.rows,
                  notes=t.notes)  # fmt: skip
    else:
        write_table(t)


def rich_to_csv(table: Any, out: TextIO | None = None) -> None:
    """A rich Table's cells as CSV (for commands that build rich tables)."""
    header = [str(c.header) for c in table.columns]
    columns = [[str(cell) for cell in c.cells] for c in table.columns]
    rows = zip(*columns) if columns else []
    write_csv(header, rows, out)


def print_or_csv(table: Any, as_csv: bool) -> None:
    """Print a rich table, or write its cells as CSV with ``--csv``."""
    if as_csv:
        rich_to_csv(table)
        return
    from gpumodel.cli._app import console

    console().print(table)


def dollars(v: float | None) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if v >= 100:
        return f"${v:,.0f}"
    return f"${v:.3g}"


def write_records(records: Sequence[dict[str, Any]], out: TextIO | None = None) -> None:
    """Dicts as CSV: the keys in first-seen order as the header; lists and dicts as JSON."""
    import json

    header: list[str] = []
    for r in records:
        header += [k for k in r if k not in header]

    def cell(v: Any) -> Any:
        return json.dumps(v) if isinstance(v, (list, dict, tuple)) else v

    write_csv(header, ([cell(r.get(k)) for k in header] for r in records), out)


CSV_HELP = "the table as CSV (raw values; sources on stderr)"
