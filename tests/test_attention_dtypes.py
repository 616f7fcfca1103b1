"""Which attention kernels take which dtypes, and how an fp32 (or 8-bit) model's attention is
priced: SDPA's own rules (sdp_utils.cpp), the memory-efficient kernel's 3xTF32 products,
measured against an H200 (validation/results/h200-sxm/sdpa-dtypes-2026-11-30)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import gpumodel as gm
from gpumodel._paths import results_dir, validation_dir
from gpumodel.errors import SpecError
from gpumodel.llm.layers import model_ops
from gpumodel.ops import Attention
from gpumodel.ops.attention import FAST_F32_WORK_FACTOR, IMPL_DTYPES

FIT_SET = results_dir() / "h200-sxm" / "sdpa-dtypes-2026-11-30" / "sdpa-dtypes.json"
GQA_FIT_SET = results_dir() / "h200-sxm" / "sdpa-gqa-fp32-2026-11-30" / "sdpa-gqa-fp32.json"


@pytest.mark.parametrize(("impl", "dtype"), [
    ("flash", "fp32"), ("flash", "tf32"), ("cudnn", "fp32"), ("cudnn", "fp64"),
    ("efficient", "fp64"), ("flash", "int8"), ("cudnn", "fp8"), ("efficient", "fp4"),
    ("naive", "int8"),
])  # fmt: skip
def test_a_kernel_never_takes_a_dtype_sdpa_refuses(impl, dtype):
    with pytest.raises(SpecError, match=f"impl={impl} takes .* tensors only") as err:
        Attention(seq=512, dtype=dtype, impl=impl)
    assert "\n" not in str(err.value)


def test_sdpa_refused_fp32_on_flash_and_cudnn_where_the_rule_says_so():
    """The fit-set run asked for flash and cuDNN with fp32 tensors at each shape: PyTorch
    refused every call, as ``IMPL_DTYPES`` does; its default dispatch ran xFormers' fp32 kernel."""
    records = json.loads(FIT_SET.read_text())["records"]
    refused = [r for r in records if "expected refusal" in r["mode"]]
    assert len(refused) == 20 and all("No available kernel" in r["error"] for r in refused)
    assert "fp32" not in IMPL_DTYPES["flash"] + IMPL_DTYPES["cudnn"]
    defaults = [r for r in records if r["mode"].startswith("fp32 default")]
    assert len(defaults) == 20
    assert all(r["kernels"][0].startswith("fmha_cutlassF_f32_") for r in defaults)


def test_wide_dtypes_default_to_the_kernel_sdpa_runs():
    assert Attention(seq=512, dtype="fp32").impl == "efficient"
    assert Attention(seq=512, dtype="tf32").impl == "efficient"
    assert Attention(seq=512, dtype="fp64").impl == "naive"
    assert Attention(seq=512, dtype="bf16").impl == "sdpa"  # per GPU: test_sdpa_dispatch.py
    assert Attention(seq=512, dtype="fp32", impl="naive").impl == "naive"  # named: kept


def test_fp32_products_run_as_tf32_on_the_tensor_cores_and_sol_counts_them_once():
    op = Attention(batch=2, heads=8, seq=1024, head_dim=128, dtype="fp32")
    mm = 4 * 2 * 8 * 1024 * 1024 * 128  # QK^T and PV, not causal
    p = gm.predict(op, "h100", "none")
    # head dim 128: the forward's 64 x 128 kernel prices the factor; the prediction reports
    # each product once
    work = sum(f.flops for f in op.kernels(gm.get_gpu("h100"))[0].flops if f.unit == "tensor")
    assert work == pytest.approx(FAST_F32_WORK_FACTOR["forward wide"] * mm)
    assert p.flops_by_unit["tensor:tf32"] == pytest.approx(mm)
    assert "vector:fp32" in p.flops_by_unit  # the softmax stays on the FP32 lanes
    # the speed of light: each product once at the TF32 peak at the max clock (H100: 494.7
    # TFLOP/s datasheet at 1.83 GHz -> x 1.98 / 1.83 at the max boost clock)
    sol = gm.speed_of_light(op, "h100")
    tensor = next(t for t in sol.kernels[0].terms if t.name == "compute roof (tensor tf32)")
    roof = 4096 / 2 * 132 * 1.98e9  # TF32: half of the 4096 dense 16-bit FLOP/clk/SM
    assert tensor.value == pytest.approx(mm / roof, rel=1e-3)
    backward = op.model_copy(update={"backward": True})
    work = sum(f.flops for f in backward.kernels(gm.get_gpu("h100"))[0].flops if f.unit == "tensor")
    assert work == pytest.approx(FAST_F32_WORK_FACTOR["backward"] * 2.5 * mm)
    assert gm.predict(backward, "h100", "none").flops_by_unit["tensor:tf32"] == pytest.approx(2.5 * mm)


def test_tf32_and_fp32_run_the_same_kernel():
    """The memory-efficient kernel ignores torch's TF32 switch: the fit set's default calls ran
    0.0-1.0% apart with it on and off, so tf32 and fp32 attention are priced alike."""
    records = json.loads(FIT_SET.read_text())["records"]
    by = {(json.dumps(r["shape"]), r["causal"], r["mode"]): r["forward_s"] for r in records
          if "forward_s" in r}  # fmt: skip
    gaps = [abs(by[(s, c, "fp32 default tf32")] / t - 1)
            for (s, c, m), t in by.items() if m == "fp32 default"]  # fmt: skip
    assert len(gaps) == 10 and max(gaps) < 0.011
    op = Attention(batch=4, heads=16, seq=2048, head_dim=64, dtype="fp32")
    assert gm.predict(op, "h200").time_s == pytest.approx(
        gm.predict(op.model_copy(update={"dtype": "tf32"}), "h200").time_s)  # fmt: skip


def test_no_fp32_fit_point_beats_its_speed_of_light():
    records = json.loads(FIT_SET.read_text())["records"]
    points = 0
    for r in records:
        if r["mode"] not in ("fp32 efficient", "bf16 efficient"):
            continue
        op = Attention(**r["shape"], causal=r["causal"], dtype=r["dtype"], impl="efficient")
        assert gm.speed_of_light(op, "h200").time_s <= r["forward_s"]
        bwd = op.model_copy(update={"backward": True})
        assert gm.speed_of_light(bwd, "h200").time_s <= r["forward_backward_s"] - r["forward_s"]
        points += 1
    assert points == 20


def test_shipped_fp32_work_factors_are_the_fits_choice():
    """validation/fitset/fit_attention_fp32.py refits both factors on the fit set (the ratio of
    fp32 to bf16 time of the same shape) and exits 0 only if they are the shipped ones."""
    script = validation_dir() / "fitset" / "fit_attention_fp32.py"
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_an_8_bit_model_runs_attention_and_its_cache_in_bf16():
    spec = gm.llm.get_model("llama-3-8b")
    ops = model_ops(spec, 8, 1, 2048, dtype="fp8", fusion="fused", kv_cache="static")
    by = {e.name: e.op for e in ops.layer}
    assert by["qkv_proj"].dtype == "fp8" and by["down_proj"].dtype == "fp8"
    assert by["attention"].dtype == "bf16" and by["kv_cache_write"].dtype == "bf16"
    assert ops.post[-1].op.dtype == "fp8"  # the LM head
    assert any("attention, the KV cache" in n for n in ops.notes)
    # the KV cache: 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 bytes x 2048 x batch 8
    mem = gm.llm.memory("llama-3-8b", "h100", batch=8, seq=2048, dtype="fp8")
    assert mem.kv_cache_bytes == pytest.approx(2 * 32 * 8 * 128 * 2 * 2048 * 8)
    fp8_kv = gm.llm.memory("llama-3-8b", "h100", batch=8, seq=2048, dtype="fp8", kv_dtype="fp8")
    assert fp8_kv.kv_cache_bytes == pytest.approx(mem.kv_cache_bytes / 2)
    # the weights: the GEMMs' at 1 byte, the embedding table (128256 x 4096) and the norms
    # (65 of 4096: two a layer and the final one) at 2, as every command counts them
    other = 128256 * 4096 + 65 * 4096
    assert mem.weights_bytes == pytest.approx((8_030_261_248 - other) * 1 + other * 2)
    infer = gm.predict_inference("llama-3-8b", "h100", batch=8, context=2048, dtype="fp8")
    assert infer.weights_bytes == infer.memory.weights_bytes == mem.weights_bytes


def test_an_fp32_model_runs_the_memory_efficient_kernel_or_the_math_path():
    """Without grouped K/V heads (GPT-2) fp32 attention is the memory-efficient kernel; with
    them (Llama 3), passed to SDPA as such, the efficient kernel refuses (an H200: "No available
    kernel") and SDPA runs its math path: cuBLAS SGEMMs and softmax kernels."""
    records = json.loads(GQA_FIT_SET.read_text())["records"]
    gqa = [r for r in records if r["mode"] == "gqa"]
    assert len(gqa) == 4 and all(any("gemm_f32" in k for k in r["kernels"]) for r in gqa)
    assert not any("fmha" in k for r in gqa for k in r["kernels"])
    refused = [r for r in records if r["mode"] == "gqa efficient"]
    assert all("No available kernel" in r["error"] for r in refused)
    assert gm.predict_inference("gpt2", "h100", batch=2, context=1024, dtype="fp32").attention \
        == "efficient"  # fmt: skip
    p = gm.predict_inference("llama-3-8b", "h100", batch=2, context=1024, dtype="fp32")
    assert p.attention == "math"
    spec = gm.llm.get_model("llama-3-8b")
    ops = model_ops(spec, 2, 8, 1024, dtype="fp32", attention="cudnn")
    names = [e.name for e in ops.layer]
    assert ops.attention == "math" and "attention" not in names
    assert {"sdpa_math_expand_kv", "sdpa_math_qk", "sdpa_math_softmax", "sdpa_math_pv"} <= set(names)
    qk = next(e.op for e in ops.layer if e.name == "sdpa_math_qk")
    assert (qk.m, qk.n, qk.k, qk.batch, qk.dtype) == (8, 1024, 128, 2 * 32, "fp32")


def test_the_math_paths_saved_tensors_are_what_an_h200_kept():
    """The fit-set run measured what autograd keeps after the math path's forward: the scaled
    q, K and V repeated to every head, and the probabilities (e.g. 159,383,552 B for 32 heads
    x 1024 x 1024, head dim 64, fp32). The memory model's math term keeps those and o_proj's
    input; without grouped heads it is the fused kernel's q, k, v, output and log-sum-exp."""
    from gpumodel.llm.memory import hf_eager_activation_bytes_per_token

    for r in (r for r in json.loads(GQA_FIT_SET.read_text())["records"] if r["mode"] == "gqa"):
        b, h, _, s, d = r["shape"]
        assert r["saved_bytes"] == b * h * s * s * 4 + 3 * b * h * s * d * 4
    spec = gm.llm.get_model("tinyllama-1.1b")  # 32 heads of 64, 4 K/V heads
    math = hf_eager_activation_bytes_per_token(spec, "fp32", math_seq=2048)
    fused = hf_eager_activation_bytes_per_token(spec, "fp32")
    q_n, kv_n = 32 * 64, 4 * 64
    assert math - fused == pytest.approx((4 * 4 * q_n + 4 * 32 * 2048)
                                         - (4 * (q_n + 2 * kv_n) + 4 * q_n + 4 * 32))  # fmt: skip


def test_cli_prices_fp32_attention_and_refuses_what_sdpa_refuses():
    def run(*args):
        return subprocess.run([sys.executable, "-m", "gpumodel", "predict", "attention",
                               "--seq", "1024", "--gpu", "h100", *args],
                              capture_output=True, text=True, timeout=120)  # fmt: skip

    ok = run("--dtype", "fp32")
    assert ok.returncode == 0 and "impl=efficient" in ok.stdout
    for args, why in ((("--dtype", "fp32", "--impl", "flash"), "takes fp16/bf16 tensors only"),
                      (("--dtype", "int8"), "no SDPA kernel takes 8- or 4-bit tensors")):
        bad = run(*args)
        assert bad.returncode == 2
        assert bad.stderr.count("\n") == 1 and why in bad.stderr


def test_fp32_attention_is_its_own_family_where_a_calibration_measured_it():
    """``gpumodel validate`` now times fp32 SDPA (the memory-efficient kernel): its family is
    ``attention:efficient:fp32``; a calibration without it prices the 16-bit kernel's family
    with the fitted work factor and says so."""
    from gpumodel.validate.families.attention import attention_points

    op = Attention(batch=4, heads=16, seq=2048, head_dim=64, dtype="fp32")
    assert op.family == "attention:efficient:fp32"
    assert op.model_copy(update={"backward": True}).family == "attention:efficient:fp32:backward"
    p = gm.predict(op, "h200")
    notes = [t.note for k in p.kernels for t in k.terms if t.name == "nearest calibrated family"]
    assert notes and "priced as attention:efficient" in notes[0]
    fp32 = [pt for pt in attention_points(False) if pt.dtype == "fp32"]
    assert len(fp32) == 10 and {pt.backend for pt in fp32} == {"efficient"}


def test_a_named_kernel_must_take_the_models_attention_dtype():
    """``attention=`` names a kernel: one that refuses the model's attention dtype is a one-line
    error, not silently another kernel; unnamed, the step runs what SDPA runs."""
    with pytest.raises(SpecError, match="attention=flash takes fp16/bf16 tensors") as err:
        gm.predict_inference("llama-3-8b", "h100", dtype="fp32", attention="flash")
    assert "\n" not in str(err.value)
    with pytest.raises(SpecError, match="attention=cudnn takes fp16/bf16"):
        gm.predict_training_step("gpt2", "h100", 1, dtype="fp32", policy="fp32",
                                 fusion="unfused", attention="cudnn")  # fmt: skip
    # an 8-bit model's attention is bf16: any 16-bit kernel may be named
    assert gm.predict_inference("llama-3-8b", "h100", dtype="fp8", attention="flash").attention \
        == "flash"  # fmt: skip
