"""validation/unseen/evaluate.py: the error arithmetic and the record -> op mapping (CPU only)."""

from __future__ import annotations

import json
import math

import pytest

import gpumodel as gm


def test_error_statistics_by_hand(ev):
    # measured 1, 2, 4 ms; predicted 1.1, 1.0, 4.0 ms -> errors +10%, -50%, 0%
    rows = [
        {"g": "a", "error": ev.rel_error(p, m)}
        for p, m in ((1.1e-3, 1e-3), (1e-3, 2e-3), (4e-3, 4e-3))
    ]
    assert [r["error"] for r in rows] == pytest.approx([0.1, -0.5, 0.0])
    s = ev.score(rows, lambda r: (r["g"],))[("a",)]
    assert s["n"] == 3
    assert s["median_abs"] == pytest.approx(0.1)
    # p90 of |err| sorted (0, 0.1, 0.5): position 0.9 * 2 = 1.8 -> 0.1 + 0.8 * (0.5 - 0.1) = 0.42
    assert s["p90_abs"] == pytest.approx(0.42)
    assert s["median_signed"] == pytest.approx(0.0)


def test_rows_without_error_are_left_out(ev):
    rows = [{"g": "a", "error": 0.2}, {"g": "a", "error": None}, {"g": "b", "error": -0.3}]
    table = ev.score(rows, lambda r: (r["g"],))
    assert table[("a",)]["n"] == 1 and table[("b",)]["median_abs"] == pytest.approx(0.3)


def test_rel_error_rejects_nonpositive_measurement(ev):
    with pytest.raises(ValueError):
        ev.rel_error(1.0, 0.0)
    with pytest.raises(ValueError):
        ev.rel_error(1.0, math.nan)


def _records() -> list[dict]:
    gemm = {"family": "gemm", "op": "torch.matmul", "shape": {"M": 64, "N": 50257, "K": 768},
            "dtype": "bf16", "layout": "x@W.T", "condition": "isolated"}  # fmt: skip
    fp8 = {"family": "gemm", "op": "torch._scaled_mm", "shape": {"M": 4096, "N": 4096, "K": 4096},
           "dtype": "fp8_e4m3", "layout": "x@W.T", "condition": "do_bench"}  # fmt: skip
    copy = {"family": "copy", "op": "Tensor.to('cuda')", "shape": {"bytes": 2**20},
            "dtype": "uint8", "layout": "contiguous", "direction": "h2d", "host_memory": "pinned",
            "condition": "per-call"}  # fmt: skip
    return [gemm, fp8, copy]


def test_kernel_records_map_to_gpumodel_ops(ev):
    gemm, fp8, copy = (ev.kernel_op(r) for r in _records())
    assert (gemm.m, gemm.n, gemm.k, gemm.dtype) == (64, 50257, 768, "bf16")
    assert fp8.dtype == "fp8"
    assert (copy.bytes, copy.direction, copy.pinned) == (2**20, "h2d", True)


def test_evaluate_kernels_end_to_end(ev, tmp_path):
    # measured = exactly twice the datasheet prediction of the same op -> error -50% on each record
    recs = _records()
    for r in recs:
        r["time_s_median"] = 2 * gm.predict(ev.kernel_op(r), "h100-sxm", "none", l2="cold").time_s
    path = tmp_path / "unseen.json"
    path.write_text(json.dumps({"env": {"gpu": "NVIDIA H100 80GB HBM3"}, "records": recs}))
    rows = ev.evaluate_kernels([path], lambda gpu: [("datasheet", "none")])
    assert len(rows) == 3 and all(r["gpu"] == "h100-sxm" for r in rows)
    assert [r["error"] for r in rows] == pytest.approx([-0.5, -0.5, -0.5])
    groups = {g for r in rows for g in r["done_when"]}
    assert {"GEMM M<=128 bf16", "GEMM misaligned N or K (50257, 1025, 2049, 4097)", "GEMM fp8",
            "copy 4KB-1GB h2d pinned"} <= groups  # fmt: skip


def test_cli_missing_file_exits_2(ev, tmp_path, capsys):
    code = ev.main(["--out", str(tmp_path / "x.md"), "--kernels", str(tmp_path / "nope.json"),
                    "--steps"])  # fmt: skip
    assert code == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert not (tmp_path / "x.md").exists()


def test_evaluate_steps_end_to_end(ev, tmp_path):
    # each row's error = (the prediction for the runtime the evaluator passed) / measured - 1
    dec = {"workload": "llama-3-8b", "runtime": "hf-eager", "phase": "decode", "policy": "bf16",
           "batch": 8, "seq": 2048, "context": 2048, "status": "ok", "step_s": {"median": 0.05}}  # fmt: skip
    pre = {"workload": "llama-3-8b", "runtime": "hf-static-compiled", "phase": "prefill",
           "policy": "bf16", "batch": 1, "seq": 512, "context": 0, "status": "ok",
           "step_s": {"median": 0.04}}  # fmt: skip
    path = tmp_path / "steps-x.json"
    path.write_text(json.dumps({"env": {"gpu": "NVIDIA H100 80GB HBM3"}, "records": [dec, pre]}))
    rows = ev.evaluate_steps([path], lambda gpu: [("datasheet", "none")])
    assert len(rows) == 2
    # HF runs a static-cache prefill uncompiled: never described as a CUDA graph
    assert rows[0]["runtime_passed"] in ("hf-eager", "eager")
    assert rows[1]["runtime_passed"] in ("hf-static-compiled", "eager")
    fn = gm.predict_inference
    t_dec = fn("llama-3-8b", "h100-sxm", phase="decode", batch=8, context=2048, dtype="bf16",
               runtime=rows[0]["runtime_passed"], calibration="none", kv_cache="concat").step_time_s  # fmt: skip
    t_pre = fn("llama-3-8b", "h100-sxm", phase="prefill", batch=1, seq=512, dtype="bf16",
               runtime=rows[1]["runtime_passed"], calibration="none", kv_cache="static").step_time_s  # fmt: skip
    assert rows[0]["predicted"] == pytest.approx(t_dec)
    assert rows[1]["predicted"] == pytest.approx(t_pre)
    assert [r["error"] for r in rows] == pytest.approx([t_dec / 0.05 - 1, t_pre / 0.04 - 1])
    assert "decode hf-eager" in rows[0]["done_when"]


def test_range_table_counts_steps_inside_the_host_drift_range(ev):
    """Two of three decode steps inside their predicted range (one at its edge counts), one
    above; rows without a range are left out."""
    base = {"gpu": "h100-sxm", "calibration": "own", "metric": "time",
            "done_when": ["decode hf-eager"]}  # fmt: skip
    rows = [dict(base, measured=0.030, range=(0.025, 0.040)),
            dict(base, measured=0.040, range=(0.025, 0.040)),
            dict(base, measured=0.055, range=(0.025, 0.040)),
            dict(base, measured=0.050, range=None)]  # fmt: skip
    text = ev.range_table(rows)
    assert "| h100-sxm | own | decode hf-eager | time | 3 | 2 | 67% |" in text
    assert ev._range_text(rows[2], lambda v: f"{v * 1e3:.1f}", " ms") == "25.0-40.0 ms (out)"
    assert "no prediction gave a range" in ev.range_table(rows[3:])
