"""Where a trace-fitted family scale holds: its span, and the fade outside it.

``calibrate --trace`` records, beside each fitted scale, the smallest and largest predicted
kernel of the traced ops that fitted it (``family_time_scale_span_s``); ``predict`` applies the
whole scale inside that span and fades it to 1 over a factor ``SCALE_FADE_FACTOR`` (10) beyond
it (``gpumodel.predict.scale_at_size``). The expected values below are worked out by hand.
"""

from __future__ import annotations

import json
import math
import re
from functools import cache
from itertools import pairwise
from pathlib import Path

import pytest

import gpumodel as gm
from gpumodel.calibration import CalibrationParams
from gpumodel.diagnose.report import TRACED_CONDITION
from gpumodel.errors import CalibrationError
from gpumodel.predict import SCALE_FADE_FACTOR, kernel_size_s, scale_at_size

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
SPAN = (10e-6, 20e-6)
TERM = "trace-fitted family scale"


@cache
def fitted(name: str) -> gm.Calibration:
    return gm.calibrate_from_trace(FIXTURES / name)


def _scale_term(p: gm.Prediction) -> list[float]:
    return [t.value for k in p.kernels for t in k.terms if t.name == TERM]


@pytest.mark.parametrize(
    "scale, time_s, expected",
    [
        (1.3, 15e-6, 1.3),  # inside
        (1.3, 10e-6, 1.3),  # on either edge
        (1.3, 20e-6, 1.3),
        (1.3, 20e-6 * math.sqrt(10), 1.15),  # half a decade above: halfway, 1.3 + (1 - 1.3) / 2
        (1.3, 10e-6 / math.sqrt(10), 1.15),  # half a decade below the other edge: the same
        (0.6, 20e-6 * 10**0.25, 0.7),  # a quarter of the way from 0.6 to 1
        (0.6, 10e-6 / 10**0.75, 0.9),  # three quarters of the way, below the span
        (1.3, 200e-6, 1.0),  # 10x above: 1
        (1.3, 1e-6, 1.0),  # 10x below: 1
        (0.6, 2e-3, 1.0),  # further out: stays 1
        (0.6, 1e-9, 1.0),
        (1.3, 0.0, 1.0),  # a kernel with no time
    ],
)  # fmt: skip
def test_scale_at_size_by_hand(scale, time_s, expected):
    assert SCALE_FADE_FACTOR == 10.0
    assert scale_at_size(scale, SPAN, time_s) == pytest.approx(expected, rel=1e-12)


def test_without_a_span_the_scale_holds_at_every_size():
    assert scale_at_size(1.3, None, 1e-9) == 1.3
    assert scale_at_size(1.3, None, 10.0) == 1.3
    # at and past the factor the result is exactly 1 (no term is added: see below)
    assert scale_at_size(0.6, SPAN, 20e-6 * SCALE_FADE_FACTOR * 1.000001) == 1.0


def test_the_fade_keeps_time_growing_with_size_between_the_documented_scales():
    """t x scale_at_size(t) grows with t for scales from 1/(1 + ln 10) = 0.303 to 1 + ln 10 =
    3.30 (docs/trace-calibration.md); below that, the time falls as a kernel grows toward the
    span's lower edge."""
    times = [SPAN[0] / 20 * 1.01**i for i in range(700)]  # 0.05x lo .. 50x hi
    for scale in (0.31, 0.5, 0.9, 1.1, 2.0, 3.29):
        t_scaled = [t * scale_at_size(scale, SPAN, t) for t in times]
        assert all(b >= a for a, b in pairwise(t_scaled)), scale
    t_scaled = [t * scale_at_size(0.19, SPAN, t) for t in times]
    assert any(b < a for a, b in pairwise(t_scaled))


def test_a_trace_calibration_carries_spans_that_bracket_its_kernels():
    cal = fitted("fp32_no_tf32.json.gz")
    families = {f.key: f for f in cal.trace.families}
    spans = cal.parameters.family_time_scale_span_s
    assert set(spans) == {k for k, f in families.items() if f.fitted}
    for key, (lo, hi) in spans.items():
        assert 0 < lo <= hi
        assert (families[key].span_lo_s, families[key].span_hi_s) == (lo, hi)
    # one GEMM shape, 4096 x 4096 x 4096 fp32 (an MLP of two 4096-wide Linears over 4096
    # tokens: 2 forward and 3 backward products per step, validation/experiments/
    # record_traces.py scenario_fp32), so the span is that one kernel's predicted time as the
    # trace is priced (no launch latency in a traced duration: diagnose's TRACED_CONDITION) and
    # as predict prices it by default (in-workload, the calibrated launch floor in it)
    lo, hi = spans["gemm/compute"]
    assert families["gemm/compute"].predicted_s == pytest.approx(5 * lo, rel=1e-9)
    op = gm.ops.Gemm(m=4096, n=4096, k=4096, dtype="fp32")
    traced = gm.predict(op, "h100", condition=TRACED_CONDITION)
    assert kernel_size_s(list(traced.kernels)) == pytest.approx(lo, rel=1e-6)
    assert kernel_size_s(list(gm.predict(op, "h100").kernels)) == pytest.approx(hi, rel=1e-6)
    # the two differ by the launch latency a trace does not hold (microseconds)
    assert 1e-6 < hi - lo < 5e-6


def test_the_fitted_step_is_reproduced_with_its_spans():
    # every traced op lies inside its family's span, so the fit still reproduces the GPU time
    # of the step it was fitted on (families too small to fit keep the model's time)
    from gpumodel.diagnose import diagnose

    cal = fitted("transformer_eager.json.gz")
    r = diagnose(FIXTURES / "transformer_eager.json.gz", calibration=cal)
    assert r.totals.predicted_s == pytest.approx(r.totals.mapped_measured_s, rel=0.02)


def test_a_kernel_far_from_the_span_keeps_the_models_time(tmp_path):
    path = fitted("fp32_no_tf32.json.gz").save(tmp_path / "mine.yaml")
    cal = gm.load_calibration(path)
    scale = cal.parameters.family_time_scale["gemm/compute"]
    _, hi = cal.parameters.family_time_scale_span_s["gemm/compute"]
    inside = gm.predict(gm.ops.Gemm(m=4096, n=4096, k=4096, dtype="fp32"), "h100", cal)
    assert _scale_term(inside) == [scale]
    # 16x the tokens: a kernel 16x the traced one's time, past the factor of 10
    far_op = gm.ops.Gemm(m=65536, n=4096, k=4096, dtype="fp32")
    far, shipped = gm.predict(far_op, "h100", cal), gm.predict(far_op, "h100")
    assert kernel_size_s(list(shipped.kernels)) > SCALE_FADE_FACTOR * hi
    assert _scale_term(far) == [] and far.time_s == shipped.time_s


def _with_scale(scale: float, span: tuple[float, float] | None) -> gm.Calibration:
    """The shipped H100 calibration with one gemm/compute trace scale (and span)."""
    cal = gm.load_calibration("h100")
    params = cal.parameters.model_copy(update={
        "family_time_scale": {"gemm/compute": scale},
        "family_time_scale_span_s": {"gemm/compute": span} if span else {},
    })  # fmt: skip
    return cal.model_copy(update={"parameters": params})


def test_inside_the_span_the_whole_scale_and_outside_a_faded_one_named_in_the_note():
    op = gm.ops.Gemm(m=8192, n=8192, k=8192, dtype="bf16")
    base = gm.predict(op, "h100")
    t0 = kernel_size_s(list(base.kernels))
    inside = gm.predict(op, "h100", _with_scale(1.3, (t0 / 2, t0 * 2)))
    assert inside.time_s == pytest.approx(1.3 * base.time_s, rel=1e-12)
    assert _scale_term(inside) == [1.3]
    # the op half a decade above a span that ends at a tenth of sqrt(10) of its time: halfway
    span = (t0 / 100, t0 / math.sqrt(10))
    faded = gm.predict(op, "h100", _with_scale(1.3, span))
    assert faded.time_s == pytest.approx(1.15 * base.time_s, rel=1e-9)
    note = next(t.note for t in faded.kernels[0].terms if t.name == TERM)
    assert "is outside that span: 1.15x" in note and "ran 1.3x" in note
    # a decade above: no term at all, the model's own time
    far = gm.predict(op, "h100", _with_scale(1.3, (t0 / 100, t0 / 10)))
    assert _scale_term(far) == [] and far.time_s == base.time_s


def test_an_op_of_several_traced_calls_keeps_the_full_scale():
    """The step model prices HF's eager RMSNorm as one op of 8 kernels, each a separate ~5 us
    aten call in the trace: the scale is held to each kernel, not to the op's sum (~39 us,
    7.6x the span's top), which would have faded most of it on the traced step itself."""
    from gpumodel.llm.layers import decoder_layer
    from gpumodel.llm.models import get_model

    run = Path(gm.__file__).parent.parent / "validation/results/steps-h100-run16"
    cal = gm.calibrate_from_trace(run / "trace-llama3-8b-decode-eager.json.gz", gpu="h100",
                                  model="llama-3-8b", step_ms=22.489)  # fmt: skip
    scale = cal.parameters.family_time_scale["elementwise/latency"]
    _, hi = cal.parameters.family_time_scale_span_s["elementwise/latency"]
    ops = decoder_layer(get_model("llama-3-8b"), batch=8, seq=1, context=2048, fusion="unfused")
    norm = next(o.op for o in ops if "eager RMSNorm" in o.op.label())
    base = gm.predict(norm, "h100")
    assert len(base.kernels) == 8 and base.time_s > 5 * hi
    terms = _scale_term(gm.predict(norm, "h100", cal))
    assert len(terms) == 8 and all(t == pytest.approx(scale, rel=0.02) for t in terms)


def _strip_spans(text: str) -> str:
    """A calibration file as written before spans existed."""
    text = re.sub(r"^  family_time_scale_span_s:\n(?:    .*\n)*", "", text, flags=re.M)
    return re.sub(r"^    span_(lo|hi)_s: .*\n", "", text, flags=re.M)


def test_an_old_calibration_without_spans_loads_and_scales_every_size(tmp_path):
    path = fitted("fp32_no_tf32.json.gz").save(tmp_path / "new.yaml")
    old = tmp_path / "old.yaml"
    old.write_text(_strip_spans(path.read_text()))
    assert "span" not in old.read_text()
    cal = gm.load_calibration(old)
    assert cal.parameters.family_time_scale_span_s == {}
    assert all(f.span_lo_s is None for f in cal.trace.families)
    scale = cal.parameters.family_time_scale["gemm/compute"]
    far_op = gm.ops.Gemm(m=65536, n=4096, k=4096, dtype="fp32")
    far = gm.predict(far_op, "h100", cal)
    assert _scale_term(far) == [scale]
    assert far.time_s == pytest.approx(scale * gm.predict(far_op, "h100").time_s, rel=1e-12)


@pytest.mark.parametrize(
    "span, message",
    [
        ("[2.0e-05, 1.0e-05]", "gemm/compute: a span is (smallest, largest) seconds; 2e-05 is "
                               "above 1e-05"),
        ("[-1.0e-05, 1.0e-05]", "gemm/compute.0: must be greater than 0, got -1e-05"),
        ("[1.0e-05, .inf]", "gemm/compute.1: must be a finite number, got inf"),
    ],
)  # fmt: skip
def test_a_bad_span_is_refused_at_load(tmp_path, span, message):
    path = fitted("fp32_no_tf32.json.gz").save(tmp_path / "good.yaml")
    text = re.sub(r"^parameters:\n", f"parameters:\n  family_time_scale_span_s:\n"
                  f"    gemm/compute: {span}\n", _strip_spans(path.read_text()), count=1,
                  flags=re.M)  # fmt: skip
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(CalibrationError) as err:
        gm.load_calibration(bad)
    assert str(err.value).startswith(f"{bad}: parameters.family_time_scale_span_s.")
    assert message in str(err.value)


def test_a_span_without_a_scale_is_refused():
    with pytest.raises(CalibrationError, match="'gemm/memory' has no scale in family_time_scale"):
        CalibrationParams(family_time_scale={"gemm/compute": 1.2},
                          family_time_scale_span_s={"gemm/memory": (1e-5, 2e-5)})  # fmt: skip


def test_cli_prints_each_scales_span(tmp_path, capsys):
    from gpumodel.cli import main

    rc = main(["calibrate", "--trace", str(FIXTURES / "fp32_no_tf32.json.gz"),
               "--out", str(tmp_path / "o.yaml")])  # fmt: skip
    out, err = capsys.readouterr()
    assert rc == 0, err
    gemm = next(line for line in out.splitlines() if line.strip().startswith("gemm/compute"))
    rc = main(["calibrate", "--trace", str(FIXTURES / "fp32_no_tf32.json.gz"),
               "--out", str(tmp_path / "o.yaml"), "--json"])  # fmt: skip
    out, err = capsys.readouterr()
    rows = {f["key"]: f for f in json.loads(out)["families"]}
    # the one traced fp32 GEMM, as the model prices it traced and in-workload (2.66-2.68 ms
    # with the shipped H100 calibrations of 2026-11-27/28): the text shows the span the JSON
    # stores
    lo, hi = rows["gemm/compute"]["span_lo_s"], rows["gemm/compute"]["span_hi_s"]
    assert 2.5e-3 < lo < hi < 2.9e-3
    assert gemm.endswith(f"kernels of {gm.format_time(lo)} to {gm.format_time(hi)}")


def test_a_trace_calibration_as_the_base_lends_parameters_not_scales(tmp_path):
    """Calibrating the same trace again on top of its own calibration fits the same scales and
    spans (they are measured against the model's own times, not the base's scaled ones); a key
    the second trace does not fit keeps the base's scale."""
    first = fitted("transformer_eager.json.gz")
    base = first.parameters.model_copy(update={
        "family_time_scale": {**first.parameters.family_time_scale, "made_up/memory": 1.7},
        "family_time_scale_span_s": {**first.parameters.family_time_scale_span_s,
                                     "made_up/memory": (1e-6, 2e-6)},
    })  # fmt: skip
    path = tmp_path / "base.yaml"
    first.model_copy(update={"parameters": base}).save(path)
    again = gm.calibrate_from_trace(FIXTURES / "transformer_eager.json.gz", calibration=str(path))
    for key, scale in first.parameters.family_time_scale.items():
        assert again.parameters.family_time_scale[key] == pytest.approx(scale, rel=1e-9)
        assert again.parameters.family_time_scale_span_s[key] == pytest.approx(
            first.parameters.family_time_scale_span_s[key], rel=1e-9)  # fmt: skip
    assert again.parameters.family_time_scale["made_up/memory"] == 1.7
    assert again.parameters.family_time_scale_span_s["made_up/memory"] == (1e-6, 2e-6)


def test_spans_carry_to_another_gpu_by_the_roof_their_bound_names():
    """H200 -> H100: a memory-bound span grows by the DRAM ratio (4.8 / 3.35 TB/s, the two
    datasheets), a compute-bound one by SMs x boost clock (132 x 1.98 GHz on both: unchanged),
    a latency-bound one stays."""
    from gpumodel.calibration import carried_spans

    spans = {"gemm/memory": (10e-6, 20e-6), "attention/compute": (1e-4, 2e-4),
             "kernel/latency": (5e-6, 6e-6)}  # fmt: skip
    out = carried_spans(spans, gm.get_gpu("h200-sxm"), gm.get_gpu("h100-sxm"))
    assert out["gemm/memory"] == pytest.approx((10e-6 * 4.8 / 3.35, 20e-6 * 4.8 / 3.35))
    assert out["attention/compute"] == pytest.approx((1e-4, 2e-4))
    assert out["kernel/latency"] == (5e-6, 6e-6)
    # the transfer applies it: a trace calibration carried to the H200 holds its memory spans
    # at 3.35 / 4.8 of the H100's
    cal = fitted("transformer_eager.json.gz")
    moved = gm.load_calibration(cal, for_gpu="h200-sxm")
    for key, (lo, hi) in cal.parameters.family_time_scale_span_s.items():
        f = 3.35 / 4.8 if key.endswith("/memory") else 1.0
        assert moved.parameters.family_time_scale_span_s[key] == pytest.approx((lo * f, hi * f))


def test_infer_prices_the_runtime_the_trace_ran_in_unless_told(tmp_path, capsys):
    """`infer --calibration mystep.yaml` without --runtime prices the runtime of the traced
    step (a training trace: the runtime of its forward), says so, and --runtime still wins."""
    from gpumodel.cli import main
    from gpumodel.llm.runtimes import DEFAULT_RUNTIME, traced_runtime

    cal = fitted("transformer_eager.json.gz")
    assert cal.trace.runtime == "train-hf-eager" and traced_runtime(cal) == "hf-eager"
    assert traced_runtime(gm.load_calibration("h100-sxm")) is None
    r = gm.predict_inference("llama-3-8b", "h100", batch=8, context=2048, calibration=cal)
    assert r.runtime == "hf-eager"
    assert any("the one the trace calibration was recorded in" in n for n in r.notes)
    told = gm.predict_inference("llama-3-8b", "h100", batch=8, context=2048, calibration=cal,
                                runtime="fused-graph")  # fmt: skip
    assert told.runtime == "fused-graph" and told.time_s < r.time_s
    assert gm.predict_inference("llama-3-8b", "h100").runtime == DEFAULT_RUNTIME

    path = cal.save(tmp_path / "mystep.yaml")
    code = main(["infer", "--model", "llama-3-8b", "--gpu", "h100", "--batch", "8",
                 "--context", "2048", "--calibration", str(path), "--json"])  # fmt: skip
    out, _ = capsys.readouterr()
    assert code == 0 and json.loads(out)["runtime"] == "hf-eager"
