"""Command-line interface: ``gpumodel ...`` and ``python -m gpumodel ...``."""

from __future__ import annotations

import sys

# Each module registers its commands on ``app`` when imported.
from gpumodel.cli import batch as _batch  # noqa: F401
from gpumodel.cli import calibrate as _calibrate  # noqa: F401
from gpumodel.cli import diagnose as _diagnose  # noqa: F401
from gpumodel.cli import explain as _explain  # noqa: F401
from gpumodel.cli import llm as _llm  # noqa: F401
from gpumodel.cli import multigpu as _multigpu  # noqa: F401
from gpumodel.cli import occupancy as _occupancy  # noqa: F401
from gpumodel.cli import plan as _plan  # noqa: F401
from gpumodel.cli import predict as _predict  # noqa: F401
from gpumodel.cli import roofline as _roofline  # noqa: F401
from gpumodel.cli import specs as _specs  # noqa: F401
from gpumodel.cli import validate as _validate  # noqa: F401
from gpumodel.cli._app import app

__all__ = ["app", "command", "main"]


def command():
    """The click command tree built from the typer app."""
    import typer

    return typer.main.get_command(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app; user errors become one line on stderr and exit code 2."""
    import typer

    from gpumodel.errors import GpumodelError

    exit_types, abort_types, usage_types = _click_exceptions(typer)
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


def _click_exceptions(typer_module):
    """Exit, Abort and ClickException classes of whichever click typer runs on: recent typer
    versions bundle their own copy, older ones use the click package."""
    import importlib

    exits, aborts, usage = [typer_module.Exit], [typer_module.Abort], []
    for name in ("typer._click.exceptions", "click.exceptions"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        exits += [getattr(mod, "Exit", typer_module.Exit)]
        aborts += [getattr(mod, "Abort", typer_module.Abort)]
        usage += [mod.ClickException]
    return tuple(exits), tuple(aborts), tuple(usage)
