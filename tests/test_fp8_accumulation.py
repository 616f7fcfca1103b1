"""fp8 products without fast accumulation (torch._scaled_mm's default) and the per-dtype power
of the sustained clock."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import gpumodel as gm
from gpumodel.errors import SpecError
from gpumodel.ops import Gemm
from gpumodel.ops.matmul import FP8_PROMOTION_INTERVAL_K
from gpumodel.validate.conditions import adapt_gemm_row

ROOT = Path(__file__).resolve().parents[1]
N = 8192


def test_promotion_adds_one_fp32_add_per_output_element_per_interval():
    """Datasheet only (calibration "none": efficiencies 1, the roofline's max): the promoted
    product takes its tensor time plus M*N*K/256 FP32 adds at half the H100's 66.9 TFLOP/s
    FP32 FMA peak (an add fills an FMA's slot and counts one FLOP)."""
    fast = gm.predict(Gemm(m=N, n=N, k=N, dtype="fp8"), "h100", "none", condition="isolated")
    slow = gm.predict(Gemm(m=N, n=N, k=N, dtype="fp8", fast_accum=False), "h100", "none",
                      condition="isolated")  # fmt: skip
    adds = N**3 / 256
    assert FP8_PROMOTION_INTERVAL_K == 256
    assert slow.time_s - fast.time_s == pytest.approx(adds / (66.9e12 / 2), rel=1e-3)
    assert slow.flops == pytest.approx(fast.flops + adds)
    # no advice to use FMAs: the adds are cuBLASLt's
    assert not any("fused multiply-add" in a for a in slow.advice)


def test_fast_accumulation_is_the_default_and_fp8_only():
    assert Gemm(m=1, n=2, k=3, dtype="fp8", fast_accum=True) == Gemm(m=1, n=2, k=3, dtype="fp8")
    assert "fast_accum" not in Gemm(m=1, n=2, k=3, dtype="fp8").label()
    assert "fast_accum=False" in Gemm(m=1, n=2, k=3, dtype="fp8", fast_accum=False).label()
    with pytest.raises(SpecError, match="fast_accum applies to fp8"):
        Gemm(m=1, n=2, k=3, dtype="bf16", fast_accum=False)


def test_the_sweep_prices_the_promotion_as_predict_does():
    ms = np.array([1, 64, 1024, 4096, 8192])
    for condition in ("isolated", "in-workload", "in-graph"):
        s = gm.sweep("gemm", "h100", m=ms, n=4096, k=8192, dtype="fp8", fast_accum=False,
                     condition=condition)  # fmt: skip
        one = [gm.predict(Gemm(m=int(m), n=4096, k=8192, dtype="fp8", fast_accum=False),
                          "h100", condition=condition).time_s for m in ms]  # fmt: skip
        assert np.allclose(s["time_s"], one, rtol=1e-9)
    with pytest.raises(SpecError, match="fast_accum applies to fp8"):
        gm.sweep("gemm", "h100", m=ms, n=64, k=64, dtype="bf16", fast_accum=False)


def test_fp8_throttles_harder_than_bf16_at_the_same_activity():
    """The shipped power fit: fp8 products draw more per unit of tensor activity than 16-bit
    ones (fitted on five H200 runs), so at the same activity their sustained clock is lower."""
    from gpumodel.calibration import resolve
    from gpumodel.model.power import sustained_clock_ratio
    from gpumodel.predict import power_watts

    gpu = gm.get_gpu("h200")
    params = resolve(None, gpu).parameters
    factor = params.power.tensor_power_dtype_factor["fp8"]
    static_w, bf16_w = power_watts(params, gpu, "bf16")
    _, fp8_w = power_watts(params, gpu, "fp8")
    assert fp8_w == pytest.approx(bf16_w * factor) and factor > 1
    assert sustained_clock_ratio(0.7, 700, static_w, fp8_w) < sustained_clock_ratio(
        0.7, 700, static_w, bf16_w)
    # and the term says which dtype's power it used
    p = gm.predict(Gemm(m=N, n=N, k=N, dtype="fp8", fast_accum=False), "h200")
    note = next(t.note for t in p.terms if t.name == "sustained clock")
    assert f"fp8 ({factor:.3g}x the 16-bit products' power)" in note


def test_conditions_records_of_scaled_mm_are_promoted_products():
    """validate's conditions stage calls torch._scaled_mm with PyTorch's default
    (use_fast_accum=False); its older records did not say so in the op."""
    run = ROOT / "validation/results/h100-sxm/validate-2026-11-28-run10"
    records = json.loads((run / "conditions-measurements.json").read_text())["records"]
    fp8 = [r for r in records if r["family"] == "gemm" and r["op"]["dtype"] == "fp8"]
    assert fp8 and all(r["meta"]["kernel"] == "torch._scaled_mm" for r in fp8)
    assert all(gm.ops.from_row(adapt_gemm_row(r["op"])).fast_accum is False for r in fp8)
    bf16 = next(r["op"] for r in records if r["family"] == "gemm")
    assert adapt_gemm_row(bf16) == bf16


def test_promoted_fp8_on_validates_own_back_to_back_points():
    """Fit data (validate's conditions stage; the interval and the power factor were chosen on
    these runs): torch._scaled_mm products of at least 150 us back to back, priced promoted,
    in-workload, within 5% in median (H200 run 8: -0.7%, H100 run 10's one product: +3.9%).
    Priced as fast accumulation at the 16-bit products' power, every size of these runs came
    out 14-17% fast in median."""
    runs = ["h100-sxm/validate-2026-11-28-run10", "h200-sxm/validate-2026-11-28-run8"]
    for name in runs:
        gpu = name.split("/")[0]
        path = ROOT / "validation/results" / name / "conditions-measurements.json"
        errs = []
        for r in json.loads(path.read_text())["records"]:
            if (r["family"], r["condition"]) != ("gemm", "in-workload") or r["time_s"] < 150e-6:
                continue
            op = gm.ops.from_row(adapt_gemm_row(r["op"]))
            if op.dtype == "fp8":
                errs.append(gm.predict(op, gpu).time_s / r["time_s"] - 1)
        assert len(errs) >= 1 and abs(float(np.median(errs))) < 0.05, (name, errs)


def test_8_bit_products_say_when_torch_refuses_their_shape():
    """torch._scaled_mm checks K % 16 == 0 and N % 16 == 0; torch._int_mm M > 16 and K, N
    multiples of 8 (aten's meta registrations, Blas.cpp): a shape they refuse is still priced
    (another library may run it), and the prediction says so."""
    def notes(**kw):
        return " ".join(gm.predict(gm.ops.Gemm(**kw), "h100").advice)

    assert "torch._scaled_mm refuses this shape: N=50257 (pad to 50272)" in notes(
        m=8, n=50257, k=4096, dtype="fp8")  # fmt: skip
    assert "K=4104 (pad to 4112)" in notes(m=64, n=4096, k=4104, dtype="fp8")
    assert "refuses" not in notes(m=8, n=4096, k=4096, dtype="fp8")
    assert "torch._int_mm refuses this shape: M=16 (it needs M > 16)" in notes(
        m=16, n=4096, k=4096, dtype="int8")  # fmt: skip
    assert "N=4100 (pad to 4104)" in notes(m=32, n=4100, k=4096, dtype="int8")
    assert "refuses" not in notes(m=17, n=4096, k=4096, dtype="int8")
    assert "refuses" not in notes(m=1, n=50257, k=4095, dtype="bf16")
