"""Layer decomposition: shapes, GQA, tensor parallelism, MoE routing, decode FLOPs ~ 2N."""

from __future__ import annotations

import pytest

from gpumodel.errors import UnsupportedError
from gpumodel.llm import decoder_layer, get_model, model_ops, predict_inference
from gpumodel.llm.layers import active_experts
from gpumodel.ops import Attention, Gemm


def _by_name(ops):
    return {e.name: e for e in ops}


def test_gqa_shrinks_k_and_v():
    ops = _by_name(decoder_layer(get_model("llama-3-8b"), batch=2, seq=16, fusion="unfused"))
    assert ops["q_proj"].op.n == 4096 and ops["k_proj"].op.n == 1024 == ops["v_proj"].op.n
    assert ops["q_proj"].op.m == 32  # batch x seq rows
    attn = ops["attention"].op
    assert isinstance(attn, Attention) and attn.kv_heads == 8 and attn.causal


def test_decode_is_one_query_against_the_context():
    ops = _by_name(decoder_layer(get_model("llama-2-7b"), batch=4, seq=1, context=1000))
    attn = ops["attention"].op
    assert (attn.seq, attn.kv_seq, attn.causal, attn.batch) == (1, 1000, False, 4)


def test_tensor_parallel_splits_and_all_reduces():
    m = get_model("llama-2-70b")
    ops = decoder_layer(m, batch=1, seq=128, tp=8)
    names = [e.name for e in ops]
    assert sum(e.kind == "comm" for e in ops) == 2  # Megatron: one after attention, one after MLP
    by = _by_name(ops)
    assert by["qkv_proj"].op.n == (64 + 2 * 8) * 128 // 8
    assert by["down_proj"].op.k == 28672 // 8 and by["o_proj"].op.k == 8192 // 8
    assert by["tp_all_reduce_mlp"].op.bytes == 128 * 8192 * 2
    assert names.index("tp_all_reduce_attn") == names.index("o_proj") + 1


def test_kv_heads_replicate_when_tp_exceeds_them():
    ops = _by_name(decoder_layer(get_model("llama-3-70b"), batch=1, seq=8, tp=16))
    assert ops["attention"].op.n_kv_heads == 1
    with pytest.raises(UnsupportedError, match="do not split"):
        decoder_layer(get_model("llama-2-7b"), batch=1, seq=8, tp=3)


def test_gelu_mlp_and_learned_positions():
    ops = model_ops(get_model("gpt2-small"), batch=1, seq=64)
    layer = [e.name for e in ops.layer]
    assert "gelu" in layer and "gate_proj" not in layer and "rope" not in layer
    assert "position_embedding" in [e.name for e in ops.pre]


def test_unfused_has_more_kernels_than_fused():
    m = get_model("llama-3-8b")
    eager = predict_inference(m, "h100", "decode", context=512, runtime="eager", calibration="none")
    graph = predict_inference(m, "h100", "decode", context=512, runtime="graph", calibration="none")
    assert eager.kernels_per_layer > 30 > graph.kernels_per_layer >= 10
    assert eager.kernels_per_step == (
        eager.kernels_per_layer * m.layers + sum(o.kernels for o in eager.breakdown if o.count == 1)
    )


def test_moe_routing_assumption():
    assert active_experts(1, 8, 2) == 2
    assert active_experts(4, 8, 2) == 6  # 8 * (1 - (3/4)^4) = 5.47 -> 6
    assert active_experts(10_000, 8, 2) == 8
    ops = _by_name(decoder_layer(get_model("mixtral-8x7b"), batch=1, seq=1, fusion="fused"))
    expert = ops["expert_gate_up_proj"]
    assert expert.count == 2 and expert.op.m == 1 and ops["router"].op.n == 8


@pytest.mark.parametrize("model_id", ["llama-2-7b", "mistral-7b", "gpt-3-175b"])
def test_decode_flops_are_about_2n_per_token(model_id):
    # Kaplan et al. 2020: forward FLOPs per token ~ 2N (+ 2 n_layer n_ctx d_attn for attention)
    m = get_model(model_id)
    ctx = 256
    r = predict_inference(m, "h100", "decode", batch=4, context=ctx, runtime="graph", allow_oversubscribe=True,
                          calibration="none")  # fmt: skip
    per_token = r.flops_per_step / 4
    assert abs(per_token - 2 * m.param_count()) / (2 * m.param_count()) < 0.03
    # exactly: 2 x weights in matrix products + QK^T and PV (4 x layers x heads x d x ctx),
    # plus elementwise FLOPs (under 1%)
    exact = 2 * m.matmul_param_count() + 4 * m.layers * m.heads * m.head_dim * ctx
    assert 0 <= per_token - exact < 0.01 * exact


def test_training_logits_for_every_token():
    ops = model_ops(get_model("llama-2-7b"), batch=2, seq=128, logits="all", kv_cache="none")
    head = next(e for e in ops.post if e.name == "lm_head").op
    assert isinstance(head, Gemm) and head.m == 256 and head.n == 32000
    assert not any(e.kind == "cache" for e in ops.layer)
