"""Speed of light is a bound: no measured kernel, LLM step or profiled op beats it.

Every measured point committed under validation/results/ (the validate harness's raw
measurements, the conditions runs, the LLM inference and training-step measurements) and every
op of the diagnose fixtures (real torch.profiler traces from an H100) is checked against
``gpumodel.sol.speed_of_light``: measured >= speed of light. A calibrated *prediction* may be
slower than a measurement; the speed of light may not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import gpumodel as gm
from gpumodel.calibrate import points_from_records
from gpumodel.diagnose import diagnose
from gpumodel.llm.layers import model_ops
from gpumodel.llm.models import ModelSpec
from gpumodel.ops import from_row
from gpumodel.sol import l2_roof_bytes_per_s, max_clock_peak_flops, speed_of_light

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "validation" / "results"
TRACES = ROOT / "tests" / "fixtures" / "traces"


def _gpu_of(device_name: str) -> str:
    return "h200-sxm" if "H200" in device_name else "h100-sxm"


def _raw_files() -> list[Path]:
    return sorted(RESULTS.glob("**/raw-measurements*.json"))


def test_max_clock_roofs_by_hand():
    h100 = gm.get_gpu("h100-sxm")
    # 132 SMs x 4096 dense FP16 FLOP/clk (Hopper whitepaper) x 1.98 GHz = 1070.5 TFLOP/s, above
    # the datasheet's 989.4 (stated at ~1.83 GHz)
    assert max_clock_peak_flops(h100, "bf16", "tensor") == pytest.approx(132 * 4096 * 1.98e9)
    assert max_clock_peak_flops(h100, "fp8", "tensor") == pytest.approx(
        2 * 132 * 4096 * 1.98e9, rel=1e-4
    )
    assert max_clock_peak_flops(h100, "fp32", "vector") == pytest.approx(66.9e12)
    # A100: the datasheet peak already is at the max clock (108 x 2048 x 1.41 GHz = 311.9)
    a100 = gm.get_gpu("a100-sxm4-80gb")
    assert max_clock_peak_flops(a100, "bf16", "tensor") == pytest.approx(312e12, rel=1e-3)
    assert l2_roof_bytes_per_s(h100) == pytest.approx(132 * 128 * 1.98e9)


def test_sol_is_at_most_the_datasheet_roofline():
    for op in (gm.ops.Gemm(m=8192, n=8192, k=8192, dtype="bf16"), gm.ops.Elementwise(op="add",
               n=2**28, dtype="bf16")):  # fmt: skip
        sol = speed_of_light(op, "h100-sxm")
        assert 0 < sol.time_s <= gm.predict(op, "h100-sxm", "none").roofline_time_s


@pytest.mark.parametrize("path", _raw_files(), ids=lambda p: str(p.relative_to(RESULTS)))
def test_validate_measurements_never_beat_speed_of_light(path: Path):
    data = json.loads(path.read_text())
    gpu = _gpu_of(data["device"].get("device_name", ""))
    points, _ = points_from_records(data["records"])
    assert len(points) > 10
    worst = max(speed_of_light(p.op, gpu).time_s / p.measured_s for p in points)
    assert worst <= 1.0, f"{path}: a kernel ran at {100 * worst:.1f}% of its speed of light"


def test_conditions_measurements_never_beat_speed_of_light():
    files = sorted(RESULTS.glob("*/conditions*/conditions-measurements.json"))
    assert files
    for path in files:
        data = json.loads(path.read_text())
        gpu = _gpu_of(data["device"]["nvidia_smi"])
        for r in data["records"]:
            op = from_row(dict(r["op"]))
            ratio = speed_of_light(op, gpu).time_s / r["time_s"]
            assert ratio <= 1.0, f"{path}: {op.label()} {r['condition']} at {100 * ratio:.1f}%"


_SOURCE = [{"title": "the measured run's own model", "url": "validation/results"}]


def _llm_files() -> list[Path]:
    return sorted(RESULTS.glob("**/llm-measurements.json")) + sorted(
        RESULTS.glob("**/llm/measurements.json"))  # fmt: skip


def _step_sol(model: ModelSpec, gpu: str, batch: int, seq: int, context: int | None = None,
              logits: str = "last") -> float:  # fmt: skip
    ops = model_ops(model, batch, seq, context, logits=logits)  # type: ignore[arg-type]
    return sum(speed_of_light(o.op, gpu).time_s * o.count for o in ops.sequence())


@pytest.mark.parametrize("path", _llm_files(), ids=lambda p: str(p.relative_to(RESULTS)))
def test_llm_steps_never_beat_speed_of_light(path: Path):
    data = json.loads(path.read_text())
    gpu = _gpu_of(data["environment"].get("device", ""))
    model = ModelSpec.model_validate({**data["model"], "sources": _SOURCE})
    checked = 0
    for p in data["prefill"]:
        assert p["median_s"] >= _step_sol(model, gpu, p["batch"], p["seq"])
        checked += 1
    for p in data.get("decode", []):
        assert p["median_s"] >= _step_sol(model, gpu, p["batch"], 1, p["context"])
        checked += 1
    assert checked > 5


@pytest.mark.parametrize("path", sorted(RESULTS.glob("**/train*/**/measurements.json"))
                         + sorted(RESULTS.glob("**/training-step/**/measurements.json")),
                         ids=lambda p: str(p.relative_to(RESULTS)))  # fmt: skip
def test_training_forward_never_beats_speed_of_light(path: Path):
    data = json.loads(path.read_text())
    gpu = _gpu_of(data["environment"]["device"])
    m = data["model"]
    model = ModelSpec(id="measured", name="measured", layers=m["layers"], hidden=m["hidden"],
                      heads=m["heads"], kv_heads=m["kv"], ffn_hidden=m["ffn"], vocab=m["vocab"],
                      ffn_kind="swiglu", norm="rmsnorm", position="rope", max_context=8192,
                      tied_embeddings=False, sources=_SOURCE)  # fmt: skip
    for p in data["points"]:
        sol = _step_sol(model, gpu, p["batch"], p["seq"], logits="all")
        assert p["forward_s"] >= sol, f"{path}: batch {p['batch']} seq {p['seq']}"


@pytest.mark.parametrize("trace", sorted(TRACES.glob("*.json.gz")), ids=lambda p: p.name)
def test_diagnose_fixture_ops_stay_under_100_percent(trace: Path):
    report = diagnose(str(trace))
    mapped = [r for r in report.ops if r.sol_pct is not None]
    assert mapped
    worst = max(mapped, key=lambda r: r.sol_pct or 0.0)
    assert worst.sol_pct is not None and worst.sol_pct <= 100.0, (
        f"{worst.name} {worst.shapes}: {worst.sol_pct:.0f}% of speed of light"
    )
    # the speed of light is a bound, the prediction a model: the model is never faster
    for r in mapped:
        assert r.sol_per_call_s is not None and r.predicted_per_call_s is not None
        assert r.sol_per_call_s <= r.predicted_per_call_s * (1 + 1e-9)
