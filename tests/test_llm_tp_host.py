"""An eager tensor-parallel step issues torch.distributed calls the measured (one-GPU) HF layer
never did: each costs the host its own time on top of the layer's."""

from __future__ import annotations

import pytest

import gpumodel as gm
from gpumodel.hostprofile import COLLECTIVE_OVER_ELEMENTWISE, load_host


def test_tp_collectives_add_host_time_to_a_measured_hf_layer():
    kw = dict(batch=1, context=4096, runtime="hf-eager")
    one = gm.predict_inference("llama-3-8b", "h100", **kw)
    two = gm.predict_inference("llama-3-8b", "h100", tp=2, gpus=2, **kw)
    hp = load_host(one.host["name"])
    # Llama-3-8B at tp 2: an all-reduce after attention and after the MLP in each of its 32
    # layers, and one after the vocab-parallel embedding (gpumodel.llm.layers)
    per_call = COLLECTIVE_OVER_ELEMENTWISE * hp.cost_s("elementwise")
    # a 1 KiB dist.all_reduce over the profile's elementwise, both measured in one device
    # call (validation/results/h200-sxm/dist-call-host-2026-12-01)
    assert per_call == pytest.approx(25.8 / 7.89 * hp.eager_op_s.elementwise)
    assert two.host_by_kind_s["collective"] == pytest.approx(65 * per_call, rel=1e-9)
    assert "collective" not in one.host_by_kind_s
    assert two.host_time_s == pytest.approx(one.host_time_s + 65 * per_call, rel=1e-9)
    # the step is host-bound on this host: splitting it over two GPUs makes it slower
    assert two.time_s > one.time_s
