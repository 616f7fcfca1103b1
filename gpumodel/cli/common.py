"""Options shared by commands that predict on GPUs: --gpu, --calibration, --json, --specs-dir."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gpumodel as gm
from gpumodel.cli._app import fail, split_list


def resolve_gpus(gpu: str, specs_dir: Sequence[str] = ()) -> list[gm.GPUSpec]:
    names = split_list(gpu)
    if not names:
        fail("--gpu needs at least one GPU id, e.g. --gpu h100 or --gpu a100,h100")
    specs: dict[str, gm.GPUSpec] = {}
    for n in names:  # one column per GPU: an alias and its id name one
        g = gm.get_gpu(n, specs_dir)
        specs.setdefault(g.id, g)
    return list(specs.values())


def calibration_for(gpu: gm.GPUSpec, calibration: str | None, calibration_from: str | None,
                    gpus: int = 1) -> Any:  # fmt: skip
    """What to pass as ``calibration=``: a transferred one, a named one, or None (best found);
    ``gpus``: how many the comparison holds (``choose_calibration``)."""
    from gpumodel.calibration import choose_calibration

    if calibration_from and calibration:
        fail("pass --calibration or --calibration-from, not both")
    return choose_calibration(gpu, calibration, calibration_from or None, gpus=gpus)


def predict_on_gpus(
    op: gm.ops.Op,
    gpus: list[gm.GPUSpec],
    calibration: str | None,
    calibration_from: str | None,
    l2: str = "cold",
    condition: str = "in-workload",
    host: str | None = None,
) -> list[gm.Prediction]:
    return [
        gm.predict(
            op,
            g,
            calibration_for(g, calibration, calibration_from, len(gpus)),
            l2=l2,  # type: ignore[arg-type]
            condition=condition,
            host=host,
        )  # type: ignore[arg-type]
        for g in gpus
    ]


def common_label(preds: list[gm.Prediction]) -> str:
    """The op of ``preds`` (one per GPU) as one label; a field each GPU runs differently
    (attention's ``impl``: SDPA's dispatch per GPU) shows each value with its GPUs."""
    import re

    labels = [p.op for p in preds]
    if len(set(labels)) == 1:
        return labels[0]
    split = [re.match(r"(\w+)\((.*)\)$", lb) for lb in labels]
    fields = [re.split(r", (?=\w+=)", m.group(2)) if m else [] for m in split]
    if not all(split) or len({(m.group(1), len(f)) for m, f in zip(split, fields)}) != 1:  # type: ignore[union-attr]
        return " / ".join(dict.fromkeys(labels))
    out = []
    for column in zip(*fields):
        if len(set(column)) == 1:
            out.append(column[0])
            continue
        key = column[0].split("=", 1)[0]
        by_value: dict[str, list[str]] = {}
        for f, p in zip(column, preds):
            by_value.setdefault(f.split("=", 1)[1], []).append(p.gpu)
        out.append(f"{key}=" + " / ".join(f"{v} ({', '.join(g)})" for v, g in by_value.items()))
    return f"{split[0].group(1)}({', '.join(out)})"  # type: ignore[union-attr]


def mixed_clock_warning(preds: list[gm.Prediction]) -> list[str]:
    """A one-line warning when side-by-side predictions price compute at a power-limited
    sustained clock on some GPUs and at the maximum clock on others (no calibrated power
    behaviour there): compute-bound times are then not like for like."""
    clocks = {p.gpu: next((t for t in p.terms if t.name == "sustained clock"), None)
              for p in preds}  # fmt: skip
    assumed = [g for g, t in clocks.items() if t is not None and "not modelled" in t.note]
    modelled = [g for g, t in clocks.items() if t is not None and "not modelled" not in t.note]
    if not assumed or not modelled:
        return []
    return [f"sustained clock: modelled for {', '.join(modelled)}, the maximum clock assumed for "
            f"{', '.join(assumed)} (no calibrated power behaviour): compute-bound times there may "
            "be optimistic; --condition isolated prices all at the maximum clock"]  # fmt: skip


def prediction_table(preds: list[gm.Prediction]):
    """One column per GPU, one row per quantity; each column's calibration in a row (short) and
    in full in a footnote. CSV: one row per GPU with the raw values."""
    from gpumodel.calibration import (
        calibration_short,
        datasheet_only_note,
        mixed_calibration_warning,
    )
    from gpumodel.cli.tables import Table
    from gpumodel.units import format_number

    fq, ft = gm.format_quantity, gm.format_time
    table = Table(title=common_label(preds), columns=["", *[p.gpu for p in preds]],
                  right={p.gpu for p in preds})  # fmt: skip

    def kind(p: gm.Prediction) -> str:  # "measured 2026-11-22" -> "measured"
        return calibration_short(p.calibration).rsplit(" 20", 1)[0].replace(" only", "")

    def date(p: gm.Prediction) -> str:
        short = calibration_short(p.calibration)
        return short.rsplit(" ", 1)[1] if " 20" in short else "-"

    def time_range(p: gm.Prediction) -> str:
        r = p.time_range_s
        return f"{ft(r[0])} - {ft(r[1])}" if r else "-"

    def expected(p: gm.Prediction) -> str:  # the explanation's "expected error" line, short
        a = p.accuracy
        return f"{a.median_abs_pct:.1f}% (p90 {a.p90_abs_pct:.0f}%) {a.basis}" if a else "-"

    rows = [
        ("time", lambda p: ft(p.time_s)),
        *([("host drift range", time_range)] if any(p.time_range_s for p in preds) else []),
        ("expected error", expected),
        ("bound", lambda p: p.bound + (f" (roofline: {r})" if (r := p.roofline_disagrees()) else "")),
        ("FLOPs", lambda p: fq(p.flops, "FLOP")),
        ("bytes moved", lambda p: fq(p.bytes, "B")),
        ("AI (FLOP/B)", lambda p: format_number(p.arithmetic_intensity)),
        ("roof", lambda p: f"{p.unit} {p.dtype}"),
        ("peak", lambda p: fq(p.peak_flops, "FLOP/s")),
        ("memory BW", lambda p: fq(p.bandwidth_bytes_per_s, "B/s")),
        ("ridge (FLOP/B)", lambda p: format_number(p.ridge_point)),
        ("attainable", lambda p: fq(p.attainable_flops, "FLOP/s")),
        ("achieved", lambda p: fq(p.achieved_flops, "FLOP/s")),
        ("% of peak", lambda p: f"{100 * p.achieved_flops / p.peak_flops:.3g}%" if p.peak_flops else "-"),
        ("roofline time", lambda p: ft(p.roofline_time_s)),
        ("condition", lambda p: p.condition or "-"),
        ("calibration", kind),
        ("calibrated on", date),
    ]  # fmt: skip
    for name, fn in rows:
        table.add(name, *[fn(p) for p in preds])
    table.notes = [f"calibration {p.gpu}: {p.calibration}" for p in preds]
    labels = {p.gpu: p.calibration for p in preds}
    table.notes += [f"warning: {w}" for w in mixed_calibration_warning(labels)]
    table.notes += [f"note: {n}" for n in datasheet_only_note(labels)]
    if not mixed_calibration_warning(labels):  # a calibration mix already says it
        table.notes += [f"warning: {w}" for w in mixed_clock_warning(preds)]
    keys = ["gpu", "op", "time_s", "bound", "flops", "bytes", "arithmetic_intensity", "unit",
            "dtype", "peak_flops", "bandwidth_bytes_per_s", "ridge_point", "attainable_flops",
            "achieved_flops", "roofline_time_s", "condition", "calibration"]  # fmt: skip
    table.csv_header = keys
    table.csv_rows = [[getattr(p, k) for k in keys] for p in preds]
    return table


def print_predictions(
    preds: list[gm.Prediction], as_json: bool, explain: bool = False, as_csv: bool = False
) -> None:
    import sys

    from gpumodel.cli._app import print_json
    from gpumodel.cli.tables import show

    if as_json:
        data = [p.to_dict() for p in preds]
        print_json(data[0] if len(data) == 1 else data)
        return
    show(prediction_table(preds), as_csv)
    if as_csv:
        return
    for p in preds:
        if explain or len(preds) == 1:  # plain text: no rich console to build (start-up time)
            sys.stdout.write(_wrapped(p.explain()) + "\n")


def _wrapped(text: str) -> str:
    """Lines longer than the CLI's width wrapped, continuations indented under their line."""
    import textwrap

    from gpumodel.cli.tables import WIDTH

    out = []
    for line in text.splitlines():
        if len(line) <= WIDTH:
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip()) + 2)
        out.append(textwrap.fill(line, WIDTH, subsequent_indent=indent, break_on_hyphens=False))
    return "\n".join(out)
