"""Training an fp32 model as a beginner runs it (``policy="fp32"``: no autocast, fp32 grads
and AdamW states, TF32 matmuls off or on), and SDPA's math path that fp32 attention with
grouped K/V heads runs. Expected values by hand and from an H200 fit set
(validation/results/h200-sxm/sdpa-gqa-fp32-2026-11-30)."""

from __future__ import annotations

import json

import pytest

import gpumodel as gm
from gpumodel._paths import results_dir
from gpumodel.calibration import default_calibration
from gpumodel.llm.layers import LayerOp, _sdpa_math_ops
from gpumodel.llm.training import _backward
from gpumodel.ops import Elementwise

GQA_FIT_SET = results_dir() / "h200-sxm" / "sdpa-gqa-fp32-2026-11-30" / "sdpa-gqa-fp32.json"


def test_the_fp32_policy_keeps_16_bytes_a_parameter_and_trains_fp32_only():
    spec = gm.llm.get_model("gpt2")
    mem = gm.llm.memory("gpt2", "h100", batch=4, seq=1024, train=True, dtype="fp32",
                        policy="fp32")  # fmt: skip
    n = spec.param_count()
    assert (mem.weights_bytes, mem.gradients_bytes, mem.optimizer_bytes) == pytest.approx(
        (4 * n, 4 * n, 8 * n))  # fmt: skip
    for bad in (lambda: gm.predict_training_step("gpt2", "h100", 1, dtype="bf16", policy="fp32"),
                lambda: gm.llm.memory("gpt2", "h100", train=True, dtype="fp8", policy="fp32")):  # fmt: skip
        with pytest.raises(gm.SpecError, match="policy fp32 trains an fp32 model") as err:
            bad()
        assert "\n" not in str(err.value)


def test_the_cli_takes_every_policy_the_model_has():
    from gpumodel.cli.llm import POLICIES
    from gpumodel.llm.memory import POLICY_STATE_BYTES

    assert POLICIES == tuple(POLICY_STATE_BYTES)


def test_an_fp32_step_runs_fp32_or_tf32_products():
    kw = dict(gpus=1, micro_batch=2, global_batch=2, seq=1024, fusion="unfused",
              recompute="none", policy="fp32")  # fmt: skip
    fp32 = gm.predict_training_step("gpt2", "h200", dtype="fp32", **kw)
    tf32 = gm.predict_training_step("gpt2", "h200", dtype="tf32", **kw)
    assert tf32.time_s < fp32.time_s / 1.5  # the products on tensor cores
    assert fp32.memory.allocated_bytes == tf32.memory.allocated_bytes


def test_the_math_path_prices_the_fit_sets_calls():
    """Forward within 10% of the H200's measured times at four shapes, forward and backward
    within 10% at the three that are not launch-bound (the fourth, 30-odd small kernels, ran
    1.1 ms where their GPU work is 0.7)."""
    gpu = gm.get_gpu("h200")
    cal = default_calibration(gpu)

    def t(entry: LayerOp) -> float:
        return gm.predict(entry.op, gpu, cal, l2=entry.l2, condition="in-workload").time_s

    for r in (r for r in json.loads(GQA_FIT_SET.read_text())["records"] if r["mode"] == "gqa"):
        b, h, kvh, s, d = r["shape"]
        ops = _sdpa_math_ops(b, h, kvh, s, s, d, "fp32", True)
        fwd = sum(t(e) for e in ops)
        both = fwd + sum(t(x) * f for e in ops for x, f in _backward(e))
        assert fwd == pytest.approx(r["forward_s"], rel=0.10), r["shape"]
        if b * h * s * s >= 32 * 1024 * 1024:
            assert both == pytest.approx(r["forward_backward_s"], rel=0.10), r["shape"]


def test_an_op_can_say_its_backward_costs_nothing():
    op = Elementwise(op="add", n=1 << 20)
    assert _backward(LayerOp("mask", op, backward_factor=0.0)) == []
    (bwd, factor), = _backward(LayerOp("where", op, backward_factor=1.0))
    assert factor == 1.0 and bwd.name == "where.bwd"
    assert _backward(LayerOp("add", op))[0][1] == 2.0  # the general rule
