"""Hostile and valid command lines for every gpumodel command (issue #20's fuzz classes).

Shared by tests/test_properties.py (hypothesis, bounded, in CI) and
validation/experiments/fuzz_cli.py (a long one-off run). Commands and their options are read
from the CLI itself, so a new command or option is fuzzed without editing this file.

``run_cli(argv)`` runs one command line in this process and classifies the outcome:
``ok`` (exit 0, and with --json no NaN/inf and positive finite times), ``error`` (exit 2 and one
``error:`` line), or a finding: ``traceback`` (any other exception), ``hang`` (past the time
limit), ``memory`` (MemoryError), ``nonfinite`` (NaN/inf in the output), ``negative`` (a time,
size or cost below zero), ``bad-exit`` (any other exit code), ``multiline`` (an error of more than
one line).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import signal
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "traces"

# commands left out: they measure the local hardware (validate) or write beside the input by
# default (calibrate); their readers and writers have their own tests
SKIP_COMMANDS = {("validate",), ("calibrate",)}
# options that write files: never generated (a fuzz run must not litter the checkout)
SKIP_OPTIONS = {"--plot", "--out", "--report", "--host-out"}

HOSTILE_NUMBERS = [
    "0", "-1", "-4096", "nan", "NaN", "inf", "-inf", "1e400", "1e-300", "", " ", "abc", "1.5",
    "0.0", "18446744073709551616", "9" * 5000, "١٢٣", "४०९६", "1e12", "1e30", "2**53",
    "9007199254740993", "0x10", "1_000", "+7", "--1", "1,2", "1e-9",
]  # fmt: skip
HOSTILE_TEXT = ["", " ", "nope", "\x00", "é" * 300, "../../etc/passwd", "/dev/zero", "/proc",
                "-", "h100,", ",", "H100", "bf17", "none", "None"]  # fmt: skip
HOSTILE_PATHS = ["/dev/zero", "/proc", "/nonexistent/x.yaml", "/etc/passwd", str(ROOT),
                 str(FIXTURES / "item_sync.json.gz")]  # fmt: skip

VALID: dict[str, list[str]] = {
    "gpu": ["h100", "a100", "h200", "l4", "mi300x", "h100,a100", "t4", "b200"],
    "model": ["llama-3-8b", "llama-2-7b", "llama-3-70b", "gpt2"],
    "dtype": ["bf16", "fp16", "fp32", "fp8", "tf32", "int8"],
    "calibration": ["none", "h100"],
    "calibration-from": ["h100"],
    "phase": ["prefill", "decode"],
    "runtime": ["eager", "graph"],
    "attention": ["flash", "cudnn", "math"],
    "fusion": ["fused", "unfused"],
    "kv-cache": ["concat", "static"],
    "recompute": ["none", "selective", "full"],
    "collective": ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all",
                   "send_recv"],
    "link": ["auto", "nvlink", "pcie", "network"],
    "algorithm": ["auto", "ring", "tree"],
    "scaling": ["weak", "strong"],
    "l2": ["cold", "warm"],
    "impl": ["flash", "math", "cudnn"],
    "mode": ["inference", "training"],
    "slo": ["chat", "server", "none"],
    "direction": ["h2d", "d2h"],
    "unit": ["vector", "tensor"],
    "kind": ["cast", "copy", "index"],
    "op": ["relu", "add", "mul", "gelu", "copy", "gemm"],
    "system": ["dgx-h100", "nope"],
    "sort": ["time_s", "usd_per_million_tokens", "tokens_per_s"],
    "topic": ["gemm", "attention", "allreduce", "memory", "roofline"],
    "name": ["llama-3-8b", "nope"],
    "files": [str(ROOT / "specs" / "h100-sxm.yaml"), "/dev/zero", str(ROOT / "specs")],
    "trace": [str(FIXTURES / "item_sync.json.gz"), str(FIXTURES / "planted_costs.json"),
              str(FIXTURES / "nsys_cuda_gpu_kern_sum_synthetic.csv")],
    "file": [str(ROOT / "tests" / "fixtures" / "ops.jsonl")],
    "system-file": ["/dev/zero", "/nonexistent.yaml"],
    "specs-dir": ["/proc", "/nonexistent", str(ROOT / "specs")],
    "gpus": ["1", "2", "8", "64", "1,2,4,8", "8-64", "1000000"],
    "bytes": ["1GB", "1 B", "28GB", "4096", "1MiB", "1e9"],
    "grad-bytes": ["1GB", "28GB", "0"],
    "bucket": ["25MB", "1 B", "1MiB"],
    "first-bucket": ["1MiB"],
    "link-bandwidth": ["450GB/s", "1e-300 B/s", "0 GB/s"],
    "price": ["2.49", "h100=2.49", "-1", "0"],
    "tokens": ["1e12", "2e12", "-1"],
    "size": ["1GB", "4096"],
}  # fmt: skip
VALID_NUMBERS = ["1", "2", "8", "64", "128", "1024", "4096", "8192", "1e6", "0.5", "2.5", "100"]


@dataclass
class Outcome:
    kind: str  # ok, error, or the finding's class
    argv: list[str]
    detail: str = ""


def commands() -> list[tuple[tuple[str, ...], Any]]:
    """Every leaf command of the CLI: (path, click command)."""
    from gpumodel.cli import command

    out: list[tuple[tuple[str, ...], Any]] = []

    def walk(c: Any, path: tuple[str, ...]) -> None:
        if hasattr(c, "commands"):
            for name, sub in sorted(c.commands.items()):
                walk(sub, (*path, name))
        elif path not in SKIP_COMMANDS:
            out.append((path, c))

    walk(command(), ())
    return out


def _key(param: Any) -> str:
    return param.opts[0].lstrip("-") if param.opts and param.opts[0].startswith("-") else param.name


def options(cmd: Any) -> list[tuple[str, Any]]:
    """(key, click parameter) of the options that can be generated."""
    return [(_key(p), p) for p in cmd.params
            if not (p.opts and p.opts[0] in SKIP_OPTIONS) and p.name != "help"]  # fmt: skip


def value_pool(key: str, hostile: bool) -> list[str]:
    if hostile:
        return HOSTILE_NUMBERS + HOSTILE_TEXT + HOSTILE_PATHS
    return VALID.get(key, VALID_NUMBERS)


def build_argv(path: tuple[str, ...], cmd: Any, choose: Any) -> list[str]:
    """A command line: required parameters always, others when ``choose`` says so. ``choose``
    is ``choose(kind, key, pool)``: kind 'include' -> bool, 'hostile' -> bool, 'pick' -> item."""
    argv = list(path)
    for key, p in options(cmd):
        flag = getattr(p, "is_flag", False)
        if not p.required and not choose("include", key, None):
            continue
        if flag:
            argv.append(p.opts[0] if p.opts else f"--{key}")
            continue
        value = choose("pick", key, value_pool(key, choose("hostile", key, None)))
        if p.opts and p.opts[0].startswith("-"):
            argv += [p.opts[0], value]
        else:
            argv.append(value)
    return argv


class _Hang(BaseException):
    pass


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Hang


def _walk_numbers(data: Any, path: str = "") -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    if isinstance(data, dict):
        for k, v in data.items():
            out += _walk_numbers(v, f"{path}.{k}")
    elif isinstance(data, list):
        for i, v in enumerate(data[:2000]):
            out += _walk_numbers(v, f"{path}[{i}]")
    elif isinstance(data, float | int) and not isinstance(data, bool):
        out.append((path, float(data)))
    return out


# fields that must be > 0 when present (times of a step, an op or a plan)
_POSITIVE = ("time_s", "step_s", "ttft_s", "tpot_s")
# fields that can never be negative
_NON_NEGATIVE = ("_s", "_bytes", "bytes", "flops", "usd", "cost", "days", "gpu_hours",
                 "tokens_per_s", "speedup", "efficiency")  # fmt: skip
_SIGNED = ("bias", "delta", "diff", "error", "_pct", "exposed", "slack", "margin", "headroom",
           "saved", "recoverable", "gain")  # fmt: skip


def check_json(text: str) -> tuple[str, str] | None:
    """A finding in a command's --json output: ('nonfinite' | 'negative', where) or None."""
    if not text.strip():
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        if any(t in text for t in ("NaN", "Infinity")):
            return "nonfinite", f"output is not JSON ({exc})"
        return None  # a command whose --json is JSON lines or text is not judged here
    for where, value in _walk_numbers(data):
        leaf = where.rsplit(".", 1)[-1].split("[")[0].lower()
        if not math.isfinite(value):
            return "nonfinite", f"{where} = {value}"
        if any(s in leaf for s in _SIGNED):
            continue
        if leaf in _POSITIVE and value <= 0:
            return "negative", f"{where} = {value}"
        if value < 0 and any(leaf.endswith(s) or leaf == s for s in _NON_NEGATIVE):
            return "negative", f"{where} = {value}"
    return None


# 'nan' / 'inf' as a value in text output ('Infinity Fabric' is a name, not a value)
_NONFINITE_TEXT = re.compile(r"(?<![A-Za-z_])(nan|NaN|-?inf)(?![A-Za-z_])")


def run_cli(argv: list[str], limit_s: float = 30.0) -> Outcome:
    """Run one command line in-process with a time limit (main thread only)."""
    from gpumodel.cli import main

    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
    except _Hang:
        return Outcome("hang", argv, f"over {limit_s:g} s")
    except MemoryError:
        return Outcome("memory", argv, "MemoryError")
    except RecursionError:
        return Outcome("traceback", argv, "RecursionError")
    except BaseException as exc:  # a traceback is what this looks for
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
        return Outcome("traceback", argv, "".join(tb[-3:])[-600:])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    stdout, stderr = out.getvalue(), err.getvalue()
    if code == 2:
        lines = [ln for ln in stderr.splitlines() if ln.startswith("error: ")]
        if len(lines) != 1:
            return Outcome("multiline", argv, stderr[-400:])
        return Outcome("error", argv, lines[0][:200])
    if code != 0:
        return Outcome("bad-exit", argv, f"exit {code}: {stderr[-300:]}")
    if "--json" not in argv and (m := _NONFINITE_TEXT.search(stdout)):
        return Outcome("nonfinite", argv, stdout[max(0, m.start() - 150) : m.end() + 50])
    if "--json" in argv:
        found = check_json(stdout)
        if found:
            return Outcome(found[0], argv, found[1])
    return Outcome("ok", argv)
