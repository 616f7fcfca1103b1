"""``gpumodel predict <op> ...``: one subcommand per registered op, options made from its fields.

The options of ``predict gemm`` are the fields of ``gm.ops.Gemm`` (``--m --n --k --dtype
--batch``), so a new op class is reachable from the CLI the moment it is registered. Values are
taken as text and validated by the op model, so errors name the field (``m: Input should be
greater than 0``) and numbers may be written ``1e6``.
"""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any, Literal, get_args, get_origin

import typer

import gpumodel as gm
from gpumodel.cli._app import app, fail
from gpumodel.cli.common import predict_on_gpus, print_predictions, resolve_gpus

predict_app = typer.Typer(
    help="Predict the time of one op on one or more GPUs.", no_args_is_help=True
)
app.add_typer(predict_app, name="predict")

# fields that take a size with units on the command line ("28GB", "4KiB")
_BYTE_FIELDS = {"bytes"}

_COMMON = [
    ("gpu", str, typer.Option("h100", help="GPU id(s) or alias(es), comma-separated")),
    ("as_json", bool, typer.Option(False, "--json", help="machine-readable output")),
    ("as_csv", bool, typer.Option(False, "--csv", help="one row per GPU as CSV")),
    ("explain", bool, typer.Option(False, "--explain", help="print the terms for every GPU")),
    ("calibration", str | None, typer.Option(None, help="'none', a calibration file, or a GPU id")),
    ("calibration_from", str | None,
     typer.Option(None, help="transfer another GPU's calibration (e.g. h100) to the target")),
    ("l2", str, typer.Option("cold", help="cold; warm: inputs already in L2 when they fit; "
     "dirty: L2 full of unpaid dirty lines (after do_bench's writing flush)")),
    ("condition", str, typer.Option("in-workload", help="in-workload (back to back: the "
     "power-limited sustained clock), isolated (one call at the boost clock: validate's "
     "harness) or in-graph (in-workload, replayed from a CUDA graph: no launch latency)")),
    ("host", str | None, typer.Option(None, help="the op as one eager PyTorch call on this host "
     "profile (name or YAML; gpumodel validate --host-only): no faster than the host issues it; "
     "a host-transfer's fixed cost from that host's own 4 KB copies; in-graph: the profile's "
     "GPU time per kernel in a replayed graph")),
    ("specs_dir", list[str], typer.Option([], "--specs-dir", help="extra GPU spec directory")),
]  # fmt: skip


def _unwrap(annotation: Any) -> Any:
    if get_origin(annotation) in (typing.Union, types.UnionType):
        return next(a for a in get_args(annotation) if a is not type(None))
    return annotation


def _parameter(name: str, field: Any) -> inspect.Parameter:
    annotation = _unwrap(field.annotation)
    flag = "--" + name.replace("_", "-")
    help_text = field.description or ""
    if annotation is bool:
        # a field whose default is None (Gemm.fast_accum, Attention.dropout) stays unset when
        # neither flag is given, so that --no-flag can say False
        unset = not field.is_required() and field.default is None
        default = None if unset else bool(field.default) if not field.is_required() else False
        option = typer.Option(default, f"{flag}/--no-{flag[2:]}", help=help_text)
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option,
                                 annotation=bool | None if unset else bool)  # fmt: skip
    if get_origin(annotation) is Literal:
        help_text = f"one of {', '.join(map(str, get_args(annotation)))}. {help_text}".strip()
    elif name in _BYTE_FIELDS:
        help_text = "size, e.g. 1GB, 512MiB or 1e9"
    if field.is_required():
        option = typer.Option(..., flag, help=help_text)
    else:
        default = field.default
        option = typer.Option(None if default is None else str(default), flag, help=help_text)
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option,
                             annotation=str | None)  # fmt: skip


def _number(text: str) -> Any:
    """'1e6' -> 1000000, '2.5' -> 2.5, anything else stays text for the model to judge
    (non-ASCII digits too: float() reads Arabic-Indic digits, a size should not)."""
    if not text.isascii() or len(text) > 100:
        return text
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        return text
    return int(value) if value.is_integer() and abs(value) < 2**63 else value


def _make_command(name: str, cls: type[gm.ops.Op]) -> None:
    fields = dict(cls.model_fields)
    common_names = {c[0] for c in _COMMON}

    def command(ctx: typer.Context, **kwargs: Any) -> None:
        common = {k: kwargs.pop(k) for k in list(kwargs) if k in common_names}
        # a field the user did not give is left to the op, whose defaults may depend on the
        # fields given (Attention's impl on its dtype)
        kwargs = {k: v for k, v in kwargs.items()
                  if getattr(ctx.get_parameter_source(k), "name", None) != "DEFAULT"}  # fmt: skip
        if common["l2"] not in ("cold", "warm", "dirty"):
            fail(f"--l2 must be cold, warm or dirty, got {common['l2']!r}")
        row: dict[str, Any] = {"op": name}
        for key, value in kwargs.items():
            if value is None:
                continue
            if isinstance(value, str):
                value = gm.parse_quantity(value, "bytes") if key in _BYTE_FIELDS else _number(value)
            row[key] = value
        op = gm.ops.from_row(row)
        gpus = resolve_gpus(common["gpu"], common["specs_dir"])
        preds = predict_on_gpus(op, gpus, common["calibration"], common["calibration_from"],
                                common["l2"], common["condition"], common["host"])  # fmt: skip
        print_predictions(preds, common["as_json"], common["explain"], common["as_csv"])

    params = [inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                annotation=typer.Context)]  # fmt: skip
    params += [_parameter(k, f) for k, f in fields.items()]
    params += [
        inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=o, annotation=t)
        for n, t, o in _COMMON
    ]
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__doc__ = (cls.__doc__ or "").strip().split("\n\n")[0]
    command.__name__ = name
    predict_app.command(name)(command)


_registered: set[str] = set()


def register_ops(only: str | None = None) -> None:
    """Add ``predict <op>`` subcommands: the one ``only`` names when it is an op (a run builds
    just the command it uses), else every registered op."""
    import gpumodel.ops as ops

    names = [only] if only in ops.registered_names() else ops.op_names()
    for name in names:
        if name in _registered or (name in ops.ELEMENTWISE_NAMES and name != "copy"):
            continue  # elementwise functions: `predict elementwise --op relu --n 1e6`
        _registered.add(name)
        _make_command(name, ops.op_class(name))
