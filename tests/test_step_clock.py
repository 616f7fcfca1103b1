"""One clock for a whole LLM step: the power limit sees the step's time-weighted tensor activity,
not each kernel's own back to back (gpumodel.llm._timing.step_activity)."""

from __future__ import annotations

import re

import pytest

import gpumodel as gm
from gpumodel.llm._timing import step_activity
from gpumodel.sol import max_clock_peak_flops


def test_step_activity_is_the_time_weighted_mean():
    # two kernels: 6 ms at activity 0.7 and 4 ms at 0 -> (0.7 * 6) / 10 = 0.42
    assert step_activity(10e-3, 0.7 * 6e-3) == pytest.approx(0.42)
    assert step_activity(0.0, 0.0) == 0.0
    assert step_activity(1e-3, 5e-3) == 1.0  # never above full activity


def test_prefill_gemms_run_at_the_steps_clock():
    """HF eager prefill of 2048 tokens on an H100: the step's tensor activity is its tensor work
    at the max-clock roof over its GPU time at the max clock (computed here from the GEMMs and
    attention of the step's breakdown); every GEMM is priced at the clock of that activity and
    the step's DRAM traffic, which the power model puts 3-5% under the maximum (at ~0.45 and
    ~1.1 TB/s the step draws about the 700 W limit; a traced H100 prefill of this size ran its
    GEMMs at 758 TFLOP/s against 787 at the maximum clock: 0.963), so a GEMM takes about its
    isolated time, not its own back-to-back throttled time (over 10% longer)."""
    r = gm.predict_inference("llama-3-8b", "h100", "prefill", batch=4, seq=512,
                             runtime="hf-eager")  # fmt: skip
    note = next(n for n in r.notes if n.startswith("sustained clock"))
    u = float(re.search(r"activity ([0-9.]+)", note).group(1))
    # independently: the tensor FLOPs of the step (7 GEMMs per layer at 2048 tokens, 32 layers,
    # causal attention) at the bf16 tensor peak of the max clock, over the step's GPU time
    tokens, h, kv, ffn, layers = 2048, 4096, 1024, 14336, 32
    gemm_flops = 2 * tokens * (h * h * 2 + h * kv * 2 + 3 * h * ffn) * layers
    attn_flops = 4 * 4 * 32 * 512 * 512 * 128 / 2 * layers  # QK^T and PV, causal half
    peak = max_clock_peak_flops(gm.get_gpu("h100"), "bf16", "tensor")
    dram = float(re.search(r"traffic ([0-9.]+) TB/s", note).group(1)) * 1e12
    gpu_s = sum(o.time_s for o in r.breakdown)  # at the step's clock: a few % over the max's
    assert u == pytest.approx((gemm_flops + attn_flops) / peak / gpu_s, abs=0.03)
    assert 0.3 < u < 0.6
    # independently: at least the weights (16 GB of bf16) stream once in a step of that time
    assert 16e9 / gpu_s < dram < 4e12
    gate = gm.ops.Gemm(m=tokens, n=ffn, k=h, dtype="bf16")
    in_step = next(o for o in r.breakdown if o.name == "gate_proj").time_s / layers
    # (the note rounds the activity and the traffic to 2 digits)
    assert in_step == pytest.approx(
        gm.predict(gate, "h100", activity=u, dram_bytes_per_s=dram).time_s, rel=0.01
    )
    from gpumodel.model.power import dram_power_w, sustained_clock_ratio
    from gpumodel.predict import dram_energy, power_watts

    static_w, full_w = power_watts(gm.load_calibration("h100").parameters, gm.get_gpu("h100"))
    energy = dram_energy(gm.load_calibration("h100").parameters, gm.get_gpu("h100"))
    ratio = sustained_clock_ratio(u, 700, static_w, full_w, dram_power_w(energy, dram))
    assert 0.95 < ratio < 0.975
    assert sustained_clock_ratio(u, 700, static_w, full_w) == 1.0  # the tensor work alone
    iso = gm.predict(gate, "h100", condition="isolated").time_s
    assert iso <= in_step <= iso / ratio * 1.01  # only its compute time slows
    own = gm.predict(gate, "h100").time_s  # back to back with itself: power-limited
    assert own > 1.1 * in_step


def test_activity_is_checked_at_the_boundary():
    op = gm.ops.Gemm(m=64, n=64, k=64)
    for bad in (-0.1, 1.5, float("nan"), "high"):
        with pytest.raises(gm.SpecError):
            gm.predict(op, "h100", activity=bad)
    with pytest.raises(gm.SpecError, match="in-workload"):  # never silently ignored
        gm.predict(op, "h100", activity=0.5, condition="isolated")
