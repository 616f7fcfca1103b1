"""Vectorised LLM sweeps equal the scalar functions point by point (1e-9 relative), including
edge cases: batch 1, context = seq, the model's maximum context, tp 8 with replicated KV
heads, pp stages, dp replicas, calibrated and datasheet-only GPUs, eager and graph runtimes."""

import json

import numpy as np
import pytest

import gpumodel as gm
from gpumodel.llm._timing import queue_time, queue_time_blocks

REL = 1e-9


def close(a: float, b: float) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b))


@pytest.mark.parametrize("runtime", ["eager", "graph"])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_inference_sweep_equals_scalar(runtime, phase):
    model = "llama-3-8b"  # 8 KV heads: tp 8 splits them one per GPU
    ctx = [128, 8192] if phase == "prefill" else [1, 8192]
    seq = [128] if phase == "prefill" else [1]
    r = gm.sweep_inference(model, ["h100", "a100"], phase=phase, batch=[1, 7], seq=seq,
                           context=ctx, tp=[1, 8], dp=[1, 3], runtime=runtime)  # fmt: skip
    assert len(r) == 2 * 2 * 2 * 2 * 2
    for row in r.records():
        s = gm.predict_inference(model, row["gpu"], phase=phase, batch=row["batch"],
                                 seq=row["seq"], context=row["context"],
                                 gpus=row["tp"] * row["dp"], tp=row["tp"], runtime=runtime)  # fmt: skip
        assert close(row["time_s"], s.step_time_s), row
        assert close(row["gpu_time_s"], s.gpu_time_s)
        assert close(row["host_time_s"], s.host_time_s)
        assert close(row["tokens_per_s"], s.tokens_per_s)
        mem = gm.llm.memory(model, row["gpu"], batch=row["batch"], seq=row["context"], tp=row["tp"],
                        prefill_tokens=row["batch"] * row["seq"])  # fmt: skip
        assert row["memory_bytes"] == mem.total_bytes and row["fits"] == mem.fits
        price = gm.get_gpu(row["gpu"]).price.usd_per_hour
        assert close(row["usd_per_hour"], row["gpus"] * price)
        per_m = row["gpus"] * price / (s.tokens_per_s * 3600) * 1e6
        assert close(row["usd_per_million_tokens"], per_m)


def test_fp8_sweep_equals_scalar_where_only_fp8_is_power_limited():
    # an eager fp8 prefill whose step activity leaves 16-bit tensor work at the max clock
    # while fp8, which draws more power per unit of activity (the H100 calibration's fitted
    # tensor_power_dtype_factor), is power-limited: the sweep once took every kernel's
    # isolated time there (0.5% fast at batch 33, 0.7% at 64)
    import re

    from gpumodel.model.power import dram_power_w, sustained_clock_ratio
    from gpumodel.predict import dram_energy, power_watts

    gpu, params = gm.get_gpu("h100"), gm.load_calibration("h100").parameters
    r = gm.sweep_inference("llama-3-8b", "h100", phase="prefill", batch=[16, 33, 64], seq=512,
                           dtype="fp8", runtime="hf-eager")  # fmt: skip
    for row in r.records():
        s = gm.predict_inference("llama-3-8b", "h100", phase="prefill", batch=row["batch"],
                                 seq=512, dtype="fp8", runtime="hf-eager")  # fmt: skip
        if row["batch"] == 33:  # the premise, at the step's activity and traffic as its note says
            activity = float(re.search(r"tensor activity ([0-9.]+)", " ".join(s.notes)).group(1))
            traffic = float(re.search(r"traffic ([0-9.]+) TB/s", " ".join(s.notes)).group(1)) * 1e12
            ratio = {d: sustained_clock_ratio(activity, gpu.tdp_watts,
                                              *power_watts(params, gpu, d),
                                              dram_power_w(dram_energy(params, gpu), traffic))
                     for d in (None, "fp8")}  # fmt: skip
            assert ratio[None] == 1.0 and ratio["fp8"] < 1.0
        assert close(row["gpu_time_s"], s.gpu_time_s), row


def test_inference_sweep_defaults_and_other_model_shapes():
    # gpt2: learned positions, LayerNorm, GELU MLP, 12 heads (tp 4 splits them)
    r = gm.sweep_inference("gpt2", "h100", batch=[1, 16], tp=[1, 4], runtime="graph")
    for row in r.records():
        s = gm.predict_inference("gpt2", "h100", batch=row["batch"], gpus=row["tp"],
                                 tp=row["tp"], runtime="graph")  # fmt: skip
        assert (row["seq"], row["context"]) == (s.seq, s.context) == (1, 1024)
        assert close(row["time_s"], s.step_time_s)


def test_training_sweep_equals_scalar():
    model = "llama-2-7b"  # 32 layers, 32 heads
    for recompute, zero in (("selective", 1), ("full", 3), ("none", 0)):
        r = gm.sweep_training(model, ["h100", "a100"], tp=[1, 8], pp=[1, 4], dp=[1, 3],
                              micro_batch=[1, 2], seq=2048, recompute=recompute, zero=zero,
                              tokens=1e11)  # fmt: skip
        assert len(r) == 2 * 2 * 2 * 2 * 2
        for row in r.records():
            s = gm.predict_training_step(model, row["gpu"], row["gpus"], tp=row["tp"],
                                         pp=row["pp"], micro_batch=row["micro_batch"], seq=2048,
                                         recompute=recompute, zero=zero)  # fmt: skip
            assert close(row["time_s"], s.step_time_s), row
            assert close(row["mfu"], s.mfu)
            assert close(row["tokens_per_s"], s.tokens_per_s)
            assert (row["global_batch"], row["microbatches"]) == (s.global_batch, s.microbatches)
            assert row["memory_bytes"] == s.memory.total_bytes and row["fits"] == s.memory.fits
            steps = np.ceil(1e11 / s.tokens_per_step)
            assert close(row["train_time_s"], steps * s.step_time_s)


def test_training_sweep_matches_plan_training_cost():
    plan = gm.plan_training("llama-2-7b", "h100", 64, 1e12, tp=2, pp=1)
    r = gm.sweep_training("llama-2-7b", "h100", tp=2, pp=1, dp=32, tokens=1e12)
    assert close(r["days"][0], plan.days) and close(r["cost_usd"][0], plan.cost_usd)


def test_grid_false_broadcasts_points():
    r = gm.sweep_inference("llama-3-8b", "h100", batch=[1, 8, 64], context=[512, 1024, 2048],
                           grid=False, runtime="graph")  # fmt: skip
    assert list(zip(r["batch"], r["context"])) == [(1, 512), (8, 1024), (64, 2048)]
    with pytest.raises(gm.SpecError, match="broadcast"):
        gm.sweep_inference("llama-3-8b", "h100", batch=[1, 2], context=[1, 2, 3], grid=False)


def test_sweep_errors_are_the_scalar_ones():
    with pytest.raises(gm.SpecError, match="batch must be >= 1"):
        gm.sweep_inference("llama-3-8b", "h100", batch=[0, 1])
    with pytest.raises(gm.SpecError, match="whole numbers"):
        gm.sweep_inference("llama-3-8b", "h100", batch=[1.5])
    with pytest.raises(gm.UnsupportedError, match="exceeds"):
        gm.sweep_inference("llama-3-8b", "h100", context=[9000])
    with pytest.raises(gm.UnsupportedError, match="do not split"):
        gm.sweep_inference("gpt2", "h100", tp=[8])
    with pytest.raises(gm.UnsupportedError, match="pipeline"):
        gm.sweep_inference("llama-3-8b", "h100", pp=[2])
    with pytest.raises(gm.SpecError, match="pp=33 stages for 32 layers"):
        gm.sweep_training("llama-2-7b", "h100", pp=[1, 33])
    with pytest.raises(gm.SpecError, match="not a multiple"):
        gm.sweep_training("llama-2-7b", "h100", dp=3, global_batch=1024)


def test_sweep_names_calibrations_prices_and_warns_when_mixed():
    r = gm.sweep_inference("llama-3-8b", ["h100", "a100"], price={"h100": 2.49}, runtime="graph")
    assert set(r.calibrations) == {"h100-sxm", "a100-sxm4-80gb"}
    assert r.calibrations["a100-sxm4-80gb"] == "none (datasheet only)"
    assert "calibration.yaml" in r.calibrations["h100-sxm"]
    shipped = gm.load_calibration("h100-sxm").created.date()  # the committed H100 run's date
    assert sorted(set(r["calibration"])) == ["datasheet only", f"measured {shipped}"]
    assert len(r.warnings) == 1 and "not like for like" in r.warnings[0]
    assert (
        r.prices["h100-sxm"].provider == "given" and r.prices["h100-sxm"].usd_per_gpu_hour == 2.49
    )
    a100 = gm.get_gpu("a100").price
    assert r.prices["a100-sxm4-80gb"].provider == a100.provider
    assert r["usd_per_gpu_hour"][r["gpu"] == "h100-sxm"][0] == 2.49
    data = json.loads(json.dumps(r.to_dict()))
    assert data["prices"]["a100-sxm4-80gb"]["source"] == a100.source
    # like for like: no warning when both use the datasheet
    # (the two specs' prices still come from two providers: that warning stays)
    same = gm.sweep_inference("llama-3-8b", ["h100", "a100"], calibration="none")
    assert [w for w in same.warnings if "not like for like" in w] == []
    assert set(same["calibration"]) == {"datasheet only"}


def test_unknown_price_gpu_is_an_error():
    with pytest.raises(gm.UnknownGPUError):
        gm.sweep_inference("llama-3-8b", "h100", price={"h1000": 2.0})


def test_queue_closed_form_equals_the_kernel_by_kernel_queue():
    rng = np.random.default_rng(1)
    for _ in range(200):
        n0, k, layers, n2 = (int(x) for x in rng.integers(0, 5, size=4))
        pre, lay, post = (rng.exponential(1e-5, n) for n in (n0, k, n2))
        h, s = rng.exponential(1e-5), rng.exponential(1e-5) * rng.integers(0, 2)
        ref = queue_time(list(pre) + list(lay) * layers + list(post), h, s)
        got = float(queue_time_blocks(pre, lay, layers, post, h, s))
        assert got == pytest.approx(ref, rel=1e-12, abs=1e-300)
    # by hand: GPU-bound 3 x 10 us after a 1 us issue; host-bound 3 x 10 us issues
    assert float(queue_time_blocks([], [1e-5], 3, [], 1e-6)) == pytest.approx(31e-6)
    assert float(queue_time_blocks([], [1e-6], 3, [], 1e-5)) == pytest.approx(31e-6)


def test_sweep_equals_scalar_where_prefill_meets_decodes_floor():
    """A one-tile prefill (128 queries) is held to decode over the same keys (the attention op's
    monotone floor); the scalar path priced that floor without the step's DRAM power, the sweep
    with it (Phi-3-mini at batch 8 x 128: 0.1% apart, found by a new user's pass)."""
    r = gm.sweep_inference("phi-3-mini", "h100", phase="prefill", batch=[1, 8], seq=[128, 256])
    for row in r.records():
        s = gm.predict_inference("phi-3-mini", "h100", phase="prefill", batch=row["batch"],
                                 seq=row["seq"])  # fmt: skip
        assert close(row["time_s"], s.time_s), row


def test_a_sweep_says_when_gpus_price_collectives_from_unlike_sources():
    """4 x H200 has a measured NCCL line (a shipped system calibration), the H100 none: the
    model priced 1 MiB all-reduces on 4 x H100 at 14.9 us where the H200's line measured 48.8,
    and the H200 came out slower at tp 4. The sweep now says so; tp 1 rows and one calibration
    carried to all (no system file) need no warning."""
    import gpumodel as gm

    def warned(**kw):
        r = gm.sweep_inference("llama-2-7b", ["h100", "h200"], batch=32, context=512, **kw)
        return [w for w in r.warnings if w.startswith("collectives:")]

    (w,) = warned(tp=[1, 4])
    assert "h200-sxm from measured NCCL lines" in w and "h100-sxm from NCCL's cost model" in w
    assert warned(tp=1) == [] and warned(tp=4, calibration_from="h100") == []


def test_side_by_side_prices_from_different_providers_are_said_to_be():
    """The H100 PCIe's spec price is Lambda's 2025 catalog, the H200's CoreWeave's of 2026: a
    sweep or a serving plan over both compares two catalogs as well as two GPUs, and says so;
    prices the user gives (or one provider: the H100 SXM and the H200 from CoreWeave's catalog
    of the same month) need no warning."""
    import gpumodel as gm
    from gpumodel.prices import price_for

    pcie, h200 = price_for(gm.get_gpu("h100-pcie")), price_for(gm.get_gpu("h200"))
    assert pcie.provider != h200.provider
    r = gm.sweep_inference("llama-3-8b", ["h100-pcie", "h200"], batch=1, context=2048)
    (w,) = [w for w in r.warnings if w.startswith("prices from different providers")]
    assert f"h100-pcie {pcie.label}" in w and "--price h100-pcie=...,h200-sxm=..." in w
    given = gm.sweep_inference("llama-3-8b", ["h100-pcie", "h200"], batch=1, context=2048,
                               price={"h100-pcie": 2.49, "h200": 3.10})  # fmt: skip
    assert not [w for w in given.warnings if w.startswith("prices from")]
    plan = gm.plan_serving("llama-3-8b", ["h100-pcie", "h200"], rate=10)
    assert any(w.startswith("prices from different providers") for w in plan.warnings)
    one = gm.sweep_inference("llama-3-8b", ["h100", "h200"], batch=1, context=2048)
    assert price_for(gm.get_gpu("h100")).provider == h200.provider
    assert not [w for w in one.warnings if w.startswith("prices from")]
