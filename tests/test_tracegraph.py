"""``calibrate --trace`` on a trace of CUDA-graph replays, with the traced step named
(``--model --batch --context``): GEMM and attention kernels fitted by name.

The traces are real: validation/results/steps-h200-fused-run1 (the vLLM-style stand-in engine,
Llama-3-8B decode at batch 8 x context 2048, 3 profiled steps of one graph replay each) and
steps-h200-moe-train-run4 (HF + StaticCache + torch.compile reduce-overhead, Mixtral-8x7B at
batch 16 x 1024). The expected sums are counted here from the trace JSON, not by the code under
test.
"""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path

import pytest

import gpumodel as gm
from gpumodel.cli import main
from gpumodel.ops import Gemm
from gpumodel.tracecal import calibrate_from_trace
from gpumodel.tracegraph import kernel_class

RESULTS = Path(gm.__file__).parent.parent / "validation/results"
FUSED = RESULTS / "steps-h200-fused-run1/trace-llama3-8b-decode-fused.json.gz"
MIXTRAL = RESULTS / "steps-h200-moe-train-run4/trace-mixtral-8x7b-static-decode-b16x1024.json.gz"
FUSED_STEP = dict(model="llama-3-8b", batch=8, context=2048)


@cache
def fused_fit(step_ms: float | None = 5.37) -> gm.Calibration:
    return calibrate_from_trace(FUSED, step_ms=step_ms, **FUSED_STEP)


def _kernel_ms_per_step(path: Path, keep, cats=("kernel",)) -> float:
    """GPU time per profiled step of the ``cats`` events (kernels) whose names ``keep``
    accepts, from the JSON."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")]
    total = sum(e["dur"] for e in ev if e.get("cat") in cats and keep(e["name"]))
    return total / 1e3 / len(steps)


@pytest.mark.parametrize("name, cls", [
    ("nvjet_sm90_tst_128x8_64x12_2x1_v_bz_splitK_TNT", "gemm"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16>", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_tn_align1>(...)", "gemm"),
    ("_ZN7cutlass13device_kernelIN2at4cuda6detail25enable_3x_kernel_for_sm9xINS_4gemm6kernel13"
     "GemmUniversalINS5_17GroupProblemShapeIN4cute5tupleIJiiiEEEEE", "grouped_gemm"),
    ("void at::cuda::detail::prepare_grouped_gemm_data<cutlass::bfloat16_t>", "grouped_gemm"),
    ("void pytorch_flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128>>",
     "attention"),
    ("cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_35_16x", "attention"),
    # Inductor names its fusions after the ops whose inputs they prepare: still not attention
    ("triton_poi_fused__scaled_dot_product_cudnn_attention__to_copy__unsafe_view_5", "other"),
    ("fg_rmsnorm_kernel", "other"),
    ("void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>", "other"),
])  # fmt: skip
def test_graph_kernels_are_classed_by_name(name, cls):
    assert kernel_class(name) == cls


def test_a_fused_graph_trace_fits_its_gemm_and_attention_kernels():
    fit = fused_fit().trace
    assert fit.runtime == "fused-graph"
    fams = {f.key: f for f in fit.families}
    gemm_ms = _kernel_ms_per_step(FUSED, lambda n: "nvjet" in n or "splitKreduce" in n)
    attn_ms = _kernel_ms_per_step(FUSED, lambda n: "pytorch_flash" in n)
    assert fams["gemm/memory"].measured_s * 1e3 == pytest.approx(gemm_ms, rel=1e-9)
    (attn,) = [f for k, f in fams.items() if k.startswith("attention")]
    assert attn.measured_s * 1e3 == pytest.approx(attn_ms, rel=1e-9)
    assert all(f.fitted for f in fams.values())
    # GEMMs and attention are what a decode step's GPU time is: 92.6% of it in this trace
    total_ms = _kernel_ms_per_step(FUSED, lambda n: True, ("kernel", "gpu_memset"))
    assert fit.matched_fraction == pytest.approx((gemm_ms + attn_ms) / total_ms, rel=1e-6)
    # the scales are the model against the trace, stored for predict with their spans
    cal = fused_fit()
    scales = cal.parameters.family_time_scale
    assert scales["gemm/memory"] == pytest.approx(fams["gemm/memory"].scale)
    lo, hi = cal.parameters.family_time_scale_span_s["gemm/memory"]
    assert lo < hi  # the step's GEMMs span sizes from the small o_proj to the LM head
    # the remaining kernels (norms, RoPE, cache writes) are listed, not fitted
    assert {u["kernel"] for u in fit.unmatched} >= {"fg_rmsnorm_kernel", "fg_rope_kernel"}
    # the self-check is the whole step predicted with the fit, against --step-ms
    assert fit.self_check["error_pct"] == pytest.approx(
        100 * (fit.self_check["step_predicted_s"] / 5.37e-3 - 1)
    )
    whole = gm.predict_inference("llama-3-8b", "h200", batch=8, context=2048, calibration=cal)
    assert fit.self_check["step_predicted_s"] == pytest.approx(whole.time_s)


def test_the_fit_reaches_predict_inside_the_traced_sizes_only():
    cal = fused_fit()
    decode = gm.predict_inference("llama-3-8b", "h200", batch=8, context=2048, calibration=cal)
    assert decode.runtime == "fused-graph"  # the trace's runtime, said in the notes
    scale = cal.parameters.family_time_scale["gemm/memory"]
    # the traced step's o_proj (8 x 4096 x 4096): inside the span, the whole scale
    o_proj = Gemm(m=8, n=4096, k=4096, transpose_b=True)
    pred, base = gm.predict(o_proj, "h200", cal), gm.predict(o_proj, "h200")
    assert pred.time_s == pytest.approx(base.time_s * scale, rel=1e-6)
    assert any(t.name == "trace-fitted family scale" for k in pred.kernels for t in k.terms)
    # a prefill's GEMM is compute-bound, a key the decode trace did not fit: untouched
    prefill = Gemm(m=8192, n=14336, k=4096, transpose_b=True)
    assert gm.predict(prefill, "h200", cal).time_s == pytest.approx(
        gm.predict(prefill, "h200").time_s, rel=1e-12
    )


def test_a_compiled_moe_trace_fits_dense_and_grouped_gemms_apart():
    fit = calibrate_from_trace(MIXTRAL, model="mixtral-8x7b", batch=16, context=1024).trace
    assert fit.runtime == "hf-static-compiled"
    fams = {f.key: f for f in fit.families}
    grouped_ms = _kernel_ms_per_step(
        MIXTRAL, lambda n: "GroupProblemShape" in n or "prepare_grouped_gemm" in n
    )
    assert fams["grouped_gemm/memory"].measured_s * 1e3 == pytest.approx(grouped_ms, rel=1e-9)
    dense = [f for k, f in fams.items() if k.startswith("gemm/")]
    assert dense and all(f.measured_s < 0.1 * fams["grouped_gemm/memory"].measured_s
                         for f in dense)  # fmt: skip
    assert fit.matched_fraction > 0.85


def test_without_the_step_a_graph_trace_fits_no_family_and_says_what_to_pass():
    fit = calibrate_from_trace(FUSED, step_ms=5.37).trace
    assert not any(f.fitted for f in fit.families)
    assert any("give the traced step's batch and context" in n for n in fit.notes)


def test_an_eager_trace_ignores_the_step_flags_with_a_note():
    eager = RESULTS / "steps-h200-run4/trace-llama3-8b-decode-eager.json.gz"
    fit = calibrate_from_trace(eager, model="llama-3-8b", batch=8, context=2048).trace
    assert fit.runtime == "hf-eager"
    assert any(n.startswith("--batch/--context ignored") for n in fit.notes)


@pytest.mark.parametrize("extra, message", [
    (["--batch", "8"], "--batch and --context go together"),
    (["--batch", "8", "--context", "2048"], "pass --model"),
    (["--model", "llama-3-8b", "--batch", "0", "--context", "2048"], "batch must be"),
    (["--model", "llama-3-8b", "--batch", "8", "--context", "2048", "--phase", "train"],
     "phase must be one of"),
    (["--phase", "prefill"], "--phase goes with --batch and --context"),
    (["--phase", "train"], "phase must be one of"),
])  # fmt: skip
def test_bad_step_flags_exit_2_with_one_line(extra, message, capsys, tmp_path):
    rc = main(["calibrate", "--trace", str(FUSED), "--out", str(tmp_path / "c.yaml"), *extra])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "c.yaml").exists()


def test_the_phase_is_checked_at_the_boundary():
    """Found by fuzz seed 50: a phase that is not a string was accepted when no step was given."""
    for bad in (object(), 3, "train"):
        with pytest.raises(gm.SpecError):
            calibrate_from_trace(FUSED, phase=bad)


def test_cli_fits_the_graph_and_infer_uses_the_file(capsys, tmp_path):
    out = tmp_path / "fused.yaml"
    rc = main(["calibrate", "--trace", str(FUSED), "--model", "llama-3-8b", "--batch", "8",
               "--context", "2048", "--step-ms", "5.37", "--out", str(out)])  # fmt: skip
    text = capsys.readouterr().out
    assert rc == 0 and "gemm/memory" in text and "graph, not fitted" in text
    rc = main(["infer", "--model", "llama-3-8b", "--gpu", "h200", "--batch", "32",
               "--context", "4096", "--calibration", str(out)])  # fmt: skip
    assert rc == 0 and "fused-graph" in capsys.readouterr().out


def test_a_tensor_parallel_graph_trace_is_not_fitted_as_one_gpu():
    """steps-h200x2-multi-gpu-run1: one rank of Llama-3-8B decode at tp 2, its all-reduces in
    the graph. Priced as one GPU its GEMMs would be twice the traced ones: no family is fitted,
    and the note says why."""
    path = RESULTS / "steps-h200x2-multi-gpu-run1/trace-llama-3-8b-decode-tp2.json.gz"
    fit = calibrate_from_trace(path, model="llama-3-8b", batch=8, context=2048).trace
    assert not any(f.fitted for f in fit.families)
    assert any("tensor-parallel" in n for n in fit.notes)


def test_a_prefill_step_prices_its_prompt_as_seq_and_context():
    """--phase prefill: the traced step is `batch` prompts of `context` tokens. Pricing the
    fused decode trace as a 1 x 512 prefill is a wrong naming on purpose: it must price (the
    model's prefill GEMMs are compute-bound, far from the trace's), not fail on seq > context."""
    prefill = calibrate_from_trace(FUSED, model="llama-3-8b", batch=1, context=512,
                                   phase="prefill").trace  # fmt: skip
    decode = calibrate_from_trace(FUSED, model="llama-3-8b", batch=1, context=512).trace
    assert any("prefill batch 1 x context 512" in n for n in prefill.notes)

    def gemm_s(fit):
        return next(f.predicted_s for f in fit.families if f.key.startswith("gemm/"))

    # 512 tokens through 8 B parameters: 8.2 TFLOP, over 10 ms at the H200's ~700 TFLOP/s
    # sustained, against one token's weight stream (16 GB at under 4.8 TB/s: over 3.3 ms)
    assert gemm_s(prefill) > 10e-3 and 3.3e-3 < gemm_s(decode) < 6e-3
