"""The typer app every CLI module registers its commands on, plus shared option helpers.

The CLI imports only gpumodel's public API. Errors a user can cause (GpumodelError, bad
options) print one line on stderr and exit 2.
"""

from __future__ import annotations

import json
import sys
from typing import Any, NoReturn

import typer

app = typer.Typer(
    name="gpumodel",
    help="Analytical GPU performance model and cost calculator, calibrated on real hardware.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


# The running command's warnings, each printed once to stderr when it ends without an error (a
# failed command's only stderr line is then its error: fuzz, 2026-11-30, found a host warning
# before the error line, and `plan train --fusion unfused` warning twice).
_warnings: list[str] = []


def warn(message: str | None) -> None:
    """A one-line warning for the command's end (``end_command``); repeats are dropped."""
    if message and message not in _warnings:
        _warnings.append(message)


def end_command(ok: bool) -> None:
    """Print the command's warnings if it ``ok``-ended, else drop them."""
    try:
        if ok:
            for message in _warnings:
                sys.stderr.write(f"warning: {message}\n")
    except (OSError, ValueError):  # a stderr the shell closed (2>&-): the output stands
        pass
    finally:
        _warnings.clear()


def fail(message: str) -> NoReturn:
    """Raise the one-line, exit-code-2 error for bad input found in the CLI layer."""
    from gpumodel.errors import GpumodelError

    raise GpumodelError(message)


def split_list(value: str | None) -> list[str]:
    """'a100,h100' -> ['a100', 'h100']."""
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def print_json(data: Any) -> None:
    sys.stdout.write(json_text(data) + "\n")


def json_text(data: Any, indent: int | None = 2) -> str:
    """Strict JSON (RFC 8259 has no NaN or Infinity): an unbounded value (the arithmetic
    intensity of a kernel that moves no bytes) is written as null; a NaN is a bug and an error."""
    try:
        return json.dumps(data, indent=indent, default=_json_default, allow_nan=False)
    except ValueError:
        pass
    plain = json.loads(json.dumps(data, default=_json_default))  # NaN/Infinity read back as floats

    def clean(v: Any, where: str) -> Any:
        if isinstance(v, float) and v != v:
            from gpumodel.errors import GpumodelError

            raise GpumodelError(f"internal error: {where or 'the result'} is NaN (please report)")
        if isinstance(v, float) and v in (float("inf"), float("-inf")):
            return None
        if isinstance(v, dict):
            return {k: clean(x, f"{where}.{k}") for k, x in v.items()}
        if isinstance(v, list):
            return [clean(x, f"{where}[{i}]") for i, x in enumerate(v)]
        return v

    return json.dumps(clean(plain, ""), indent=indent, allow_nan=False)


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "isoformat"):
        return obj.isoformat()
    raise TypeError(f"cannot serialise {type(obj).__name__}")


def console():
    """Rich console 100 columns wide, terminal or pipe (#19 item 3: tables fit 100 columns;
    longer text lines wrap). Its tables are drawn without side borders and with one rule under
    the header, as gpumodel.cli.tables draws its own: about 3 columns more room per cell than
    rich's default box, so fewer cells are cut."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    from gpumodel.cli.tables import WIDTH

    class _Console(Console):
        def print(self, *objects: Any, **kwargs: Any) -> None:
            for o in objects:
                if isinstance(o, Table) and o.box is box.HEAVY_HEAD:  # rich's default
                    o.box, o.show_edge, o.pad_edge = box.SIMPLE_HEAD, False, False
                    o.collapse_padding = True
            super().print(*objects, **kwargs)

    return _Console(soft_wrap=False, width=WIDTH)
