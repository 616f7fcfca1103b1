"""benchmarks/llm_device.py without a GPU: kernel classes, summaries, predictions, report."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from gpumodel.llm import get_model
from gpumodel.llm.models import ModelSpec
from gpumodel.specs import get_gpu

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location(
        "llm_device", ROOT / "benchmarks" / "llm_device.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules["llm_device"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_kernel_classes(bench):
    kc = bench.kernel_category
    assert kc("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3") == "attention"
    assert kc("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128>>") == "attention"
    assert kc("nvjet_tst_64x24_64x16_4x1_v_bz_splitK_TNT") == "gemm"
    assert kc("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64") == "gemm"
    assert kc("void gemv2T_kernel_val<int, int, __nv_bfloat16>") == "gemm"
    assert kc("void at::native::(anonymous namespace)::CatArrayBatchedCopy_alignedK_contig") == (
        "other"
    )
    assert kc("Memcpy HtoD (Pageable -> Device)") == "memcpy"


def test_profile_summary(bench):
    s = bench.profile_summary([("nvjet_tst_a", 3e-6), ("nvjet_tst_a", 5e-6), ("flash_fwd", 2e-6),
                               ("elementwise_kernel", 1e-6), ("Memset (Device)", 1e-6)])  # fmt: skip
    assert s["kernels"] == 4 and s["memcpy_events"] == 1
    assert s["gpu_busy_s"] == pytest.approx(11e-6)
    assert s["by_category_s"] == pytest.approx({"gemm": 8e-6, "attention": 2e-6, "other": 1e-6})
    assert s["top_kernels"][0] == {
        "name": "nvjet_tst_a",
        "calls": 2,
        "total_s": pytest.approx(8e-6),
    }
    assert bench.profile_summary(None) is None


def test_summary_statistics(bench):
    rows = [{"e": -10.0}, {"e": 20.0}, {"e": -30.0}, {"e": None}]
    s = bench.summary(rows, "e")
    assert s["n"] == 3 and s["median_abs_pct"] == 20 and s["max_abs_pct"] == 30
    assert s["bias_pct"] == pytest.approx(-20 / 3)
    assert bench.summary([], "e") == {"n": 0}


def _spec():
    base = get_model("llama-3-8b").model_dump()
    return ModelSpec.model_validate({**base, "id": "llama-3-8b-4l", "layers": 4})


def test_predictor_and_report(bench):
    gpu = get_gpu("h100-sxm")
    predict = bench.Predictor(_spec(), gpu, None, 18e-6)
    gemms = {"lm_head": 2e-3, "q_proj": 2e-5}
    row = {"batch": 8, "context": 512, "median_s": 6e-3, "p90_s": 6.5e-3,
           "profile": {"kernels": 182, "memcpy_events": 0, "gpu_busy_s": 4e-3,
                       "by_category_s": {"gemm": 3e-3, "attention": 1e-4, "other": 9e-4},
                       "top_kernels": [{"name": "nvjet", "calls": 29, "total_s": 3e-3}]},
           **predict("decode", 8, 1, 512, gemm_times=gemms)}  # fmt: skip
    bench.add_errors(row)
    assert row["pred_host_per_kernel_s"] == 18e-6 and row["pred_kernels"] == 181
    # measured GEMMs replace the model's: the 2 ms LM head lengthens the step by ~1.7 ms
    assert row["pred_measured_gemms_s"] > row["pred_calibrated_s"] + 1.5e-3
    assert set(row["gemm_predicted_s"]) == set(gemms)
    assert row["err_calibrated_pct"] == pytest.approx(
        100 * (row["pred_calibrated_s"] - 6e-3) / 6e-3
    )
    graph = {"batch": 1, "context": 1024, "median_s": 2e-3, "p90_s": 2.1e-3, "profile": None,
             **predict("decode", 1, 1, 1024, runtime="graph", fusion="unfused",
                       kv_cache="static")}  # fmt: skip
    bench.add_errors(graph)
    rows = {"prefill": [], "decode": [row], "decode_static_eager": [], "decode_graph": [graph]}
    r = {
        "environment": {"device": "H100", "gpu_id": "h100-sxm", "torch": "2.11", "cuda": "13.0",
                        "transformers": "5.17", "date": "today", "calibration": "none"},
        "host": {"aten_op_host_s": 9e-6, "graph_kernel_gpu_s": 1e-6,
                 "tiny_model_decode_step_s": 3.3e-3, "tiny_model_predicted_kernels_decode": 181,
                 "tiny_model_profiled_kernels_decode": 182,
                 "tiny_model_predicted_kernels_prefill": 181,
                 "tiny_model_profiled_kernels_prefill": 186, "host_per_kernel_s": 18e-6,
                 "host_per_kernel_divisor": "profiled", "default_host_per_kernel_s": 17.9e-6,
                 "calibration_launch_host_s": None},
        "diagnostics": {"gemm_n": 8192, "gemm_bf16_efficiency": 0.79, "weight_linear_s": 6e-5,
                        "weight_linear_bandwidth_efficiency": 0.5, "copy_bytes": 1e9,
                        "copy_bandwidth_efficiency": 0.88, "sdpa_causal_gqa_4096_efficiency": None},
        "model": _spec().model_dump(mode="json"),
        "errors": ["prefill 8x1024: OOM"],
        "fit": {"fitted": ["host cost"], "held_out": 2, "note": "x"},
        "wall_s": 30.0,
        **rows,
        "summary": {k: {p: bench.summary(v, f"err_{p}_pct") for p in bench.PREDICTIONS}
                    for k, v in rows.items()},
    }  # fmt: skip
    text = bench.report(r)
    assert "| decode | calibrated | 1 |" in text and "| decode | measured gemms | 1 |" in text
    assert "## Decode, HF StaticCache replayed from a CUDA graph" in text
    assert "| 8 | 512 | 6.000 ms |" in text and "182/181" in text
    assert "## GEMMs alone" in text and "2000 / " in text  # LM head: measured 2000 us
    assert "- prefill 8x1024: OOM" in text
