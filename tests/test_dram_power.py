"""The DRAM stream's power in the sustained clock (gpumodel.model.power): a GEMM that streams its
weights at full bandwidth while its tensor cores work reaches the power limit sooner.

Figures from the H200 mid-M GEMM fit set (validation/results/h200-sxm/gemm-midm2-2026-11-29:
bf16 x @ W.T at M = 16-1024, back to back over rotating weights, NVML's power and SM clock read
after each point)."""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path

import pytest

import gpumodel as gm
from gpumodel.model.power import (
    DRAM_ENERGY_J_PER_BYTE,
    MIN_SM_HEADROOM_FRACTION,
    dram_power_w,
    fit_full_power,
    power_draw_w,
    sustained_clock_ratio,
    sustained_clock_ratio_array,
)

ROOT = Path(__file__).resolve().parents[1]
FIT_SET = ROOT / "validation" / "results" / "h200-sxm" / "gemm-midm2-2026-11-29" / "gemm-midm2.json"


def _points() -> list[dict]:
    return json.loads(FIT_SET.read_text())["points"]


def test_the_dram_term_lowers_the_headroom_by_its_power():
    """f / f_max = ((L - P_static - e B) / (u W))^(1/3): 700 W limit, 100 W static, 91 pJ/B at
    4 TB/s = 364 W, u = 0.3 of 1200 W: (236 / 360)^(1/3) = 0.8685; without the stream 1."""
    mem = dram_power_w(DRAM_ENERGY_J_PER_BYTE["hopper"], 4e12)
    assert mem == pytest.approx(91e-12 * 4e12)
    assert sustained_clock_ratio(0.3, 700, 100, 1200, mem) == pytest.approx((236 / 360) ** (1 / 3))
    assert sustained_clock_ratio(0.3, 700, 100, 1200) == 1.0
    assert "ampere" not in DRAM_ENERGY_J_PER_BYTE  # unmeasured: no term (dram_energy -> 0)
    # a stream that would take the whole limit leaves the SMs their floor, not a zero clock
    floor = sustained_clock_ratio(0.5, 700, 100, 1200, 1e4)
    assert floor == pytest.approx((MIN_SM_HEADROOM_FRACTION * 700 / 600) ** (1 / 3))
    arr = sustained_clock_ratio_array([0.3, 0.3, 0.0], 700, 100, 1200, [mem, 0.0, mem])
    assert list(arr) == pytest.approx([(236 / 360) ** (1 / 3), 1.0, 1.0])
    # throttled, the board draws exactly its limit, the stream's power included
    r = sustained_clock_ratio(0.3, 700, 100, 1200, mem)
    assert power_draw_w(0.3, r, 100, 1200, mem) == pytest.approx(700)


def test_the_tensor_power_fit_sees_each_points_stream():
    """W planted with each point's DRAM power is recovered only when the fit is told of it; a
    fit that ignores the streams puts their power into W."""
    u = [0.4, 0.5, 0.6, 0.7, 0.8]
    mem = [300.0, 250.0, 150.0, 60.0, 30.0]
    r = [sustained_clock_ratio(x, 700, 100, 1200, m) for x, m in zip(u, mem)]
    assert fit_full_power(u, r, 700, 100, mem) == pytest.approx(1200, rel=0.01)
    assert fit_full_power(u, r, 700, 100) > 1250


def test_the_energy_is_the_fit_sets_measured_power():
    """e = (NVML power - P_static - u W) / (DRAM bytes / time) over the points that ran below
    the limit at the maximum clock: the shipped constant is its median."""
    sys.path.insert(0, str(ROOT / "validation" / "fitset"))
    from fit_dram_power import energy_per_byte

    es = energy_per_byte(_points(), gm.get_gpu("h200"), gm.load_calibration("h200"))
    assert len(es) >= 40
    assert statistics.median(es) == pytest.approx(DRAM_ENERGY_J_PER_BYTE["hopper"], rel=0.03)


def test_mid_m_gemms_in_workload_slow_with_the_power_limit():
    """The fit set's in-workload times (not what the energy was read from): M = 33-256 was
    priced 8.7% fast (median, signed) by the tensor term alone; now within 6% median |error|,
    and the modelled clock falls from the maximum at M = 32 to under 80% of it by M = 192 as
    NVML's did (1980 -> 1400 MHz at 693 W)."""
    pts = [p for p in _points() if 33 <= p["M"] <= 256]
    errs = []
    for p in pts:
        op = gm.ops.Gemm(m=p["M"], n=p["N"], k=p["K"], dtype="bf16", transpose_b=True)
        errs.append(gm.predict(op, "h200", "h200").time_s / p["in_workload_s"] - 1)
    assert statistics.median(abs(e) for e in errs) < 0.06
    assert abs(statistics.median(errs)) < 0.04

    def clock(m: int) -> float:
        op = gm.ops.Gemm(m=m, n=5120, k=13824, dtype="bf16", transpose_b=True)
        return next(t.value for t in gm.predict(op, "h200", "h200").terms
                    if t.name == "sustained clock")  # fmt: skip

    assert clock(32) == pytest.approx(1.0, abs=0.01)
    assert clock(192) < 0.8
    measured = [p["sm_clock_mhz"] for p in _points() if p["M"] == 192]
    assert statistics.median(measured) / 1980 < 0.8


def test_dram_traffic_is_checked_at_the_boundary():
    op = gm.ops.Gemm(m=64, n=64, k=64)
    for bad in (-1.0, math.nan, math.inf, "fast"):
        with pytest.raises(gm.SpecError):
            gm.predict(op, "h100", activity=0.5, dram_bytes_per_s=bad)
    with pytest.raises(gm.SpecError, match="activity"):  # a step's traffic goes with its activity
        gm.predict(op, "h100", dram_bytes_per_s=1e12)


def test_validate_fits_the_energy_from_its_own_streaming_gemms():
    """``validate --conditions`` reads e off its weight-streaming GEMMs (``DRAM_POWER``) that
    stayed at the maximum clock under the limit: records planted at 120 pJ/B come back 120;
    a throttled point and one over the limit are left out; none qualifying: None."""
    from gpumodel.validate.conditions import DRAM_POWER, fit_dram_energy

    gpu = gm.get_gpu("h200")
    from gpumodel.predict import power_watts, tensor_activity

    static_w, full_w = power_watts(gm.load_calibration("h200").parameters, gpu)
    planted = 120e-12
    pts = []
    for dtype, m, n, k in DRAM_POWER:
        op = gm.ops.Gemm(m=m, n=n, k=k, dtype=dtype)
        kw = op.kernels(gpu)[0]
        t = kw.bytes / 3.8e12  # streamed at 3.8 TB/s
        watts = static_w + tensor_activity(kw, gpu, t) * full_w + planted * kw.bytes / t
        pts.append((op, {"time_s": t, "meta": {"sm_clock_mhz_median": 1980.0,
                                                "power_w_median": watts}}))  # fmt: skip
    assert fit_dram_energy(pts, gpu, static_w, full_w) == pytest.approx(planted)
    slow = [(op, {**r, "meta": {**r["meta"], "sm_clock_mhz_median": 1500.0}}) for op, r in pts]
    hot = [(op, {**r, "meta": {**r["meta"], "power_w_median": 699.0}}) for op, r in pts]
    assert fit_dram_energy(slow + hot, gpu, static_w, full_w) is None


def test_a_fitted_energy_takes_precedence_over_the_constant():
    from gpumodel.predict import dram_energy

    cal = gm.load_calibration("h200")
    assert cal.parameters.power.dram_energy_j_per_byte is None  # shipped: the constant stands
    assert dram_energy(cal.parameters, gm.get_gpu("h200")) == DRAM_ENERGY_J_PER_BYTE["hopper"]
    own = cal.parameters.power.model_copy(update={"dram_energy_j_per_byte": 50e-12})
    params = cal.parameters.model_copy(update={"power": own})
    assert dram_energy(params, gm.get_gpu("h200")) == 50e-12
    # a calibration of another architecture carries none of it, nor the constant of its own
    assert dram_energy(params, gm.get_gpu("a100")) == 0.0
