"""Command-line interface: ``gpumodel ...`` and ``python -m gpumodel ...``."""

from __future__ import annotations

import sys

# Each module registers its commands on ``app`` when imported.
from gpumodel.cli import batch as _batch  # noqa: F401
from gpumodel.cli import diagnose as _diagnose  # noqa: F401
from gpumodel.cli import explain as _explain  # noqa: F401
from gpumodel.cli import llm as _llm  # noqa: F401
from gpumodel.cli import multigpu as _multigpu  # noqa: F401
from gpumodel.cli import occupancy as _occupancy  # noqa: F401
from gpumodel.cli import roofline as _roofline  # noqa: F401
from gpumodel.cli import specs as _specs  # noqa: F401
from gpumodel.cli import validate as _validate  # noqa: F401
from gpumodel.cli._app import app

__all__ = ["app", "command", "main"]


def command():
    """The click command tree: the typer app plus the generated ``predict`` group."""
    import typer

    from gpumodel.cli.predict import predict_group

    cmd = typer.main.get_command(app)
    cmd.add_command(predict_group(), "predict")  # type: ignore[attr-defined]
    return cmd


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app; user errors become one line on stderr and exit code 2."""
    import click
    import typer

    from gpumodel.errors import GpumodelError

    # newer typer versions bundle their own click: catch both families of exceptions
    bundled = getattr(getattr(typer, "_click", None), "exceptions", None)
    exit_types = (click.exceptions.Exit, typer.Exit)
    abort_types = (click.exceptions.Abort, typer.Abort)
    usage_types = (
        click.exceptions.ClickException,
        getattr(bundled, "ClickException", click.ClickException),
    )

    try:
        result = command()(args=argv, prog_name="gpumodel", standalone_mode=False)
    except GpumodelError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    except exit_types as exc:
        return exc.exit_code
    except abort_types:
        sys.stderr.write("aborted\n")
        return 1
    except usage_types as exc:
        sys.stderr.write(f"error: {exc.format_message()}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    return result if isinstance(result, int) else 0
