"""Audit item 1: a calibration from a trace of CUDA-graph replays priced every eager kernel at
one replay's host (1,260 us), so a 1 x 512 hf-static-compiled prefill (eager kernels) came out
at 1.76 s and a TinyLlama training step at 4.17 s.

The trace is real (validation/results/steps-h200-graph2-run2: HF + StaticCache +
torch.compile reduce-overhead, Llama-3-8B decode at batch 16 x 1024, 10.81 ms a step without
the profiler), with the host profile measured on the same VM. The expected times are the
committed measurements (steps-*.json), read here; the expected host per kernel is the host
profile's own figures, read from its file.
"""

from __future__ import annotations

import json
import statistics
from functools import cache
from pathlib import Path

import pytest
import yaml

import gpumodel as gm
from gpumodel.calibration import CalibrationError, read_calibration_file
from gpumodel.cli import main
from gpumodel.tracecal import calibrate_from_trace

RESULTS = Path(gm.__file__).parent.parent / "validation/results"
RUN = RESULTS / "steps-h200-graph2-run2"
TRACE = RUN / "trace-llama3-8b-static-decode-b16x1024.json.gz"
HOST = RUN / "host-static.yaml"
STEP = dict(model="llama-3-8b", batch=16, context=1024)


@cache
def graph_cal(named: bool = True) -> gm.Calibration:
    """The graph trace calibrated as a user with the traced machine's host profile does."""
    return calibrate_from_trace(TRACE, step_ms=10.81, host=str(HOST), **(STEP if named else {}))


def _medians(glob: str, keep) -> list[float]:
    """The committed steady-state medians (seconds) of the records ``keep`` accepts, over the
    H200 runs' files matching ``glob``."""
    out = []
    for path in sorted(RESULTS.glob(glob)):
        for r in json.loads(path.read_text())["records"]:
            if r.get("step_s") and keep(r):
                out.append(r["step_s"]["median"])
    return out


def test_the_replays_host_is_not_a_kernels():
    host = yaml.safe_load(HOST.read_text())
    per_kernel = host["hf_decoder_layer_s"] / host["hf_decoder_layer_kernels"]
    for named in (True, False):  # the families fitted by name or not: the host is the same
        fit = graph_cal(named).trace
        assert fit.runtime == "hf-static-compiled" and fit.graph_launches_per_step == 1
        # one replay a step: the trace's host a step (as profiled) is the replay's, the time of
        # a hundred eager kernels; it was the host per kernel
        assert fit.profiler.profiled_host_step_s > 100 * per_kernel
        assert fit.host_per_kernel_s == pytest.approx(per_kernel, rel=1e-9)
        assert fit.eager_host_from is not None and host["name"] in fit.eager_host_from
        assert any("times no eager kernel's host" in n for n in fit.notes)


def test_an_eager_prefill_priced_with_the_graph_calibration_is_near_what_was_measured():
    """hf-static-compiled prefills uncompiled: 1,397 eager kernels. Measured on 25 H200 VMs
    at 20.7-50.2 ms (median of medians ~24 ms); priced at one replay's host per kernel it was
    1.76 s."""
    measured = statistics.median(_medians(
        "steps-h200-run*/steps-static.json",
        lambda r: r["runtime"] == "hf-static-compiled" and r["phase"] == "prefill"
        and r["batch"] == 1 and r["seq"] == 512))  # fmt: skip
    pred = gm.predict_inference("llama-3-8b", "h200", "prefill", batch=1, seq=512,
                                runtime="hf-static-compiled", calibration=graph_cal())  # fmt: skip
    # the shipped calibration with the typical host misses these by 0-15%; 25% is that and
    # the spread of the VMs' hosts (their p10 and p90 differ by 2x)
    assert pred.time_s == pytest.approx(measured, rel=0.25)


def test_a_training_step_priced_with_the_graph_calibration_is_near_what_was_measured():
    """TinyLlama-1.1B amp, batch 2 x 2,048: 100-108 ms on the H200 VMs; 4.17 s before."""
    measured = statistics.median(_medians(
        "steps-h200-run*/steps-train.json",
        lambda r: r["workload"] == "tinyllama-1.1b" and r.get("policy") == "amp"
        and r["batch"] == 2 and r["seq"] == 2048))  # fmt: skip
    pred = gm.predict_training_step("tinyllama-1.1b", "h200", 1, micro_batch=2,
                                    global_batch=2, seq=2048, policy="amp", fusion="unfused",
                                    recompute="none", calibration=graph_cal())  # fmt: skip
    assert pred.time_s == pytest.approx(measured, rel=0.15)


def test_the_graph_decode_points_measured_beside_the_trace_still_price_right():
    """The decode steps the trace's runtime replays (its other points, steps-static.json):
    the graph calibration prices them from the kernels it fitted and the graph's host."""
    doc = json.loads((RUN / "steps-static.json").read_text())
    points = [r for r in doc["records"] if r.get("step_s") and not r.get("traced")]
    assert len(points) == 3
    for r in points:
        pred = gm.predict_inference("llama-3-8b", "h200", "decode", batch=r["batch"],
                                    context=r["context"], runtime="hf-static-compiled",
                                    calibration=graph_cal())  # fmt: skip
        assert pred.time_s == pytest.approx(r["step_s"]["median"], rel=0.1), r["batch"]


def test_a_graph_calibration_written_before_the_fix_is_refused(tmp_path):
    """Its host per kernel is a replay's and says nothing to tell it apart but the missing
    eager_host_from: loading it is one line that says to calibrate again, not a 1.76 s prefill."""
    good = tmp_path / "g.yaml"
    graph_cal().save(good)
    data = yaml.safe_load(good.read_text().split("\nmeasurements:")[0])
    fit = data["trace"]
    fit.pop("eager_host_from")
    fit["host_per_kernel_s"] = fit["profiler"]["host_step_s"]  # what the old code stored
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(data) + "measurements: []\n# end of gpumodel calibration\n")
    with pytest.raises(CalibrationError, match="calibrate from the trace again") as info:
        read_calibration_file(old)
    assert "\n" not in str(info.value)
    assert read_calibration_file(good).trace.eager_host_from  # the new file loads


def test_cli_says_where_the_eager_host_came_from(capsys, tmp_path):
    out = tmp_path / "g.yaml"
    rc = main(["calibrate", "--trace", str(TRACE), "--host", str(HOST), "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0
    line = next(x for x in text.splitlines() if x.strip().startswith("host per step:"))
    assert "1 graph replay" in line and "eager kernels" in line
    assert "host per issued kernel" not in text
