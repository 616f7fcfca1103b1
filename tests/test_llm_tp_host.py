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
