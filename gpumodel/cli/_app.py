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


def fail(message: str) -> NoReturn:
    """Raise the one-line, exit-code-2 error for bad input found in the CLI layer."""
    from gpumodel.errors import GpumodelError

    raise GpumodelError(message)


def split_list(value: str | None) -> list[str]:
    """'a100,h100' -> ['a100', 'h100']."""
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "isoformat"):
        return obj.isoformat()
    raise TypeError(f"cannot serialise {type(obj).__name__}")


def console():
    from rich.console import Console

    return Console(soft_wrap=False, width=max(150, Console().width))
