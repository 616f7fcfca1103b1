"""An eager tensor-parallel step issues torch.distributed calls the measured (one-GPU) HF layer
never did, HF's tensor-parallel hooks wrap every sharded projection, and the step waits for the
slowest rank's host: each costs the host its own time on top of the layer's."""

from __future__ import annotations

import math

import pytest

import gpumodel as gm
from gpumodel.hostprofile import COLLECTIVE_OVER_ELEMENTWISE, load_host
from gpumodel.llm.ranks import RANK_HOST_SPREAD
from gpumodel.llm.runtimes import HF_TP_HOOKS_OVER_ELEMENTWISE

KW = dict(batch=1, context=4096, runtime="hf-eager")
SHAPE = dict(batch=8, context=2048)


def test_tp_collectives_hooks_and_the_slowest_rank_add_host_time_to_a_measured_hf_layer():
    one = gm.predict_inference("llama-3-8b", "h100", **KW)
    two = gm.predict_inference("llama-3-8b", "h100", tp=2, gpus=2, **KW)
    hp = load_host(one.host["name"])
    e = hp.cost_s("elementwise")
    # the slowest of 2 ranks: 1 + spread x E[max of 2 standard normals] = 1 + spread / sqrt(pi)
    slowest = 1 + RANK_HOST_SPREAD / math.sqrt(math.pi)
    # Llama-3-8B at tp 2: an all-reduce after attention and after the MLP in each of its 32
    # layers, and one after the vocab-parallel embedding (gpumodel.llm.layers), each a 1 KiB
    # dist.all_reduce over the profile's elementwise, both measured in one device call
    # (validation/results/h200-sxm/dist-call-host-2026-12-01)
    per_call = 25.8 / 7.89 * e
    assert COLLECTIVE_OVER_ELEMENTWISE * e == pytest.approx(per_call)
    assert two.host_by_kind_s["collective"] == pytest.approx(slowest * 65 * per_call, rel=1e-9)
    # HF's TP plan for Llama shards q, k, v, o, gate, up and down: 7 projections a layer
    hooks = 32 * 7 * HF_TP_HOOKS_OVER_ELEMENTWISE * e
    assert two.host_by_kind_s["HF tensor-parallel hooks"] == pytest.approx(slowest * hooks)
    assert "collective" not in one.host_by_kind_s
    assert two.host_time_s == pytest.approx(slowest * (one.host_time_s + 65 * per_call + hooks),
                                            rel=1e-9)  # fmt: skip
    # the step is host-bound on this host: splitting it over two GPUs makes it slower
    assert two.time_s > one.time_s
    assert any("slowest of the 2 tensor-parallel ranks" in n for n in two.notes)


def test_graph_runtimes_pay_no_hooks_and_one_gpu_no_pacing():
    fused = gm.predict_inference("llama-3-8b", "h100", tp=2, gpus=2, batch=1, context=4096)
    assert fused.runtime == "fused-graph"
    assert "HF tensor-parallel hooks" not in fused.host_by_kind_s
    one = gm.predict_inference("llama-3-8b", "h100", **KW)
    assert not any("tensor-parallel ranks" in n for n in one.notes)


def test_the_sweep_prices_tensor_parallel_hf_steps_as_predict_does():
    rows = gm.sweep_inference("llama-3-8b", "h100", batch=[1, 8], context=[4096], tp=[2],
                              runtime="hf-eager")  # fmt: skip
    for row in rows.records():
        one = gm.predict_inference("llama-3-8b", "h100", tp=2, gpus=2, batch=row["batch"],
                                   context=4096, runtime="hf-eager")  # fmt: skip
        assert row["time_s"] == pytest.approx(one.time_s, rel=1e-6)
        assert row["host_time_s"] == pytest.approx(one.host_time_s, rel=1e-6)


def test_hf_runtimes_refuse_a_tp_that_splits_kv_heads():
    """HF's TP plan splits k_proj's and v_proj's output features evenly: Llama-3-8B's 8 K/V
    heads over 16 ranks would leave half a head a rank (vLLM-style engines replicate heads)."""
    for runtime in ("hf-eager", "hf-static-compiled"):
        with pytest.raises(gm.UnsupportedError, match="8 K/V heads, tp=16"):
            gm.predict_inference("llama-3-8b", "h200", tp=16, runtime=runtime, **SHAPE)
        with pytest.raises(gm.UnsupportedError, match="tp=8 does not divide"):
            gm.sweep_inference("qwen3-30b-a3b", "h200", tp=[2, 8], runtime=runtime, **SHAPE)
    fused = gm.predict_inference("llama-3-8b", "h200", tp=16, runtime="fused-graph", **SHAPE)
    assert fused.tp == 16  # replicated K/V heads, as vLLM does


def test_the_library_defaults_gpus_to_tp_as_the_cli_does():
    one = gm.predict_inference("llama-3-8b", "h200", tp=2, runtime="hf-eager", **SHAPE)
    assert (one.gpus, one.replicas) == (2, 1)
    assert one.time_s == gm.predict_inference("llama-3-8b", "h200", tp=2, gpus=2,
                                              runtime="hf-eager", **SHAPE).time_s  # fmt: skip
    assert gm.predict_inference("llama-3-8b", "h200", gpus=4, **SHAPE).tp == 4
    with pytest.raises(gm.SpecError, match="tp must be"):
        gm.predict_inference("llama-3-8b", "h200", tp=-2, **SHAPE)


def test_the_notes_quote_the_measured_host_and_the_rank_factor_apart():
    two = gm.predict_inference("llama-3-8b", "h100", tp=2, runtime="hf-eager", **SHAPE)
    hp = load_host(two.host["name"])
    slowest = 1 + RANK_HOST_SPREAD / math.sqrt(math.pi)
    text = " ".join(two.notes)
    assert f"{hp.hf_model_layer_s * 1e6:.4g} us per decoder layer" in text  # as measured
    assert f"x{slowest:.3g} on every figure" in text


def test_a_serving_plan_skips_the_tps_the_hf_runtimes_cannot_run():
    """Qwen3-30B-A3B has 4 K/V heads: HF's TP plan runs tp 1, 2 and 4, never 8; the plan keeps
    the sizes it can run (it had called the GPU 'no fit' when the tp 8 candidate raised)."""
    plan = gm.plan_serving("qwen3-30b-a3b", ["h100"], rate=5, runtime="hf-eager")
    option = plan.options[0]
    assert option.feasible and option.tp in (1, 2, 4)
