"""Eager Hugging Face transformers (5.x) Llama step: kernels, GQA in SDPA, host queue, measured
op times. Kernel lists checked against a dispatch trace of transformers 5.17 (LlamaForCausalLM,
sdpa, DynamicCache) and 182 kernels profiled per 4-layer decode step on an H100."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpumodel.errors import SpecError
from gpumodel.llm import get_model, model_ops, predict_inference
from gpumodel.llm.inference import DEFAULT_EAGER_HOST_PER_KERNEL_S
from gpumodel.llm.layers import rope_tables, sdpa_mask
from gpumodel.llm.models import ModelSpec
from gpumodel.ops import Attention, ExpandCopy
from gpumodel.specs import get_gpu


def _four_layer_llama3() -> ModelSpec:
    base = get_model("llama-3-8b").model_dump()
    return ModelSpec.model_validate({**base, "id": "llama-3-8b-4l", "layers": 4})


def _names(entries):
    return [e.name for e in entries]


def _kernels(entries) -> int:
    return sum(len(e.op.kernels(get_gpu_h100())) * e.count for e in entries)


def get_gpu_h100():
    from gpumodel.specs import get_gpu

    return get_gpu("h100-sxm")


def test_eager_decode_kernel_count_by_hand(old_host):
    # per layer: RMSNorm 8 (to fp32, pow, mean, + eps, rsqrt, mul, to bf16, * weight), q/k/v 3,
    # RoPE 5 + 5 (mul, neg, cat, mul, add), cache cat 2, SDPA 1, o_proj 1, residual add 1,
    # RMSNorm 8, gate, silu, up, mul, down 5, residual add 1 = 40
    # per step: embedding 1 + cos/sin tables 11 (arange, + length, .float(), matmul, cat, cos,
    # * scale, sin, * scale, 2 casts) = 12 before; final RMSNorm 8 + LM head 1 = 9 after
    m = _four_layer_llama3()
    ops = model_ops(m, batch=1, seq=1, context=128, fusion="unfused", kv_cache="concat")
    assert _kernels(ops.layer) == 40
    assert _kernels(ops.pre) == 12 and _kernels(ops.post) == 9
    r = predict_inference(m, "h100", "decode", batch=1, context=128, calibration="none", runtime="eager", gqa="native", host=old_host)
    assert r.kernels_per_layer == 40 and r.kernels_per_step == 12 + 4 * 40 + 9 == 181
    # 32 layers: 12 + 1280 + 9
    assert predict_inference("llama-3-8b", "h100", "decode", context=128,
                             calibration="none", runtime="eager", gqa="native", host=old_host).kernels_per_step == 1301  # fmt: skip


def test_fused_sdpa_needs_no_transpose_copy():
    # flash / cuDNN write (batch, seq, heads, d): HF's transpose(1, 2).contiguous() is free
    m = get_model("llama-3-8b")
    flash = model_ops(m, 2, 64, fusion="unfused", kv_cache="concat")
    assert "attn_transpose" not in _names(flash.layer)
    naive = model_ops(m, 2, 64, fusion="unfused", kv_cache="concat", attention="naive")
    copy = next(e for e in naive.layer if e.name == "attn_transpose").op
    assert copy.n == 2 * 64 * 4096


def test_rope_tables_follow_positions_not_batch():
    # HF position_ids are (1, seq): the fp32 tables are seq x head_dim whatever the batch
    t = rope_tables(seq=512, head_dim=128, dtype="bf16")
    assert t.n == 512 * 128 and len(t.passes) == 11
    cos = next(p for p in t.passes if p.name == "cos")
    assert cos.fraction == 1 and cos.bytes_per_element == 8  # fp32 in, fp32 out
    ops = model_ops(get_model("llama-3-8b"), 8, 512, fusion="unfused", kv_cache="concat")
    assert next(e for e in ops.pre if e.name == "rope_tables").op.n == 512 * 128


def test_eager_sdpa_reads_kv_at_kv_heads():
    # no mask (DynamicCache, no padding) -> HF passes enable_gqa=True: K/V stay at 8 heads
    r = predict_inference("llama-3-8b", "h100", "decode", batch=4, context=1000,
                          calibration="none")  # fmt: skip
    assert r.gqa == "native"
    ops = model_ops(get_model("llama-3-8b"), 4, 1, 1000, fusion="unfused", kv_cache="concat")
    attn = next(e for e in ops.layer if e.name == "attention").op
    assert isinstance(attn, Attention) and attn.n_kv_heads == 8
    assert "repeat_kv" not in _names(ops.layer)


def test_repeat_kv_when_sdpa_gets_a_mask():
    # a StaticCache decode makes HF build a mask -> repeat_kv copies K and V to 32 heads
    m = get_model("llama-3-8b")
    ops = model_ops(m, 2, 1, 100, fusion="unfused", kv_cache="static", gqa="repeat")
    rep = next(e for e in ops.layer if e.name == "repeat_kv").op
    # each copy (K, then V): 2 x 100 x 4096 elements written, a quarter of that read, 2 B each
    assert isinstance(rep, ExpandCopy) and rep.n == 2 * 100 * 4096 and rep.repeat == 4
    kernels = rep.kernels(get_gpu("h100"))
    # K and V: one kernel each, priced once and counted twice (``KernelWork.repeats``)
    assert len(kernels) == 1 and kernels[0].repeats == 2 and rep.family == "expand_copy"
    assert kernels[0].bytes == pytest.approx(2 * 100 * (4096 + 1024) * 2)
    assert kernels[0].bytes_written == pytest.approx(2 * 100 * 4096 * 2)
    attn = next(e for e in ops.layer if e.name == "attention").op
    assert attn.n_kv_heads == 32 and attn.n_kv_seq == 100 and not attn.causal
    mask = next(e for e in ops.pre if e.name == "attention_mask").op
    assert len(mask.passes) == 7 and mask.n == 100
    assert len(sdpa_mask(2, 1, 100).passes) == 7
    # the HF-StaticCache-in-a-CUDA-graph combination picks it by default
    g = predict_inference(m, "h100", "decode", batch=2, context=100, runtime="graph",
                          fusion="unfused", kv_cache="static", calibration="none")  # fmt: skip
    assert g.gqa == "repeat"
    assert predict_inference(m, "h100", "decode", runtime="graph", calibration="none").gqa == (
        "native"
    )


def test_host_bound_decode_is_kernels_times_host_plus_tail(old_host):
    # batch 1: every kernel is shorter than the host cost except the MLP GEMMs, whose backlog
    # drains within the layer; the step is the host's issue time plus the GPU tail after the
    # last launch (final norm, LM head)
    m = _four_layer_llama3()
    r = predict_inference(m, "h100", "decode", batch=1, context=128, calibration="none", runtime="eager", gqa="native", host=old_host)
    host = r.kernels_per_step * DEFAULT_EAGER_HOST_PER_KERNEL_S
    lm = next(o for o in r.breakdown if o.name == "lm_head").time_s
    assert r.bound == "host"
    assert r.step_time_s == pytest.approx(host + lm)  # the LM head starts at the last launch


def test_measured_op_times_replace_the_op_model(old_host):
    m = _four_layer_llama3()
    base = predict_inference(m, "h100", "decode", batch=8, context=512, calibration="none", runtime="eager", gqa="native", host=old_host)
    lm = next(o for o in base.breakdown if o.name == "lm_head").time_s
    r = predict_inference(m, "h100", "decode", batch=8, context=512, calibration="none",
                          op_times={"lm_head": 2e-3}, runtime="eager", gqa="native", host=old_host)  # fmt: skip
    assert next(o for o in r.breakdown if o.name == "lm_head").time_s == pytest.approx(2e-3)
    assert r.gpu_time_s == pytest.approx(base.gpu_time_s - lm + 2e-3)
    # the LM head runs last: a longer one adds its whole difference to a host-bound step
    assert r.step_time_s == pytest.approx(base.step_time_s - lm + 2e-3, rel=1e-6)
    # per-layer ops: the measurement is per execution, every layer pays it
    q = predict_inference(m, "h100", "decode", batch=8, context=512, calibration="none",
                          op_times={"q_proj": 1e-4}, runtime="eager", gqa="native", host=old_host)  # fmt: skip
    assert next(o for o in q.breakdown if o.name == "q_proj").time_s == pytest.approx(4e-4)
    with pytest.raises(SpecError, match="names no op"):
        predict_inference(m, "h100", "decode", calibration="none", op_times={"qproj": 1e-4}, runtime="eager", gqa="native", host=old_host)


PREFILL_TRACES = [Path(__file__).parents[1] / "validation" / "results" / run
                  / "trace-llama3-8b-prefill-eager.json.gz"
                  for run in ("steps-h100-run9", "steps-h200-run32")]  # fmt: skip


def test_prefill_lm_head_is_one_gemm_of_the_last_rows(old_host):
    # HF eager prefill at batch 4 x 512 (logits_to_keep=1, as generate asks): each committed
    # trace, H100 and H200, runs the LM head as one GEMM of M = 4 a step, reading its 1.05 GB
    # weight once: 376-380 us on the H100 (4 reads in that time would be 11 TB/s, over its
    # 3.35 TB/s HBM), 245-254 us on the H200
    weight = 4096 * 128256 * 2
    for path, peak in zip(PREFILL_TRACES, (3.35e12, 4.8e12), strict=True):
        doc = json.loads(gzip.open(path).read())
        steps = [e for e in doc["traceEvents"] if e.get("name", "").startswith("ProfilerStep")]
        heads = [e for e in doc["traceEvents"]
                 if e.get("cat") == "kernel" and e["name"].startswith("nvjet")
                 and "x8_" in e["name"]]  # fmt: skip
        assert len(heads) == len(steps) == 3
        assert all(weight / (e["dur"] * 1e-6) < peak for e in heads)
        assert all(4 * weight / (e["dur"] * 1e-6) > peak for e in heads)
    m = _four_layer_llama3()
    ops = model_ops(m, batch=4, seq=512, fusion="unfused", kv_cache="concat")
    lm = ops.post[-1].op
    assert (lm.m, lm.n, lm.k, lm.batch) == (4, 128256, 4096, 1)
    k = lm.kernels(get_gpu_h100())
    assert len(k) == 1 and k[0].bytes == (4 * 4096 + 4096 * 128256) * 2 + 4 * 128256 * 2
    # decode (contiguous rows) and a fused engine (gathered rows) alike
    dec = model_ops(m, batch=4, seq=1, context=512, fusion="unfused", kv_cache="concat")
    assert (dec.post[-1].op.m, dec.post[-1].op.batch) == (4, 1)
    fused = model_ops(m, batch=4, seq=512, fusion="fused")
    assert (fused.post[-1].op.m, fused.post[-1].op.batch) == (4, 1)
    # the step prices one weight pass (~1 GB at 3.35 TB/s = 0.31 ms, uncalibrated)
    r = predict_inference(m, "h100", "prefill", batch=4, seq=512, calibration="none", runtime="eager", gqa="native", host=old_host)
    head = next(o for o in r.breakdown if o.name == "lm_head")
    assert head.time_s == pytest.approx(weight / 3.35e12, rel=0.05)
    assert r.kernels_per_step == 181


def test_in_stream_floor_replaces_the_isolated_floor_of_small_kernels(old_host):
    # uncalibrated, every kernel carries the default 2.5 us floor; with stream_floor_s=1 us the
    # 152 non-GEMM kernels of a 4-layer decode step pay 1 us instead, the 29 GEMMs keep theirs
    m = _four_layer_llama3()
    kw = {"batch": 1, "context": 128, "calibration": "none"}
    iso = predict_inference(m, "h100", "decode", **kw, runtime="eager", gqa="native", host=old_host)
    st = predict_inference(m, "h100", "decode", stream_floor_s=1e-6, **kw, runtime="eager", gqa="native", host=old_host)
    gemms = sum(o.kernels for o in iso.breakdown if o.kind == "gemm")
    assert gemms == 29 and iso.kernels_per_step == st.kernels_per_step == 181
    assert iso.gpu_time_s - st.gpu_time_s == pytest.approx((181 - 29) * 1.5e-6, rel=1e-6)
    for a, b in zip(iso.breakdown, st.breakdown, strict=True):
        if a.kind == "gemm":
            assert a.time_s == b.time_s
    assert st.stream_floor_s == 1e-6 and any("in-stream floor" in n for n in st.notes)
    with pytest.raises(SpecError, match="stream_floor_s"):
        predict_inference(m, "h100", "decode", stream_floor_s=-1e-6, **kw, runtime="eager", gqa="native", host=old_host)


def test_in_stream_keeps_the_other_floor_terms():
    from gpumodel.llm._timing import in_stream
    from gpumodel.prediction import KernelPrediction, Term

    k = KernelPrediction(name="mean", time_s=12e-6, bound="launch", flops=0, bytes=1e3, launches=2,
                         terms=(Term(name="memory time", value=1e-6),
                                Term(name="launch floor", value=9e-6),
                                Term(name="reduction tail", value=2e-6)))  # fmt: skip
    s = in_stream(k, 1.5e-6)
    assert s.time_s == pytest.approx(12e-6 - 9e-6 + 2 * 1.5e-6)  # 6 us: memory + tail + 2 x 1.5
    assert [t.name for t in s.terms] == ["memory time", "in-stream floor", "reduction tail"]
    no_floor = k.model_copy(update={"terms": k.terms[:1]})
    assert in_stream(no_floor, 1.5e-6) is no_floor


def test_in_stream_keeps_a_kernels_own_fixed_work_when_asked():
    # empty_s given: only the launch latency a stream hides goes (an empty kernel: 3.5 us
    # isolated, 1.5 us back to back): 4.5 us a launch -> 2.5 us; without it -> 1.5 us
    from gpumodel.llm._timing import in_stream
    from gpumodel.prediction import KernelPrediction, Term

    k = KernelPrediction(name="cudnn attention", time_s=12e-6, bound="memory", flops=0,
                         bytes=1e3, launches=2,
                         terms=(Term(name="memory time", value=3e-6),
                                Term(name="launch floor", value=9e-6)))  # fmt: skip
    assert in_stream(k, 1.5e-6, 3.5e-6).time_s == pytest.approx(3e-6 + 2 * 2.5e-6)
    assert in_stream(k, 1.5e-6).time_s == pytest.approx(3e-6 + 2 * 1.5e-6)
    # a floor of 2 us a launch, under an empty kernel's: it loses what it has down to 1.5 us
    small = k.model_copy(update={"time_s": 7e-6,
                                 "terms": (k.terms[0], Term(name="launch floor", value=4e-6))})
    assert in_stream(small, 1.5e-6, 3.5e-6).time_s == pytest.approx(3e-6 + 2 * 1.5e-6)


def test_cudnn_attention_after_repeat_kv_keeps_its_floor_and_pays_the_dirty_l2():
    import gpumodel as gm
    from gpumodel.llm._timing import keeps_fixed_work
    from gpumodel.llm.layers import decoder_layer
    from gpumodel.ops.attention import Attention

    assert keeps_fixed_work(Attention(seq=1, kv_seq=2048, impl="cudnn"))
    assert not keeps_fixed_work(Attention(seq=1, kv_seq=2048, impl="flash"))
    m = gm.get_model("llama-3-8b")
    kw = {"attention": "cudnn", "fusion": "compiled", "kv_cache": "static"}
    rep = {e.name: e for e in decoder_layer(m, 16, 1, 1024, gqa="repeat", **kw)}
    nat = {e.name: e for e in decoder_layer(m, 16, 1, 1024, gqa="native", **kw)}
    assert rep["attention"].l2 == "dirty" and nat["attention"].l2 == "cold"
    # the write-back: validate's fraction x min(L2, bytes read) at the kernel's own DRAM rate
    cal = gm.load_calibration("h200")
    r = gm.predict(rep["attention"].op, "h200", calibration=cal, l2="dirty")
    terms = {t.name: t.value for t in r.kernels[0].terms}
    rate = r.kernels[0].bytes / terms["memory time"]
    l2 = gm.get_gpu("h200").l2_cache_bytes
    want = cal.parameters.dirty_l2_writeback_fraction * min(l2, r.kernels[0].bytes) / rate
    assert terms["dirty-L2 write-back"] == pytest.approx(want, rel=1e-9)


def test_the_step_says_when_cudnn_attention_keeps_its_floor():
    from gpumodel.llm.inference import predict_inference

    kw = {"batch": 2, "context": 128, "calibration": "none"}
    compiled = predict_inference("llama-3-8b", "h200", "decode", runtime="hf-static-compiled", **kw)
    fused = predict_inference("llama-3-8b", "h200", "decode", runtime="fused-graph", **kw)
    kept = "cuDNN's attention keeps its own fixed work"
    assert any(kept in n for n in compiled.notes)
    assert not any(kept in n for n in fused.notes) and any("in-stream floor" in n for n in fused.notes)
