"""Every concrete `gpumodel ...` command shown in the README and in docs/ runs and exits 0.

Lines are taken from the code blocks of README.md and docs/*.md. Optional parts written ``[--flag value]`` are
run both without and with their contents; alternatives written ``a | b`` after ``gpumodel`` are
run one by one. Commands that need a GPU, a file the reader supplies or a device run are left
out by name below, each with the reason; everything else must work as written.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from gpumodel.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

# (first words, why it cannot run here)
NOT_HERE = {
    "validate": "measures a GPU (the numpy backend is covered by tests/test_validate*.py)",
    "diagnose": "reads the reader's own profiler trace",
    "batch": "reads the reader's own ops file",
    "specs check": "checks the reader's own spec file",
    "explain gemm|attention|decode|allreduce": "a list of subcommands (each is run below)",
}


def _code_lines() -> list[str]:
    lines = []
    for page in PAGES:
        in_block = False
        for raw in page.read_text(encoding="utf-8").splitlines():
            if raw.startswith("```"):
                in_block = not in_block
                continue
            text = raw.strip().removeprefix("$ ")
            if in_block and text.startswith("gpumodel "):
                lines.append(text.split("  #")[0].split(" # ")[0].strip())
    return lines


def _expand(line: str) -> list[str]:
    """The bracket-free commands a README line stands for."""
    out = []
    for part in line.split(" | "):
        part = part if part.startswith("gpumodel ") else "gpumodel " + part
        bare = re.sub(r"\s*\[[^\]]*\]", "", part)
        out.append(bare)
        full = re.sub(r"\[([^\]]*)\]", r"\1", part)
        if full != bare and "|" not in full and "..." not in full:
            out.append(full)
    return out


def _commands() -> list[str]:
    cmds = []
    for line in _code_lines():
        for cmd in _expand(line):
            words = cmd.removeprefix("gpumodel ")
            if any(words.startswith(k) for k in NOT_HERE):
                continue
            cmds.append(cmd)
    return cmds + [f"gpumodel explain {what} --gpu h100"
                   for what in ("gemm", "attention", "decode", "allreduce")]  # fmt: skip


def test_the_readme_shows_commands():
    assert len(_commands()) >= 30


@pytest.mark.parametrize("cmd", _commands())
def test_readme_command_runs(cmd, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # --plot files land here
    code = main(shlex.split(cmd)[1:])
    out, err = capsys.readouterr()
    assert code == 0, f"{cmd}\n{err[-400:]}"
    assert out.strip()


def test_readme_python_examples_run(tmp_path, monkeypatch, capsys):
    """The library examples, in order, in one namespace (later blocks use ``gm`` and ``gpu``
    from the first); the one that reads the reader's own profiler trace is left out."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    runnable = [b for b in blocks if "trace.json" not in b]
    assert len(runnable) >= 4
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for block in runnable:
        exec(compile(block, str(README), "exec"), namespace)
    assert namespace["p"].time_s > 0
