"""Fuzz campaign at issue #20's scale: every CLI command, every public function and op, every
file reader, and the write paths, ~10,000 hostile cases (a script, not a CI test).

    python benchmarks/fuzz_campaign.py                       # ~10,000 cases, seed 20
    python benchmarks/fuzz_campaign.py --cases 800 --only cli,lib
    python benchmarks/fuzz_campaign.py --against /tmp/old-checkout   # fuzz another checkout
    python benchmarks/fuzz_campaign.py --json benchmarks/results/fuzz-YYYY-MM-DD.json

What is enumerated (nothing listed by hand that can be read from the code):
* CLI: every leaf command of the typer app and every option (tests/cli_cases.py walks the
  click tree), each option given each hostile value with the others valid, plus random mixes;
* library: every function in ``gpumodel.__all__`` (each parameter given each hostile Python
  value: 0, -1, NaN, inf, 1e300, 2**70, a 5000-digit int, Arabic-Indic digits, '', a typo,
  None, True, [], {}, object()), every registered op class through ``predict``,
  ``speed_of_light`` and ``sweep``;
* files: every reader (spec, model, system, calibration, host profile, trace, batch, plan,
  measurements; library and CLI entry points) given binary junk, /dev/zero, a FIFO, a directory,
  empty files, NUL bytes, Latin-1, truncated gzip, a gzip bomb, a sparse 600 MB file, JSON and
  YAML nested 10^5 deep, a YAML alias bomb, 5000-digit numbers; shipped specs, models, systems,
  host profiles, calibrations and batch rows with each field replaced by a wrong-typed or
  out-of-range value (then used for a prediction); a calibration for another GPU (named and
  cached under the wrong GPU's name); 200 MB batch files (JSON, JSONL, CSV, YAML) made on the
  fly and deleted after;
* writes: every writer (calibration save, host profile save, HTML reports, plots, calibrate
  --out, diagnose/plan --html) to a directory, a read-only directory, /proc, a missing parent,
  a file as parent, a 300-character name, a disk that fills (RLIMIT_FSIZE, and a patched write
  raising ENOSPC), under umask 027 and 002; SIGINT/SIGTERM mid-write in a subprocess; start-up
  cases in a subprocess (broken pipe, closed stdout, hostile environment).

Each case runs in a forked child (fork per case: a crash or hang cannot take the run down)
under RLIMIT_AS (default 2 GB) and a wall-clock limit (default 20 s; 300 s for the 200 MB
batch files), with its own scratch directory as cwd and cache. Outcome classes: ``ok`` (exit 0 /
a return value with finite, non-negative numbers and positive times), ``error`` (exit 2 and one
``error:`` line / a GpumodelError), and the findings: ``traceback`` (any other exception,
including a bare ValueError from the library), ``signal`` (the child died on a signal:
segfault, abort), ``hang``, ``memory`` (MemoryError under the address-space cap), ``nonfinite``,
``negative``, ``absurd`` (a time over 10^12 s, a cost over 10^15 $, or a rate over 10^18/s,
with exit 0), ``silent-accept`` (a value that cannot be meant, e.g. NaN, '', a typo or a
wrong type, accepted without error), ``lost-write`` (the old file changed after a failed
write, or a partial new file), ``litter`` (a temp file left behind), ``mode`` (a new file's mode
does not follow the umask), ``multiline`` (an error of more than one line), ``bad-exit``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import errno
import io
import json
import math
import os
import random
import re
import resource
import signal
import stat
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from pathlib import Path
from typing import Any

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one thread per child: forks stay cheap, VM stays small
os.environ.setdefault("MPLBACKEND", "Agg")

HERE = Path(__file__).resolve().parents[1]
FINDINGS = (
    "traceback",
    "signal",
    "hang",
    "memory",
    "nonfinite",
    "negative",
    "absurd",
    "silent-accept",
    "lost-write",
    "litter",
    "mode",
    "multiline",
    "bad-exit",
)
NAN, INF = float("nan"), float("inf")
BIG_INT = 10**5000 - 1  # 5000 digits


@dataclasses.dataclass
class Case:
    area: str  # cli, lib, file, write, proc
    target: str  # what is fuzzed: a command, a function, a reader, a writer
    label: str  # the hostile input, short
    run: Any  # callable(case_dir) -> (kind, detail), run in the child
    invalid: bool = False  # the input cannot be meant: ok is a silent accept
    timeout_s: float | None = None
    root: str = ""  # the checkout fuzzed


# ---------------------------------------------------------------------------------------------
# outcome checks shared by the areas


def walk_numbers(data: Any, path: str = "", depth: int = 0) -> list[tuple[str, float]]:
    """(field path, value) of every number in a result: pydantic models, dataclasses, dicts,
    lists, numpy arrays (float arrays reduced to their non-finite / negative / largest)."""
    import numpy as np

    out: list[tuple[str, float]] = []
    if depth > 12:
        return out
    if hasattr(data, "model_dump"):
        with contextlib.suppress(Exception):
            data = data.model_dump()
    elif dataclasses.is_dataclass(data) and not isinstance(data, type):
        data = {f.name: getattr(data, f.name) for f in dataclasses.fields(data)}
    if isinstance(data, dict):
        for k, v in list(data.items())[:500]:
            out += walk_numbers(v, f"{path}.{k}", depth + 1)
    elif isinstance(data, (list, tuple)):
        for i, v in enumerate(data[:200]):
            out += walk_numbers(v, f"{path}[{i}]", depth + 1)
    elif isinstance(data, np.ndarray):
        if data.dtype.names:
            for name in data.dtype.names:
                out += walk_numbers(data[name], f"{path}.{name}", depth + 1)
        elif np.issubdtype(data.dtype, np.number) and data.size:
            arr = data.astype(float).ravel()
            bad = ~np.isfinite(arr)
            pick = arr[bad][:1] if bad.any() else [arr.min(), arr.max()]
            out += [(path, float(x)) for x in pick]
    elif isinstance(data, (int, float, np.number)) and not isinstance(data, bool):
        try:
            out.append((path, float(data)))
        except OverflowError:
            out.append((path, INF))
    return out


# fields where +inf is the honest answer: Amdahl's speedup limit with no serial part (1/0); the
# CLI's JSON writes it as null
UNBOUNDED_OK = {"limit"}
# the README's headline command line, the valid base of the file and cache cases
PREDICT_GEMM = ("predict", "gemm", "--m", "4096", "--n", "4096", "--k", "4096")
# time-like fields that must be > 0, never-negative fields, signed fields (as tests/cli_cases.py)
POSITIVE = ("time_s", "step_s", "ttft_s", "tpot_s")
NON_NEGATIVE = (
    "_s",
    "_bytes",
    "bytes",
    "flops",
    "usd",
    "cost",
    "days",
    "gpu_hours",
    "tokens_per_s",
    "speedup",
    "efficiency",
)
SIGNED = (
    "bias",
    "delta",
    "diff",
    "error",
    "_pct",
    "exposed",
    "slack",
    "margin",
    "headroom",
    "saved",
    "recoverable",
    "gain",
    "residual",
    "log",
    "offset",
    "intercept",
    "slope",
    "exponent",
    "signed",
    "change",
)


def judge_numbers(pairs: list[tuple[str, float]], one_gpu: bool = False) -> tuple[str, str] | None:
    # a collective on one GPU moves nothing: 0 s is its honest time
    one_gpu = one_gpu or any(w.rsplit(".", 1)[-1] == "gpus" and v == 1 for w, v in pairs)
    for where, value in pairs:
        leaf = where.rsplit(".", 1)[-1].split("[")[0].lower()
        if not math.isfinite(value):
            if value == INF and leaf in UNBOUNDED_OK:
                continue
            return "nonfinite", f"{where} = {value}"
        if any(s in leaf for s in SIGNED):
            continue
        if leaf in POSITIVE and value <= 0 and not (one_gpu and value == 0):
            return "negative", f"{where} = {value}"
        if value < 0 and any(leaf.endswith(s) or leaf == s for s in NON_NEGATIVE):
            return "negative", f"{where} = {value}"
        if leaf.endswith("_s") and value > 1e12 and "per_s" not in leaf:
            return "absurd", f"{where} = {value:g} s"
        if ("usd" in leaf or "cost" in leaf) and value > 1e15:
            return "absurd", f"{where} = ${value:g}"
        if leaf.endswith("per_s") and value > 1e24:
            return "absurd", f"{where} = {value:g}/s"
    return None


def judge_json_text(text: str) -> tuple[str, str] | None:
    if not text.strip():
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        if any(t in text for t in ("NaN", "Infinity")):
            return "nonfinite", f"output is not JSON ({exc})"
        lines = [ln for ln in text.splitlines() if ln.strip()]
        try:  # JSON lines
            data = [json.loads(ln) for ln in lines[:2000]]
        except ValueError:
            return None  # text output, judged by its nan/inf words only
    return judge_numbers(walk_numbers(data), bool(_ONE_GPU.search(text)))


_ONE_GPU = re.compile(r"gpus=1[,)]")


def exc_detail(exc: BaseException) -> str:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return "".join(tb[-3:])[-700:]


def judge_exception(exc: BaseException) -> tuple[str, str]:
    from gpumodel.errors import GpumodelError

    if isinstance(exc, MemoryError):
        return "memory", "MemoryError"
    if isinstance(exc, GpumodelError):
        text = str(exc)
        if "\n" in text.strip() or not text.strip():
            return "multiline", text[:300]
        return "error", text[:200]
    return "traceback", exc_detail(exc)


def judge_value(value: Any, invalid: bool, label: str) -> tuple[str, str]:
    found = judge_numbers(walk_numbers(value), bool(_ONE_GPU.search(repr(value)[:2000])))
    if found:
        return found
    if invalid:
        return "silent-accept", f"accepted {label}"
    return "ok", ""


# ---------------------------------------------------------------------------------------------
# CLI cases


def cli_runner(
    argv: list[str], invalid: bool = False, env: dict[str, str] | None = None, check: Any = None
) -> Any:
    def run(case_dir: Path) -> tuple[str, str]:
        from gpumodel.cli import main

        os.environ.update(env or {})
        out_path, err_path = case_dir / ".stdout", case_dir / ".stderr"
        with open(out_path, "w") as out, open(err_path, "w") as err:
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    code = main(list(argv))
            except MemoryError:
                return "memory", "MemoryError"
            except BaseException as exc:
                return "traceback", exc_detail(exc)
        stderr = _head(err_path, 4000)
        if code == 2:  # one error line (warnings before it are fine)
            lines = [ln for ln in stderr.splitlines() if ln.startswith("error")]
            if len(lines) != 1 or "Traceback" in stderr:
                return "multiline", stderr[-400:]
            return "error", lines[0][:200]
        missed = code == 1 and argv[:1] == ["validate"] and "target(s) missed" in stderr
        if code != 0 and not missed:  # validate's 1 is a missed target, said in one line
            return "bad-exit", f"exit {code}: {stderr[-300:]}"
        size = out_path.stat().st_size
        stdout = _head(out_path, 8 << 20)
        if "--json" in argv and size <= 8 << 20:
            found = judge_json_text(stdout)
            if found:
                return found
        elif (m := _NONFINITE_TEXT.search(stdout)) is not None:
            return "nonfinite", stdout[max(0, m.start() - 150) : m.end() + 50]
        if check is not None:
            found = check(case_dir)
            if found:
                return found
        return ("silent-accept", "exit 0") if invalid else ("ok", "")

    return run


def _head(path: Path, limit: int) -> str:
    with open(path, "rb") as fh:
        return fh.read(limit).decode("utf-8", "replace")


_NONFINITE_TEXT = re.compile(r"(?<![A-Za-z_])(nan|NaN|-?inf)(?![A-Za-z_])")

# option values that cannot be meant for any option (ok = silent accept)
NEVER_VALID = {
    "nan",
    "NaN",
    "inf",
    "-inf",
    "1e400",
    "",
    " ",
    "\x00",
    "9" * 5000,
    "١٢٣",
    "४०९६",
    "bf17",
    "é" * 300,
}
# options taking free text or a path that may exist: a value there is not "never valid"
FREE_TEXT = {
    "condition",
    "families",
    "host",
    "html",
    "out",
    "report",
    "plot",
    "host-out",
    "from-measurements",
    "trace",
    "file",
    "files",
    "plan",
    "specs-dir",
}
# options that write files: given a path in the case's directory
WRITE_OPTIONS = {"--out", "--report", "--plot", "--html", "--host-out"}
# hostile targets for them: never an existing file outside the case's directory (a fuzz run
# must not overwrite /etc/passwd or a fixture)
WRITE_HOSTILE = [
    "",
    " ",
    "/proc",
    "/proc/x.yaml",
    "/nonexistent/x.yaml",
    ".",
    "..",
    "n" * 300,
    "\x00",
    "é" * 300,
    "-",
    "a/b/c/out.yaml",
    "/proc/self/x",
]


def cli_cases(rng: random.Random, budget: int, root: Path) -> list[Case]:
    import cli_cases as cc

    cc.SKIP_COMMANDS.clear()  # every command, validate and calibrate included
    cc.SKIP_OPTIONS.clear()
    commands = cc.commands()
    hostile = cc.HOSTILE_NUMBERS + cc.HOSTILE_TEXT + cc.HOSTILE_PATHS
    cases: list[Case] = []

    def valid(key: str, p: Any) -> str:
        if p.opts and p.opts[0] in WRITE_OPTIONS:
            return {"--plot": "plot.png", "--report": "report", "--html": "r.html"}.get(
                p.opts[0], "out.yaml"
            )
        return cc.VALID.get(key, cc.VALID_NUMBERS)[0]

    def required(path: tuple[str, ...], cmd: Any) -> list[str]:
        argv = list(path)
        if path == ("validate",):  # never measure here: re-fit from a saved run
            argv += ["--backend", "numpy", "--from-measurements", str(SAMPLE_CAL)]
        if path == ("calibrate",):
            argv += ["--gpu", "h100"]
        for key, p in cc.options(cmd):
            if p.required:
                v = valid(key, p)
                argv += [p.opts[0], v] if p.opts and p.opts[0].startswith("-") else [v]
        return argv

    per_cmd = max(20, budget // max(1, len(commands)))
    for path, cmd in commands:
        name = " ".join(path)
        slow = path == ("validate",)  # a re-fit takes ~1 min: fewer cases, a longer limit
        opts = [(k, p) for k, p in cc.options(cmd) if not getattr(p, "is_flag", False)]
        flags = [p.opts[0] for k, p in cc.options(cmd) if getattr(p, "is_flag", False) and p.opts]
        base = required(path, cmd)
        json_flag = ["--json"] if "--json" in flags else []
        mine: list[Case] = [Case("cli", name, "defaults", cli_runner(base + json_flag))]
        n_cmd = 16 if slow else per_cmd
        singles = [
            (k, p, v)
            for k, p in opts
            for v in (WRITE_HOSTILE if p.opts and p.opts[0] in WRITE_OPTIONS else hostile)
        ]
        rng.shuffle(singles)
        for key, p, value in singles[: n_cmd * 3 // 4]:
            argv = _with_option(base, p, value) + json_flag
            bad = value in NEVER_VALID and key not in FREE_TEXT
            mine.append(
                Case("cli", name, f"{key}={value[:40]!r}", cli_runner(argv, bad), invalid=bad)
            )
        while len(mine) < n_cmd:  # random mixes of valid and hostile options
            argv = list(base)
            hostile_rate = rng.choice([0.0, 0.1, 0.3])
            for key, p in opts:
                if p.required or rng.random() > 0.4:
                    continue
                pool = hostile if rng.random() < hostile_rate else None
                if pool and p.opts and p.opts[0] in WRITE_OPTIONS:
                    pool = WRITE_HOSTILE
                value = (
                    rng.choice(pool)
                    if pool
                    else (
                        valid(key, p)
                        if p.opts[0] in WRITE_OPTIONS
                        else rng.choice(cc.VALID.get(key, cc.VALID_NUMBERS))
                    )
                )
                argv = _with_option(argv, p, value)
            argv += [f for f in flags if rng.random() < 0.3 and f != "--csv"] or json_flag
            mine.append(Case("cli", name, "mix", cli_runner(argv)))
        for c in mine:
            c.timeout_s = 180 if slow else None
        cases += mine
    # the environment the CLI reads
    for env in (
        {"GPUMODEL_MAX_INPUT_MB": "abc"},
        {"GPUMODEL_MAX_INPUT_MB": "-1"},
        {"GPUMODEL_MAX_INPUT_MB": "nan"},
        {"GPUMODEL_MAX_INPUT_MB": "1e400"},
        {"GPUMODEL_CACHE_DIR": "/proc"},
        {"GPUMODEL_CACHE_DIR": "/dev/null"},
        {"GPUMODEL_CACHE_DIR": "/nonexistent/x"},
        {"XDG_CACHE_HOME": "/proc/self"},
    ):
        for argv in (
            [*PREDICT_GEMM, "--json"],
            ["diagnose", str(TRACE), "--gpu", "h100", "--json"],
            ["infer", "--model", "llama-3-8b", "--gpu", "h100", "--json"],
        ):
            label = ",".join(f"{k}={v}" for k, v in env.items())
            cases.append(Case("cli", " ".join(argv[:1]), f"env {label}", cli_runner(argv, env=env)))
    return cases


def _with_option(argv: list[str], p: Any, value: str) -> list[str]:
    if p.opts and p.opts[0].startswith("-"):
        return [*argv, p.opts[0], value]
    return [*argv, value]


# ---------------------------------------------------------------------------------------------
# library cases


def hostile_python() -> list[tuple[str, Any, str]]:
    """(label, value, kind): kind 'never' = cannot be meant for any parameter, 'number' =
    invalid where a size/count is meant, 'maybe' = judged by hand."""
    return [
        ("0", 0, "number"),
        ("-1", -1, "number"),
        ("-4096", -4096, "number"),
        ("nan", NAN, "never"),
        ("inf", INF, "never"),
        ("-inf", -INF, "never"),
        ("1e300", 1e300, "never"),
        ("2**70", 2**70, "never"),
        ("5000 digits", BIG_INT, "never"),
        ("'١٢'", "١٢", "never"),
        ("''", "", "never"),
        ("'bf17'", "bf17", "maybe"),
        ("None", None, "maybe"),
        ("True", True, "maybe"),
        ("[]", [], "maybe"),
        ("{}", {}, "never"),
        ("1.5", 1.5, "maybe"),
        ("1e-300", 1e-300, "maybe"),
        ("'4096'", "4096", "maybe"),
        ("object()", object(), "never"),
        ("2**63", 2**63, "number"),
        ("1e12", 1e12, "maybe"),
    ]


LIB_SKIP = {"llm", "ops", "__version__"}
# (function, parameter) pairs where a huge finite number or an empty mapping is a valid input:
# formatting and unit helpers format any finite number; an empty dict of calibration
# parameters, prices or measured op times means "none given"
_HUGE = {"1e300", "2**70", "2**63", "1e12"}
LIB_VALID_ODDITIES = {
    ("format_quantity", "value"): _HUGE,
    ("format_quantity", "unit"): {"'١٢'", "'abc'"},  # a unit is any non-empty text
    ("format_time", "seconds"): _HUGE,
    ("parse_quantity", "value"): _HUGE,
    ("littles_law", "throughput"): _HUGE,
    ("littles_law", "latency"): _HUGE,
    ("concurrency", "calibration"): {"{}"},
    ("price_for", "price"): {"{}"},
    # op_times maps op names to measured seconds; empty: nothing measured (as None)
    ("predict_inference", "op_times"): {"{}"},
    # a described kernel's FLOPs are a float count up to 10^30, not a tensor size (<= 2**53)
    ("op kernel", "flops"): {"2**70", "2**63", "1e12"},
}


def lib_baselines() -> dict[str, dict[str, Any]]:
    import gpumodel as gm

    gpu = gm.get_gpu("h100")
    gemm = gm.ops.Gemm(m=4096, n=4096, k=4096)
    return {
        "amdahl": dict(parallel_fraction=0.9, n=[1, 2, 8]),
        "amdahl_from_times": dict(serial_s=0.01, parallel_s=1.0, n=[1, 8]),
        "calibrate_from_trace": dict(path=str(TRACE), gpu="h100"),
        "concurrency": dict(gpu=gpu),
        "data_parallel_step": dict(compute_s=0.1, grad_bytes=1e9, gpus=8, gpu="h100"),
        "diagnose": dict(trace=str(TRACE), gpu="h100"),
        "explain_symbolic": dict(topic="gemm", gpu="h100"),
        "fits": dict(model="llama-3-8b", gpu="h100", batch=1, seq=2048),
        "format_quantity": dict(value=1e9, unit="B"),
        "format_time": dict(seconds=1e-3),
        "get_gpu": dict(name="h100"),
        "get_model": dict(name_or_path="llama-3-8b"),
        "get_system": dict(id_or_path="dgx-h100"),
        "list_gpus": {},
        "list_hosts": {},
        "list_models": {},
        "list_systems": {},
        "littles_law": dict(throughput=8, latency=24),
        "load_calibration": dict(id_or_path=str(SAMPLE_CAL), for_gpu="h100"),
        "load_host": dict(name_or_path=None),
        "load_spec_file": dict(path=str(HERE / "specs" / "h100-sxm.yaml")),
        "load_system_file": dict(path=str(HERE / "specs" / "systems" / "dgx-h100.yaml")),
        "max_batch": dict(model="llama-3-8b", gpu="h100", seq=2048),
        "max_context": dict(model="llama-3-8b", gpu="h100", batch=1),
        "occupancy": dict(gpu=gpu, threads_per_block=256, registers_per_thread=32),
        "occupancy_table": dict(gpu=gpu, block_sizes=[128, 256], registers_per_thread=32),
        "parse_prices": dict(text="h100=2.49"),
        "parse_quantity": dict(value="3.35 TB/s", dimension="bytes_per_s"),
        "plan_serving": dict(model="llama-3-8b", gpus="h100", rate=1.0),
        "plan_training": dict(model="llama-3-8b", gpu="h100", gpus=64, tokens=1e12),
        "predict": dict(op=gemm, gpu="h100"),
        "predict_inference": dict(model="llama-3-8b", gpu="h100", batch=1, context=1024),
        "predict_training_step": dict(model="llama-3-8b", gpu="h100", gpus=8),
        "price_for": dict(gpu=gpu, price=2.0),
        "scaling_curve": dict(compute_s=0.1, grad_bytes=1e9, gpu_counts=[1, 8], gpu="h100"),
        "search_training": dict(model="llama-3-8b", gpu="h100", tokens=1e12, gpus=[8, 64]),
        "speed_of_light": dict(op=gemm, gpu="h100"),
        "sweep": dict(op="gemm", gpu="h100", m=[1024, 4096], n=4096, k=4096),
        "sweep_inference": dict(model="llama-3-8b", gpu="h100", batch=[1, 8], context=1024),
        "sweep_training": dict(model="llama-3-8b", gpu="h100", dp=[1, 8]),
        "waves": dict(gpu=gpu, blocks=1000, blocks_per_sm=2),
        "write_report": dict(kind="plan", source=None, path="r.html"),
    }


OP_FIELD_VALID = {
    "m": 4096,
    "n": 4096,
    "k": 4096,
    "bytes": 1e9,
    "rows": 4096,
    "hidden": 4096,
    "cols": 4096,
    "batch": 1,
    "heads": 32,
    "seq": 4096,
    "head_dim": 128,
    "tokens": 4096,
    "repeat": 2,
    "tensors": 4,
    "in_channels": 64,
    "out_channels": 64,
    "height": 56,
    "width": 56,
    "kernel": 3,
    "flops": 1e12,
    "params": 1e9,
    "gpus": 8,
    "op": "relu",
    "kind": "copy",
    "bytes_per_element": 4,
    "written_per_element": 4,
}


def lib_call(fn_name: str, kwargs: dict[str, Any], invalid: bool, label: str) -> Any:
    def run(case_dir: Path) -> tuple[str, str]:
        import gpumodel as gm

        kw = dict(kwargs)
        if fn_name == "write_report" and kw.get("source") is None:
            kw["source"] = gm.plan_serving("llama-3-8b", "h100")
        try:
            value = getattr(gm, fn_name)(**kw)
        except BaseException as exc:
            return judge_exception(exc)
        return judge_value(value, invalid, label)

    return run


def op_call(
    name: str, fields: dict[str, Any], how: str, gpu: str, invalid: bool, label: str
) -> Any:
    def run(case_dir: Path) -> tuple[str, str]:
        import gpumodel as gm

        try:
            if how == "sweep":
                value = gm.sweep(name, gpu, **fields)
            else:
                op = gm.ops.op_class(name)(**fields)
                if how == "sol":
                    value = gm.speed_of_light(op, gpu)
                elif how == "cal":
                    value = gm.predict(op, "h100", str(SAMPLE_CAL))
                else:
                    value = gm.predict(op, gpu)
        except BaseException as exc:
            return judge_exception(exc)
        return judge_value(value, invalid, label)

    return run


def lib_cases(rng: random.Random, budget: int) -> list[Case]:
    import inspect

    import gpumodel as gm

    bases = lib_baselines()
    hostile = hostile_python()
    cases: list[Case] = []
    functions = [
        n for n in gm.__all__ if n not in LIB_SKIP and n[0].islower() and callable(getattr(gm, n))
    ]
    missing = [n for n in functions if n not in bases]
    if missing:
        print(f"library functions without a baseline (fuzzed with defaults only): {missing}")
    fn_budget = budget * 3 // 5
    per_fn = max(10, fn_budget // max(1, len(functions)))
    for name in functions:
        base = bases.get(name, {})
        params = [
            p
            for p in inspect.signature(getattr(gm, name)).parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        keys = list(dict.fromkeys([p.name for p in params] + list(base)))
        mine = [Case("lib", name, "defaults", lib_call(name, base, False, "defaults"))]
        singles = [(k, h) for k in keys for h in hostile]
        rng.shuffle(singles)
        for key, (label, value, kind) in singles[:per_fn]:
            kw = {**base, key: value}
            if name == "write_report" and key == "path":
                continue  # the write area owns targets
            bad = kind == "never" and key not in {"path", "trace", "name_or_path", "id_or_path"}
            bad = bad and label not in LIB_VALID_ODDITIES.get((name, key), ())
            mine.append(
                Case("lib", name, f"{key}={label}", lib_call(name, kw, bad, label), invalid=bad)
            )
        cases += mine
    # ops: predict, speed_of_light, sweep; each field hostile
    op_budget = budget - len(cases)
    names = list(gm.ops.registered_names())
    per_op = max(10, op_budget // max(1, len(names)))
    for name in names:
        cls = gm.ops.op_class(name)
        base = {
            k: OP_FIELD_VALID[k]
            for k, f in cls.model_fields.items()
            if f.is_required() and k in OP_FIELD_VALID
        }
        if name == "strided_elementwise":
            base["kind"] = "cast"
        mine = [
            Case(
                "lib",
                f"op {name}",
                "defaults",
                op_call(name, base, "predict", "h100", False, "defaults"),
            )
        ]
        singles = [(k, h) for k in cls.model_fields for h in hostile]
        rng.shuffle(singles)
        for key, (label, value, kind) in singles[:per_op]:
            if label in LIB_VALID_ODDITIES.get((f"op {name}", key), ()):
                kind = "maybe"
            how = rng.choice(["predict", "predict", "sol", "cal", "sweep"])
            if how == "sweep" and name not in ("gemm", "kernel", "elementwise"):
                how = "predict"
            fields = {**base, key: value}
            if how == "sweep" and name == "elementwise":
                name_ = fields.pop("op")  # sweep takes the elementwise name as its op
                mine.append(
                    Case(
                        "lib",
                        f"op {name}",
                        f"sweep {key}={label}",
                        op_call(name_, fields, how, "h100", kind == "never", label),
                        invalid=kind == "never",
                    )
                )
                continue
            gpu = rng.choice(["h100", "a100", "l4", "mi300x", "h200", "t4"])
            mine.append(
                Case(
                    "lib",
                    f"op {name}",
                    f"{how} {key}={label}",
                    op_call(name, fields, how, gpu, kind == "never", label),
                    invalid=kind == "never",
                )
            )
        cases += mine
    return cases


# ---------------------------------------------------------------------------------------------
# file readers


ROOT_FILES: dict[str, Path] = {}  # filled by setup: payload name -> file


def _reader_table() -> dict[str, tuple[str, Any]]:
    """reader -> (natural suffix, run(path, case_dir) -> value or raises). The CLI readers
    return the CLI outcome; the library readers also use what they read."""
    import gpumodel as gm

    def spec(p: Any) -> Any:
        g = gm.load_spec_file(p)
        return [
            gm.predict(op, g)
            for op in (
                gm.ops.Gemm(m=4096, n=4096, k=4096),
                gm.ops.Copy(bytes=1e9),
                gm.ops.LayerNorm(rows=4096, hidden=4096),
            )
        ]

    def model(p: Any) -> Any:
        m = gm.get_model(p)
        return [
            gm.predict_inference(m, "h100", batch=8, context=2048),
            gm.predict_training_step(m, "h100", gpus=8),
            gm.fits(m, "h100"),
        ]

    def system(p: Any) -> Any:
        s = gm.load_system_file(p)
        return [s, gm.predict(gm.ops.AllReduce(bytes=1e9, gpus=8, system=str(p)), "h100")]

    def calibration(p: Any) -> Any:
        c = gm.load_calibration(p, for_gpu="h100")
        return [
            gm.predict(op, "h100", c)
            for op in (
                gm.ops.Gemm(m=4096, n=4096, k=4096),
                gm.ops.Copy(bytes=1e9),
                gm.ops.LayerNorm(rows=4096, hidden=4096),
                gm.ops.Elementwise(op="relu", n=10**6),
                gm.ops.Attention(batch=1, heads=32, seq=4096, head_dim=128),
            )
        ] + [gm.predict_inference("llama-3-8b", "h100", calibration=c)]

    def host(p: Any) -> Any:
        h = gm.load_host(p)
        return [h, gm.predict_inference("llama-3-8b", "h100", host=h)]

    def trace(p: Any) -> Any:
        return gm.diagnose(p, gpu="h100")

    def trace_cal(p: Any) -> Any:
        return gm.calibrate_from_trace(p, gpu="h100")

    def cli(*argv: str) -> Any:
        return ("cli", argv)

    return {
        "spec": (".yaml", spec),
        "model": (".yaml", model),
        "system": (".yaml", system),
        "calibration": (".yaml", calibration),
        "host": (".yaml", host),
        "trace": (".json", trace),
        "trace-calibrate": (".json", trace_cal),
        "cli specs check": (".yaml", lambda p: cli("specs", "check", str(p))),
        "cli specs-dir": (
            ".yaml",
            lambda p: cli("specs", "list", "--specs-dir", str(p.parent), "--json"),
        ),
        "cli infer --model": (
            ".yaml",
            lambda p: cli("infer", "--model", str(p), "--gpu", "h100", "--json"),
        ),
        "cli infer --host": (
            ".yaml",
            lambda p: cli(
                "infer", "--model", "llama-3-8b", "--gpu", "h100", "--host", str(p), "--json"
            ),
        ),
        "cli systems --system-file": (
            ".yaml",
            lambda p: cli("systems", "--system-file", str(p), "--json"),
        ),
        "cli allreduce --system-file": (
            ".yaml",
            lambda p: cli(
                "allreduce", "--bytes", "1GB", "--gpus", "8", "--system-file", str(p), "--json"
            ),
        ),
        "cli predict --calibration": (
            ".yaml",
            lambda p: cli(*PREDICT_GEMM, "--gpu", "h100", "--calibration", str(p), "--json"),
        ),
        "cli diagnose": (".json", lambda p: cli("diagnose", str(p), "--gpu", "h100", "--json")),
        "cli report diagnose": (
            ".json",
            lambda p: cli("report", "diagnose", str(p), "--gpu", "h100", "--json"),
        ),
        "cli calibrate --trace": (
            ".json",
            lambda p: cli(
                "calibrate", "--trace", str(p), "--gpu", "h100", "--out", "c.yaml", "--json"
            ),
        ),
        "cli batch .json": (".json", lambda p: cli("batch", str(p), "--gpu", "h100", "--json")),
        "cli batch .jsonl": (".jsonl", lambda p: cli("batch", str(p), "--gpu", "h100", "--json")),
        "cli batch .csv": (".csv", lambda p: cli("batch", str(p), "--gpu", "h100", "--json")),
        "cli batch .yaml": (".yaml", lambda p: cli("batch", str(p), "--gpu", "h100", "--json")),
        "cli report plan": (
            ".json",
            lambda p: cli("report", "plan", str(p), "--out", "r.html", "--json"),
        ),
        "cli validate --from-measurements": (
            ".json",
            lambda p: cli(
                "validate",
                "--backend",
                "numpy",
                "--from-measurements",
                str(p),
                "--out",
                "c.yaml",
                "--json",
            ),
        ),
    }


def reader_runner(reader: str, payload: str, invalid: bool, make: Any = None) -> Any:
    """Run ``reader`` on the payload file (or on ``make(case_dir)``'s file)."""

    def run(case_dir: Path) -> tuple[str, str]:
        suffix, fn = _reader_table()[reader]
        if make is not None:
            path = make(case_dir, suffix)
        else:
            path = _payload_path(payload, suffix, case_dir)
        try:
            value = fn(path)
        except BaseException as exc:
            return judge_exception(exc)
        if isinstance(value, tuple) and value and value[0] == "cli":
            return cli_runner(list(value[1]), invalid)(case_dir)
        return judge_value(value, invalid, payload)

    return run


def _payload_path(payload: str, suffix: str, case_dir: Path) -> Path:
    src = ROOT_FILES[payload]
    if payload in ("/dev/zero", "fifo", "directory", "sparse-600MB", "gzip-bomb"):
        if payload == "fifo":
            path = case_dir / f"fifo{suffix}"
            os.mkfifo(path)
            return path
        if payload == "directory":
            path = case_dir / f"dir{suffix}"
            path.mkdir()
            return path
        if payload == "/dev/zero":
            return Path("/dev/zero")
        path = case_dir / f"{payload}{suffix}"  # large payloads: shared, linked
        path.symlink_to(src)
        return path
    path = case_dir / f"input{suffix}"
    path.write_bytes(src.read_bytes())
    return path


def make_payloads(scratch: Path) -> list[str]:
    """Hostile input files, made once (the large ones sparse or compressed)."""
    d = scratch / "payloads"
    d.mkdir()
    rnd = random.Random(7)
    valid_json = json.dumps({"traceEvents": [], "schemaVersion": 1}).encode()
    files: dict[str, bytes] = {
        "binary": bytes(rnd.randrange(256) for _ in range(4096)),
        "empty": b"",
        "nul": b"gpu_id: h100\x00\x00\x00\n",
        "latin1": "name: caf\xe9\nvalue: 1\n".encode("latin-1"),
        "bom-only": b"\xef\xbb\xbf",
        "whitespace": b" \n\t\n",
        "null": b"null\n",
        "list": b"[1, 2, 3]\n",
        "number": b"42\n",
        "string": b'"x"\n',
        "truncated-gzip": zlib.compress(valid_json * 200)[:40],  # zlib header, cut
        "deep-json-list": b"[" * 100_000 + b"]" * 100_000,
        "deep-json-dict": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
        "deep-yaml-flow": b"a: " + b"[" * 100_000 + b"]" * 100_000 + b"\n",
        "deep-yaml-block": "".join(f"{'  ' * i}a{i}:\n" for i in range(3000)).encode(),
        "deep-yaml-dash": b"".join(b"  " * i + b"-\n" for i in range(3000)),
        "alias-bomb": _alias_bomb(),
        "huge-int-json": b'{"m": ' + b"9" * 5000 + b"}",
        "huge-int-yaml": b"m: " + b"9" * 5000 + b"\n",
        "yaml-python-tag": b"a: !!python/object/apply:os.system ['true']\n",
        "yaml-bad-date": b"created: 2026-13-45\n",
        "nan-json": b'{"m": NaN, "n": Infinity}',
        "long-line": b'{"op": "gemm", "m": "' + b"1" * (3 << 20) + b'"}\n',
    }
    gz = io.BytesIO()
    import gzip

    with gzip.GzipFile(fileobj=gz, mode="wb") as fh:
        fh.write(valid_json * 5000)
    files["truncated-gzip"] = gz.getvalue()[: len(gz.getvalue()) // 2]
    for name, data in files.items():
        (d / name).write_bytes(data)
        ROOT_FILES[name] = d / name
    # a gzip bomb: ~1.5 MB of gzip that is 1.5 GB of spaces (valid JSON whitespace)
    bomb = d / "gzip-bomb"
    comp = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = b" " * (1 << 24)
    with open(bomb, "wb") as fh:
        for _ in range(96):
            fh.write(comp.compress(chunk))
        fh.write(comp.flush())
    ROOT_FILES["gzip-bomb"] = bomb
    sparse = d / "sparse-600MB"
    with open(sparse, "wb") as fh:
        fh.truncate(600 << 20)
    ROOT_FILES["sparse-600MB"] = sparse
    for special in ("/dev/zero", "fifo", "directory"):
        ROOT_FILES[special] = Path(special)
    for p in d.iterdir():
        p.chmod(0o444)
    payloads = list(ROOT_FILES)
    # a valid saved plan (the input of `report plan`), not a hostile payload
    from gpumodel.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["plan", "serve", "--model", "llama-3-8b", "--gpu", "h100,a100", "--json"])
    (d / "plan.json").write_text(out.getvalue())
    ROOT_FILES["plan-json"] = d / "plan.json"
    return payloads


def _alias_bomb() -> bytes:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        refs = ",".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return ("\n".join(lines) + "\n").encode()


# mutated shipped files: every leaf replaced by hostile values


MUTATIONS = [
    ("nan", ".nan", "never"),
    ("inf", ".inf", "never"),
    ("-inf", "-.inf", "never"),
    ("-1", -1, "negative"),
    ("0", 0, "zero"),
    ("1e300", 1e300, "never"),
    ("'abc'", "abc", "never"),
    ("''", "", "never"),
    ("[]", [], "never"),
    ("{}", {}, "never"),
    ("true", True, "never"),
    ("5000 digits", "@big", "never"),
    ("'١٢'", "١٢", "never"),
    ("null", None, "maybe"),
    ("1e-300", 1e-300, "maybe"),
]


def _leaves(data: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    out: list[tuple[tuple, Any]] = []
    if isinstance(data, dict):
        for k, v in data.items():
            out += _leaves(v, (*path, k))
    elif isinstance(data, list):
        for i, v in enumerate(data[:6]):
            out += _leaves(v, (*path, i))
    else:
        out.append((path, data))
    return out


def _set(data: Any, path: tuple, value: Any) -> Any:
    import copy

    data = copy.deepcopy(data)
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


def _dump_yaml(data: Any, nan_tokens: dict[str, str]) -> str:
    import yaml

    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=10**9)
    for token, raw in nan_tokens.items():  # YAML's .nan/.inf written bare
        text = text.replace(f"'{token}'", raw)
    return text


SAMPLE_FILES = {
    "spec": HERE / "specs" / "h100-sxm.yaml",
    "model": HERE / "specs" / "models" / "llama-3-8b.yaml",
    "system": HERE / "specs" / "systems" / "dgx-h100.yaml",
    "host": HERE / "specs" / "hosts" / "reference-h100.yaml",
}
SAMPLE_CAL = HERE / "validation" / "results" / "h100-sxm" / "calibration.yaml"
OTHER_CAL = HERE / "validation" / "results" / "h200-sxm" / "calibration.yaml"
TRACE = HERE / "tests" / "fixtures" / "traces" / "item_sync.json.gz"


def mutation_cases(rng: random.Random, budget: int) -> list[Case]:
    import yaml

    from gpumodel.calibration import END_MARKER

    samples: dict[str, tuple[Any, str]] = {}
    for kind, path in SAMPLE_FILES.items():
        samples[kind] = (yaml.safe_load(path.read_text()), "")
    cal_text = SAMPLE_CAL.read_text()
    cal_head = cal_text[: cal_text.index("\nmeasurements:") + 1]
    samples["calibration"] = (yaml.safe_load(cal_head), END_MARKER)
    rows = [
        json.loads(ln)
        for ln in (HERE / "tests/fixtures/ops.jsonl").read_text().splitlines()
        if ln.strip()
    ]
    samples["batch-row"] = ({"rows": rows}, "")
    all_leaves = [
        (kind, path, value) for kind, (data, _) in samples.items() for path, value in _leaves(data)
    ]
    cases: list[Case] = []
    pairs = [(leaf, m) for leaf in all_leaves for m in MUTATIONS]
    rng.shuffle(pairs)
    for (kind, path, old), (label, value, strength) in pairs[:budget]:
        data, tail = samples[kind]
        numeric = isinstance(old, (int, float)) and not isinstance(old, bool)
        if isinstance(old, str) and strength == "never" and label in ("'abc'", "'١٢'"):
            strength = "maybe"  # text in a text field
        if isinstance(old, bool) and label == "true":
            continue
        invalid = strength == "never" and (numeric or label in ("[]", "{}", "''"))
        if label == "''" and not numeric and not _identifies(path):
            invalid = False  # free-text metadata (titles, notes, environment strings) may be empty
        if label == "{}" and path[-1:] == ("notes",):
            invalid = False  # a host profile's notes are free text or a free mapping
        tokens = {"@nan": ".nan", "@inf": ".inf", "@-inf": "-.inf", "@big": "9" * 5000}
        written = (
            {".nan": "@nan", ".inf": "@inf", "-.inf": "@-inf"}.get(value, value)
            if isinstance(value, str)
            else value
        )
        mutated = _set(data, path, written)
        where = ".".join(map(str, path))
        if kind == "batch-row":
            text = (
                "\n".join(json.dumps(r) for r in mutated["rows"])
                .replace('"@nan"', "NaN")
                .replace('"@inf"', "Infinity")
                .replace('"@-inf"', "-Infinity")
                .replace('"@big"', "9" * 5000)
                + "\n"
            )
            make = _maker(text, ".jsonl")
            reader = "cli batch .jsonl"
        else:
            make = _maker(_dump_yaml(mutated, tokens) + tail, ".yaml")
            reader = (
                kind
                if rng.random() < 0.8
                else {
                    "spec": "cli specs check",
                    "model": "cli infer --model",
                    "host": "cli infer --host",
                    "system": "cli systems --system-file",
                    "calibration": "cli predict --calibration",
                }[kind]
            )
        case = Case(
            "file",
            f"{reader} (fields)",
            f"{where}={label}",
            reader_runner(reader, "", invalid, make),
            invalid=invalid,
        )
        if strength in ("negative", "zero") and numeric:
            case.label += f" [{strength}]"
        cases.append(case)
    return cases


# text fields that name something (an empty one is invalid); other text is free metadata
IDENT_KEYS = {"id", "name", "gpu_id", "architecture", "vendor", "gpu", "family", "aliases"}


def _identifies(path: tuple) -> bool:
    keys = [k for k in path if isinstance(k, str)]
    return bool(keys) and (keys[-1] in IDENT_KEYS or "aliases" in keys)


def _maker(text: str, suffix: str) -> Any:
    def make(case_dir: Path, _suffix: str) -> Path:
        path = case_dir / f"mutated{suffix}"
        path.write_text(text, encoding="utf-8")
        return path

    return make


# a batch file with no rows (empty, a CSV header line) is an empty batch, not an error
HARMLESS_FOR_BATCH = {
    "empty",
    "bom-only",
    "whitespace",
    "null",
    "list",
    "number",
    "string",
    "huge-int-json",
    "huge-int-yaml",
    "yaml-python-tag",
    "yaml-bad-date",
    "nan-json",
}


def file_cases(rng: random.Random, budget: int, big: bool, payloads: list[str]) -> list[Case]:
    readers = list(_reader_table())
    cases: list[Case] = []
    for reader in readers:
        # a re-fit of the shipped H100 calibration's 2,200 measurements is a minute of fitting
        # on a 2-core machine (63 s serial, 40 s on 2 workers, 2026-11-27): not a hang
        refit = reader == "cli validate --from-measurements"
        run = reader_runner(reader, "", False, _valid_maker(reader))
        cases.append(Case("file", reader, "valid", run, timeout_s=300 if refit else None))
        for payload in payloads:
            bad = not (reader.startswith("cli batch") and payload in HARMLESS_FOR_BATCH)
            if reader == "cli specs-dir" and payload in ("/dev/zero", "directory"):
                bad = False  # --specs-dir /dev (or an empty dir): no specs there, the shipped ones list
            cases.append(
                Case("file", reader, payload, reader_runner(reader, payload, bad), invalid=bad)
            )
    # a calibration for another GPU: named, and cached under the wrong GPU's name
    cases.append(
        Case(
            "file",
            "calibration",
            "another GPU's file, for_gpu='h100' (a documented transfer)",
            reader_runner("calibration", "", False, _copy_maker(OTHER_CAL)),
        )
    )
    cases.append(
        Case(
            "file",
            "cli predict --calibration",
            "another GPU's file (h200 for h100)",
            reader_runner("cli predict --calibration", "", True, _copy_maker(OTHER_CAL)),
            invalid=True,
        )
    )
    cases.append(
        Case(
            "file",
            "calibration cache",
            "h200 calibration cached as h100-sxm.yaml",
            _wrong_cache(),
            invalid=True,
        )
    )
    if big:
        for suffix in (".jsonl", ".csv", ".json", ".yaml"):
            cases.append(
                Case(
                    "file",
                    f"cli batch {suffix}",
                    "200 MB batch file",
                    _big_batch(suffix),
                    timeout_s=400,
                )
            )
    cases += mutation_cases(rng, max(0, budget - len(cases)))
    return cases


def _valid_maker(reader: str) -> Any:
    valid = {
        "spec": SAMPLE_FILES["spec"],
        "cli specs check": SAMPLE_FILES["spec"],
        "cli specs-dir": SAMPLE_FILES["spec"],
        "model": SAMPLE_FILES["model"],
        "cli infer --model": SAMPLE_FILES["model"],
        "system": SAMPLE_FILES["system"],
        "cli systems --system-file": SAMPLE_FILES["system"],
        "cli allreduce --system-file": SAMPLE_FILES["system"],
        "host": SAMPLE_FILES["host"],
        "cli infer --host": SAMPLE_FILES["host"],
        "calibration": SAMPLE_CAL,
        "cli predict --calibration": SAMPLE_CAL,
        "cli validate --from-measurements": SAMPLE_CAL,
    }
    src = valid.get(reader)
    if reader.startswith("cli batch"):
        rows = [{"op": "gemm", "m": 4096, "n": 4096, "k": 4096}, {"op": "copy", "bytes": 1e9}]
        suffix = reader.rsplit(" ", 1)[-1]
        text = {
            ".json": json.dumps(rows),
            ".jsonl": "\n".join(map(json.dumps, rows)),
            ".csv": "op,m,n,k,bytes\ngemm,4096,4096,4096,\ncopy,,,,1e9\n",
            ".yaml": "- {op: gemm, m: 4096, n: 4096, k: 4096}\n- {op: copy, bytes: 1e9}\n",
        }[suffix]
        return _maker(text, suffix)
    if reader == "cli report plan":
        return _copy_maker(ROOT_FILES["plan-json"])
    return _copy_maker(src or TRACE)


def _copy_maker(src: Path) -> Any:
    def make(case_dir: Path, suffix: str) -> Path:
        suffix = "".join(src.suffixes) if src.suffix == ".gz" else src.suffix
        path = case_dir / f"copy{suffix}"
        path.write_bytes(src.read_bytes())
        return path

    return make


def _wrong_cache() -> Any:
    def run(case_dir: Path) -> tuple[str, str]:
        cache = case_dir / "cache" / "calibrations"
        cache.mkdir(parents=True)
        (cache / "h100-sxm.yaml").write_bytes(OTHER_CAL.read_bytes())
        argv = [*PREDICT_GEMM, "--gpu", "h100", "--json"]
        return cli_runner(argv, invalid=True)(case_dir)

    return run


def _big_batch(suffix: str) -> Any:
    def run(case_dir: Path) -> tuple[str, str]:
        path = case_dir / f"big{suffix}"
        row = {"op": "gemm", "m": 4096, "n": 4096, "k": 4096}
        target = 200 << 20
        with open(path, "w") as fh:
            if suffix == ".jsonl":
                line = json.dumps(row) + "\n"
                fh.write(line * (target // len(line)))
            elif suffix == ".csv":
                fh.write("op,m,n,k\n" + "gemm,4096,4096,4096\n" * (target // 19))
            elif suffix == ".json":
                item = json.dumps(row) + ",\n"
                fh.write("[" + item * (target // len(item)) + json.dumps(row) + "]")
            else:
                item = "- {op: gemm, m: 4096, n: 4096, k: 4096}\n"
                fh.write(item * (target // len(item)))
        try:
            kind, detail = cli_runner(["batch", str(path), "--gpu", "h100", "--csv"])(case_dir)
        finally:
            path.unlink()
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return kind, f"{detail} (peak RSS {peak_mb:.0f} MB)"

    return run


# ---------------------------------------------------------------------------------------------
# writes


OLD = b"OLD CONTENT: must survive a failed write\n"


def _writers() -> dict[str, Any]:
    """writer -> write(target) (raises on failure); each makes a complete, checkable file."""

    def io_text(t: Path) -> None:
        from gpumodel._io import atomic_write_text

        atomic_write_text(t, "x" * 100_000 + "\nEND\n")

    def cal_save(t: Path) -> None:
        import gpumodel as gm

        gm.load_calibration(str(SAMPLE_CAL), for_gpu="h100").save(t)

    def host_save(t: Path) -> None:
        import gpumodel as gm

        gm.load_host(str(SAMPLE_FILES["host"])).save(t)

    def report(t: Path) -> None:
        import gpumodel as gm

        gm.write_report("plan", gm.plan_serving("llama-3-8b", "h100"), t)

    def cli(*argv: str) -> Any:
        def write(t: Path) -> None:
            from gpumodel.cli import main

            err = io.StringIO()
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
                code = main(
                    [
                        a.replace("TARGET", str(t)).replace(
                            "PLANFILE", str(ROOT_FILES["plan-json"])
                        )
                        for a in argv
                    ]
                )
            if code == 2:
                raise _CliError(err.getvalue())
            if code != 0:
                raise RuntimeError(f"exit {code}: {err.getvalue()[-300:]}")

        return write

    return {
        "_io.atomic_write_text": io_text,
        "Calibration.save": cal_save,
        "HostProfile.save": host_save,
        "write_report": report,
        "cli calibrate --out": cli(
            "calibrate", "--trace", str(TRACE), "--gpu", "h100", "--out", "TARGET"
        ),
        "cli diagnose --html": cli("diagnose", str(TRACE), "--gpu", "h100", "--html", "TARGET"),
        "cli plan serve --html": cli(
            "plan", "serve", "--model", "llama-3-8b", "--gpu", "h100", "--html", "TARGET"
        ),
        "cli report plan --out": cli("report", "plan", "PLANFILE", "--out", "TARGET"),
        "cli roofline --plot": cli("roofline", "--gpu", "h100", "--plot", "TARGET"),
        "cli occupancy --plot": cli("occupancy", "--gpu", "h100", "--plot", "TARGET"),
    }


class _CliError(Exception):
    pass


def _complete(path: Path, writer: str) -> bool:
    data = path.read_bytes()
    if writer.endswith("--plot"):
        return data.startswith(b"\x89PNG") and data.endswith(b"IEND\xaeB`\x82")
    if "html" in writer or writer == "write_report":
        return data.rstrip().endswith(b"</html>")
    if writer in ("Calibration.save", "cli calibrate --out"):
        return data.endswith(b"# end of gpumodel calibration\n")
    if writer == "_io.atomic_write_text":
        return data.endswith(b"\nEND\n")
    return len(data) > 0


TARGETS = (
    "new",
    "existing",
    "directory",
    "readonly-dir",
    "proc",
    "missing-parent",
    "file-as-parent",
    "long-name",
    "disk-full-fsize",
    "disk-full-enospc",
    "umask-027",
    "umask-002",
    "dev-null",
)


def write_runner(writer: str, target: str) -> Any:
    def run(case_dir: Path) -> tuple[str, str]:
        from gpumodel.errors import GpumodelError

        fn = _writers()[writer]
        suffix = (
            ".png"
            if writer.endswith("--plot")
            else ".html"
            if ("html" in writer or writer == "write_report")
            else ".yaml"
        )
        work = case_dir / "w"
        work.mkdir()
        path = work / f"target{suffix}"
        expect_fail = target not in ("new", "existing", "umask-027", "umask-002", "missing-parent")
        old_exists = target in ("existing", "disk-full-fsize", "disk-full-enospc", "readonly-dir")
        if old_exists:
            path.write_bytes(OLD)
        restore: Any = None
        if target == "directory":
            path.mkdir()
        elif target == "readonly-dir":
            warm = case_dir / "warm"  # import what the writer imports while root can read
            warm.mkdir()
            with contextlib.suppress(Exception):
                fn(warm / path.name)
            work.chmod(0o555)
            os.setgid(65534)
            os.setuid(65534)  # root ignores permissions: drop to nobody for this case
        elif target == "proc":
            path = Path(f"/proc/gpumodel-fuzz{suffix}")
        elif target == "missing-parent":
            path = work / "missing" / "deeper" / f"target{suffix}"
        elif target == "file-as-parent":
            (work / "afile").write_bytes(b"x")
            path = work / "afile" / f"target{suffix}"
        elif target == "long-name":
            path = work / ("n" * 300 + suffix)
        elif target == "dev-null":  # a /dev/null node of our own: never the real one
            path = work / f"null{suffix}"
            os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        elif target == "disk-full-fsize":
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (256, resource.RLIM_INFINITY))
        elif target == "disk-full-enospc":
            restore = _patch_enospc(work)
        elif target.startswith("umask"):
            os.umask(int(target[-3:], 8))
        mask = os.umask(0)
        os.umask(mask)
        try:
            fn(path)
            failed = None
        except _CliError as exc:
            failed = ("error", str(exc).strip()[-300:])
            lines = [ln for ln in str(exc).splitlines() if ln.startswith("error")]
            if len(lines) != 1 or "Traceback" in str(exc):
                failed = ("multiline", str(exc)[-300:])
        except GpumodelError as exc:
            failed = judge_exception(exc)
        except BaseException as exc:
            failed = judge_exception(exc)
        finally:
            if restore:
                restore()
            resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
        litter = [
            str(p)
            for p in case_dir.rglob("*")
            if p.name.endswith(".tmp") or (p.name.startswith(".target") and p != path)
        ]
        if litter:
            return "litter", f"left {litter[:3]}"
        if failed is not None:
            if failed[0] != "error":
                return failed
            if old_exists and path.is_file() and path.read_bytes() != OLD:
                return "lost-write", "the old file changed after a failed write"
            return failed
        if expect_fail:
            return "silent-accept", f"wrote to a {target} target"
        if not path.is_file() or not _complete(path, writer):
            return "lost-write", "the new file is missing or incomplete"
        want = 0o666 & ~mask
        got = stat.S_IMODE(path.stat().st_mode)
        if got != want:
            return "mode", f"mode {got:o}, umask {mask:03o} wants {want:o}"
        return "ok", ""

    return run


def _patch_enospc(work: Path) -> Any:
    """Every file opened for writing under ``work`` fails its first write with ENOSPC after
    256 bytes (a disk that fills mid-write); returns the undo."""
    import builtins

    real_open = builtins.open
    real_fdopen = os.fdopen

    class Full(io.RawIOBase):
        pass

    def wrap(fh: Any) -> Any:
        real_write = fh.write
        state = {"n": 0}

        def write(data: Any) -> int:
            state["n"] += len(data)
            if state["n"] > 256:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real_write(data)

        try:
            fh.write = write
        except AttributeError:
            return _Proxy(fh, write)
        return fh

    def fake_open(file: Any, mode: str = "r", *a: Any, **k: Any) -> Any:
        fh = real_open(file, mode, *a, **k)
        if any(c in mode for c in "wax+") and str(work) in str(file):
            return wrap(fh)
        return fh

    builtins.open = fake_open
    io.open = fake_open

    def undo() -> None:
        builtins.open = real_open
        io.open = real_open
        os.fdopen = real_fdopen

    return undo


class _Proxy:
    def __init__(self, fh: Any, write: Any) -> None:
        self._fh, self.write = fh, write

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)

    def __enter__(self) -> Any:
        self._fh.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._fh.__exit__(*exc)

    def __iter__(self) -> Any:
        return iter(self._fh)


def write_cases() -> list[Case]:
    cases = []
    for writer in _writers():
        for target in TARGETS:
            cases.append(
                Case(
                    "write",
                    writer,
                    target,
                    write_runner(writer, target),
                    invalid=target
                    not in ("new", "existing", "umask-027", "umask-002", "missing-parent"),
                )
            )
    return cases


# subprocess cases: signals mid-write and start-up


SIGNAL_SCRIPT = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from gpumodel._io import atomic_write_text
import gpumodel.calibration
text = "y" * (int(sys.argv[3]) << 20) + "\nEND\n"
print("ready", flush=True)
atomic_write_text(sys.argv[2], text)
print("done", flush=True)
"""


def signal_runner(sig: int, delay_s: float, how: str, root: Path) -> Any:
    def run(case_dir: Path) -> tuple[str, str]:
        target = case_dir / ("target.yaml" if how == "lib" else "c.yaml")
        target.write_bytes(OLD)
        env = {**os.environ, "PYTHONPATH": str(root)}
        if how == "lib":
            cmd = [sys.executable, "-c", SIGNAL_SCRIPT, str(root), str(target), "400"]
        else:
            cmd = [
                sys.executable,
                "-m",
                "gpumodel",
                "calibrate",
                "--trace",
                str(HERE / "tests/fixtures/traces/transformer_eager.json.gz"),
                "--gpu",
                "h100",
                "--out",
                str(target),
            ]
        proc = subprocess.Popen(
            cmd, cwd=case_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        if how == "lib":
            proc.stdout.readline()  # "ready": the write starts now
        time.sleep(delay_s)
        proc.send_signal(sig)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            return "hang", "did not stop after the signal"
        litter = [p.name for p in case_dir.iterdir() if p.name.endswith(".tmp")]
        if litter:
            return "litter", f"left {litter}"
        data = target.read_bytes()
        complete = (
            data.endswith(b"\nEND\n")
            if how == "lib"
            else data.endswith(b"# end of gpumodel calibration\n")
        )
        if data != OLD and not complete:
            return "lost-write", f"target is neither old nor complete ({len(data)} bytes)"
        if how == "cli" and proc.returncode not in (0, 130, -sig, 128 + sig, 2):
            return "bad-exit", f"exit {proc.returncode}: {err.decode()[-300:]}"
        if how == "cli" and b"Traceback" in err:
            return "traceback", err.decode()[-500:]
        return "ok", f"exit {proc.returncode}, {'new' if complete else 'old'} file"

    return run


def startup_runner(shell: str, root: Path, invalid: bool = False) -> Any:
    def run(case_dir: Path) -> tuple[str, str]:
        env = {**os.environ, "PYTHONPATH": str(root)}
        cmd = shell.replace("{gm}", f"{sys.executable} -m gpumodel")
        proc = subprocess.run(
            ["bash", "-c", cmd], cwd=case_dir, env=env, capture_output=True, timeout=60
        )
        err = proc.stderr.decode("utf-8", "replace")
        if "Traceback" in err:
            return "traceback", err[-500:]
        if "Usage:" in proc.stdout.decode("utf-8", "replace") + err and proc.returncode in (0, 2):
            return "error", "usage shown"
        if proc.returncode < 0:
            return "signal", f"signal {-proc.returncode}"
        if proc.returncode not in (0, 2, 141):
            return "bad-exit", f"exit {proc.returncode}: {err[-300:]}"
        closed = "2>&-" in shell  # no stderr to write the line to
        if (
            proc.returncode == 2
            and not closed
            and len([ln for ln in err.splitlines() if ln.strip()]) != 1
        ):
            return "multiline", err[-300:]
        if proc.returncode == 0 and invalid:
            return "silent-accept", "exit 0"
        return ("ok" if proc.returncode != 2 else "error"), err.strip()[:200]

    return run


def proc_cases(rng: random.Random, root: Path) -> list[Case]:
    cases = []
    for i in range(24):
        sig = signal.SIGINT if i % 2 == 0 else signal.SIGTERM
        how = "lib" if i < 12 else "cli"
        delay = rng.uniform(0.0, 0.6) if how == "lib" else rng.uniform(0.3, 4.0)
        name = "SIGINT" if sig == signal.SIGINT else "SIGTERM"
        cases.append(
            Case(
                "proc",
                f"{name} mid-write ({how})",
                f"after {delay:.2f} s",
                signal_runner(sig, delay, how, root),
                timeout_s=120,
            )
        )
    shells = [
        ("{gm} specs list | head -c 10 >/dev/null", False),
        ("{gm} predict gemm --m 4096 --n 4096 --k 4096 --gpu h100 --json | head -c 1", False),
        ("{gm} specs list >&-", False),
        ("{gm} models list --json 1>&-", False),
        ("{gm} predict gemm --m 4096 --n 4096 --k 4096 >/dev/full", False),
        ("{gm} specs show h100 2>&- >/dev/full", False),
        ("HOME=/nonexistent {gm} predict gemm --m 64 --n 64 --k 64", False),
        ("GPUMODEL_CACHE_DIR=/proc {gm} predict gemm --m 64 --n 64 --k 64", False),
        ("GPUMODEL_MAX_INPUT_MB=abc {gm} diagnose " + str(TRACE) + " --gpu h100", True),
        ("LANG=C LC_ALL=C PYTHONIOENCODING=ascii {gm} specs list", False),
        ("PYTHONIOENCODING=ascii {gm} predict gemm --m ١٢ --n 64 --k 64", True),
        ("{gm} </dev/null", False),
        ("{gm} nope", True),
        ("{gm} predict", False),
        ("{gm} predict nope --m 1", True),
        ("{gm} --version", False),
        ("{gm} batch - </dev/zero", True),
        ("{gm} specs check /dev/stdin </dev/zero", True),
        (
            "timeout -s INT 0.4 {gm} plan train --model llama-3-70b --tokens 1e12 --gpu h100 "
            "|| test $? -eq 130 -o $? -eq 124",
            False,
        ),
        ("ulimit -v 400000; {gm} predict gemm --m 64 --n 64 --k 64 --json", False),
    ]
    for shell, invalid in shells:
        cases.append(
            Case(
                "proc",
                "start-up",
                shell[:80],
                startup_runner(shell, root, invalid),
                invalid=invalid,
                timeout_s=60,
            )
        )
    return cases


# ---------------------------------------------------------------------------------------------
# the run


def run_child(case: Case, scratch: Path, mem_bytes: int, result_path: Path) -> None:
    """In the forked child: limits, a fresh cwd and cache, the case, the result as JSON."""
    try:
        os.setpgid(0, 0)
        if mem_bytes:
            resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
        signal.signal(signal.SIGINT, signal.default_int_handler)
        case_dir = Path(tempfile.mkdtemp(dir=scratch / "cases"))
        case_dir.chmod(0o777)
        os.chdir(case_dir)
        os.environ["GPUMODEL_CACHE_DIR"] = str(case_dir / "cache")
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        t0 = time.perf_counter()
        try:
            kind, detail = case.run(case_dir)
        except MemoryError:
            kind, detail = "memory", "MemoryError (harness)"
        except BaseException as exc:  # the harness itself
            kind, detail = "harness", exc_detail(exc)
        result = {"kind": kind, "detail": detail, "s": time.perf_counter() - t0}
        # write through a fd opened before the case could fill the disk limit
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
        result_path.write_text(json.dumps(result))
    finally:
        os._exit(0)


def run_all(
    cases: list[Case], scratch: Path, workers: int, timeout_s: float, mem_bytes: int, progress: bool
) -> list[dict[str, Any]]:
    (scratch / "cases").mkdir(exist_ok=True)
    (scratch / "cases").chmod(0o777)
    (scratch / "results").mkdir(exist_ok=True)
    (scratch / "results").chmod(0o777)  # a case that drops to nobody still reports
    results: list[dict[str, Any] | None] = [None] * len(cases)
    running: dict[int, tuple[int, float, float]] = {}  # pid -> (index, start, limit)
    queue = collections.deque(range(len(cases)))
    t0 = time.time()
    done = 0
    sys.stdout.flush()
    sys.stderr.flush()
    while queue or running:
        while queue and len(running) < workers:
            i = queue.popleft()
            limit = cases[i].timeout_s or timeout_s
            pid = os.fork()
            if pid == 0:
                run_child(cases[i], scratch, mem_bytes, scratch / "results" / f"{i}.json")
            running[pid] = (i, time.time(), limit)
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            now = time.time()
            for pid_, (i, start, limit) in list(running.items()):
                if now - start > limit:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(pid_, signal.SIGKILL)
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(pid_, 0)
                    del running[pid_]
                    results[i] = {"kind": "hang", "detail": f"over {limit:g} s", "s": limit}
                    done += 1
            time.sleep(0.005)
            continue
        if pid not in running:
            continue
        i, start, _ = running.pop(pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # leftovers of the case (its subprocesses)
        rpath = scratch / "results" / f"{i}.json"
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            results[i] = {
                "kind": "signal",
                "detail": f"killed by {signal.Signals(sig).name}",
                "s": time.time() - start,
            }
        elif rpath.exists():
            results[i] = json.loads(rpath.read_text())
        else:
            results[i] = {"kind": "signal", "detail": "no result (died)", "s": time.time() - start}
        done += 1
        if progress and done % 250 == 0:
            rate = done / (time.time() - t0)
            print(f"  {done}/{len(cases)} cases, {rate:.1f}/s", file=sys.stderr, flush=True)
    return [r or {"kind": "harness", "detail": "no result"} for r in results]


def summarise(
    cases: list[Case], results: list[dict[str, Any]], wall_s: float, args: argparse.Namespace
) -> dict[str, Any]:
    per_target: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    per_area: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    total: collections.Counter[str] = collections.Counter()
    findings = []
    for case, res in zip(cases, results, strict=True):
        key = f"{case.area}: {case.target}"
        per_target[key][res["kind"]] += 1
        per_area[case.area][res["kind"]] += 1
        total[res["kind"]] += 1
        if res["kind"] not in ("ok", "error"):
            findings.append(
                {
                    "area": case.area,
                    "target": case.target,
                    "input": case.label,
                    "class": res["kind"],
                    "detail": res["detail"][:700],
                }
            )
    return {
        "cases": len(cases),
        "seed": args.seed,
        "wall_s": round(wall_s, 1),
        "workers": args.workers,
        "timeout_s": args.timeout_s,
        "memory_gb": args.memory_gb,
        "against": str(args.against),
        "python": sys.version.split()[0],
        "totals": dict(total),
        "per_area": {k: dict(v) for k, v in per_area.items()},
        "per_target": {k: dict(v) for k, v in sorted(per_target.items())},
        "findings": findings,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=10_000, help="about this many cases")
    ap.add_argument("--seed", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout-s", type=float, default=20.0)
    ap.add_argument("--memory-gb", type=float, default=2.0)
    ap.add_argument("--only", default="cli,lib,file,write,proc")
    ap.add_argument("--no-big", action="store_true", help="skip the 200 MB batch files")
    ap.add_argument("--against", default=str(HERE), help="checkout whose gpumodel to fuzz")
    ap.add_argument("--json", help="write the summary here")
    ap.add_argument("--show", type=int, default=4, help="findings shown per target and class")
    args = ap.parse_args()
    root = Path(args.against).resolve()
    sys.path[:0] = [str(root), str(HERE / "tests")]
    import gpumodel

    assert Path(gpumodel.__file__).resolve().is_relative_to(root), gpumodel.__file__
    _preload()
    rng = random.Random(args.seed)
    areas = args.only.split(",")
    scratch = Path(tempfile.mkdtemp(prefix="gpumodel-fuzz-"))
    scratch.chmod(0o755)
    payloads = make_payloads(scratch)
    share = {"cli": 0.50, "lib": 0.25, "file": 0.23}
    cases: list[Case] = []
    if "cli" in areas:
        cases += cli_cases(rng, int(args.cases * share["cli"]), root)
    if "lib" in areas:
        cases += lib_cases(rng, int(args.cases * share["lib"]))
    if "file" in areas:
        cases += file_cases(rng, int(args.cases * share["file"]), not args.no_big, payloads)
    if "write" in areas:
        cases += write_cases()
    if "proc" in areas:
        cases += proc_cases(rng, root)
    for c in cases:
        c.root = str(root)
    print(f"{len(cases)} cases (seed {args.seed}) against {root}; scratch {scratch}", flush=True)
    t0 = time.time()
    results = run_all(
        cases, scratch, args.workers, args.timeout_s, int(args.memory_gb * 2**30), progress=True
    )
    wall = time.time() - t0
    summary = summarise(cases, results, wall, args)
    print(f"\n{len(cases)} cases in {wall:.0f} s: {summary['totals']}")
    for area, counts in summary["per_area"].items():
        print(f"  {area}: {counts}")
    shown: collections.Counter[tuple[str, str]] = collections.Counter()
    for f in summary["findings"]:
        k = (f["target"], f["class"])
        shown[k] += 1
        if shown[k] <= args.show:
            print(f"\n[{f['class']}] {f['area']}: {f['target']} <- {f['input'][:120]}")
            print("    " + f["detail"].replace("\n", " | ")[:500])
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=1) + "\n")
    _cleanup(scratch)


def _preload() -> None:
    """Import and warm what the cases use, once, before forking (children start warm)."""
    import gpumodel as gm
    from gpumodel.cli import command

    command()
    for name in gm.__all__:
        with contextlib.suppress(Exception):
            getattr(gm, name)
    for g in ("h100", "a100", "l4", "mi300x", "h200", "t4", "b200"):
        gm.get_gpu(g)
    gm.predict(gm.ops.Gemm(m=64, n=64, k=64), "h100")
    gm.predict_inference("llama-3-8b", "h100")
    with contextlib.suppress(Exception):
        gm.load_calibration(str(SAMPLE_CAL), for_gpu="h100")


def _cleanup(scratch: Path) -> None:
    import shutil

    for p in scratch.rglob("*"):
        with contextlib.suppress(OSError):
            if p.is_dir() and not p.is_symlink():
                p.chmod(0o755)
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
