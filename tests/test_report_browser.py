"""The HTML reports in a real headless browser: Debian's chromium driven by Playwright.

Each page is written by the command's own ``--html`` and loaded from ``file://`` with every
network request recorded. Checked: no console error or page error, no request but the page
itself; every plot draws as many points as the command's ``--json`` output says; every number
the page marks with its place in that output (``data-path``) holds that exact value and is shown
as the page's formatter writes it.

Set-up: ``pip install ".[dev]"`` (Playwright from PyPI) and ``apt-get install chromium``
(.ci/run installs it where apt is usable); Playwright's own browser download is never used.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from gpumodel.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
ROOT = Path(__file__).resolve().parents[1]

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is not installed (pip install '.[dev]')"
)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytest.skip(
        "no chromium browser on PATH (apt-get install chromium; .ci/run installs it where apt "
        "is usable)",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def cli_json(capsys, *args: str) -> dict[str, Any]:
    code = main(list(args))
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def load(browser, path: Path) -> tuple[Any, dict[str, Any]]:
    """Open ``path`` from file://; fail on any console error, page error or other request."""
    page = browser.new_page()
    errors: list[str] = []
    requests: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    url = path.resolve().as_uri()
    page.goto(url, wait_until="load")
    assert errors == []
    assert requests == [url]  # self-contained: nothing else is fetched
    plots = page.eval_on_selector_all(
        "svg.plot",
        """els => els.map(e => ({id: e.dataset.plot, label: e.getAttribute('aria-label'),
            declared: +e.dataset.points,
            drawn: e.querySelectorAll('[data-point="' + e.dataset.plot + '"]').length,
            kernels: e.querySelectorAll('[data-kind="kernel"]').length,
            width: e.getBoundingClientRect().width}))""",
    )
    numbers = page.eval_on_selector_all(
        "[data-path]",
        """els => els.map(e => ({path: JSON.parse(e.dataset.path), value: e.dataset.value,
            unit: e.dataset.unit, text: e.innerText.trim()}))""",
    )
    embedded = json.loads(page.inner_text("#gpumodel-data"))
    page.close()
    for p in plots:
        assert p["drawn"] == p["declared"], p
        assert p["width"] > 100, p  # laid out, not collapsed
    return {"plots": {p["id"]: p for p in plots}, "numbers": numbers}, embedded


def check_numbers(numbers: list[dict[str, Any]], data: dict[str, Any], at_least: int,
                  page_only: dict[str, Any] | None = None) -> None:  # fmt: skip
    """Every marked number equals the --json value at its path and reads as fmt() writes it
    (a path whose first key --json lacks is looked up in ``page_only``, the page's own data)."""
    from gpumodel.report._html import fmt

    assert len([n for n in numbers if n["path"][0] in data]) >= at_least
    for n in numbers:
        value: Any = data if n["path"][0] in data else page_only
        for key in n["path"]:
            value = value[key]
        assert float(n["value"]) == pytest.approx(value, rel=1e-15, abs=0), n
        assert n["text"] == fmt(value, n["unit"]), n


def test_validate_page(browser, capsys, tmp_path):
    """A validate re-fit from the committed H100 run's measurements (GEMM, bandwidth, copy)."""
    from gpumodel.calibration import read_calibration_file

    cal = read_calibration_file(
        ROOT / "validation/results/h100-sxm/calibration.yaml", measurements=True
    )
    keep = {"gemm", "bandwidth", "copy", "launch", "latency"}
    saved = tmp_path / "measurements.json"
    saved.write_text(json.dumps({"device": dict(cal.environment),
                                 "records": [r for r in cal.measurements
                                             if r["family"] in keep]}))  # fmt: skip
    page = tmp_path / "validate.html"
    data = cli_json(capsys, "validate", "--from-measurements", str(saved), "--gpu", "h100",
                    "--out", str(tmp_path / "cal.yaml"), "--json", "--no-host", "--html",
                    str(page))  # fmt: skip
    assert str(page) in data["written"]
    seen, embedded = load(browser, page)
    families = {p["label"]: p for p in seen["plots"].values() if p["id"].startswith("family-")}
    assert set(families) == set(data["errors"])  # one plot per family with an error figure
    for name, plot in families.items():  # held-out points, each calibrated and datasheet-only
        assert plot["drawn"] == 2 * data["errors"][name]["n"], name
    assert seen["plots"]["errors"]["drawn"] == sum(e["n"] for e in data["errors"].values())
    check_numbers(seen["numbers"], data, at_least=5 * len(data["errors"]), page_only=embedded)
    assert {n["path"][0] for n in seen["numbers"]} == {"errors", "timing"}
    # the plotted points are the ones the error table summarises
    for fam in embedded["families"]:
        errs = sorted(abs(p["predicted_s"] / p["measured_s"] - 1) * 100 for p in fam["points"])
        median = (errs[(len(errs) - 1) // 2] + errs[len(errs) // 2]) / 2
        assert median == pytest.approx(data["errors"][fam["name"]]["median_abs_pct"], rel=1e-9)
    assert embedded["conditions"]["gemm"]["cache"]  # how the points were timed is shown


def test_validate_report_command_from_the_saved_run(browser, capsys, tmp_path):
    """`gpumodel report validate` on the committed calibration file (it carries its run)."""
    page = tmp_path / "v.html"
    data = cli_json(capsys, "report", "validate",
                    str(ROOT / "validation/results/h200-sxm/calibration.yaml"), "--out",
                    str(page), "--json")  # fmt: skip
    seen, embedded = load(browser, page)
    assert embedded == data
    for fam in data["families"]:
        plot = next(p for p in seen["plots"].values() if p["label"] == fam["name"])
        assert plot["drawn"] == 2 * len(fam["points"]) == 2 * data["errors"][fam["name"]]["n"]
    check_numbers(seen["numbers"], data, at_least=5 * len(data["families"]))


@pytest.mark.parametrize("trace", ["dataloader_starved.json.gz", "transformer_eager.json.gz"])
def test_diagnose_page(browser, capsys, tmp_path, trace):
    page = tmp_path / "diagnose.html"
    data = cli_json(capsys, "diagnose", str(FIXTURES / trace), "--json", "--html", str(page))
    seen, embedded = load(browser, page)
    plots = seen["plots"]
    steps = data["steps"]
    # the timeline draws every kernel of the analysed window: kernels per step x step periods
    assert plots["timeline"]["kernels"] == round(steps["kernels_per_step"] * steps["periods"])
    assert plots["timeline"]["drawn"] == len(embedded["timeline"]["spans"])
    assert plots["sol"]["drawn"] == 2 * len(data["ops"])  # measured and speed of light
    on_roof = [o for o in data["ops"] if o["mapped"] and o["arithmetic_intensity"]
               and o["achieved_flops_per_s"]]  # fmt: skip
    assert plots["roofline"]["drawn"] == len(on_roof) > 0
    amdahl = data["amdahl"]
    assert plots["amdahl"]["drawn"] == 1 + len(amdahl["per_finding"]) + (
        amdahl["all_fixed_step_time_s"] is not None
    )
    check_numbers(seen["numbers"], data, at_least=3 * len(data["ops"]))
    # the findings with their predicted savings are all on the page
    paths = {tuple(n["path"]) for n in seen["numbers"]}
    for i, f in enumerate(data["findings"]):
        if f["recoverable_s"] is not None:
            assert ("findings", i, "recoverable_s") in paths
    # the step the findings are for: without the profiler's own host cost
    assert ("steps", "unprofiled_step_time_s") in paths


def test_diagnose_report_command_writes_the_same_page(capsys, tmp_path):
    trace = str(FIXTURES / "item_sync.json.gz")
    assert main(["diagnose", trace, "--html", str(tmp_path / "a.html")]) == 0
    assert main(["report", "diagnose", trace, "--out", str(tmp_path / "b.html")]) == 0
    capsys.readouterr()
    assert (tmp_path / "a.html").read_bytes() == (tmp_path / "b.html").read_bytes()


def test_plan_serve_page(browser, capsys, tmp_path):
    page = tmp_path / "serve.html"
    data = cli_json(capsys, "plan", "serve", "--model", "llama-3-8b", "--gpu",
                    "l4,a100,h100,mi300x", "--rate", "10/s", "--json", "--html", str(page))  # fmt: skip
    seen, embedded = load(browser, page)
    opts = data["options"]
    assert seen["plots"]["cost"]["drawn"] == sum(
        o["usd_per_million_prompt_and_output_tokens"] is not None for o in opts
    )
    assert seen["plots"]["memory"]["drawn"] == sum(
        o["memory_per_gpu_bytes"] is not None for o in opts
    )
    check_numbers(seen["numbers"], data, at_least=8 * len(opts))
    assert embedded["data"] == data
    # the saved --json gives the same page through `gpumodel report plan`
    saved = tmp_path / "serve.json"
    saved.write_text(json.dumps(data))
    assert main(["report", "plan", str(saved), "--out", str(tmp_path / "again.html")]) == 0
    assert (tmp_path / "again.html").read_bytes() == page.read_bytes()


def test_plan_train_search_page(browser, capsys, tmp_path):
    page = tmp_path / "train.html"
    data = cli_json(capsys, "plan", "train", "--model", "llama-2-7b", "--tokens", "1T", "--gpu",
                    "h100", "--days", "30", "--json", "--html", str(page))  # fmt: skip
    seen, _ = load(browser, page)
    n = len(data["options"])
    for plot in ("days", "cost", "memory"):
        assert seen["plots"][plot]["drawn"] == n, plot
    check_numbers(seen["numbers"], data, at_least=9 * n)
    from gpumodel.report.plan import search_roles

    roles = search_roles(data)
    assert roles.count("chosen") == 1
    assert data["options"][roles.index("chosen")] == data["choice"]
    assert 1 <= roles.count("runner-up") <= 3
    assert all(data["options"][i]["meets"] for i, r in enumerate(roles) if r == "runner-up")


def test_plan_train_one_count_page(browser, capsys, tmp_path):
    page = tmp_path / "train1.html"
    data = cli_json(capsys, "plan", "train", "--model", "llama-2-7b", "--tokens", "1T", "--gpu",
                    "h100", "--gpus", "64", "--json", "--html", str(page))  # fmt: skip
    seen, _ = load(browser, page)
    step = data["step"]
    assert seen["plots"]["breakdown"]["drawn"] == len(step["breakdown"])
    parts = [k for k in ("weights_bytes", "gradients_bytes", "optimizer_bytes",
                         "activations_bytes", "kv_cache_bytes", "overhead_bytes")
             if k in step["memory"]]  # fmt: skip
    assert seen["plots"]["memory"]["drawn"] == len(parts) + 1  # and the total
    check_numbers(seen["numbers"], data, at_least=6)
