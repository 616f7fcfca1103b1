"""Every concrete `gpumodel ...` command shown in the README and in docs/ runs and exits 0.

Lines are taken from the code blocks of README.md and docs/*.md. Optional parts written
``[--flag value]`` are run both without and with their contents; alternatives written ``a | b``
after ``gpumodel`` are run one by one. The files the examples name as the reader's own (a
profiler trace, an nsys summary, an ops file, a calibration fitted from the trace) are stood in
for by the committed fixtures, in the working directory the examples run in. Commands that need
a GPU or the reader's own spec file are left out by name below, each with the reason;
everything else must work as written.
"""

from __future__ import annotations

import re
import shlex
import shutil
import textwrap
from pathlib import Path

import pytest

from gpumodel.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
TRACES = ROOT / "tests" / "fixtures" / "traces"

# (first words, why it cannot run here)
NOT_HERE = {
    "validate": "measures a GPU (the numpy backend is covered by tests/test_validate*.py)",
    "specs check": "checks the reader's own spec file",
    "explain gemm|attention|decode|allreduce": "a list of subcommands (each is run below)",
}


def _code_lines() -> list[tuple[str, str, int]]:
    """(page, command, expected exit code) for every ``gpumodel ...`` line of the code blocks;
    lines continued with a backslash are joined; a comment saying ``exit 2`` expects 2."""
    lines = []
    for page in PAGES:
        in_block = False
        pending = ""
        for raw in page.read_text(encoding="utf-8").splitlines():
            if raw.startswith("```"):
                in_block, pending = not in_block, ""
                continue
            text = pending + raw.strip().removeprefix("$ ")
            if text.endswith("\\"):
                pending = text[:-1] + " "
                continue
            pending = ""
            if in_block and text.startswith("gpumodel "):
                comment = text.split("#", 1)[1] if "#" in text else ""
                expect = 2 if "exit 2" in comment else 0
                lines.append((page.name, text.split("  #")[0].split(" # ")[0].strip(), expect))
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


def _commands() -> list[tuple[str, str, int]]:
    cmds = []
    for page, line, expect in _code_lines():
        for cmd in _expand(line):
            words = cmd.removeprefix("gpumodel ")
            if any(words.startswith(k) for k in NOT_HERE):
                continue
            cmds.append((page, cmd, expect))
    return cmds + [("explain", f"gpumodel explain {what} --gpu h100", 0)
                   for what in ("gemm", "attention", "decode", "allreduce")]  # fmt: skip


def test_the_readme_shows_commands():
    assert len(_commands()) >= 30


@pytest.fixture(scope="module")
def readers_files(tmp_path_factory) -> Path:
    """A working directory holding the files the examples call the reader's own."""
    from gpumodel import calibrate_from_trace

    work = tmp_path_factory.mktemp("reader")
    for name in ("step.json.gz", "trace.json.gz"):
        shutil.copy(TRACES / "transformer_eager.json.gz", work / name)
    shutil.copy(TRACES / "nsys_cuda_gpu_kern_sum_synthetic.csv", work / "kern_sum.csv")
    (work / "ops.csv").write_text("op,m,n,k,dtype\ngemm,4096,4096,4096,bf16\n")
    (work / "ops.jsonl").write_text(
        '{"op": "gemm", "m": 4096, "n": 4096, "k": 4096, "dtype": "bf16"}\n'
        '{"op": "copy", "bytes": 1e9}\n'
    )
    calibrate_from_trace(work / "step.json.gz").save(work / "mystep.yaml")
    # docs/llm.md's own model file, as the page writes it (its ```yaml block named in line 1)
    page = (ROOT / "docs" / "llm.md").read_text()
    block = re.search(r"```yaml\n# (my-[\w-]+\.yaml)[^\n]*\n(.*?)```", page, re.S)
    assert block, "docs/llm.md: the model file example is missing"
    (work / block.group(1)).write_text(block.group(2))
    return work


@pytest.fixture(scope="module")
def page_dirs(readers_files, tmp_path_factory) -> dict[str, Path]:
    """One working directory per page, so a page's later examples see what earlier ones
    wrote (``plan serve --json > serve.json`` then ``report plan serve.json``)."""
    dirs: dict[str, Path] = {}
    for page, _, _ in _commands():
        if page not in dirs:
            dirs[page] = tmp_path_factory.mktemp(page.replace(".", "_"))
            shutil.copytree(readers_files, dirs[page], dirs_exist_ok=True)
            for top in ("validation", "tests", "specs"):  # paths as written from the checkout
                (dirs[page] / top).symlink_to(ROOT / top)
    return dirs


@pytest.mark.parametrize(("page", "cmd", "expect"), _commands(), ids=lambda v: str(v)[:80])
def test_readme_command_runs(page, cmd, expect, page_dirs, monkeypatch, capsys):
    monkeypatch.chdir(page_dirs[page])  # --plot and --out files land here
    args, _, target = cmd.partition(" > ")
    code = main(shlex.split(args)[1:])
    out, err = capsys.readouterr()
    assert code == expect, f"{cmd}\n{err[-400:]}"
    if expect == 2:
        assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
        return
    if target:
        (page_dirs[page] / target.strip()).write_text(out)
    assert out.strip()


@pytest.mark.parametrize("page", [p for p in PAGES if "```python" in p.read_text("utf-8")],
                         ids=lambda p: p.name)  # fmt: skip
def test_python_examples_run(page, readers_files, tmp_path, monkeypatch):
    """Each page's library examples, in order, in one namespace (later blocks use ``gm`` and
    names from earlier ones), with the reader's files standing by."""
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
    # a block that imports torch records the reader's own job with the profiler: not run here
    blocks = [b for b in blocks if "from torch" not in b and "import torch" not in b]
    for f in readers_files.iterdir():
        shutil.copy(f, tmp_path / f.name)
    monkeypatch.chdir(tmp_path)
    import gpumodel

    namespace: dict = {"gm": gpumodel}  # every page's examples assume `import gpumodel as gm`
    for block in blocks:
        exec(compile(textwrap.dedent(block), str(page), "exec"), namespace)
