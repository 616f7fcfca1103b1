"""Start-up stays light by construction (issue #20 item 6): what ``import gpumodel`` and a
``predict gemm`` run load, checked in fresh interpreters (``sys.modules``), not timed; the
timing is benchmarks/bench_startup.py. Plus the tables that let the CLI and ``gpumodel.ops``
load lazily, held equal to what they stand for."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import gpumodel as gm

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("sympy", "matplotlib", "cupy", "torch", "pandas", "scipy")


def _modules_after(code: str) -> dict:
    """Run ``code`` in a fresh interpreter on this checkout (no user calibration cache); it
    prints a JSON object."""
    with tempfile.TemporaryDirectory() as cache:
        env = {"PYTHONPATH": str(ROOT), "PATH": "", "GPUMODEL_CACHE_DIR": cache}
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                             text=True, check=True, env=env)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def _loaded(mods: list[str], name: str) -> bool:
    return any(m == name or m.startswith(name + ".") for m in mods)


def test_import_gpumodel_loads_only_the_error_types():
    got = _modules_after("import sys, json, gpumodel; print(json.dumps({'m': list(sys.modules)}))")
    mods = got["m"]
    for heavy in (*HEAVY, "rich", "typer", "click", "numpy", "pydantic", "yaml"):
        assert not _loaded(mods, heavy), f"import gpumodel loads {heavy}"
    assert sorted(m for m in mods if m.startswith("gpumodel")) == ["gpumodel", "gpumodel.errors"]


def test_predict_gemm_cli_loads_only_what_it_uses():
    """``gpumodel predict gemm ... --gpu h100``: no plotting, symbolic, GPU or table libraries,
    no numpy (a scalar prediction), none of the other commands' modules, and of the 17 GPU
    spec files only the H100's is parsed."""
    code = (
        "import contextlib, io, json, sys\n"
        "from gpumodel.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    rc = main(['predict', 'gemm', '--m', '4096', '--n', '4096', '--k', '4096',"
        " '--gpu', 'h100'])\n"
        "from gpumodel.specs import library\n"
        "print(json.dumps({'rc': rc, 'out': out.getvalue(), 'm': list(sys.modules),"
        " 'specs': sorted(library()._loaded)}))\n"
    )
    got = _modules_after(code)
    assert got["rc"] == 0 and "gemm(m=4096, n=4096, k=4096" in got["out"]
    mods = got["m"]
    for heavy in (*HEAVY, "rich", "numpy"):
        assert not _loaded(mods, heavy), f"predict gemm loads {heavy}"
    for unused in ("gpumodel.llm", "gpumodel.diagnose", "gpumodel.validate", "gpumodel.symbolic",
                   "gpumodel.vectorised", "gpumodel.tracecal", "gpumodel.ops.attention",
                   "gpumodel.ops.collectives", "gpumodel.ops.simple", "gpumodel.cli.llm",
                   "gpumodel.cli.validate", "gpumodel.cli.diagnose", "gpumodel.cli.batch"):  # fmt: skip
        assert not _loaded(mods, unused), f"predict gemm loads {unused}"
    assert got["specs"] == ["h100-sxm"]


def test_every_command_maps_to_the_module_that_registers_it():
    """``gpumodel <command>`` imports only ``_COMMANDS[command]``'s module: every top-level
    command and group must be there, under the module that defines it."""
    from gpumodel import cli

    cli.load_commands()  # all of them
    found = {}
    for info in cli.app.registered_commands:
        name = info.name or info.callback.__name__.replace("_", "-")
        found[name] = info.callback.__module__
    for group in cli.app.registered_groups:
        sub = group.typer_instance
        callbacks = [c.callback for c in sub.registered_commands]
        callbacks += [c.callback for g in sub.registered_groups for c in
                      g.typer_instance.registered_commands]  # fmt: skip
        found[group.name] = callbacks[0].__module__
    assert found, "no commands registered"
    for name, module in found.items():
        assert name in cli._COMMANDS, f"command {name!r} missing from gpumodel.cli._COMMANDS"
        assert f"gpumodel.cli.{cli._COMMANDS[name]}" == module, name
    assert set(cli._COMMANDS) == set(found)


def test_lazy_op_tables_match_the_classes():
    from gpumodel import ops
    from gpumodel.ops import simple

    assert set(ops.ELEMENTWISE_NAMES) == set(simple.ELEMENTWISE)
    for name, cls_name in ops._BUILTIN.items():
        cls = getattr(ops, cls_name)
        assert cls.op_name == name, (name, cls_name)
    assert set(ops.op_names()) == set(ops._BUILTIN) | set(ops.ELEMENTWISE_NAMES)


def test_predict_and_diagnose_stay_functions_after_their_modules_load():
    """``gpumodel.predict`` and ``gpumodel.diagnose`` name both a function and its module;
    importing the module must not replace the function on the package."""
    got = _modules_after(
        "import json, gpumodel as gm, gpumodel.predict, gpumodel.diagnose.parse\n"
        "print(json.dumps({'p': callable(gm.predict), 'd': callable(gm.diagnose)}))"
    )
    assert got == {"p": True, "d": True}
    assert gm.predict(gm.ops.Gemm(m=8, n=8, k=8), "h100", "none").time_s > 0
