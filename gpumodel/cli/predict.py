"""``gpumodel predict <op> ...``: one subcommand per registered op, options made from its fields.

The options of ``predict gemm`` are the fields of ``gm.ops.Gemm`` (``--m --n --k --dtype
--batch``), so a new op class is reachable from the CLI the moment it is registered.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, get_args, get_origin

import click

import gpumodel as gm
from gpumodel.cli.common import predict_on_gpus, print_predictions, resolve_gpus

# fields that take a size with units on the command line ("28GB", "4KiB")
_BYTE_FIELDS = {"bytes"}


class _IntLike(click.ParamType):
    """An integer that may be written 1e6 or 1_000_000."""

    name = "integer"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        if isinstance(value, int):
            return value
        try:
            number = float(str(value).replace("_", ""))
        except ValueError:
            self.fail(f"{value!r} is not a number", param, ctx)
        if number != int(number):
            self.fail(f"{value!r} is not a whole number", param, ctx)
        return int(number)


INT_LIKE = _IntLike()


def _option_for(name: str, field: Any) -> click.Option:
    flag = "--" + name.replace("_", "-")
    annotation = field.annotation
    required = field.is_required()
    default = None if required else field.default
    args = get_args(annotation)
    if get_origin(annotation) in (typing.Union, types.UnionType):
        annotation = next(a for a in args if a is not type(None))
        args = get_args(annotation)
    help_text = field.description or ""
    if annotation is bool:
        return click.Option([f"{flag}/--no-{flag[2:]}"], default=bool(default), help=help_text)
    if get_origin(annotation) is Literal:
        return click.Option(
            [flag], type=click.Choice([str(a) for a in args]), default=default,
            required=required, show_default=True, help=help_text,
        )  # fmt: skip
    if name in _BYTE_FIELDS:
        return click.Option([flag], type=str, default=default, required=required,
                            help="size, e.g. 1GB, 512MiB or 1e9")  # fmt: skip
    click_type = {int: INT_LIKE, float: float}.get(annotation, str)
    return click.Option(
        [flag], type=click_type, default=default, required=required, show_default=True,
        help=help_text,
    )  # fmt: skip


def _common_options() -> list[click.Option]:
    return [
        click.Option(["--gpu"], default="h100", show_default=True,
                     help="GPU id(s) or alias(es), comma-separated for side by side"),
        click.Option(["--json", "as_json"], is_flag=True, help="machine-readable output"),
        click.Option(["--explain"], is_flag=True, help="print the terms for every GPU"),
        click.Option(["--calibration"], default=None,
                     help="'none' for datasheet only, a calibration file, or a GPU id"),
        click.Option(["--calibration-from"], default=None,
                     help="transfer another GPU's calibration (e.g. h100) to the target"),
        click.Option(["--l2"], type=click.Choice(["cold", "warm"]), default="cold",
                     show_default=True, help="warm: inputs already in L2 when they fit"),
        click.Option(["--specs-dir"], multiple=True, help="extra directory of GPU spec YAML"),
    ]  # fmt: skip


_COMMON = {"gpu", "as_json", "explain", "calibration", "calibration_from", "l2", "specs_dir"}


def _make_command(name: str, cls: type[gm.ops.Op], fixed: dict[str, Any]) -> click.Command:
    fields = {k: f for k, f in cls.model_fields.items() if k not in fixed}

    def callback(**kwargs: Any) -> None:
        common = {k: kwargs.pop(k) for k in list(kwargs) if k in _COMMON}
        row = {"op": name, **fixed, **{k: v for k, v in kwargs.items() if v is not None}}
        for key in _BYTE_FIELDS & row.keys():
            row[key] = gm.parse_quantity(row[key], "bytes")
        op = gm.ops.from_row(row)
        gpus = resolve_gpus(common["gpu"], common["specs_dir"])
        preds = predict_on_gpus(op, gpus, common["calibration"], common["calibration_from"],
                                common["l2"])  # fmt: skip
        print_predictions(preds, common["as_json"], common["explain"])

    doc = (cls.__doc__ or "").strip().split("\n\n")[0]
    params = [_option_for(k, f) for k, f in fields.items()] + _common_options()
    return click.Command(name, callback=callback, params=params, help=doc)


def predict_group() -> click.Group:
    group = click.Group("predict", help="Predict the time of one op on one or more GPUs.")
    for name in gm.ops.op_names():
        if name in gm.ops.ELEMENTWISE and name != "copy":
            continue
        cls = gm.ops.op_class(name)
        group.add_command(_make_command(name, cls, {}))
    return group
