"""validation/park_results.sh: result folders leave the tree for a device call and come back,
and no commit can record them as deleted in between (a submission was once refused for that)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=check)  # fmt: skip


def _script(repo: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": str(repo.parent / "tmp")}
    return subprocess.run(["bash", str(repo / "validation/park_results.sh"), *args],
                          capture_output=True, text=True, env=env)  # fmt: skip


def test_park_keeps_the_shipped_calibrations_refuses_commits_and_unparks(tmp_path):
    repo = tmp_path / "repo"
    (tmp_path / "tmp").mkdir()
    for name in ("h100-sxm", "h200-sxm", "steps-a", "steps-b", "keep-me"):
        (repo / "validation/results" / name).mkdir(parents=True)
        (repo / "validation/results" / name / "data.txt").write_text(name)
    shutil.copy(ROOT / "validation/park_results.sh", repo / "validation/park_results.sh")
    _git(tmp_path, "init", "-q", str(repo))
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "results")

    parked = _script(repo, "park", "keep-me")
    assert parked.returncode == 0, parked.stderr
    left = sorted(p.name for p in (repo / "validation/results").iterdir())
    assert left == ["h100-sxm", "h200-sxm", "keep-me"]
    again = _script(repo, "park")
    assert again.returncode == 2 and "already parked" in again.stderr

    commit = _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "oops",
                  check=False)  # fmt: skip
    assert commit.returncode != 0 and "unpark before committing" in commit.stderr
    assert "steps-a" in _script(repo, "status").stdout

    back = _script(repo, "unpark")
    assert back.returncode == 0, back.stderr
    assert _git(repo, "status", "--porcelain").stdout == ""
    assert (repo / "validation/results/steps-b/data.txt").read_text() == "steps-b"
    assert "nothing parked" in _script(repo, "status").stdout
