"""Audit item 2: a trace of CUDA-graph replays records no shapes, so the user names the step it
ran (--model --batch --context --phase). Named wrong, it was fitted anyway: the static decode
trace called a prefill fitted its GEMMs at x0.015 and said the fitted model took 1.76 s for a
13.2 ms step; --batch 99999 fitted x0.003. Such a fit is refused, naming the likely argument.

The traces are the committed graph traces (validation/results), each named as its steps file
records the traced point.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import pytest

import gpumodel as gm
from gpumodel.cli import main
from gpumodel.tracecal import SELF_CHECK_FACTOR, calibrate_from_trace
from gpumodel.tracegraph import DESCRIBED_STEP_FACTOR

RESULTS = Path(gm.__file__).parent.parent / "validation/results"
STATIC = RESULTS / "steps-h200-graph2-run2/trace-llama3-8b-static-decode-b16x1024.json.gz"
GRAPH_RUNS = ("steps-h200-fused-run1", "steps-h200-fused-run2", "steps-h200-fused-run3",
              "steps-h200-graph2-run1", "steps-h200-graph2-run2", "steps-h200-moe-train-run2",
              "steps-h200-moe-train-run4")  # fmt: skip


def _traced_points() -> list[tuple[Path, dict, float]]:
    """(trace, traced point, its measured median ms) of every graph trace of GRAPH_RUNS."""
    out = []
    for run in GRAPH_RUNS:
        for path in sorted((RESULTS / run).glob("steps-*.json")):
            doc = json.loads(path.read_text())
            for t in doc.get("traces", []):
                point = t["point"]
                rec = next(r for r in doc["records"] if r.get("traced")
                           and all(r[k] == v for k, v in point.items()))  # fmt: skip
                out.append((path.parent / t["file"], point, rec["step_s"]["median"] * 1e3))
    return out


POINTS = _traced_points()


@cache
def _named_right(i: int, base: str | None) -> gm.Calibration:
    trace, point, step_ms = POINTS[i]
    return calibrate_from_trace(trace, model=point["workload"], batch=point["batch"],
                                context=point["context"], phase=point["phase"],
                                step_ms=step_ms, calibration=base)  # fmt: skip


def test_every_committed_graph_trace_is_found():
    assert len(POINTS) == len(GRAPH_RUNS)


@pytest.mark.parametrize("base", [None, "none"])
@pytest.mark.parametrize("i", range(len(GRAPH_RUNS)))
def test_a_graph_trace_named_right_still_calibrates(i, base):
    """Each committed graph trace named as recorded, on the shipped calibration and on the
    datasheet alone (what evaluate_traces.py scores), fits within the bounds."""
    fit = _named_right(i, base).trace
    fitted = [f for f in fit.families if f.fitted]
    assert fitted
    assert all(1 / DESCRIBED_STEP_FACTOR <= f.scale <= DESCRIBED_STEP_FACTOR for f in fitted)
    ratio = fit.self_check["step_predicted_s"] / fit.self_check["step_measured_s"]
    assert 1 / SELF_CHECK_FACTOR <= ratio <= SELF_CHECK_FACTOR


def _refused(capsys, tmp_path, *args: str) -> str:
    out = tmp_path / "c.yaml"
    rc = main(["calibrate", "--trace", str(STATIC), *args, "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "does not describe the traced step" in err
    assert not out.exists()
    return err


def test_a_decode_trace_named_a_prefill_is_refused_naming_the_phase(capsys, tmp_path):
    err = _refused(capsys, tmp_path, "--model", "llama-3-8b", "--batch", "16", "--context",
                   "1024", "--phase", "prefill")  # fmt: skip
    assert "check --phase: as a decode step they fit" in err


def test_an_absurd_batch_is_refused_naming_batch(capsys, tmp_path):
    err = _refused(capsys, tmp_path, "--model", "llama-3-8b", "--batch", "99999", "--context",
                   "1024")  # fmt: skip
    assert "--batch" in err.split("check", 1)[1]


def test_a_batch_16x_too_small_is_refused_naming_context_and_batch(capsys, tmp_path):
    """At batch 1 the model prices a 16th of the traced KV cache reads: the attention class
    fits x6-7 (its time is set by the batch x the KV length), outside 4x."""
    err = _refused(capsys, tmp_path, "--model", "llama-3-8b", "--batch", "1", "--context",
                   "1024")  # fmt: skip
    assert "attention kernels" in err and "check --context and --batch" in err


def test_another_model_is_refused_naming_model(capsys, tmp_path):
    """Llama-3-70B's weights are 8.7x Llama-3-8B's: its decode GEMMs stream that much more."""
    err = _refused(capsys, tmp_path, "--model", "llama-3-70b", "--batch", "16", "--context",
                   "1024")  # fmt: skip
    assert "gemm kernels" in err and "--model" in err.split("check", 1)[1]


def test_the_library_raises_the_same_one_line_error():
    with pytest.raises(gm.SpecError, match="does not describe the traced step"):
        calibrate_from_trace(STATIC, model="llama-3-8b", batch=16, context=1024, phase="prefill")
