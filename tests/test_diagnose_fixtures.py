"""gpumodel diagnose on real traces of planted problems, recorded on an H100.

``validation/experiments/record_traces.py`` recorded each ``tests/fixtures/traces/*.json.gz`` with a planted
problem and measured what the problem cost per step (the same loop without it) into
``planted_costs.json``. Here, on the CPU: each planted problem must be found, and the time the
findings named in ``findings`` recover must be within 20% of the measured cost (issue 7). An
entry may ask for less (a smaller ``tolerance``), never for more: the looser 35% once recorded
for the fusion problem is not needed (the chain estimate lands within ~11%).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from gpumodel.diagnose import DiagnoseReport, diagnose

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
COSTS = FIXTURES / "planted_costs.json"
NOT_RECORDED = "fixtures not recorded yet (run validation/experiments/record_traces.py on a GPU)"
TOLERANCE = 0.2  # the "within 20% of the time it actually cost"


def _planted() -> dict[str, dict[str, Any]]:
    if not COSTS.exists():
        return {}
    data = json.loads(COSTS.read_text())
    return {k: v for k, v in data.items() if not k.startswith("_")}


def _recorded() -> list[Any]:
    """(trace file, entry) for every trace that was recorded and is present."""
    out = [
        pytest.param(name, entry, id=name.removesuffix(".json.gz"))
        for name, entry in sorted(_planted().items())
        if "skipped" not in entry and (FIXTURES / name).exists()
    ]
    return out or [pytest.param(None, None, marks=pytest.mark.skip(reason=NOT_RECORDED))]


def _problems() -> list[Any]:
    out = []
    for p in _recorded():
        name, entry = p.values
        if name is None:
            return [p]
        for prob in entry.get("problems", []):
            out.append(pytest.param(name, entry, prob,
                                    id=f"{name.removesuffix('.json.gz')}-{prob['problem']}"))  # fmt: skip
    return out or [pytest.param(None, None, None, marks=pytest.mark.skip(reason=NOT_RECORDED))]


@cache
def report(name: str, step_ms: float | None = None) -> DiagnoseReport:
    return diagnose(FIXTURES / name, step_ms=step_ms)


def _recovered_ms(rep: DiagnoseReport, kinds: list[str]) -> float:
    return sum((f.recoverable_s or 0.0) for f in rep.findings if f.kind in kinds) * 1e3


def _summary(rep: DiagnoseReport) -> str:
    return "; ".join(f"{f.kind} {(f.recoverable_s or 0) * 1e3:.3f} ms" for f in rep.findings)


def _unprofiled_cost_ms(entry: dict[str, Any], problem: dict[str, Any]) -> float | None:
    """What the planted problem cost per step without the profiler (the loop with and without
    it, timed with CUDA events, unprofiled). Recorded for the entry's main problem; a kernel
    problem beside it (the fusion chain) costs GPU time, which the profiler does not change."""
    if problem["problem"] == entry["problem"]:
        return entry.get("cost_unprofiled_ms_per_step")
    return problem.get("cost_ms_per_step")


def _check_cost(name: str, rep: DiagnoseReport, problem: dict[str, Any], cost: float) -> None:
    got = _recovered_ms(rep, problem["findings"])
    tol = min(problem.get("tolerance", TOLERANCE), TOLERANCE)
    assert abs(got - cost) <= tol * abs(cost), (
        f"{name}: {'+'.join(problem['findings'])} recovers {got:.3f} ms/step, the planted "
        f"{problem['problem']} cost {cost:.3f} ms/step without the profiler (tolerance "
        f"{tol:.0%}); findings: {_summary(rep)}"
    )


@pytest.mark.parametrize(("name", "entry", "problem"), _problems())
def test_planted_problem_is_found_and_quantified(name, entry, problem):
    """Given the step time the run measured without the profiler (``--step-ms``, as a user
    reads it from their logs), the findings recover what the problem cost without it: the
    launch-bound fixture's 17.7 ms a step under the profiler was 10.1 ms without it."""
    rep = report(name, entry["step_ms"])
    kind = problem["problem"]
    assert rep.finding(kind) is not None, f"{kind} not found in {name}: {_summary(rep)}"
    cost = _unprofiled_cost_ms(entry, problem)
    if cost is None:  # the baseline could not be run at record time: detection is all there is
        return
    # the step loses at most its idle time: a GPU-bound step keeps its kernels (lm_head: 18.62
    # ms traced, 18.56 ms timed without the profiler)
    assert rep.steps.unprofiled_step_time_s * 1e3 == pytest.approx(entry["step_ms"], rel=0.01)
    _check_cost(name, rep, problem, cost)


@pytest.mark.parametrize(("name", "entry", "problem"), _problems())
def test_planted_problem_without_the_step_time(name, entry, problem):
    """From the trace alone the profiler's cost is estimated (recorded events x the default
    cost per event), and the findings still land within 20% of the unprofiled cost. (The
    default cost per event was measured on the launch-bound fixture, so for that one this
    checks the bookkeeping; the step-time test above is its independent check.)"""
    rep = report(name)
    cost = _unprofiled_cost_ms(entry, problem)
    if cost is None:
        return
    assert rep.profiler is not None and "default per-event cost" in rep.profiler.method
    _check_cost(name, rep, problem, cost)


def test_the_profiled_launch_gaps_overstate_the_saving():
    """Under the profiler the launch-bound fixture's gaps came to 17.7 ms a step; without it
    the same problem cost 10.1 ms. The finding and its Amdahl speed-up are the unprofiled
    step's: 13.2 ms -> ~3.2 ms (the CUDA-graph run's time), not 20.8 -> 3.2."""
    entry = _planted()["transformer_eager.json.gz"]
    rep = report("transformer_eager.json.gz", entry["step_ms"])
    f = rep.finding("launch_bound")
    assert f is not None and f.recoverable_s * 1e3 < 0.8 * entry["cost_ms_per_step"]
    assert f.step_time_if_fixed_s * 1e3 == pytest.approx(entry["extra"]["timings"]["graph"]["median_ms"], rel=0.2)
    assert any("profiler's own host cost" in e for e in f.evidence)


@pytest.mark.parametrize(("name", "entry"), _recorded())
def test_step_time_matches_the_recorded_run(name, entry):
    """The window diagnose analyses gives the step period CUDA events measured in that run."""
    rep = report(name)
    measured = entry["profiled_step_ms"]
    assert rep.steps.source == "ProfilerStep" and rep.steps.count == entry["steps"]
    assert rep.steps.step_time_s * 1e3 == pytest.approx(measured, rel=0.1)


@pytest.mark.parametrize(("name", "entry"), _recorded())
def test_every_step_is_charged_the_same_work(name, entry):
    """GPU work is charged to the step that launched it, whatever its GPU time: each op runs
    the same number of times in every profiled step, and the warm-up step's tail (on the GPU
    when profiling began, its launches not recorded) is left out, not charged to step 1."""
    rep = report(name)
    n = rep.steps.count
    assert all(r.count % n == 0 for r in rep.ops), [
        (r.name, r.phase, r.count) for r in rep.ops if r.count % n
    ]


@pytest.mark.parametrize(("name", "entry"), _recorded())
def test_findings_stay_within_the_step(name, entry):
    """No finding returns less than nothing or more than the step; Amdahl agrees with them."""
    rep = report(name)
    step = rep.steps.step_time_s
    assert step > 0 and rep.steps.window_s > 0 and rep.steps.periods == entry["steps"] - 1
    for f in rep.findings:
        assert f.recoverable_s is not None and 0.0 <= f.recoverable_s <= step, f.kind
        assert f.step_time_if_fixed_s is not None and 0.0 <= f.step_time_if_fixed_s <= step
    a = rep.amdahl
    assert (
        0.0
        <= a.all_fixed_step_time_s
        <= min((e.step_time_s for e in a.per_finding), default=step) + 1e-12
    )
    assert all(r.recoverable_s >= 0.0 for r in rep.ops)


@pytest.mark.parametrize(("name", "entry"), _recorded())
def test_fixture_is_small_and_mostly_mapped(name, entry):
    assert (FIXTURES / name).stat().st_size < 3 << 20
    rep = report(name)
    assert rep.gpu.source == "trace" and rep.source.record_shapes
    if "compiled" not in name:  # Inductor's Triton kernels carry no shapes
        t = rep.totals
        assert t.mapped_measured_s >= 0.7 * t.measured_s, (
            f"{name}: only {t.mapped_measured_s / t.measured_s:.0%} of GPU time mapped; unmapped: "
            + ", ".join(f"{r.name} ({r.reason})" for r in rep.ops if not r.mapped)
        )


def test_misaligned_vocab_names_the_padding():
    entry = _planted().get("lm_head_50257.json.gz")
    if entry is None or not (FIXTURES / "lm_head_50257.json.gz").exists():
        pytest.skip(NOT_RECORDED)
    f = report("lm_head_50257.json.gz").finding("misaligned_matmul")
    assert f is not None and "50257 -> 50304" in f.title


def test_controls_show_less_of_the_problem():
    """torch.compile cuts launch overhead and fuses chains; vocabulary 50304 is aligned."""
    planted = _planted()
    checked = 0
    for name, entry in planted.items():
        of = entry.get("control_of")
        if not of or "skipped" in entry or not (FIXTURES / name).exists():
            continue
        if not (FIXTURES / of).exists():
            continue
        bad, good = report(of), report(name)
        kinds = [k for p in planted[of].get("problems", []) for k in p["findings"]]
        assert _recovered_ms(good, kinds) < _recovered_ms(bad, kinds), (
            f"{name} should show less {kinds} than {of}: {_summary(good)} vs {_summary(bad)}"
        )
        checked += 1
    if not checked:
        pytest.skip(NOT_RECORDED)
