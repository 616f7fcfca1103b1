"""validation/experiments/llm_device.py without a GPU: kernel classes, summaries, predictions, report."""

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
        "llm_device", ROOT / "validation" / "experiments" / "llm_device.py"
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


def test_host_split_from_two_depths(bench):
    # 4 and 8 layers: 181 and 341 kernels; 5.0 and 9.0 ms -> 4 ms / 160 kernels = 25 us per
    # kernel, 5.0 ms - 181 x 25 us = 0.475 ms per step
    h = bench.host_split({"kernels": [181, 341], "host_issue_s": [5.0e-3, 9.0e-3]})
    assert h["per_kernel_s"] == pytest.approx(25e-6)
    assert h["per_step_s"] == pytest.approx(0.475e-3)
    assert h["split"] == "two depths"
    # 4.0 and 9.0 ms: 31.25 us per kernel would leave a negative per-step time -> one depth
    h = bench.host_split({"kernels": [181, 341], "host_issue_s": [4.0e-3, 9.0e-3]})
    assert h["per_step_s"] == 0 and h["per_kernel_s"] == pytest.approx(4.0e-3 / 181)
    assert h["split"].startswith("one depth")


def test_replica_point_pools_before_and_after(bench):
    class Fake:
        depths = (4, 8)

        def __init__(self):
            self.calls = []

        def issue(self, depth, path, batch, n):
            self.calls.append(depth)
            return {4: [5e-3, 5.2e-3], 8: [9e-3]}[depth] if len(self.calls) < 3 else [5.4e-3]

        def modelled_kernels(self, depth, path, batch, n):
            return {4: 181, 8: 341}[depth]

    fake = Fake()
    ref = bench.measure_replica_point(fake, "decode", 1, 128)
    ref = bench.finish_replica_point(fake, ref, "decode", 1, 128)
    assert fake.calls == [4, 8, 4]  # L before, 2L, then L after the full-width point
    assert ref["host_issue_L_before_s"] == pytest.approx(5.1e-3)
    assert ref["host_issue_L_after_s"] == 5.4e-3
    assert ref["host_issue_s"] == [pytest.approx(5.2e-3), 9e-3]  # median of 5.0, 5.2, 5.4
    assert ref["per_kernel_s"] == pytest.approx(3.8e-3 / 160)


def test_stream_floor_from_the_norm_graph(bench):
    assert bench.stream_floor({}) is None
    g = {"rmsnorm_graph": {"hidden": 4096, "repeats": 20, "replay_s": 400e-6}}
    assert bench.stream_floor(g) == pytest.approx(400e-6 / 160)  # 8 kernels x 20 norms
    g["rmsnorm_graph"]["profiled_kernels"] = 200
    assert bench.stream_floor(g) == pytest.approx(2e-6)


def _result(bench, rows, host):
    return {
        "environment": {"device": "H100", "gpu_id": "h100-sxm", "torch": "2.11", "cuda": "13.0",
                        "transformers": "5.17", "date": "today", "calibration": "none"},
        "host": host,
        "diagnostics": {"gemm_n": 8192, "gemm_bf16_efficiency": 0.79, "weight_linear_s": 6e-5,
                        "weight_linear_bandwidth_efficiency": 0.5, "copy_bytes": 1e9,
                        "copy_bandwidth_efficiency": 0.88, "sdpa_causal_gqa_4096_efficiency": None},
        "model": _spec().model_dump(mode="json"),
        "errors": ["prefill 8x1024: OOM"],
        "wall_s": 30.0,
        **{k: rows.get(k, []) for k in bench.PHASES},
    }  # fmt: skip


def test_predictions_use_the_replica_host_and_report(bench):
    gpu = get_gpu("h100-sxm")
    ref = bench.host_split({"depths": [4, 8], "kernels": [181, 341],
                            "host_issue_s": [6.0e-3, 10.8e-3], "host_issue_L_before_s": 6.0e-3,
                            "host_issue_L_after_s": 6.1e-3})  # fmt: skip
    profile = {"kernels": 202, "library_internal_kernels": 20, "memcpy_events": 0,
               "gpu_busy_s": 1.4e-3,
               "by_category_s": {"gemm": 1.1e-3, "attention": 2e-5, "other": 2.8e-4},
               "top_kernels": [{"name": "nvjet", "calls": 29, "total_s": 1.1e-3}]}  # fmt: skip
    dec = {"batch": 8, "context": 512, "median_s": 6.4e-3, "p90_s": 6.5e-3, "host_issue_s": 6.1e-3,
           "host_ref": ref, "profile": profile,
           "gemm_measured_s": {"lm_head": 2e-3, "q_proj": 2e-5}}  # fmt: skip
    graph = {"batch": 1, "context": 1024, "median_s": 2e-3, "p90_s": 2.1e-3, "profile": None}
    host = {"aten_op_host_s": 9e-6, "graph_kernel_gpu_s": 1e-6,
            "rmsnorm_graph": {"hidden": 4096, "repeats": 20, "replay_s": 400e-6,
                              "profiled_kernels": 160},
            "tiny_reference": [{"when": "start", "step_s": 4.6e-3, "host_issue_s": 4.5e-3},
                               {"when": "after profiling", "step_s": 6e-3, "host_issue_s": 6e-3}],
            "replica": {"hidden": 256, "ffn": 512, "vocab": 512, "layers": [4, 8], "heads": 32,
                        "kv_heads": 8, "head_dim": 128, "reps": 15},
            "attribution": {"SDPA enable_gqa, no mask (full b1 c1024)":
                            {"host_s": 3e-5, "backend": "CUDNN_ATTENTION"}},
            "calibration_launch_host_s": None}  # fmt: skip
    r = _result(bench, {"decode": [dec], "decode_graph": [graph]}, host)
    bench.add_predictions(r, _spec(), gpu, None)
    # the replicas' host: per step + 181 kernels x per kernel = their 6.0 ms at depth L
    assert dec["pred_host_s"] == pytest.approx(6.0e-3)
    assert dec["pred_host_per_kernel_s"] == pytest.approx(4.8e-3 / 160)
    assert dec["pred_kernels"] == 181 and dec["pred_bound"] == "host"
    assert dec["pred_stream_floor_s"] == pytest.approx(2.5e-6) == r["stream_floor_s"]
    # host-bound: the step is the host time plus the GPU tail (final norm, LM head)
    assert 6.0e-3 < dec["pred_calibrated_s"] < 6.0e-3 + 0.5e-3
    # measured GEMMs replace the model's: the 2 ms LM head lengthens the step by ~1.7 ms
    assert dec["pred_measured_gemms_s"] > dec["pred_calibrated_s"] + 1.5e-3
    # the measured-host diagnostic runs on the step's own 6.1 ms
    assert dec["pred_measured_host_s"] > 6.1e-3
    assert dec["err_calibrated_pct"] == pytest.approx(
        100 * (dec["pred_calibrated_s"] - 6.4e-3) / 6.4e-3
    )
    assert "pred_isolated_floor_s" in dec and "pred_measured_host_s" not in graph
    assert r["fit"]["fitted"] == [] and r["fit"]["held_out"] == 2
    text = bench.report(r)
    assert (
        "| decode | calibrated | 1 |" in text and "| decode | measured gemms (diagnostic) |" in text
    )
    assert "## Decode, HF StaticCache replayed from a CUDA graph" in text
    assert "| 8 | 512 | 6.400 ms |" in text and "202 (182 HF)/181" in text
    assert "in-stream floor 2.50 us per kernel" in text
    assert "start 4.500 ms, after profiling 6.000 ms" in text
    assert "| decode | 8 | 512 | 6.000 ms / 6.100 ms | 10.800 ms | 181/341 |" in text
    assert "[CUDNN_ATTENTION]: 30.00 us" in text
    assert "## GEMMs alone" in text and "2000 / " in text  # LM head: measured 2000 us
    assert "- prefill 8x1024: OOM" in text


def test_rereport_of_a_first_run_file(bench, tmp_path):
    # a file of the first layout: no replicas, one tiny-model host cost per kernel
    dec = {"batch": 1, "context": 128, "median_s": 7.8e-3, "p90_s": 8e-3, "host_issue_s": 7.5e-3,
           "pred_calibrated_s": 1.0, "err_calibrated_pct": 5.0}  # fmt: skip
    host = {"aten_op_host_s": 9e-6, "graph_kernel_gpu_s": 1e-6, "host_per_kernel_s": 25e-6,
            "tiny_model_decode_step_s": 4.6e-3, "tiny_model_decode_by_batch": [],
            "calibration_launch_host_s": 4.6e-6}  # fmt: skip
    r = _result(bench, {"decode": [dec]}, host)
    r["model"] = {k: v for k, v in r["model"].items() if k != "sources"}
    src = tmp_path / "old.json"
    src.write_text(__import__("json").dumps(r))
    args = type(
        "A", (), {"from_file": str(src), "gpu": None, "calibration": None, "floor": "stream"}
    )()
    assert bench.rereport(args, tmp_path) == 0
    new = __import__("json").loads((tmp_path / "measurements.json").read_text())
    row = new["decode"][0]
    assert row["pred_host_per_kernel_s"] == pytest.approx(25e-6) and row["pred_host_per_step_s"] == 0
    assert row["pred_calibrated_s"] != 1.0 and row["host_source"].startswith("tiny model")
    assert "pred_isolated_floor_s" not in row  # no norm graph in that run: isolated floors
    assert "Re-reported" in (tmp_path / "report.md").read_text()
