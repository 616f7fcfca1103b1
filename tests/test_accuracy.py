"""gpumodel.accuracy: every prediction says how wrong predictions like it measured.

The table's figures are recomputed here from the committed raw measurements (two classes, with
numpy's statistics rather than the table script's), so a model or calibration change that leaves
the table stale fails; the lookups are checked against the table's own entries."""

from __future__ import annotations

import glob
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gpumodel as gm
from gpumodel import _paths
from gpumodel.accuracy import TABLE_FILE, _table, kernel_classes, parallel_layout, step_class

ROOT = Path(__file__).resolve().parents[1]
DOWN_PROJ = gm.ops.Gemm(m=64, n=4096, k=14336, dtype="bf16", transpose_b=True)


@pytest.fixture(scope="module")
def table():
    data = _table()
    assert data is not None, f"validation/results/{TABLE_FILE} is missing"
    return data


def entry(table, kind, cls, gpu, cal, condition="in-workload", host=False):
    return table["index"][(kind, cls, gpu, cal, condition, host)]


def test_the_table_was_scored_with_the_shipped_calibrations(table):
    for gpu in ("h100-sxm", "h200-sxm"):
        shipped = gm.load_calibration(str(_paths.results_dir() / gpu / "calibration.yaml"))
        assert table["calibrations"][gpu]["created"] == shipped.created.isoformat(), (
            f"{gpu}'s shipped calibration changed: write the table again "
            "(validation/unseen/accuracy_table.py)")  # fmt: skip


def _recompute(ev, gpu, cal, keep):
    """|error| and signed error of every unseen kernel record of ``gpu`` that ``keep`` selects,
    predicted as evaluate.py predicts it without a host profile."""
    errors = []
    for path in sorted(glob.glob(str(ROOT / "validation/results/unseen-*/unseen.json"))):
        data = json.loads(Path(path).read_text())
        if ev.gpu_id_of(data.get("env") or {}) != gpu:
            continue
        for rec in data["records"]:
            if rec.get("time_s_median") and keep(rec):
                pred = ev._predict_kernel_bare(rec, ev.kernel_op(rec), gpu, cal)
                errors.append(pred / rec["time_s_median"] - 1)
    return np.array(errors)


def test_a_copy_class_recomputed_from_the_raw_measurements(ev, table):
    """H100 host copies, wall clock (what the user times), the H100's own calibration."""
    cal = ev.calibration("h100-sxm")
    errors = _recompute(ev, "h100-sxm", cal, lambda r: r["family"] == "copy"
                        and r["condition"] == "per-call-wall")  # fmt: skip
    e = entry(table, "kernel", "host_transfer", "h100-sxm", "own")
    assert len(errors) == e["n"] > 100
    assert 100 * np.median(np.abs(errors)) == pytest.approx(e["median_abs_pct"], abs=0.01)
    assert 100 * np.percentile(np.abs(errors), 90) == pytest.approx(e["p90_abs_pct"], abs=0.01)
    assert 100 * np.median(errors) == pytest.approx(e["bias_pct"], abs=0.01)


def test_a_gemm_class_recomputed_from_the_raw_measurements(ev, table):
    """fp8 GEMMs at M <= 128 on the H200 with the H100's calibration carried over, in-workload
    loops the GPU set the pace of (the launch-bound ones are the host's, priced with host=)."""
    cal = ev.calibration("h200-sxm", "h100-sxm")
    errors = _recompute(ev, "h200-sxm", cal, lambda r: r["family"] == "gemm"
                        and r["dtype"] == "fp8_e4m3" and r["shape"]["M"] <= 128
                        and r["condition"] == "in-workload" and not r.get("launch_bound"))  # fmt: skip
    e = entry(table, "kernel", "gemm:fp8:m<=128", "h200-sxm", "from h100-sxm")
    assert len(errors) == e["n"] >= 20
    assert 100 * np.median(np.abs(errors)) == pytest.approx(e["median_abs_pct"], abs=0.01)
    assert 100 * np.percentile(np.abs(errors), 90) == pytest.approx(e["p90_abs_pct"], abs=0.01)


def test_classes_most_specific_first():
    assert kernel_classes(DOWN_PROJ) == ["gemm:bf16:m<=128", "gemm:bf16", "gemm"]
    lm_head = gm.ops.Gemm(m=8, n=50257, k=768, dtype="fp16", transpose_b=True)
    assert kernel_classes(lm_head)[0] == "gemm:misaligned"
    copy = gm.ops.HostTransfer(bytes=4096, direction="d2h", pinned=False)
    assert kernel_classes(copy) == ["host_transfer:d2h:pageable", "host_transfer"]
    assert kernel_classes(gm.ops.Elementwise(op="add", n=1 << 20)) == []
    assert step_class("hf-eager", "decode") == "hf-eager decode"
    assert step_class("hf-eager", "train", "amp") == "train amp"
    assert step_class("hf-eager", "train", "bf16", "fsdp 2") == "train bf16, fsdp 2"


def test_multi_gpu_layouts_by_name():
    assert parallel_layout() == ""
    assert parallel_layout(tp=2) == "tp 2"
    assert parallel_layout(dp=2) == "ddp 2"  # ZeRO 0: PyTorch DDP
    assert parallel_layout(dp=4, zero=3) == "fsdp 4"
    assert parallel_layout(dp=2, zero=1) is None  # ZeRO-1: no set measured it
    assert parallel_layout(tp=2, pp=2) is None
    assert parallel_layout(tp=2, dp=2) is None


def test_a_kernel_prediction_carries_its_class(table):
    p = gm.predict(DOWN_PROJ, "h100")
    e = entry(table, "kernel", "gemm:bf16:m<=128", "h100-sxm", "own")
    assert p.accuracy.basis == "unseen"
    assert (p.accuracy.median_abs_pct, p.accuracy.n) == (e["median_abs_pct"], e["n"])
    assert "M <= 128" in p.accuracy.what and "expected error" in p.explain()
    iso = gm.predict(DOWN_PROJ, "h100", condition="isolated").accuracy
    assert iso.median_abs_pct == entry(table, "kernel", "gemm:bf16:m<=128", "h100-sxm", "own",
                                       "isolated")["median_abs_pct"]  # fmt: skip
    # carried to the H200: the rows scored with the H100's calibration on H200 measurements
    carried = gm.load_calibration("h100", for_gpu="h200-sxm")
    h200 = gm.predict(DOWN_PROJ, "h200", carried).accuracy
    e = entry(table, "kernel", "gemm:bf16:m<=128", "h200-sxm", "from h100-sxm")
    assert (h200.measured_on, h200.median_abs_pct) == ("h200-sxm", e["median_abs_pct"])


def test_no_error_is_claimed_without_measurements():
    assert gm.predict(DOWN_PROJ, "a100").accuracy is None  # carried across a generation
    assert gm.predict(DOWN_PROJ, "h100", "none").accuracy is None  # the datasheet alone
    assert gm.predict(DOWN_PROJ, "h100", l2="dirty").accuracy is None  # no set's L2 state
    # an eager loop priced on a shipped host: the sets timed loops against their own machine's
    # profile, and the GPU-paced figures do not hold for a host-priced call
    assert gm.predict(DOWN_PROJ, "h100", host="typical").accuracy is None
    mine = gm.load_host("typical").model_copy(update={"name": "measured-vm-1"})
    hosted = gm.predict(DOWN_PROJ, "h100", host=mine).accuracy
    assert "host profile measured beside it" in hosted.what
    assert "not measured" in gm.predict(DOWN_PROJ, "a100").explain()


def test_your_own_calibration_reports_its_held_out_error():
    shipped = gm.load_calibration("h100")
    own = shipped.model_copy(update={"created": shipped.created.replace(year=2031)})
    acc = gm.predict(DOWN_PROJ, "h100", own).accuracy
    held = shipped.errors["gemm (all shapes)"]
    assert acc.basis == "held-out"
    assert (acc.median_abs_pct, acc.p90_abs_pct, acc.n) == (
        held.median_abs_pct, held.p90_abs_pct, held.n)  # fmt: skip
    norm = gm.predict(gm.ops.RMSNorm(rows=4096, hidden=4096), "h100", own).accuracy
    assert norm.median_abs_pct == shipped.errors["layer/RMS norm, softmax"].median_abs_pct


def test_steps_carry_their_runtime_and_host(table):
    r = gm.predict_inference("llama-3-8b", "h100", batch=8, context=2048, runtime="hf-eager")
    e = entry(table, "step time", "hf-eager decode", "h100-sxm", "own")
    assert (r.accuracy.median_abs_pct, r.accuracy.n) == (e["median_abs_pct"], e["n"])
    # a profile measured on the machine (any but the shipped reference): the "+ host" figures
    mine = gm.load_host("reference-h100").model_copy(update={"name": "measured-vm-1"})
    hosted = gm.predict_inference("llama-3-8b", "h100", batch=8, context=2048,
                                  runtime="hf-eager", host=mine).accuracy  # fmt: skip
    assert hosted.median_abs_pct == entry(table, "step time", "hf-eager decode", "h100-sxm",
                                          "own", host=True)["median_abs_pct"]  # fmt: skip
    assert "host measured" in r.accuracy.hint  # the reference host: measuring yours helps
    first = gm.predict_inference("llama-3-8b", "h100", batch=8, context=2048, runtime="hf-eager",
                                 new_shapes=True).accuracy  # fmt: skip
    assert "new KV lengths" in first.what
    # no H100 pair measured tensor-parallel decode: nothing claimed
    assert gm.predict_inference("llama-3-8b", "h100", gpus=2, tp=2, batch=8, context=2048,
                                runtime="fused-graph").accuracy is None  # fmt: skip
    t = gm.predict_training_step("gpt2-small", "h100", 1, micro_batch=4, global_batch=4, seq=1024,
                                 fusion="unfused", recompute="none", policy="amp")  # fmt: skip
    assert t.accuracy.what.startswith("train amp")
    assert t.memory_accuracy.median_abs_pct == entry(table, "step peak memory", "train amp",
                                                     "h100-sxm", "own")["median_abs_pct"]  # fmt: skip
    fused = gm.predict_training_step("gpt2-small", "h100", 1, micro_batch=4, global_batch=4,
                                     seq=1024, recompute="none", policy="amp")  # fmt: skip
    assert fused.accuracy is None  # the sets time eager HF steps, not a fused engine's


def test_the_cli_shows_and_exports_it():
    run = [sys.executable, "-m", "gpumodel", "predict", "gemm", "--m", "64", "--n", "4096",
           "--k", "14336", "--gpu", "h100,a100"]  # fmt: skip
    out = subprocess.run(run, capture_output=True, text=True, check=True).stdout
    row = next(line for line in out.splitlines() if line.startswith("expected error"))
    assert "unseen" in row and row.rstrip().endswith("-")  # the A100: none measured
    data = json.loads(subprocess.run([*run[:-1], "h100", "--json"], capture_output=True,
                                     text=True, check=True).stdout)  # fmt: skip
    assert data["accuracy"]["basis"] == "unseen"


def _tp_decode_records():
    for path in sorted(glob.glob(str(ROOT / "validation/results/steps-h200x2-*/steps-*.json"))):
        for rec in json.loads(Path(path).read_text())["records"]:
            if (rec.get("tp", 1) == 2 and rec["status"] == "ok" and rec["phase"] == "decode"
                    and rec["runtime"] == "fused-graph"):  # fmt: skip
                yield rec


def test_a_multi_gpu_class_recomputed_from_the_raw_measurements(table):
    """Tensor-parallel (tp 2) fused-graph decode on 2 x H200, the H200's own calibration, no host
    profile: every run's records predicted here through the public API (not evaluate.py), each
    measured step the median of its timed steps, the slowest GPU's."""
    errors = []
    for rec in _tp_decode_records():
        if rec["context"] > gm.get_model(rec["workload"]).max_context:
            continue  # refused (Llama-3-70B at 16k: the engine ran it past the model's 8192)
        r = gm.predict_inference(rec["workload"], "h200", gpus=2, tp=2, batch=rec["batch"],
                                 context=rec["context"], runtime="fused-graph")  # fmt: skip
        errors.append(r.time_s / rec["step_s"]["median"] - 1)
    e = entry(table, "step time", "fused-graph decode, tp 2", "h200-sxm", "own")
    assert len(errors) == e["n"] >= 20
    assert 100 * np.median(np.abs(errors)) == pytest.approx(e["median_abs_pct"], abs=0.01)
    # a prediction at tp 2 reports that class; the one-GPU class no longer holds its points
    got = gm.predict_inference("llama-3-8b", "h200", gpus=2, tp=2, batch=8, context=2048,
                               runtime="fused-graph").accuracy  # fmt: skip
    assert (got.median_abs_pct, got.n) == (e["median_abs_pct"], e["n"])
    one_gpu = [rec for path in glob.glob(str(ROOT / "validation/results/steps-h200-*/steps-*.json"))
               for rec in json.loads(Path(path).read_text())["records"]
               if (rec["runtime"], rec["phase"], rec["status"]) == ("fused-graph", "decode", "ok")
               and rec.get("gpus", 1) == 1]  # fmt: skip
    one = entry(table, "step time", "fused-graph decode", "h200-sxm", "own")
    assert one["n"] == len(one_gpu) > 0
    fsdp = gm.predict_training_step("tinyllama-1.1b", "h200", 2, micro_batch=2, global_batch=4,
                                    seq=2048, zero=3, fusion="unfused", recompute="none",
                                    policy="bf16").accuracy  # fmt: skip
    assert fsdp.what.startswith("train bf16, fsdp 2")
    zero1 = gm.predict_training_step("tinyllama-1.1b", "h200", 2, micro_batch=2, global_batch=4,
                                     seq=2048, zero=1, fusion="unfused", recompute="none",
                                     policy="bf16").accuracy  # fmt: skip
    assert zero1 is None


def test_a_gemm_dtype_nothing_timed_quotes_no_error():
    """No unseen set nor validate times an int8 product: its prediction quoted the pooled
    'GEMMs of every dtype' figure (4.3%); it now says 'not measured'."""
    op = gm.ops.Gemm(m=8192, n=8192, k=8192, dtype="int8")
    assert gm.predict(op, "h100").accuracy is None
    assert gm.predict(op.model_copy(update={"dtype": "bf16"}), "h100").accuracy is not None
