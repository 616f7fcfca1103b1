"""Calibrations find themselves (issue #19 item 5): system calibrations (GPU count, link) are
looked up with the device one; `validate --collectives` saves where they are found;
`gpumodel calibrations` lists them; every prediction names the calibration it used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import gpumodel as gm
from gpumodel import calibration
from gpumodel.cli import main

RESULTS = Path(__file__).resolve().parent.parent / "validation" / "results"
MIB = 1 << 20


def _fit(n: int) -> dict:
    """The shipped fit, read as plain YAML (not through gpumodel)."""
    text = (RESULTS / f"h200-sxm-x{n}" / "collectives_calibration.yaml").read_text()
    return yaml.safe_load(text)["parameters"]["collectives"][f"all_reduce@{n}"]


def _measured_all_reduce(n: int, nbytes: int) -> float:
    data = json.loads((RESULTS / f"h200-sxm-x{n}" / "collectives_measurements.json").read_text())
    (rec,) = [r for r in data["records"]
              if r["op"]["op"] == "all_reduce" and r["op"]["bytes"] == nbytes]  # fmt: skip
    return rec["time_s"]


def test_two_h200_all_reduce_uses_the_shipped_fit_by_default():
    p = gm.predict(gm.ops.AllReduce(bytes="1MB", gpus=2), "h200")
    assert "h200-sxm-x2/collectives_calibration.yaml" in p.calibration
    assert "h200-sxm-x2/collectives_calibration.yaml" in p.explain()
    fit = _fit(2)
    # all-reduce on 2 ranks: bus factor 2 (n - 1) / n = 1; t = alpha + S / busbw
    assert p.time_s == pytest.approx(fit["alpha_s"] + 1e6 / fit["bus_bandwidth_bytes_per_s"])


def test_two_h200_1mib_all_reduce_against_the_measurement():
    measured = _measured_all_reduce(2, MIB)  # 39.3 us, 2026-11-22
    p = gm.predict(gm.ops.AllReduce(bytes=MIB, gpus=2), "h200")
    datasheet = gm.predict(gm.ops.AllReduce(bytes=MIB, gpus=2), "h200", "none")
    assert abs(p.time_s / measured - 1) < 0.10  # 5.7% with the fit
    assert abs(datasheet.time_s / measured - 1) > 0.5  # 71% from the datasheet alone


def test_four_h200_use_their_own_fit():
    p = gm.predict(gm.ops.AllReduce(bytes=MIB, gpus=4), "h200")
    assert "h200-sxm-x4/collectives_calibration.yaml" in p.calibration
    fit = _fit(4)
    # bus factor 2 (n - 1) / n = 1.5 on 4 ranks
    assert p.time_s == pytest.approx(fit["alpha_s"] + 1.5 * MIB / fit["bus_bandwidth_bytes_per_s"])
    # the fit misses this size by 45% (88.6 us measured, a step above the fitted floor), still
    # closer than the datasheet's 83%
    measured = _measured_all_reduce(4, MIB)
    datasheet = gm.predict(gm.ops.AllReduce(bytes=MIB, gpus=4), "h200", "none")
    assert abs(p.time_s / measured - 1) < abs(datasheet.time_s / measured - 1)


def test_other_counts_transfer_from_the_nearest_and_none_means_none():
    p8 = gm.predict(gm.ops.AllReduce(bytes=MIB, gpus=8), "h200")
    assert "h200-sxm-x4" in p8.calibration and p8.details["calibrated"] == "transferred from 4 GPUs"
    bare = gm.predict(gm.ops.AllReduce(bytes=MIB, gpus=2), "h200", "none")
    assert bare.calibration == calibration.DATASHEET_LABEL
    # another GPU, another link or several nodes: no H200 fit applies
    assert "collectives" not in gm.predict(gm.ops.AllReduce(bytes=MIB, gpus=2), "h100").calibration
    multi = gm.predict(gm.ops.AllReduce(bytes=MIB, gpus=16, nodes=2), "h200")
    assert "collectives" not in multi.calibration
    # carried from another GPU (like for like): collectives are topology-specific, never added
    carried = gm.load_calibration("h100", for_gpu="h200")
    assert "collectives" not in gm.predict(gm.ops.AllReduce(bytes=MIB, gpus=2), "h200",
                                           carried).calibration  # fmt: skip


def test_user_fit_shadows_the_shipped_one(tmp_path):
    shipped = calibration.read_calibration_file(
        RESULTS / "h200-sxm-x2" / "collectives_calibration.yaml"
    )
    params = shipped.parameters.collectives["all_reduce@2"].model_copy(update={"alpha_s": 1e-3})
    mine = shipped.model_copy(update={"parameters": shipped.parameters.model_copy(
        update={"collectives": {"all_reduce@2": params}})})  # fmt: skip
    path = mine.save(calibration.user_system_calibration_path("h200-sxm", 2))
    calibration._system_files.cache_clear()
    p = gm.predict(gm.ops.AllReduce(bytes=MIB, gpus=2), "h200")
    assert str(path) in p.calibration and p.time_s > 1e-3


def test_validate_collectives_saves_where_predictions_look(capsys):
    meas = RESULTS / "h200-sxm-x2" / "collectives_measurements.json"
    report = calibration.cache_dir().parent / "report"
    code = main(["validate", "--collectives", "--from-measurements", str(meas),
                 "--report", str(report), "--json"])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    target = calibration.user_system_calibration_path("h200-sxm", 2)
    assert code in (0, 1) and out["collectives"]["found_by_predictions_at"] == str(target)
    calibration._system_files.cache_clear()
    p = gm.predict(gm.ops.AllReduce(bytes=MIB, gpus=2), "h200")
    assert str(target) in p.calibration
    # the re-fit of the same measurements gives the shipped parameters
    assert p.time_s == pytest.approx(
        _fit(2)["alpha_s"] + MIB / _fit(2)["bus_bandwidth_bytes_per_s"], rel=1e-9
    )
    assert main(["calibrations", "--gpu", "h200", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["calibrations"]
    x2 = [r for r in rows if r["system"] == "2 x nvlink"]
    assert [(r["source"], r["default"]) for r in x2] == [("user", True), ("shipped", False)]
    assert {r["system"] for r in rows} == {"1 GPU", "2 x nvlink", "4 x nvlink"}


def test_calibrations_table_lists_provenance(capsys):
    assert main(["calibrations"]) == 0
    out = capsys.readouterr().out
    assert "h200-sxm-x2/collectives_calibration.yaml" in out and "NCCL 2.28.9" in out
    assert max(len(line) for line in out.splitlines()) <= 100


def test_prediction_json_names_the_calibration(capsys):
    assert main(["allreduce", "--bytes", "1MiB", "--gpus", "2", "--gpu", "h200", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert "h200-sxm-x2/collectives_calibration.yaml" in data["calibration"]
