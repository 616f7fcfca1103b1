"""Mixture-of-experts training and compiled decoding as HF transformers 5 runs them: the grouped
products' backward, PyTorch's per-group fallback that amp's fp32 experts take, the host-device
syncs it adds, the experts' saved activations, and the compiled experts' kernels; checked by
hand and against H200 measurements and traces (validation/results/steps-h200-moe-train-run*)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

import gpumodel as gm
from gpumodel.cli import main
from gpumodel.hostprofile import load_host
from gpumodel.llm import training
from gpumodel.llm.layers import LayerOp
from gpumodel.llm.memory import hf_eager_activation_bytes_per_token
from gpumodel.llm.training import _backward, synced_layer_s
from gpumodel.ops import Elementwise
from gpumodel.ops.matmul import GroupedGemm

ROOT = Path(__file__).parents[1]
MODELS = ROOT / "validation" / "unseen" / "models"
QWEN = str(MODELS / "qwen3-moe-1.9b.yaml")
MIXTRAL = str(MODELS / "mixtral-3.6b.yaml")
RESULTS = ROOT / "validation" / "results"
H200 = gm.get_gpu("h200")


def test_grouped_backward_is_dx_through_the_weights_and_dw_over_the_rows():
    fwd = GroupedGemm(tokens=4096, experts=8, top_k=2, n=11264, k=2048)
    (dx, fx), (dw, fw) = _backward(LayerOp("gate_up", fwd, kind="gemm"))
    assert (fx, fw) == (1.0, 1.0)
    assert (dx.op.n, dx.op.k, dx.op.weight_grad) == (2048, 11264, False)
    assert dw.op.weight_grad and (dw.op.n, dw.op.k) == (11264, 2048)
    # 8,192 slots over 8 experts: the useful work 2 * rows * n * k in each of the three (the
    # rest is the binomial spread's partial row tiles)
    useful = 2.0 * 8192 * 11264 * 2048
    for op in (fwd, dx.op, dw.op):
        (gemm,) = [k for k in op.kernels(H200) if k.name == "grouped_gemm"]
        assert gemm.total_flops * gemm.min_flops_fraction == pytest.approx(useful, rel=1e-9)
        assert useful < gemm.total_flops < 1.1 * useful


def test_fp32_grouped_products_run_one_gemm_per_expert_after_a_sync():
    # 4,096 tokens x top-8 = 32,768 slots over 64 experts (all hit): 512 rows each
    op = GroupedGemm(tokens=4096, experts=64, top_k=8, n=1024, k=1024, dtype="fp32")
    assert op.sync_per_call
    assert not GroupedGemm(tokens=4096, experts=64, top_k=8, n=1024, k=1024).sync_per_call
    (kw,) = op.kernels(H200)
    assert kw.repeats == 64
    assert kw.gemm.m == 512 and (kw.gemm.n, kw.gemm.k) == (1024, 1024)
    assert kw.total_flops == pytest.approx(2.0 * 512 * 1024 * 1024)
    # the op's totals count every repeated kernel: all 32,768 slots' products
    assert gm.predict(op, "h200").flops == pytest.approx(2.0 * 32768 * 1024 * 1024)
    (dw,) = op.model_copy(update={"weight_grad": True}).kernels(H200)
    assert (dw.gemm.m, dw.gemm.n, dw.gemm.k) == (1024, 1024, 512)


def test_fp32_experts_run_at_the_fp32_rate_the_h200_trace_shows():
    # the amp trace: 120.5 ms of FP32 SGEMMs a step for 4,096 tokens through 16 layers' experts
    # (forward + dX + dW of gate_up and down: 3 x 2 x 32,768 x 1024 x 1536 FLOPs a layer)
    trace_flops = 16 * 3 * 2.0 * 32768 * 1024 * 1536
    measured_tflops = trace_flops / 0.1205 / 1e12
    op = GroupedGemm(tokens=4096, experts=64, top_k=8, n=1024, k=1024, dtype="fp32")
    predicted_tflops = 2.0 * 32768 * 1024 * 1024 / gm.predict(op, "h200").time_s / 1e12
    assert predicted_tflops == pytest.approx(measured_tflops, rel=0.15)


def _step(model, policy, batch=2, seq=2048, host="reference-h100"):
    return gm.predict_training_step(model, "h200", 1, micro_batch=batch, global_batch=batch,
                                    seq=seq, fusion="unfused", policy=policy, host=host,
                                    recompute="none")  # fmt: skip


def test_amp_names_the_fp32_experts_and_counts_the_traced_syncs():
    amp, bf16 = _step(QWEN, "amp"), _step(QWEN, "bf16")
    (note,) = [n for n in amp.notes if n.startswith("experts in fp32")]
    # the H200 trace of a Qwen3-MoE amp step: 96 cudaStreamSynchronize a step (16 layers x 2
    # grouped calls x forward, dX, dW)
    assert "96 syncs a step" in note
    assert not any(n.startswith("experts in") for n in bf16.notes)
    assert amp.time_s > 2 * bf16.time_s  # FP32 FFMA against bf16 tensor cores


def test_a_synced_layer_takes_the_slower_side_of_each_segment(monkeypatch):
    hp = load_host("reference-h100")
    per = 1e-3  # every kernel costs 1 ms of host
    monkeypatch.setattr(training, "train_host_per_kernel", lambda *a, **k: per)
    grouped = GroupedGemm(tokens=64, experts=4, top_k=1, n=64, k=64, dtype="fp32")

    def timed(op, gpu_s, launches):
        return SimpleNamespace(entry=SimpleNamespace(op=op, count=1), time_s=gpu_s,
                               launches=launches)  # fmt: skip

    ew = Elementwise(op="add", n=64, dtype="fp32")
    # forward: [ew gpu 5 ms, 1 launch] | [grouped gpu 1 ms, 4 groups] [ew gpu 0.5 ms, 3 launches]
    fwd = [timed(ew, 5e-3, 1), timed(grouped, 1e-3, 4), timed(ew, 0.5e-3, 3)]
    got = synced_layer_s(fwd, [], [], gm.get_model(QWEN), "amp", hp)
    grouped_host = per + hp.sync_s() + 4 * hp.cost_s("matmul")
    seg1 = max(5e-3, 1 * per)
    seg2 = max(1e-3 + 0.5e-3, grouped_host + 3 * per)
    assert got == pytest.approx(seg1 + seg2)
    assert synced_layer_s([fwd[0]], [], [], gm.get_model(QWEN), "amp", hp) == 0.0


def test_moe_activations_count_the_routed_slots_by_hand():
    spec = gm.get_model(QWEN)  # h 1024, 16 x 128 q, 8 x 128 kv, 64 experts of 512, top-8
    norms = 2 * (4 * 1024 + 2 * 1024)
    attention = 2 * (2048 + 2 * 1024) + 2 * 2048 + 4 * 16 + 4 * (2048 + 1024)
    experts = 4 * 64 + 8 * (2 * 1024 + 4 * 512) * 2
    assert hf_eager_activation_bytes_per_token(spec, "bf16") == norms + attention + experts
    amp_inputs = 5 * 2 * 1024
    amp = 2 * (4 * 1024 + 4 * 1024) + amp_inputs + attention + 4 * 64 + 8 * 4096 * 4
    assert hf_eager_activation_bytes_per_token(spec, "amp") == amp


def _records(run):
    data = json.loads(
        (RESULTS / f"steps-h200-moe-train-{run}" / "steps-moe-train.json").read_text()
    )
    return [r for r in data["records"] if r["phase"] == "train" and r.get("peak_allocated_bytes")]


@pytest.mark.parametrize("run", ["run1", "run3", "run4"])
def test_training_peaks_match_the_h200_measurements(run):
    # run 2's peaks held a second AdamW's states (its annotations.json): not a measurement of
    # the workload
    for rec in _records(run):
        model = QWEN if rec["workload"].startswith("qwen3") else MIXTRAL
        peak = _step(model, rec["policy"], rec["batch"], rec["seq"]).memory.allocated_bytes
        assert peak == pytest.approx(rec["peak_allocated_bytes"], rel=0.05), rec["workload"]


def test_compiled_moe_decode_launches_about_what_the_h200_trace_shows():
    path = (RESULTS / "steps-h200-moe-train-run2"
            / "trace-qwen3-30b-a3b-static-decode-b8x2048.json.gz")  # fmt: skip
    events = json.loads(gzip.open(path).read())["traceEvents"]
    steps = sum(1 for e in events if e.get("name", "").startswith("ProfilerStep"))
    traced = sum(1 for e in events if e.get("cat") == "kernel") / steps
    res = gm.predict_inference("qwen3-30b-a3b", "h200", phase="decode", batch=8, context=2048,
                               runtime="hf-static-compiled")  # fmt: skip
    kernels = sum(op.kernels for op in res.breakdown)
    assert kernels == pytest.approx(traced, rel=0.10)
    moe = ("router", "routing", "experts_dispatch", "expert_gate_up_proj",
           "experts_silu_and_mul", "expert_down_proj", "experts_combine")  # fmt: skip
    per_layer = sum(op.kernels for op in res.breakdown if op.name in moe) / 48
    assert per_layer == 15  # router 1, top-k 3, dispatch 5, 2 grouped x 2, SiLU 1, combine 1


def test_plan_train_states_the_fp32_experts(capsys):
    args = ["plan", "train", "--model", QWEN, "--tokens", "1e9", "--gpu", "h200", "--gpus", "1",
            "--micro-batch", "2", "--global-batch", "2", "--seq", "2048", "--fusion", "unfused",
            "--recompute", "none", "--host", "reference-h100"]  # fmt: skip
    assert main([*args, "--policy", "amp"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "experts in fp32" in out and "96 syncs a step" in out
    assert main([*args, "--policy", "bf16"]) == 0
    assert "experts in" not in capsys.readouterr().out


def test_fp16_moe_inference_names_the_per_expert_fallback():
    # HF eager decode in fp16: both grouped calls of each of the 48 layers fall back
    fp16 = gm.predict_inference("qwen3-30b-a3b", "a100", "decode", batch=4, context=2048,
                                dtype="fp16", runtime="hf-eager")  # fmt: skip
    (note,) = [n for n in fp16.notes if n.startswith("experts in fp16")]
    assert "96 a step" in note
    bf16 = gm.predict_inference("qwen3-30b-a3b", "a100", "decode", batch=4, context=2048,
                                runtime="hf-eager")  # fmt: skip
    assert not any(n.startswith("experts in") for n in bf16.notes)
