"""The sweeps' array path (ops built over numpy arrays of shapes, their kernels timed over the
arrays: ``vectorised.op_kernel_times``) equals the scalar model point by point, 1e-9 relative:
op by op against ``predict`` (through the LLM ``Timer``), and step by step against
``predict_inference`` over grids that cross kernel switches (decode's split-KV / one-split
kernels, short / long norms), on calibrated (H100, H200) and datasheet-only GPUs (A100, L4, an
AMD MI300X without occupancy rules), every runtime, decode and prefill."""

import numpy as np
import pytest

import gpumodel as gm
from gpumodel.calibration import CalibrationParams
from gpumodel.llm import sweep as sweep_module
from gpumodel.llm._comm import Collective
from gpumodel.llm._timing import KEEP_ISOLATED_FLOOR, Timer, keeps_fixed_work
from gpumodel.llm.layers import model_ops
from gpumodel.llm.models import get_model
from gpumodel.llm.runtimes import RUNTIME_NAMES
from gpumodel.ops import Attention
from gpumodel.ops.base import MixedKernels, build, uniform
from gpumodel.predict import empty_kernel_s
from gpumodel.vectorised import op_kernel_times

REL = 1e-9


def close(a: float, b: float) -> bool:
    return abs(a - b) <= REL * max(abs(a), abs(b))


# batches 1..300 cross decode's switch from split-KV to the one-split kernel on every GPU here
BATCH = np.array([1, 2, 3, 5, 8, 13, 21, 40, 64, 100, 300])
CONTEXT = np.array([300, 1000, 2048, 4096, 777, 8000, 1500, 2500, 600, 3000, 5000])


@pytest.mark.parametrize("model", ["llama-3-8b", "gpt2", "mistral-7b"])
@pytest.mark.parametrize("fusion,kv_cache,gqa", [
    ("fused", "static", "native"), ("unfused", "concat", "native"),
    ("compiled", "static", "native"), ("unfused", "static", "repeat"),
    ("compiled", "static", "repeat"),
])  # fmt: skip
@pytest.mark.parametrize("seq", [1, 33])
def test_every_kernel_over_arrays_equals_predict(model, fusion, kv_cache, gqa, seq):
    spec = get_model(model)
    context = np.minimum(np.maximum(CONTEXT, seq), spec.max_context)
    sides = [np.arange(len(BATCH))]
    if fusion == "unfused" and gqa == "native" and spec.sliding_window:
        # an eager HF step whose keys reach the sliding window runs other kernels (mask,
        # repeat_kv, a strided cache cat: layers.hf_window_gqa): the points on both sides do
        # not build together, each side does
        reached = context + (1 if seq == 1 else 0) >= spec.sliding_window
        assert reached.any() and not reached.all()
        with pytest.raises(MixedKernels):
            model_ops(spec, BATCH, seq, context, fusion=fusion, kv_cache=kv_cache, gqa=gqa)
        sides = [np.flatnonzero(reached), np.flatnonzero(~reached)]
    for idx in sides:
        _kernels_over_arrays(model, BATCH[idx], seq, context[idx], fusion, kv_cache, gqa)


def _kernels_over_arrays(model, batch, seq, context, fusion, kv_cache, gqa):
    spec = get_model(model)
    worst = 0.0
    for gpu, cal, floor in (("h100", None, None), ("h200", None, 3e-6), ("a100", None, None),
                            ("l4", "none", 2e-6), ("mi300x", None, None)):  # fmt: skip
        g = gm.get_gpu(gpu)
        timer = Timer(g, cal, stream_floor_s=floor)
        params = timer.calibration.parameters if timer.calibration else CalibrationParams()
        tp = 2 if model != "gpt2" else 4
        ops = model_ops(spec, batch, seq, context, tp=tp, fusion=fusion, kv_cache=kv_cache,
                        gqa=gqa)  # fmt: skip
        for block in ("pre", "layer", "post"):
            for j, e in enumerate(getattr(ops, block)):
                if isinstance(e.op, Collective):
                    continue
                stream = floor if e.kind not in KEEP_ISOLATED_FLOOR else None
                empty = empty_kernel_s(params) if keeps_fixed_work(e.op) else None
                got = op_kernel_times(e.op, g, params, len(batch), l2=e.l2, stream_floor_s=stream,
                                      stream_empty_s=empty)  # fmt: skip
                for i, (b, c) in enumerate(zip(batch.tolist(), context.tolist())):
                    one = model_ops(spec, b, seq, c, tp=tp, fusion=fusion, kv_cache=kv_cache,
                                    gqa=gqa)  # fmt: skip
                    want = timer.kernels(getattr(one, block)[j])
                    assert [launches for _, launches, _ in got] == [k.launches for k in want]
                    if e.kind != "attention":  # split attention: the first points' name
                        assert [name for _, _, name in got] == [k.name for k in want]
                    for (t, _, _), k in zip(got, want):
                        worst = max(worst, abs(t[i] - k.time_s) / k.time_s)
                        assert close(t[i], k.time_s), (gpu, e.name, k.name, b, c)
    assert worst < REL


@pytest.mark.parametrize("impl", ["flash", "cudnn", "naive"])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_over_arrays_equals_predict(impl, causal):
    # prefill with a causal mask: query tiles of unequal work (the block scheduler's tail)
    seq = np.array([129, 256, 1000, 2048, 4096])
    kv = seq + np.array([0, 7, 512, 0, 100])
    for gpu in ("h100", "a100", "mi300x"):
        g = gm.get_gpu(gpu)
        if impl == "cudnn" and g.vendor != "nvidia":  # cuDNN is NVIDIA's: a one-line error
            with pytest.raises(gm.UnsupportedError, match="impl=cudnn is NVIDIA's"):
                gm.predict(Attention(seq=1024, impl=impl), g)
            continue
        timer = Timer(g, None)
        params = timer.calibration.parameters if timer.calibration else CalibrationParams()
        for s_i in range(len(seq)):  # seq is one number per op (it picks the kernel)
            batch = np.array([1, 3, 16])
            op = build(Attention, batch=batch, heads=32, seq=int(seq[s_i]), head_dim=128,
                       causal=causal, impl=impl, kv_heads=8, kv_seq=np.full(3, int(kv[s_i])))  # fmt: skip
            got = op_kernel_times(op, g, params, 3)
            for i, b in enumerate(batch.tolist()):
                one = Attention(batch=b, heads=32, seq=int(seq[s_i]), head_dim=128,
                                causal=causal, impl=impl, kv_heads=8, kv_seq=int(kv[s_i]))  # fmt: skip
                want = gm.predict(one, g, timer.calibration or "none").kernels
                assert len(got) == len(want)
                for (t, _, _), k in zip(got, want):
                    assert close(t[i], k.time_s), (gpu, impl, causal, b)


def test_mixed_kernels_are_split_and_joined():
    # decode: few sequences run FlashAttention-2's split-KV kernel, many the one-split kernel
    g = gm.get_gpu("h100")
    batch = np.array([1, 200, 2, 300])
    op = build(Attention, batch=batch, heads=32, seq=1, head_dim=128, kv_heads=8,
               kv_seq=np.array([4096, 4096, 1024, 1024]))  # fmt: skip
    splits = op.decode_splits_kv(g)
    assert splits.tolist() == [True, False, True, False]
    with pytest.raises(MixedKernels):
        uniform(splits)
    params = Timer(g, None).calibration.parameters
    ((t, _launches, _name),) = op_kernel_times(op, g, params, 4)
    for i, b in enumerate(batch.tolist()):
        one = Attention(batch=b, heads=32, seq=1, head_dim=128, kv_heads=8,
                        kv_seq=int(op.kv_seq[i]))  # fmt: skip
        assert close(t[i], gm.predict(one, g).time_s)


@pytest.mark.parametrize("runtime", RUNTIME_NAMES)
@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_sweep_equals_predict_inference_across_kernel_switches(runtime, phase):
    seq = [1] if phase == "decode" else [64, 200, 1000]  # prompts over arrays too
    context = [512, 3000] if phase == "decode" else [1000, 1500]
    batch = [1, 3, 8, 40, 130] if phase == "decode" else [1, 5]
    for cal in (None, "none"):
        r = gm.sweep_inference("llama-3-8b", ["h100", "a100", "l4"], phase=phase, batch=batch,
                               seq=seq, context=context, tp=[1, 2], runtime=runtime,
                               calibration=cal)  # fmt: skip
        for row in r.records():
            s = gm.predict_inference("llama-3-8b", row["gpu"], phase=phase, batch=row["batch"],
                                     seq=row["seq"], context=row["context"], gpus=row["tp"],
                                     tp=row["tp"], runtime=runtime, calibration=cal,
                                     allow_oversubscribe=True)  # fmt: skip
            assert close(row["time_s"], s.time_s), row
            assert close(row["gpu_time_s"], s.gpu_time_s), row
            assert close(row["host_time_s"], s.host_time_s), row


def test_sweep_takes_the_array_path(monkeypatch):
    """Dense models with native GQA never fall back to the one-step-at-a-time path (the speed
    the benchmark measures rests on it); MoE models do, and still equal the scalar."""

    def refuse(*args, **kwargs):
        raise AssertionError("fell back to the scalar path")

    with monkeypatch.context() as m:
        m.setattr(sweep_module, "_scalar_steps", refuse)
        for runtime in RUNTIME_NAMES:
            gm.sweep_inference("llama-3-8b", ["h100", "l4"], batch=[1, 8, 64, 256],
                               context=[512, 4096], tp=[1, 4], runtime=runtime)  # fmt: skip
        gm.sweep_inference("mistral-7b", "h200", phase="prefill", batch=[1, 4], seq=[512, 8192])
    r = gm.sweep_inference("mixtral-8x7b", "h100", batch=[1, 16], context=[1024], tp=[2],
                           runtime="fused-graph")  # fmt: skip
    for row in r.records():
        s = gm.predict_inference("mixtral-8x7b", "h100", batch=row["batch"], context=1024,
                                 gpus=2, tp=2, runtime="fused-graph", allow_oversubscribe=True)  # fmt: skip
        assert close(row["time_s"], s.time_s)


def test_sweep_still_rejects_what_the_scalar_rejects():
    with pytest.raises(gm.UnsupportedError, match="exceeds"):
        gm.sweep_inference("llama-3-8b", "h100", batch=[1, 2], context=[1024, 10**6])
    with pytest.raises(gm.SpecError, match="seq"):
        gm.sweep_inference("llama-3-8b", "h100", phase="prefill", seq=[512], context=[128, 1024])
    with pytest.raises(gm.UnsupportedError, match="tp=3"):
        gm.sweep_inference("llama-3-8b", "h100", tp=[1, 3])


@pytest.mark.parametrize("gpu", ["h100", "h200", "a100", "l4", "mi300x"])
def test_collective_over_sizes_equals_predict(gpu):
    """``collectives.time_array`` (one op, many sizes) against ``predict`` size by size: measured
    NCCL lines (H100/H200 calibrations), transferred ones and the datasheet's algorithm choice,
    across the sizes where the fastest algorithm changes; and over several nodes (the training
    step's gradient sync), where one node's collective is the floor."""
    from gpumodel.calibration import resolve
    from gpumodel.llm._comm import AllGather, AllReduce, ReduceScatter, collective_kernel, placed
    from gpumodel.ops.collectives import time_array

    g = gm.get_gpu(gpu)
    sizes = np.unique(np.geomspace(1, 1e10, 60).round())
    for cal in (resolve(None, g), None):
        for cls in (AllReduce, AllGather, ReduceScatter):
            for tp in (2, 4, 8):
                op = placed(cls, 1024.0, tp, "bf16")
                got = time_array(op, g, cal, sizes)
                for i, v in enumerate(sizes.tolist()):
                    one = type(op)(**{**op.__dict__, "bytes": v})
                    assert close(got[i], collective_kernel(one, g, cal).time_s), (cls, tp, v)
            for dp, inner in ((16, 1), (24, 2), (64, 8), (512, 4)):
                op = placed(cls, 1024.0, dp, "bf16", inner=inner)
                assert op.nodes > 1
                got = time_array(op, g, cal, sizes[::4])
                for i, v in enumerate(sizes[::4].tolist()):
                    one = type(op)(**{**op.__dict__, "bytes": v})
                    assert close(got[i], collective_kernel(one, g, cal).time_s), (cls, dp, v)


def test_prompts_across_a_sliding_window_equal_predict():
    # Mistral's 4096-token window: prompts of 512 are causal, of 8192 attend 4096 keys each
    # (not causal): the sweep splits them by prompt length
    r = gm.sweep_inference("mistral-7b", ["h100", "l4"], phase="prefill", batch=[1, 3],
                           seq=[512, 8192], runtime="fused-graph")  # fmt: skip
    for row in r.records():
        s = gm.predict_inference("mistral-7b", row["gpu"], phase="prefill", batch=row["batch"],
                                 seq=row["seq"], runtime="fused-graph", allow_oversubscribe=True)  # fmt: skip
        assert close(row["time_s"], s.time_s), row


def test_trace_calibration_is_timed_point_by_point_and_equal(tmp_path):
    """A calibration fitted from a trace scales kernel families by their bound; the array path
    leaves it to the scalar op model (ScalarOnly), and the sweep still equals the scalar."""
    from pathlib import Path

    trace = Path(__file__).resolve().parent / "fixtures" / "traces" / "transformer_eager.json.gz"
    cal = gm.calibrate_from_trace(trace).save(tmp_path / "eager.calibration.yaml")
    assert gm.load_calibration(cal).parameters.family_time_scale
    r = gm.sweep_inference("llama-3-8b", "h100", batch=[1, 16], context=[1024, 2048],
                           runtime="hf-eager", calibration=str(cal))  # fmt: skip
    for row in r.records():
        s = gm.predict_inference("llama-3-8b", "h100", batch=row["batch"], context=row["context"],
                                 runtime="hf-eager", calibration=str(cal))  # fmt: skip
        assert close(row["time_s"], s.time_s), row
