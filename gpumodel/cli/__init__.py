"""Command-line interface: ``gpumodel ...`` and ``python -m gpumodel ...``."""

from __future__ import annotations

import sys

from gpumodel.cli._app import app

# Each module registers its commands on ``app`` when imported. A run imports only the module of
# the command it names (a full import for help or an unknown name), so `gpumodel predict ...`
# does not pay for the LLM, diagnose or validate commands: command -> module.
_MODULES = ("batch", "calibrate", "calibrations", "diagnose", "explain", "llm", "multigpu",
            "occupancy", "plan", "predict", "report", "roofline", "specs", "validate")  # fmt: skip
_COMMANDS = {
    "batch": "batch", "calibrate": "calibrate", "calibrations": "calibrations",
    "diagnose": "diagnose", "explain": "explain", "report": "report",
    "infer": "llm", "memory": "llm", "plan": "llm", "models": "llm", "sweep-llm": "plan",
    "allreduce": "multigpu", "amdahl": "multigpu", "dp-step": "multigpu", "systems": "multigpu",
    "occupancy": "occupancy", "littles-law": "occupancy", "predict": "predict",
    "roofline": "roofline", "specs": "specs", "validate": "validate",
}  # fmt: skip


def load_commands(argv: list[str] | None = None) -> None:
    """Import the command modules ``argv`` needs (all of them when it names none we know)."""
    import importlib

    words = [a for a in argv or () if not a.startswith("-")]
    if words and words[0] in _COMMANDS:
        importlib.import_module(f"gpumodel.cli.{_COMMANDS[words[0]]}")
        if words[0] == "predict":
            from gpumodel.cli.predict import register_ops

            register_ops(words[1] if len(words) > 1 else None)
        return
    for module in _MODULES:
        importlib.import_module(f"gpumodel.cli.{module}")
    from gpumodel.cli.predict import register_ops

    register_ops()


@app.callback()
def _root() -> None:
    """Analytical GPU performance model and cost calculator, calibrated on real hardware."""


__all__ = ["app", "command", "main"]


def command(argv: list[str] | None = None):
    """The click command tree built from the typer app (the part ``argv`` needs, if given)."""
    import typer

    load_commands(argv)
    return typer.main.get_command(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app; user errors become one line on stderr and exit code 2."""
    import typer

    from gpumodel.errors import GpumodelError

    exit_types, abort_types, usage_types = _click_exceptions(typer)
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        result = command(args)(args=args, prog_name="gpumodel", standalone_mode=False)
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
