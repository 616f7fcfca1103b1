"""Host<->device copy curves (gpumodel.fitting.fit_copy_curve): the rate from the link-bound
copies, the fixed cost from the small ones, and the step to a slower rate of a large pageable
source (issue #16: host copies 4 KB-1 GB)."""

import json
from pathlib import Path

import pytest

import gpumodel as gm
from gpumodel.calibration import HostLinkParams, read_calibration_file
from gpumodel.fitting import CopyCurve, fit_copy_curve
from gpumodel.ops import HostTransfer
from gpumodel.predict import predict_with_params

ROOT = Path(__file__).resolve().parents[1]
SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 32 << 20,
         64 << 20, 128 << 20, 256 << 20, 1 << 30]  # fmt: skip


def test_a_planted_affine_copy_is_recovered_without_a_step():
    times = [12e-6 + b / 55e9 for b in SIZES]
    c = fit_copy_curve(SIZES, times)
    assert c.overhead_s == pytest.approx(12e-6, rel=1e-9)
    assert c.bytes_per_s == pytest.approx(55e9, rel=1e-9)
    assert c.large_min_bytes is None and c.large_bytes_per_s is None


def test_a_planted_step_is_found_where_it_is():
    """14 GB/s up to 32 MB, then the whole copy at 7.5 GB/s (the H100 VM's pageable h2d)."""

    def t(b: int) -> float:
        return 30e-6 + b / (14e9 if b <= 32 << 20 else 7.5e9)

    c = fit_copy_curve(SIZES, [t(b) for b in SIZES])
    assert c.large_min_bytes == 32 << 20
    assert c.bytes_per_s == pytest.approx(14e9, rel=1e-9)
    assert c.large_bytes_per_s == pytest.approx(7.5e9, rel=1e-9)
    assert c.overhead_s == pytest.approx(30e-6, rel=1e-9)
    # between the last fast and the first slow size the slower rate is priced
    assert c.time_s(48 << 20) == pytest.approx(30e-6 + (48 << 20) / 7.5e9)


def test_a_jittering_floor_does_not_bend_the_rate():
    """The old relative-error affine fit took 61.8 GB/s for pinned d2h from a floor that
    jittered 20-23 us (a 1 MB copy 30.8 us); the link-bound copies set the rate here."""
    floors = [22.8e-6, 23.5e-6, 20.0e-6, 20.2e-6]
    times = [f + b / 55e9 for f, b in zip(floors, SIZES[:4])] + [
        12e-6 + b / 55e9 for b in SIZES[4:]]  # fmt: skip
    c = fit_copy_curve(SIZES, times)
    assert c.bytes_per_s == pytest.approx(55e9, rel=0.01)
    assert c.large_min_bytes is None


def test_too_few_sizes():
    assert fit_copy_curve([4096], [1e-5]) is None
    assert fit_copy_curve([4096, 4096], [1e-5, 2e-5]) is None
    two = fit_copy_curve([4096, 1 << 20], [10e-6 + 4096 / 10e9, 10e-6 + (1 << 20) / 10e9])
    assert two.bytes_per_s == pytest.approx(10e9, rel=1e-6)


def test_the_committed_harness_run_shows_the_step():
    """The shipped H100 calibration's own cudaMemcpyAsync measurements (pageable h2d) and the
    torch wall-clock ones: 13-15 GB/s to 16-32 MB, 7-9 GB/s beyond; the fitted large rate is
    within 10% of what the 256 MB copy measured (b / t)."""
    cal = read_calibration_file(ROOT / "validation/results/h100-sxm/calibration.yaml",
                                measurements=True)  # fmt: skip
    ms = [m for m in cal.measurements if m["family"] == "host_transfer"
          and m["op"]["direction"] == "h2d" and not m["op"]["pinned"]]  # fmt: skip
    c = fit_copy_curve([m["op"]["bytes"] for m in ms], [m["time_s"] for m in ms])
    assert c.large_min_bytes == 32 << 20
    at_256 = next(m for m in ms if m["op"]["bytes"] == 256 << 20)
    assert c.large_bytes_per_s == pytest.approx(at_256["op"]["bytes"] / at_256["time_s"], rel=0.1)
    assert c.bytes_per_s > 1.5 * c.large_bytes_per_s
    run = json.loads((ROOT / "validation/results/h100-sxm/validate-2026-11-24-run4/"
                      "conditions-measurements.json").read_text())  # fmt: skip
    wall = [r for r in run["records"] if r["family"] == "host_transfer"
            and r["condition"] == "isolated" and r["op"]["direction"] == "h2d"
            and not r["op"]["pinned"]]  # fmt: skip
    w = fit_copy_curve([r["op"]["bytes"] for r in wall], [r["time_s"] for r in wall])
    assert w.large_min_bytes == 16 << 20  # this run had no size between 16 and 256 MB
    assert 6e9 < w.large_bytes_per_s < 8e9 < 12e9 < w.bytes_per_s


def test_prediction_takes_the_large_rate_above_the_step_and_says_so():
    link = HostLinkParams(h2d_pageable_bytes_per_s=14e9, h2d_pageable_overhead_s=30e-6,
                          h2d_pageable_large_min_bytes=32 << 20,
                          h2d_pageable_large_bytes_per_s=7.5e9)  # fmt: skip
    params = gm.load_calibration("h100-sxm").parameters.model_copy(
        update={"host": link, "host_wall": link}
    )
    gpu = gm.get_gpu("h100-sxm")
    small = predict_with_params(HostTransfer(bytes=16 << 20, pinned=False), gpu, params)
    big = predict_with_params(HostTransfer(bytes=1 << 30, pinned=False), gpu, params)
    assert small.time_s == pytest.approx(30e-6 + (16 << 20) / 14e9)
    assert big.time_s == pytest.approx(30e-6 + (1 << 30) / 7.5e9)
    note = big.explain()
    assert "above 33.6 MB" in note and "DRAM" in note
    assert "DRAM" not in small.explain()


def test_copy_curve_time_by_hand():
    c = CopyCurve(overhead_s=1e-5, bytes_per_s=1e10, large_min_bytes=1e6, large_bytes_per_s=5e9)
    assert c.time_s(1e6) == pytest.approx(1e-5 + 1e-4)
    assert c.time_s(2e6) == pytest.approx(1e-5 + 4e-4)


def test_shipped_calibrations_price_a_1gb_pageable_upload_at_the_measured_rate():
    """The validate runs behind the shipped calibrations measured a 256 MB pageable h2d copy at
    38.6 ms (H100) and the model now carries that rate to 1 GB (the unseen H100 runs measured
    132-168 ms); the affine fit had priced 1 GB at 102 ms."""
    t = gm.predict(HostTransfer(bytes=1 << 30, pinned=False), "h100-sxm").time_s
    assert 0.13 < t < 0.17


def test_a_pinned_copy_fits_one_rate():
    """A pinned copy has no CPU staging to fall out of the caches: one slow last point (the
    H100 VM's 256 MB pinned d2h of 2026-11-27 ran at 37 GB/s where 64-128 MB ran at 52-55)
    must not make a step of it."""
    times = [15e-6 + b / 55e9 for b in SIZES[:-1]] + [15e-6 + SIZES[-1] / 37e9]
    assert fit_copy_curve(SIZES, times).large_min_bytes == 256 << 20
    one = fit_copy_curve(SIZES, times, step=False)
    assert one.large_min_bytes is None and one.large_bytes_per_s is None
    assert one.bytes_per_s == pytest.approx(55e9, rel=0.01)
