"""Audit items 3 and 4: --step-ms values the trace says are impossible, and what the profiler
correction says it did with a GPU-bound one.

Before: --step-ms 0.0337 (seconds typed for 33.7 ms) took all of an eager decode trace's host
away and reported +31590%; 1e-300 printed a 300-digit percentage; 999999999 wrote a
calibration reporting -100%. A GPU-bound step said "default per-event cost" and used another
figure, and "the trace's host is kept" beside a host cut from 69 ms to the step.

Expected values are counted here from the trace JSON and the fixtures' planted step times.
"""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest

import gpumodel as gm
from gpumodel.cli import main
from gpumodel.tracecal import DEFAULT_PROFILER_EVENT_S, calibrate_from_trace

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
PLANTED = json.loads((FIXTURES / "planted_costs.json").read_text())
RESULTS = Path(gm.__file__).parent.parent / "validation/results"
EAGER = FIXTURES / "transformer_eager.json.gz"  # host-bound: 20.8 ms profiled, 13.2 unprofiled
DECODE = RESULTS / "steps-h100-run11/trace-llama3-8b-decode-eager.json.gz"


def _json(path: Path) -> tuple[list[dict], list[dict]]:
    """(the complete events, the ProfilerStep ranges) of a trace."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in ev if e.get("cat") == "user_annotation"
             and str(e.get("name", "")).startswith("ProfilerStep#")]  # fmt: skip
    return ev, steps


def _gpu_busy_ms(path: Path) -> float:
    """The GPU's busy time per profiled step: the union of its activities inside the steps."""
    ev, steps = _json(path)
    lo, hi = min(s["ts"] for s in steps), max(s["ts"] + s["dur"] for s in steps)
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev
                   if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and lo <= e["ts"] <= hi)  # fmt: skip
    busy, end = 0.0, float("-inf")
    for a, b in spans:
        busy += max(b - max(a, end), 0.0)
        end = max(end, b)
    return busy / 1e3 / len(steps)


def _cli(capsys, tmp_path, trace: Path, step_ms: str) -> tuple[int, str, str]:
    out = tmp_path / "c.yaml"
    rc = main(["calibrate", "--trace", str(trace), "--gpu", "h100", "--step-ms", step_ms,
               "--out", str(out)])  # fmt: skip
    cap = capsys.readouterr()
    if rc == 2:
        assert not out.exists()
    return rc, cap.out, cap.err.strip()


@pytest.mark.parametrize("factor", [0.5, 1e-3, 1e-300])
def test_a_step_shorter_than_its_kernels_is_refused(factor, capsys, tmp_path):
    step_ms = factor * _gpu_busy_ms(EAGER)
    rc, _, err = _cli(capsys, tmp_path, EAGER, f"{step_ms:g}")
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err
    assert "shorter than the traced step's kernels" in err and "milliseconds" in err
    assert len(err) < 400  # no 300-digit percentage


def test_seconds_typed_for_milliseconds_are_named(capsys, tmp_path):
    seconds = PLANTED[EAGER.name]["step_ms"] / 1e3
    rc, _, err = _cli(capsys, tmp_path, EAGER, f"{seconds:g}")
    assert rc == 2 and f"({seconds:g} s is {seconds * 1e3:g} ms)" in err


@pytest.mark.parametrize("factor", [11, None])
def test_a_step_far_longer_than_the_profiled_one_is_refused(factor, capsys, tmp_path):
    _, steps = _json(EAGER)
    profiled_ms = statistics.median(s["dur"] for s in steps) / 1e3
    step = "999999999" if factor is None else f"{factor * profiled_ms:g}"  # (the audit's)
    rc, _, err = _cli(capsys, tmp_path, EAGER, step)
    assert rc == 2 and len(err.splitlines()) == 1
    assert "the traced step" in err and "only slows a step" in err


def test_step_times_the_trace_allows_still_calibrate(capsys, tmp_path):
    """The planted unprofiled step, and one twice the profiled step (a drifting host: said,
    not refused)."""
    for step_ms in (PLANTED[EAGER.name]["step_ms"], 2 * PLANTED[EAGER.name]["profiled_step_ms"]):
        rc, out, err = _cli(capsys, tmp_path, EAGER, f"{step_ms:g}")
        assert rc == 0, err
    assert "drifting host" in out


def test_a_gpu_bound_step_says_which_figure_it_removed():
    """The H100 eager decode trace: 69 ms of host a step under the profiler, ~11 ms of kernels.
    --step-ms 11 is GPU-bound: the host is cut to fit under it (more than the default cost per
    event removes), and the lines say so: the three figures the removal is the largest of, the
    default cost among them at its documented 3.68 us, and no "kept"."""
    _, steps = _json(DECODE)
    profiled_ms = statistics.median(s["dur"] for s in steps) / 1e3
    fit = calibrate_from_trace(DECODE, step_ms=11.0).trace
    p = fit.profiler
    excess = min(profiled_ms * 1e-3 - 11e-3, p.profiled_host_step_s)
    by_event = min(DEFAULT_PROFILER_EVENT_S * p.events_per_step, 0.9 * p.profiled_host_step_s)
    held = p.profiled_host_step_s - 11e-3
    assert p.removed_per_step_s == pytest.approx(max(excess, by_event, held), rel=1e-9)
    assert by_event < p.removed_per_step_s and p.host_step_s <= 11e-3 * (1 + 1e-9)
    for figure in (f"the profiled step's excess over it ({excess * 1e3:.3g} ms)",
                   f"default per-event cost ({DEFAULT_PROFILER_EVENT_S * 1e6:.3g} us an event: "
                   f"{by_event * 1e3:.3g} ms)",
                   f"what holds the host under the step ({held * 1e3:.3g} ms)"):  # fmt: skip
        assert figure in p.method
    host_notes = [n for n in fit.notes if n.startswith("host: --step-ms")]
    assert len(host_notes) == 1 and "cut to fit under the step time" in host_notes[0]
    assert "is kept" not in host_notes[0]


def test_a_gpu_bound_step_of_the_cost_per_event_says_so():
    """fp32_no_tf32 is GPU-bound and its host ran far ahead of the GPU (2.3 of 13.9 ms): the
    default cost per event is what comes off, at the figure the output names."""
    name = "fp32_no_tf32.json.gz"
    ev, steps = _json(FIXTURES / name)
    lo, hi = min(s["ts"] for s in steps), max(s["ts"] + s["dur"] for s in steps)
    events = sum(1 for e in ev if e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver")
                 and lo <= e["ts"] <= hi) / len(steps)  # fmt: skip
    fit = calibrate_from_trace(FIXTURES / name, gpu="h100",
                               step_ms=PLANTED[name]["step_ms"]).trace  # fmt: skip
    p = fit.profiler
    by_event = min(DEFAULT_PROFILER_EVENT_S * events, 0.9 * p.profiled_host_step_s)
    assert p.removed_per_step_s == pytest.approx(by_event, rel=1e-9)
    assert f"{DEFAULT_PROFILER_EVENT_S * 1e6:.3g} us an event" in p.method
