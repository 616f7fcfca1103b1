"""The wheel carries every subpackage and every shipped data folder (pyproject.toml lists them
by hand, so a new one must be added there: this test says which)."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from 3.11")
ROOT = Path(__file__).resolve().parents[1]
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]


def test_every_subpackage_is_packaged():
    found = {
        ".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "gpumodel").rglob("__init__.py")
    }
    assert found <= set(CONFIG["packages"]), sorted(found - set(CONFIG["packages"]))


def test_every_spec_folder_is_packaged():
    globs = CONFIG["package-data"]["gpumodel._specs"]
    folders = {p.parent.relative_to(ROOT / "specs") for p in (ROOT / "specs").rglob("*.yaml")}
    for folder in folders:
        pattern = "*.yaml" if str(folder) == "." else f"{folder}/*.yaml"
        assert pattern in globs, f"specs/{folder} is not in the wheel's package-data"
