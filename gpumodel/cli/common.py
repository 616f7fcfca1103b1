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
    return [gm.get_gpu(n, specs_dir) for n in names]


def calibration_for(gpu: gm.GPUSpec, calibration: str | None, calibration_from: str | None) -> Any:
    """What to pass as ``calibration=``: a transferred one, a named one, or None (best found)."""
    from gpumodel.calibration import choose_calibration

    if calibration_from and calibration:
        fail("pass --calibration or --calibration-from, not both")
    return choose_calibration(gpu, calibration, calibration_from or None)


def predict_on_gpus(
    op: gm.ops.Op,
    gpus: list[gm.GPUSpec],
    calibration: str | None,
    calibration_from: str | None,
    l2: str = "cold",
    condition: str = "in-workload",
) -> list[gm.Prediction]:
    return [
        gm.predict(
            op,
            g,
            calibration_for(g, calibration, calibration_from),
            l2=l2,  # type: ignore[arg-type]
            condition=condition,
        )  # type: ignore[arg-type]
        for g in gpus
    ]


def prediction_table(preds: list[gm.Prediction]):
    """Rich table: one column per GPU, one row per quantity."""
    from rich.table import Table

    fq, ft = gm.format_quantity, gm.format_time
    table = Table(title=preds[0].op, show_header=True, header_style="bold")
    table.add_column("")
    for p in preds:
        table.add_column(p.gpu, justify="right")
    rows = [
        ("time", lambda p: ft(p.time_s)),
        ("bound", lambda p: p.bound),
        ("FLOPs", lambda p: fq(p.flops, "FLOP")),
        ("bytes moved", lambda p: fq(p.bytes, "B")),
        ("arithmetic intensity", lambda p: f"{p.arithmetic_intensity:.3g} FLOP/B"),
        ("roof (unit, dtype)", lambda p: f"{p.unit} {p.dtype}"),
        ("peak", lambda p: fq(p.peak_flops, "FLOP/s")),
        ("memory bandwidth", lambda p: fq(p.bandwidth_bytes_per_s, "B/s")),
        ("ridge point", lambda p: f"{p.ridge_point:.3g} FLOP/B"),
        ("attainable (roofline)", lambda p: fq(p.attainable_flops, "FLOP/s")),
        ("achieved (predicted)", lambda p: fq(p.achieved_flops, "FLOP/s")),
        ("% of peak", lambda p: f"{100 * p.achieved_flops / p.peak_flops:.3g}%" if p.peak_flops else "-"),
        ("roofline time", lambda p: ft(p.roofline_time_s)),
        ("condition", lambda p: p.condition or "-"),
        ("calibration", lambda p: p.calibration),
    ]  # fmt: skip
    for name, fn in rows:
        table.add_row(name, *[fn(p) for p in preds])
    return table


def print_predictions(preds: list[gm.Prediction], as_json: bool, explain: bool = False) -> None:
    from gpumodel.cli._app import console, print_json

    if as_json:
        data = [p.to_dict() for p in preds]
        print_json(data[0] if len(data) == 1 else data)
        return
    out = console()
    out.print(prediction_table(preds))
    for p in preds:
        if explain or len(preds) == 1:
            out.print(p.explain(), highlight=False, markup=False)
    from gpumodel.calibration import mixed_calibration_warning

    for w in mixed_calibration_warning({p.gpu: p.calibration for p in preds}):
        out.print(f"warning: {w}", highlight=False, markup=False)
