from datetime import datetime, timezone

import numpy as np
import pytest

import gpumodel as gm
from gpumodel.calibrate import calibrate, fit, points_from_records, split
from gpumodel.calibration import Calibration, CalibrationParams, GemmParams, read_calibration_file
from gpumodel.predict import predict_with_params


def _cal(gpu_id="h100-sxm", **params) -> Calibration:
    return Calibration(
        gpu_id=gpu_id, device_name="NVIDIA H100 80GB HBM3", backend="synthetic",
        created=datetime(2026, 11, 22, tzinfo=timezone.utc),
        environment={"driver": "580.159.04"}, parameters=CalibrationParams(**params),
    )  # fmt: skip


def test_round_trip(tmp_path):
    cal = _cal(dram_efficiency=0.9, kernel_overhead_s=3e-6,
               gemm={"bf16": GemmParams(efficiency=0.8, misaligned_efficiency=0.3)})  # fmt: skip
    path = cal.save(tmp_path / "c.yaml")
    back = read_calibration_file(path, measurements=True)
    assert back.parameters == cal.parameters and back.gpu_id == "h100-sxm"
    assert back.measurements == cal.measurements
    assert not list(tmp_path.glob(".*tmp"))  # atomic write leaves no temp file


def test_shared_records_round_trip_without_yaml_aliases(tmp_path):
    """Records that share one meta dict (as a runner builds them) were dumped as a YAML anchor
    and alias, which the reader refuses: validate's own calibration then failed to load
    (H100, 2026-11-24). They are written out in full and read back equal."""
    meta = {"engine": "torch", "layout": "nchw"}
    rows = [{"family": "conv2d", "op": None, "time_s": 1e-5 * (i + 1), "meta": meta}
            for i in range(2)]  # fmt: skip
    cal = _cal().model_copy(update={"measurements": rows})
    path = cal.save(tmp_path / "c.yaml")
    assert "&id" not in path.read_text() and "*id" not in path.read_text()
    assert read_calibration_file(path, measurements=True).measurements == rows


def test_calibration_changes_prediction_and_is_named(tmp_path):
    path = _cal(dram_efficiency=0.5).save(tmp_path / "c.yaml")
    op = gm.ops.Elementwise(op="copy", n=2**28, dtype="fp32")
    ds = gm.predict(op, "h100", "none")
    cal = gm.predict(op, "h100", str(path))
    # memory time doubles at half the bandwidth
    assert cal.terms[0].value == pytest.approx(2 * ds.terms[0].value)
    assert str(path) in cal.calibration
    assert "datasheet" in ds.calibration


END = "# end of gpumodel calibration\n"
HEAD = "gpu_id: h100-sxm\ndevice_name: x\ncreated: 2026-01-01\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpu_id: h100-sxm\nparameters: {dram_eff", "truncated"),
        ("gpu_id: h100-sxm\nparameters: {dram_eff\n" + END, "not valid YAML"),
        ("", "empty or not a mapping"),
        (HEAD + END, "parameters: required key is missing"),
        (HEAD + "parameters: {dram_efficiency: -1}\n" + END, "greater than 0"),
    ],
)
def test_corrupt_or_truncated_file_is_a_clear_error(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(gm.CalibrationError, match=message):
        gm.predict(gm.ops.Gemm(m=1, n=1, k=1), "h100", str(path))


def test_truncated_real_file_is_refused(tmp_path):
    cal = _cal(dram_efficiency=0.9).model_copy(
        update={"measurements": [{"family": "gemm", "time_s": 1e-3, "op": {"op": "gemm"}}] * 50}
    )
    path = cal.save(tmp_path / "c.yaml")
    text = path.read_text()
    path.write_text(text[: len(text) - 200])  # cut inside the measurements block
    with pytest.raises(gm.CalibrationError, match="truncated"):
        gm.load_calibration(path)


def test_other_gpus_calibration_is_refused_without_transfer(tmp_path):
    path = _cal("h100-sxm").save(tmp_path / "c.yaml")
    with pytest.raises(
        gm.CalibrationError, match=r"is for h100-sxm, not h200-sxm.*--calibration-from"
    ):
        gm.predict(gm.ops.Gemm(m=1, n=1, k=1), "h200", str(path))


def test_transfer_keeps_relative_efficiency_and_takes_rates_from_target(tmp_path):
    path = _cal(dram_efficiency=0.9, l2_bandwidth_bytes_per_s=10e12,
                gemm={"bf16": GemmParams(efficiency=0.8)}).save(tmp_path / "c.yaml")  # fmt: skip
    h200 = gm.get_gpu("h200")
    moved = gm.load_calibration(path, for_gpu=h200)
    assert moved.gpu_id == "h200-sxm" and moved.transferred_from == "h100-sxm"
    assert moved.parameters.dram_efficiency == 0.9
    # same SM count and clock: L2 bandwidth carries over unchanged
    assert moved.parameters.l2_bandwidth_bytes_per_s == pytest.approx(10e12)
    op = gm.ops.Elementwise(op="copy", n=2**28, dtype="fp32")
    p = gm.predict(op, h200, moved)
    # 2 * 2^30 bytes at 0.9 * 4.8 TB/s
    assert p.terms[0].value == pytest.approx(2**31 / (0.9 * 4.8e12))
    assert "transferred from h100-sxm" in p.calibration


def test_default_prefers_user_cache(tmp_path, monkeypatch):
    from gpumodel import calibration

    cache = tmp_path / "cache"
    _cal(dram_efficiency=0.7).save(cache / "calibrations" / "h100-sxm.yaml")
    calibration._find_default.cache_clear()
    found = calibration.default_calibration(gm.get_gpu("h100"))
    assert found is not None and found.parameters.dram_efficiency == 0.7


def _synthetic_records(gpu, params, rng, noise=0.02):
    ops = []
    for b in np.logspace(5, 9.5, 24):
        ops.append(
            (
                "bandwidth",
                {"op": "kernel", "flops": 0, "bytes": float(int(b)), "dtype": "fp32"},
                {"cache": "cold"},
            )
        )
    for m in (1, 16, 64, 256, 512, 1024, 2048, 4096, 8192):
        for n, k in ((4096, 4096), (11008, 4096), (4096, 11008)):
            ops.append(("gemm", {"op": "gemm", "m": m, "n": n, "k": k, "dtype": "bf16"}, {}))
    for k in (1, 4, 16, 64, 128, 256, 512, 1000):
        n = 2**24
        ops.append(
            (
                "poly_fma",
                {"op": "kernel", "flops": 2 * k * n, "bytes": 8 * n, "fma": True, "threads": n},
                {},
            )
        )
    records = []
    for fam, row, meta in ops:
        t = predict_with_params(gm.ops.from_row(row), gpu, params).time_s
        records.append(
            {
                "family": fam,
                "op": row,
                "time_s": t * (1 + noise * rng.standard_normal()),
                "meta": meta,
            }
        )
    return records


def test_fit_recovers_known_parameters_from_noisy_measurements():
    gpu = gm.get_gpu("h100")
    truth = CalibrationParams(
        dram_efficiency=0.88, family_overhead_s={"kernel": 4e-6}, overlap_exponent=3.0,
        compute_efficiency={"vector:fp32": 0.93},
        gemm={"bf16": GemmParams(efficiency=0.72, small_m_bandwidth_efficiency=0.8, overhead_s=7e-6,
                                 overlap_exponent=2.5)},
    )  # fmt: skip
    records = _synthetic_records(gpu, truth, np.random.default_rng(1))
    points, _ = points_from_records(records)
    fitted = fit(points, gpu)
    assert fitted.dram_efficiency == pytest.approx(0.88, rel=0.03)
    assert fitted.compute_efficiency["vector:fp32"] == pytest.approx(0.93, rel=0.03)
    assert fitted.gemm["bf16"].efficiency == pytest.approx(0.72, rel=0.05)
    assert fitted.gemm["bf16"].small_m_bandwidth_efficiency == pytest.approx(0.8, rel=0.05)


def test_calibrate_reports_held_out_error_only():
    gpu = gm.get_gpu("h100")
    truth = CalibrationParams(dram_efficiency=0.9, family_overhead_s={"kernel": 3e-6})
    records = _synthetic_records(gpu, truth, np.random.default_rng(2), noise=0.0)
    points, _ = points_from_records(records)
    fit_pts, held = split(points)
    assert not set(map(id, fit_pts)) & set(map(id, held))
    assert abs(len(fit_pts) - len(held)) <= 3
    _, errors, _ = calibrate(records, gpu)
    bw = errors["bandwidth (4 KB - 4 GB)"]
    assert bw.n == sum(1 for p in held if p.family == "bandwidth")
    assert bw.median_abs_pct < 1.0  # noiseless data from the model itself
    assert bw.datasheet_median_abs_pct > 5.0  # while the datasheet misses it
