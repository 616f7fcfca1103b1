"""Pipeline stages that do not divide the layers (Llama 3 405B: 126 layers over 16 stages,
Dubey et al. 2024, section 3.3.2): the largest stage, ceil(layers / pp) layers, holds the
memory and sets the pace. Expected values worked by hand from the model's own parameter count."""

from __future__ import annotations

import math

import numpy as np
import pytest

import gpumodel as gm
from gpumodel.llm.layers import stage_layers
from gpumodel.llm.planning import layouts


def test_the_largest_stage_holds_ceil_layers_over_pp():
    assert stage_layers(126, 16) == 8 and stage_layers(126, 14) == 9 and stage_layers(32, 4) == 8
    assert list(stage_layers(126, np.array([1, 16, 126]))) == [126, 8, 1]


def test_memory_of_an_uneven_pipeline_is_its_largest_stage():
    spec = gm.llm.get_model("llama-3-405b")
    kw = dict(batch=1, seq=8192, train=True, tp=8, dp=128, zero=1, recompute="selective")
    mem = gm.llm.memory("llama-3-405b", "h100", pp=16, **kw)
    # bf16 weights of 8 of 126 layers' share of the parameters, over tp 8
    assert mem.weights_bytes == pytest.approx(spec.param_count() * 8 / 126 / 8 * 2)
    assert any("126 layers over pp=16: stages of 8" in n for n in mem.notes)
    # an even split: each stage 1 / pp of the parameters, as before
    even = gm.llm.memory("llama-2-7b", "h100", pp=4, **{**kw, "tp": 1, "dp": 1, "seq": 4096})
    assert even.weights_bytes == pytest.approx(gm.llm.get_model("llama-2-7b").param_count() / 4 * 2)
    with pytest.raises(gm.SpecError, match="pp=127 stages for 126 layers"):
        gm.llm.memory("llama-3-405b", "h100", pp=127, **kw)


def test_an_uneven_step_runs_at_its_largest_stages_pace():
    kw = dict(tp=8, micro_batch=1, seq=8192, zero=1)
    steps = {pp: gm.predict_training_step("llama-3-405b", "h100", gpus=8 * pp * 2, pp=pp,
                                          global_batch=4 * pp, **kw) for pp in (14, 16, 18)}  # fmt: skip
    # 9, 8 and 7 layers a stage: the per-stage forward scales with them (the head aside)
    fwd = {pp: s.forward_s for pp, s in steps.items()}
    per_layer = (fwd[14] - fwd[18]) / 2
    assert fwd[16] == pytest.approx(fwd[18] + per_layer, rel=1e-6)
    # the vectorised sweep prices the same uneven layout as the scalar step
    r = gm.sweep_training("llama-3-405b", "h100", tp=8, pp=16, dp=2, micro_batch=1, seq=8192,
                          zero=1, global_batch=64, grid=False)  # fmt: skip
    assert float(r.table["time_s"][0]) == pytest.approx(steps[16].time_s, rel=1e-9)


def test_plans_search_pipeline_sizes_that_do_not_divide_the_layers():
    spec = gm.llm.get_model("llama-3-405b")
    _, pps, _ = layouts(spec, [16384], tp=8)
    assert {16, 32, 64} <= set(pps.tolist())  # powers of two: 126 = 2 x 3^2 x 7 has none > 2
    assert 63 in layouts(spec, [8 * 63], tp=8)[1].tolist()  # its divisors stay
    plan = gm.plan_training("llama-3-405b", "h100", gpus=16384, tokens=15.6e12, global_batch=2048)
    assert plan.step.tp * plan.step.pp * plan.step.dp == 16384
    assert 126 % plan.step.pp != 0  # only an uneven pipeline fits 16,384 GPUs here
    assert 2048 % (plan.step.dp * plan.step.micro_batch) == 0
    assert math.isfinite(plan.days) and plan.days > 0
