"""``gpumodel batch FILE --gpu ID``: predict every op of a file, results in the same order."""

from __future__ import annotations

import sys

import typer

import gpumodel as gm
from gpumodel.cli._app import app, fail


@app.command()
def batch(
    file: str = typer.Argument(
        ..., help="ops as .jsonl, .json, .yaml or .csv (an 'op' field per row)"
    ),
    gpu: str = typer.Option("h100", help="GPU id or alias"),
    calibration: str = typer.Option(None, help="'none', a calibration file, or a GPU id"),
    as_json: bool = typer.Option(False, "--json", help="full predictions as JSON"),
    as_csv: bool = typer.Option(False, "--csv", help="one CSV row per op (raw values)"),
    max_input_mb: float = typer.Option(
        None, "--max-input-mb", help="read limit for a .json/.yaml batch file, MB (default 512)"
    ),
) -> None:
    """Predict many ops at once (vectorised for GEMM and elementwise rows)."""
    from gpumodel.batchio import chunks, iter_rows
    from gpumodel.vectorised import predict_rows

    if as_json and as_csv:
        fail("pass --json or --csv, not both")
    from gpumodel.calibration import calibration_label, resolve

    spec = gm.get_gpu(gpu)
    label = calibration_label(resolve(calibration, spec))
    # rows are read, predicted and written a chunk at a time: memory stays flat for any file
    out = _JsonOut() if as_json else _CsvOut(spec.id, label) if as_csv else _TextOut(spec.id, label)
    from gpumodel._io import input_limit_mb

    start = 0
    with input_limit_mb(max_input_mb):
        for chunk in chunks(iter_rows(file)):
            out.write(predict_rows(chunk, spec, calibration), start)
            start += len(chunk)
    out.close(start)


class _JsonOut:
    """One JSON array, laid out as ``json.dumps(whole_list, indent=2)`` would, a chunk at a time."""

    def write(self, items: list[dict], start: int) -> None:
        import json
        import textwrap

        text = ",\n".join(textwrap.indent(json.dumps(r, indent=2), "  ") for r in items)
        sys.stdout.write(("[\n" if start == 0 else ",\n") + text)

    def close(self, count: int) -> None:
        sys.stdout.write("\n]\n" if count else "[]\n")


_KEYS = ["op", "time_s", "bound", "flops", "bytes", "arithmetic_intensity"]


class _CsvOut:
    def __init__(self, gpu: str, label: str) -> None:
        self.note = f"calibration {gpu}: {label}"

    def write(self, items: list[dict], start: int) -> None:
        import csv

        from gpumodel.cli.tables import csv_value

        w = csv.writer(sys.stdout, lineterminator="\n")
        if start == 0:
            w.writerow(["row", *_KEYS])
        for i, r in enumerate(items, start):
            w.writerow([i, *(csv_value(r[k]) for k in _KEYS)])

    def close(self, count: int) -> None:
        if count == 0:
            self.write([], 0)
        sys.stderr.write(f"# {self.note}\n")


class _TextOut:
    """The plain-text table, streamed: column widths fixed up front (cells are short)."""

    COLUMNS = ("#", "op", "time", "bound", "AI (FLOP/B)")
    WIDTHS = (9, 22, 10, 8, 11)

    def __init__(self, gpu: str, label: str) -> None:
        from gpumodel.calibration import calibration_short

        self.gpu, self.label = gpu, label
        self.title = f"ops on {gpu} ({calibration_short(label)})"

    def _line(self, cells: tuple[str, ...] | list[str]) -> str:
        from gpumodel.cli.tables import GAP, _cell

        right = (True, False, True, False, True)
        return GAP.join(_cell(c, w, r) for c, w, r in zip(cells, self.WIDTHS, right)).rstrip()

    def write(self, items: list[dict], start: int) -> None:
        from gpumodel.cli.tables import GAP

        lines = []
        if start == 0:
            lines += [self.title, self._line(self.COLUMNS), GAP.join("-" * w for w in self.WIDTHS)]
        ft = gm.format_time
        lines += [self._line([str(i), r["op"], ft(r["time_s"]), r["bound"],
                              f"{r['arithmetic_intensity']:.3g}"])
                  for i, r in enumerate(items, start)]  # fmt: skip
        sys.stdout.write("\n".join(lines) + "\n")

    def close(self, count: int) -> None:
        if count == 0:
            self.write([], 0)
        sys.stdout.write(f"{count:,} ops; calibration {self.gpu}: {self.label}\n")
