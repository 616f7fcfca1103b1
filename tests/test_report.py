"""HTML reports without a browser: self-contained pages, bad input, atomic writes.
(tests/test_report_browser.py loads the pages in chromium.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpumodel.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "traces"


def test_pages_load_nothing_from_anywhere(capsys, tmp_path):
    page = tmp_path / "d.html"
    assert main(["diagnose", str(FIXTURES / "pageable_copy.json.gz"), "--html", str(page)]) == 0
    html = page.read_text(encoding="utf-8")
    # no external script, style sheet, image, font or frame: src/href only to nothing at all
    assert not re.search(r"""\b(src|href)\s*=""", html)
    assert "@import" not in html and "url(" not in html
    assert html.count("<svg ") >= 4
    data = json.loads(re.search(r'id="gpumodel-data">(.*?)</script>', html, re.S).group(1))
    assert data["kind"] == "diagnose" and data["findings"]
    assert not list(tmp_path.glob(".*.tmp"))  # the temporary file was renamed, not left
    assert page.stat().st_mode & 0o777 == 0o644


def test_plan_json_round_trip_gives_the_same_page(capsys, tmp_path):
    args = ["plan", "train", "--model", "llama-2-7b", "--tokens", "1T", "--gpu", "h100",
            "--budget", "200k"]  # fmt: skip
    assert main([*args, "--html", str(tmp_path / "a.html"), "--json"]) == 0
    saved = tmp_path / "plan.json"
    saved.write_text(capsys.readouterr().out)
    assert main(["report", "plan", str(saved), "--out", str(tmp_path / "b.html")]) == 0
    assert (tmp_path / "a.html").read_bytes() == (tmp_path / "b.html").read_bytes()
    html = (tmp_path / "a.html").read_text(encoding="utf-8")
    choice = json.loads(saved.read_text())["choice"]
    assert "fastest within $200,000" in html and f">{choice['gpus']}</td>" in html


def test_a_ddp_plan_shows_its_second_step_buckets(capsys, tmp_path):
    """A DDP job (eager HF, ZeRO 0) holds its first bucket set at the second step: the page's
    memory bars show it, the same bytes as the JSON, and the total holds them."""
    args = ["plan", "train", "--model", "tinyllama-1.1b", "--tokens", "1e9", "--gpu", "h200",
            "--gpus", "2", "--zero", "0", "--fusion", "unfused", "--policy", "bf16",
            "--micro-batch", "2", "--global-batch", "4", "--seq", "1024", "--recompute", "none"]  # fmt: skip
    assert main([*args, "--html", str(tmp_path / "a.html"), "--json"]) == 0
    mem = json.loads(capsys.readouterr().out)["step"]["memory"]
    assert mem["transient_bytes"] == pytest.approx(1_100_048_384 * 2)
    parts = ("weights", "gradients", "optimizer", "activations", "kv_cache", "transient",
             "overhead", "fragmentation")  # fmt: skip
    assert sum(mem[f"{k}_bytes"] for k in parts) == pytest.approx(mem["total_bytes"])
    html = (tmp_path / "a.html").read_text(encoding="utf-8")
    assert "second-step buckets" in html


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["report", "plan", "{missing}", "--out", "{tmp}/x.html"], "cannot read"),
        (["report", "plan", "{list}", "--out", "{tmp}/x.html"], "is not the output of"),
        (["report", "plan", "{junk}", "--out", "{tmp}/x.html"], "is not the output of"),
        (["report", "validate", "l4", "--out", "{tmp}/x.html"], "no calibration found for l4"),
        (["report", "diagnose", "{missing}", "--out", "{tmp}/x.html"], "cannot read"),
        (["report", "validate", "{tmp}", "--out", "{tmp}/x.html"], "holds no calibration.yaml"),
        (["report", "plan", "{serve}", "--out", "{tmp}"], "is a folder"),
        (["validate", "--host-only", "--html", "{tmp}/x.html"], "--html reports a kernel"),
        (["validate", "--collectives", "--html", "{tmp}/x.html"], "--html reports a kernel"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, args, message):
    (tmp_path / "list.json").write_text("[1]")
    (tmp_path / "junk.json").write_text('{"options": [{"x": 1}]}')
    (tmp_path / "serve.json").write_text(json.dumps({"options": []}))
    names = {"missing": tmp_path / "nothere.json", "list": tmp_path / "list.json",
             "junk": tmp_path / "junk.json", "serve": tmp_path / "serve.json", "tmp": tmp_path}  # fmt: skip
    code = main([a.format(**{k: str(v) for k, v in names.items()}) for a in args])
    _, err = capsys.readouterr()
    assert code == 2
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "x.html").exists()


def test_library_validate_page_reads_the_measurements_of_a_loaded_calibration(tmp_path):
    import gpumodel as gm

    cal = gm.load_calibration("h100")  # loaded without its measurements
    html = gm.write_report("validate", cal, tmp_path / "h100.html").read_text(encoding="utf-8")
    data = json.loads(re.search(r'id="gpumodel-data">(.*?)</script>', html, re.S).group(1))
    for fam in data["families"]:  # the held-out points behind each error figure
        assert len(fam["points"]) == cal.errors[fam["name"]].n > 0
    with pytest.raises(gm.CalibrationError, match="no measurements"):
        gm.write_report("validate", cal.model_copy(update={"origin": None}), tmp_path / "x.html")


def test_report_validate_takes_a_results_folder(capsys, tmp_path):
    folder = Path(__file__).resolve().parents[1] / "validation" / "results" / "h200-sxm"
    assert main(["report", "validate", str(folder), "--out", str(tmp_path / "a.html")]) == 0
    assert main(["report", "validate", str(folder / "calibration.yaml"), "--out",
                 str(tmp_path / "b.html")]) == 0  # fmt: skip
    capsys.readouterr()
    assert (tmp_path / "a.html").read_bytes() == (tmp_path / "b.html").read_bytes()
    assert "NVIDIA H200" in (tmp_path / "a.html").read_text(encoding="utf-8")
