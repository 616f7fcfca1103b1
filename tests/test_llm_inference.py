"""Inference: weight-bound decode, host overhead (eager queue, graphs), KV cache, calibration."""

from __future__ import annotations

import pytest

from gpumodel.errors import SpecError, UnsupportedError
from gpumodel.hostprofile import load_host
from gpumodel.llm import get_model, predict_inference
from gpumodel.llm._timing import queue_time
from gpumodel.llm.inference import DEFAULT_EAGER_HOST_PER_KERNEL_S, DEFAULT_GRAPH_LAUNCH_S


def test_kv_cache_bytes_by_hand():
    # llama-2-7b: 2 (K, V) x 32 layers x 32 KV heads x 128 x 2 B = 524288 B per token
    m = get_model("llama-2-7b")
    assert m.kv_cache_bytes_per_token(2) == 2 * 32 * 32 * 128 * 2 == 524288
    r = predict_inference(m, "h100", "decode", batch=3, context=1000, calibration="none")
    assert r.kv_cache_bytes == 3 * 1000 * 524288
    # GQA: llama-3-8b has 8 KV heads -> a quarter of that per token
    assert get_model("llama-3-8b").kv_cache_bytes_per_token(2) == 131072


def test_small_batch_decode_is_weight_bandwidth_bound():
    m = get_model("llama-2-7b")
    r = predict_inference(m, "h100", "decode", batch=1, context=128, runtime="graph",
                          calibration="none")  # fmt: skip
    assert r.bound == "memory"
    weights_time = m.param_count() * 2 / 3.35e12
    # weights stream once per step; the rest is launch floors and small ops
    assert weights_time < r.gpu_time_s < 1.3 * weights_time


def test_eager_runtime_is_host_bound_at_batch_1(old_host):
    r = predict_inference("llama-3-8b", "h100", "decode", batch=1, context=512,
                          calibration="none", runtime="eager", gqa="native", host=old_host)  # fmt: skip
    assert r.runtime == "hf-eager" and r.bound == "host"
    host = r.kernels_per_step * DEFAULT_EAGER_HOST_PER_KERNEL_S
    assert r.step_time_s >= max(host, r.gpu_time_s)
    assert r.host_overhead_s == pytest.approx(r.step_time_s - r.gpu_time_s)


def test_graph_runtime_adds_one_launch():
    kw = {"batch": 1, "context": 512, "runtime": "graph", "calibration": "none"}
    r = predict_inference("llama-3-8b", "h100", "decode", host="reference-h100", **kw)
    assert r.step_time_s == pytest.approx(r.gpu_time_s + DEFAULT_GRAPH_LAUNCH_S)  # its 20 us
    # the default host: the median machine's measured cudaGraphLaunch (~3 us)
    d = predict_inference("llama-3-8b", "h100", "decode", **kw)
    launch = load_host().graph_replay_s
    assert 1e-6 < launch < 10e-6 and d.step_time_s == pytest.approx(d.gpu_time_s + launch)


def test_prefill_is_compute_bound_and_reports_ttft():
    r = predict_inference("llama-3-8b", "h100", "prefill", batch=1, seq=4096, calibration="none")
    assert r.bound == "compute" and r.host_overhead_s < 0.01 * r.step_time_s
    assert r.time_to_first_token_s == r.step_time_s and r.time_per_output_token_s is None
    assert r.tokens_per_s == pytest.approx(4096 / r.step_time_s)


def test_queue_time_between_bounds():
    kernels = [1e-3, 1e-6, 1e-6, 1e-6, 2e-3, 1e-6]
    host = 1e-4
    t = queue_time(kernels, host)
    assert max(sum(kernels), len(kernels) * host) <= t <= sum(max(k, host) for k in kernels) + host
    assert queue_time([1e-5] * 10, 1e-6) == pytest.approx(1e-6 + 10 * 1e-5)  # GPU-bound
    assert queue_time([1e-6] * 10, 1e-5) == pytest.approx(10 * 1e-5 + 1e-6)  # host-bound


def test_host_profile_costs_are_used(old_host):
    # every eager kernel costs its kind's figure from the host profile: 25.1 us uniform here
    # (4.545 ms / 181 kernels, tiny-width HF decode on an H100 host, llm-report.md 2026-11-22)
    d = predict_inference("llama-3-8b", "h100", "decode", batch=1, context=512, calibration="none",
                          runtime="hf-eager", gqa="native", host=old_host)  # fmt: skip
    assert d.host_per_kernel_s == pytest.approx(25.1e-6) == DEFAULT_EAGER_HOST_PER_KERNEL_S
    assert 4.545e-3 / 181 == pytest.approx(DEFAULT_EAGER_HOST_PER_KERNEL_S, rel=2e-3)
    assert d.host_time_s == pytest.approx(d.kernels_per_step * 25.1e-6)
    assert d.host == {"name": "old-default", "cpu_model": "test cpu", "gpu": "test",
                      "measured_at": "2026-11-22T00:59:00+00:00", "source": "given"}  # fmt: skip
    # an explicit host cost per kernel (expert override) replaces the profile's
    h = predict_inference("llama-3-8b", "h100", "decode", batch=1, context=512, calibration="none",
                          runtime="hf-eager", host=old_host, host_per_kernel_s=20e-6)  # fmt: skip
    assert h.host_per_kernel_s == pytest.approx(20e-6)

def test_host_per_step_comes_before_the_kernels(old_host):
    # host-bound decode: step = per-step + kernels x per-kernel + the GPU tail after the last
    # launch; the per-step time moves every launch later by the same amount
    kw = {"batch": 1, "context": 128, "calibration": "none", "host_per_kernel_s": 30e-6}
    base = predict_inference("llama-3-8b", "h100", "decode", **kw, runtime="eager", gqa="native", host=old_host)
    r = predict_inference("llama-3-8b", "h100", "decode", host_per_step_s=0.5e-3, **kw, runtime="eager", gqa="native", host=old_host)
    assert r.host_per_step_s == 0.5e-3
    assert r.host_time_s == pytest.approx(0.5e-3 + r.kernels_per_step * 30e-6)
    assert r.step_time_s == pytest.approx(base.step_time_s + 0.5e-3)
    assert "per step + 1301 kernels, mean 30 us each" in r.explain()
    # GPU-bound: the first launch waits for the per-step time, the queue never runs dry again
    assert queue_time([1e-3, 1e-3], 1e-6, start_s=2e-4) == pytest.approx(2e-4 + 1e-6 + 2e-3)
    assert queue_time([1e-6] * 4, 1e-5, start_s=1e-4) == pytest.approx(1e-4 + 4e-5 + 1e-6)
    with pytest.raises(SpecError, match=">= 0"):
        predict_inference("llama-3-8b", "h100", "decode", host_per_step_s=-1e-3, **kw, runtime="eager", gqa="native", host=old_host)
    # a CUDA graph has no per-kernel or per-step host time: giving one is an error
    g = predict_inference("llama-3-8b", "h100", "decode", runtime="graph", calibration="none")
    assert g.host_per_step_s == 0.0 and g.host_per_kernel_s == 0.0
    with pytest.raises(SpecError, match="price an eager step's host"):
        predict_inference("llama-3-8b", "h100", "decode", runtime="graph", host_per_step_s=1e-3,
                          calibration="none")  # fmt: skip


def test_tensor_parallel_replicas_and_comm():
    r = predict_inference("llama-3-70b", "h100", "decode", batch=8, context=1024, gpus=16, tp=8,
                          runtime="graph", calibration="none")  # fmt: skip
    assert r.replicas == 2 and r.weights_bytes == pytest.approx(
        get_model("llama-3-70b").param_count() * 2 / 8
    )
    comm = [o for o in r.breakdown if o.kind == "comm"]
    assert comm and all(o.time_s > 0 for o in comm)
    assert r.tokens_per_s == pytest.approx(2 * 8 / r.step_time_s)


def test_bad_requests():
    with pytest.raises(UnsupportedError, match="exceeds llama-2-7b's max_context 4096"):
        predict_inference("llama-2-7b", "h100", "decode", context=10_000)
    with pytest.raises(SpecError, match="phase"):
        predict_inference("llama-2-7b", "h100", "train")  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="multiple of tp"):
        predict_inference("llama-2-7b", "h100", gpus=3, tp=2)


def test_sliding_window_caps_the_cache():
    r = predict_inference("mistral-7b", "h100", "decode", batch=1, context=16384,
                          calibration="none")  # fmt: skip
    assert r.kv_cache_bytes == get_model("mistral-7b").kv_cache_bytes_per_token(2) * 4096


def test_hf_decode_prices_the_attention_kernel_torch_runs_on_the_gpu():
    """torch's SDPA runs cuDNN's attention first on compute capability 9.0/10.0, and an HF
    decode step's attention there is cuDNN's memory-bound 16-row-tile kernel (the decode
    breakdown: 8.11 ms at 4.2 TB/s for batch 64 x 4096 on an H200): the HF runtimes price
    cuDNN's kernel by default on those GPUs, FlashAttention elsewhere and in fused-graph
    engines; a named kernel always wins. Prefill on those GPUs runs cuDNN's
    kernels too (unseen-h200-run16's default backend), and so does an eager HF training step
    (the H100 training fit set's traces), with its dropout where the model has one."""
    from gpumodel.llm.runtimes import get_runtime, runtime_attention, training_attention

    eager, static, fused = (get_runtime(n) for n in ("hf-eager", "hf-static-compiled",
                                                      "fused-graph"))  # fmt: skip
    # decode and prefill alike
    assert runtime_attention(eager, "9.0", None) == "cudnn"
    assert runtime_attention(static, "10.0", None) == "cudnn"
    assert runtime_attention(eager, "8.0", None) == "flash"
    assert training_attention("unfused", "9.0", None) == "cudnn"
    assert training_attention("fused", "9.0", None) == "flash"
    assert training_attention("unfused", "8.0", None) == "flash"
    assert training_attention("unfused", "9.0", "efficient") == "efficient"
    assert runtime_attention(fused, "9.0", None) == "flash"
    assert runtime_attention(eager, "9.0", "flash") == "flash"
    kw = dict(batch=64, context=4096, phase="decode", runtime="hf-eager")
    for gpu, kernel in (("h200", "cudnn"), ("a100", "flash")):
        default = predict_inference("llama-3-8b", gpu, **kw)
        named = predict_inference("llama-3-8b", gpu, attention=kernel, **kw)
        assert default.step_time_s == named.step_time_s
    # on the H200 FlashAttention's compute-bound 128-row decode tile would take longer
    h200 = predict_inference("llama-3-8b", "h200", **kw)
    assert predict_inference("llama-3-8b", "h200", attention="flash", **kw).gpu_time_s > (
        h200.gpu_time_s + 2e-3
    )
