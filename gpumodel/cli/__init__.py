"""Command-line interface: ``gpumodel ...`` and ``python -m gpumodel ...``."""

from __future__ import annotations

import sys

import typer

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


def _print_version(value: bool) -> None:
    if value:
        from gpumodel import __version__

        print(f"gpumodel {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        is_eager=True,
        callback=_print_version,
        help="print the version and exit",
    ),
) -> None:
    """Analytical GPU performance model and cost calculator, calibrated on real hardware."""


__all__ = ["app", "command", "main"]


def command(argv: list[str] | None = None):
    """The click command tree built from the typer app (the part ``argv`` needs, if given)."""
    import typer

    load_commands(argv)
    cmd = typer.main.get_command(app)
    _guard_inputs(cmd)
    return cmd


def _guard_inputs(cmd) -> None:
    """The CLI's input rules, applied once to every command of the tree."""
    for sub in getattr(cmd, "commands", {}).values():
        _guard_inputs(sub)
    _refuse_blank_values(cmd)
    _refuse_json_with_csv(cmd)


def _refuse_json_with_csv(cmd) -> None:
    """``--json`` with ``--csv`` is an error (one line, exit 2) on a command that has both:
    one rule here, not a check per command (some printed JSON, some CSV)."""
    from gpumodel.errors import SpecError

    inner = getattr(cmd, "callback", None)
    if inner is None or not {"as_json", "as_csv"} <= {p.name for p in cmd.params}:
        return

    def refuse_both(*args, **kwargs):
        if kwargs.get("as_json") and kwargs.get("as_csv"):
            raise SpecError("pass --json or --csv, not both")
        return inner(*args, **kwargs)

    cmd.callback = refuse_both


def _refuse_blank_values(cmd) -> None:
    """Every option and argument of ``cmd`` given on the command line as '' or blanks is an
    error (one line, exit 2), never read as its default (issue #20: `--dtype ''` was bf16)."""
    from gpumodel.errors import SpecError

    for param in getattr(cmd, "params", ()):
        if getattr(param, "is_flag", False) or getattr(param, "_gm_blank", False):
            continue
        inner = param.callback

        def check(ctx, p, value, inner=inner):
            values = value if isinstance(value, (list, tuple)) else [value]
            source = ctx.get_parameter_source(p.name)
            if getattr(source, "name", "") == "COMMANDLINE" and any(
                isinstance(v, str) and not v.strip() for v in values
            ):
                flag = p.opts[0] if p.opts and p.opts[0].startswith("-") else p.name
                raise SpecError(f"{flag} must not be empty")
            return inner(ctx, p, value) if inner is not None else value

        param.callback = check
        param._gm_blank = True


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app; user errors become one line on stderr and exit code 2."""
    _usable_streams()
    import typer

    from gpumodel.errors import GpumodelError

    exit_types, abort_types, usage_types = _click_exceptions(typer)
    from gpumodel._io import command_inputs
    from gpumodel.cli._app import end_command

    args = list(sys.argv[1:] if argv is None else argv)
    ok = False
    try:
        try:
            with command_inputs():  # an output may not overwrite a file the command read
                result = command(args)(args=args, prog_name="gpumodel", standalone_mode=False)
            sys.stdout.flush()  # a full disk or a closed pipe shows here, not at exit
            ok = True
        except GpumodelError as exc:
            _err(f"error: {exc}\n")
            return 2
        except BrokenPipeError:  # `gpumodel ... | head`: the reader left; stop quietly
            _silence_stdout()
            return 141
        except OSError as exc:
            if exc.filename is not None:  # a file the command touched: not an output failure
                raise
            _silence_stdout()
            _err(f"error: cannot write the output ({exc.strerror or exc})\n")
            return 2
        except exit_types as exc:
            ok = True  # a command's own exit (validate's 1 on a missed tolerance)
            return exc.exit_code
        except abort_types:
            sys.stderr.write("aborted\n")
            return 1
        except usage_types as exc:
            _err(f"error: {exc.format_message()}\n")
            return 2
        except SystemExit as exc:  # click exits 1 itself on a closed pipe (EPIPE)
            return exc.code if isinstance(exc.code, int) else 1
        except KeyboardInterrupt:
            sys.stderr.write("interrupted\n")
            return 130
        return result if isinstance(result, int) else 0
    finally:
        end_command(ok)  # its warnings, after output; none after an error line


def _err(line: str) -> None:
    """Write the one error line; a stderr the shell closed (2>&-) cannot take it: the exit
    code still says what happened."""
    try:
        sys.stderr.write(line)
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _usable_streams() -> None:
    """stdout/stderr that can be written: a closed descriptor (``>&-``) becomes /dev/null, and a
    narrow encoding (``PYTHONIOENCODING=ascii``) escapes what it cannot show."""
    import os

    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        try:  # a descriptor closed by the shell (2>&-) reads as a stream that cannot write
            os.fstat(stream.fileno())
        except (OSError, ValueError, AttributeError):
            if stream is not None and not hasattr(stream, "getvalue"):  # keep test captures
                stream = None
        if stream is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))
        elif hasattr(stream, "reconfigure") and getattr(stream, "errors", "") == "strict":
            try:
                stream.reconfigure(errors="backslashreplace")
            except (ValueError, OSError):
                pass


def _silence_stdout() -> None:
    """After a failed write to stdout, point it at /dev/null so the exit flush cannot fail
    again (the 'Exception ignored ... BrokenPipeError' Python prints otherwise)."""
    import os

    if sys.stdout is not sys.__stdout__:  # a test's capture: nothing to silence
        return
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _click_exceptions(typer_module):
    """Exit, Abort and ClickException classes of whichever click typer runs on: recent typer
    versions bundle their own copy, older ones use the click package (importing both cost the
    CLI's start-up 20 ms)."""
    import importlib

    for name in ("typer._click.exceptions", "click.exceptions"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        return ((typer_module.Exit, getattr(mod, "Exit", typer_module.Exit)),
                (typer_module.Abort, getattr(mod, "Abort", typer_module.Abort)),
                (mod.ClickException,))  # fmt: skip
    return (typer_module.Exit,), (typer_module.Abort,), ()
