"""docs/json.md lists the top-level keys of every command's ``--json`` output: each section's
command is run and its keys compared with the page's, so the page cannot go stale."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "json.md"


def _sections() -> list[tuple[str, list[str], bool, set[str]]]:
    """(title, command, is a list, keys) of each section of the page."""
    text = PAGE.read_text(encoding="utf-8")
    out = []
    for block in re.split(r"^## ", text, flags=re.M)[1:]:
        title = block.splitlines()[0]
        cmd = re.search(r"^```\n(gpumodel [^\n]+)\n```", block, re.M).group(1)
        keys = re.search(r"^Keys( of each element)?: (.+)$", block, re.M)
        out.append((title, shlex.split(cmd), bool(keys.group(1)),
                    set(re.findall(r"`([a-z_0-9]+)`", keys.group(2)))))  # fmt: skip
    return out


def test_the_page_covers_every_json_command():
    titles = " ".join(t for t, *_ in _sections())
    for command in ("predict", "infer", "memory", "plan train", "plan serve", "allreduce",
                    "amdahl", "dp-step", "occupancy", "littles-law", "roofline", "sweep-llm",
                    "explain", "diagnose", "calibrate", "batch", "models", "specs",
                    "calibrations", "systems"):  # fmt: skip
        assert f"gpumodel {command}" in titles, command


@pytest.mark.parametrize(("title", "cmd", "is_list", "keys"), _sections(),
                         ids=lambda v: v if isinstance(v, str) else "")  # fmt: skip
def test_documented_keys_are_the_commands_keys(title, cmd, is_list, keys, tmp_path):
    args = [str(ROOT / a) if a.startswith("tests/") else a for a in cmd[1:]]
    done = subprocess.run([sys.executable, "-m", "gpumodel", *args], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-500:]
    doc = json.loads(done.stdout)
    assert isinstance(doc, list) == is_list
    got = set(doc[0]) if is_list else set(doc)
    assert got == keys, f"{title}: undocumented {sorted(got - keys)}, gone {sorted(keys - got)}"
