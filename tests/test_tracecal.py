"""``gpumodel calibrate --trace``: a calibration fitted from one real profiled step.

The fixtures are real torch.profiler traces recorded on an H100 (tests/fixtures/traces/README.md)
with the unprofiled step time measured in the same process (``planted_costs.json``, key
``step_ms``). The expected values below are computed here from the trace JSON itself, not by
the code under test.
"""

from __future__ import annotations

import gzip
import json
from functools import cache
from pathlib import Path

import pytest

import gpumodel as gm
from gpumodel.cli import main
from gpumodel.diagnose import diagnose
from gpumodel.tracecal import DEFAULT_PROFILER_EVENT_S, calibrate_from_trace

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
PLANTED = json.loads((FIXTURES / "planted_costs.json").read_text())


@cache
def fitted(name: str, step_ms: float | None = None) -> gm.Calibration:
    return calibrate_from_trace(FIXTURES / name, step_ms=step_ms)


def _events_per_step(name: str) -> float:
    """CPU operators + CUDA runtime calls inside the ProfilerStep ranges, per step, counted
    straight from the JSON."""
    doc = json.loads(gzip.decompress((FIXTURES / name).read_bytes()))
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in ev if e.get("cat") == "user_annotation"
             and str(e.get("name", "")).startswith("ProfilerStep#")]  # fmt: skip
    lo = min(s["ts"] for s in steps)
    hi = max(s["ts"] + s["dur"] for s in steps)
    n = sum(1 for e in ev if e.get("cat") in ("cpu_op", "cuda_runtime", "cuda_driver")
            and lo <= e["ts"] <= hi)  # fmt: skip
    return n / len(steps)


def test_profiler_cost_solved_from_the_unprofiled_step():
    # transformer_eager is host-bound: the whole profiled-minus-unprofiled difference is the
    # profiler's cost, spread over the recorded events
    name = "transformer_eager.json.gz"
    unprof = PLANTED[name]["step_ms"]
    cal = fitted(name, unprof)
    p = cal.trace.profiler
    assert p.method.startswith("step-ms")
    assert p.events_per_step == pytest.approx(_events_per_step(name), rel=1e-9)
    profiled_ms = PLANTED[name]["profiled_step_ms"]
    assert p.per_event_s == pytest.approx((profiled_ms - unprof) * 1e-3 / p.events_per_step,
                                          rel=0.02)  # fmt: skip
    # the fitted step (host-bound) is the unprofiled time it was told, within the GPU/host slack
    assert cal.trace.self_check["error_pct"] == pytest.approx(0.0, abs=2.0)
    # and the default per-event cost is that same measurement (its stated source)
    assert p.per_event_s == pytest.approx(DEFAULT_PROFILER_EVENT_S, rel=0.01)


def test_a_step_ms_longer_than_the_profiled_step_is_said_to_be_a_drifting_host():
    """The profiler only adds host time: an unprofiled step longer than the profiled one means
    the host itself changed speed between the two (H200 run 29's decode trace: 36.4 ms profiled,
    its point timed at 37.8-40.7 ms). Nothing is removed, and the output says why."""
    name = "transformer_eager.json.gz"
    profiled_ms = PLANTED[name]["profiled_step_ms"]
    p = fitted(name, profiled_ms * 1.2).trace.profiler
    assert p.removed_per_step_s == 0.0
    assert p.host_step_s == p.profiled_host_step_s
    assert "longer than the profiled step" in p.method and "drifting host" in p.method
    # an unprofiled step shorter than the profiled one is the usual case: no such words
    assert "drifting" not in fitted(name, PLANTED[name]["step_ms"]).trace.profiler.method


def test_step_ms_is_subtracted_from_the_same_statistic_of_the_profiled_steps():
    """H100 run 16's decode trace: three ProfilerSteps of 53.2, 43.4 and 44.6 ms (the first in
    a slow moment); the point ran 22.49 ms unprofiled. The profiled step --step-ms is taken
    from is their median, as the host time is; with the GPU window's mean (48.3 ms) the
    calibration took 4 ms too many off the host and priced the traced point itself 16% fast."""
    run = Path(gm.__file__).parent.parent / "validation/results/steps-h100-run16"
    trace = run / "trace-llama3-8b-decode-eager.json.gz"
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    steps = sorted(e["dur"] for e in events if e.get("cat") == "user_annotation"
                   and str(e.get("name", "")).startswith("ProfilerStep#"))  # fmt: skip
    assert len(steps) == 3
    cal = calibrate_from_trace(trace, gpu="h100", model="llama-3-8b", step_ms=22.489)
    assert cal.trace.self_check["step_profiled_s"] == pytest.approx(steps[1] * 1e-6)
    assert cal.trace.self_check["error_pct"] == pytest.approx(0.0, abs=2.0)
    traced = gm.predict_inference("llama-3-8b", "h100", phase="decode", batch=8, context=2048,
                                  runtime="hf-eager", calibration=cal)  # fmt: skip
    assert traced.time_s == pytest.approx(22.489e-3, rel=0.02)


def test_a_gpu_bound_step_ms_bounds_the_host_from_above_only():
    """fp32_no_tf32 is GPU-bound (13.87 ms profiled, 13.86 unprofiled): the difference says
    nothing of the profiler's host cost, so the per-event cost is removed as without --step-ms
    (events counted from the JSON, x the default cost), and the host stays under the step."""
    name = "fp32_no_tf32.json.gz"
    unprof = PLANTED[name]["step_ms"]
    p = fitted(name, unprof).trace.profiler
    assert "is GPU-bound" in p.method and "bounds the host from above only" in p.method
    events = _events_per_step(name)
    by_event = min(DEFAULT_PROFILER_EVENT_S * events, 0.9 * p.profiled_host_step_s)
    assert p.removed_per_step_s == pytest.approx(
        max(by_event, p.profiled_host_step_s - unprof * 1e-3), rel=1e-9
    )
    assert p.host_step_s <= unprof * 1e-3 + 1e-12
    # the traced step is the timeline's (diagnose's 13.87 ms), not the host's ProfilerStep
    # range, which ran ahead of the GPU (2.33 ms)
    check = fitted(name, unprof).trace.self_check
    assert check["step_traced_s"] * 1e3 == pytest.approx(PLANTED[name]["profiled_step_ms"], rel=0.01)
    assert check["step_profiled_s"] < 0.2 * check["step_traced_s"]
    # the solved figure would have removed only the 0.01 ms the two step times differ by
    assert p.removed_per_step_s > 10 * (PLANTED[name]["profiled_step_ms"] - unprof) * 1e-3
    # a training trace keeps the default with a host profile too (docs/trace-calibration.md:
    # the profile's cost helped one run's TinyLlama trace and hurt another's)
    run = Path(gm.__file__).parent.parent / "validation/results/steps-h200-run26"
    q = calibrate_from_trace(FIXTURES / name, step_ms=unprof, host=str(run / "host-train.yaml"))
    assert q.trace.runtime.startswith("train-")
    assert q.trace.profiler.per_event_s == pytest.approx(p.per_event_s)


def test_a_gpu_bound_step_ms_keeps_the_host_profiles_speed(tmp_path):
    """H200 run 24's eager prefill trace is GPU-bound (56.1 ms of kernels a step): a 60 ms
    --step-ms says only that the host took no longer, so with --host the host is taken at the
    profile's speed exactly as without --step-ms, and held under the step where the profile
    is slower than that."""
    import yaml

    run = Path(gm.__file__).parent.parent / "validation/results/steps-h200-run24"
    trace, host = run / "trace-llama3-8b-prefill-eager.json.gz", run / "host-llama-eager.yaml"
    free = calibrate_from_trace(trace, model="llama-3-8b", host=str(host)).trace
    timed = calibrate_from_trace(trace, model="llama-3-8b", host=str(host), step_ms=60.0).trace
    assert "is GPU-bound" in timed.profiler.method
    assert timed.gpu_busy_s * 1.1 > 60e-3  # GPU-bound by the rule's own margin
    assert timed.profiler.host_speed_factor == pytest.approx(free.profiler.host_speed_factor)
    assert timed.profiler.host_speed_factor < 0.8  # the profiled trace's host was slower
    assert timed.host_per_kernel_s == pytest.approx(free.host_per_kernel_s)
    # a profile four times slower than this one would put the host past the 60 ms step
    prof = yaml.safe_load(host.read_text())
    slow = tmp_path / "slow.yaml"
    slow.write_text(yaml.safe_dump({**prof, "hf_decoder_layer_s": 4 * prof["hf_decoder_layer_s"]}))
    assert calibrate_from_trace(trace, model="llama-3-8b", host=str(slow)).trace \
        .profiler.host_step_s > 60e-3  # fmt: skip
    capped = calibrate_from_trace(trace, model="llama-3-8b", host=str(slow), step_ms=60.0).trace
    assert capped.profiler.host_step_s == pytest.approx(60e-3)
    # without a profile the trace's own host, less the default per-event cost, is kept, and
    # the output says how to do better
    bare = calibrate_from_trace(trace, model="llama-3-8b", step_ms=60.0).trace
    assert bare.profiler.host_speed_factor == 1.0
    assert bare.profiler.per_event_s == pytest.approx(DEFAULT_PROFILER_EVENT_S)
    hint = [n for n in bare.notes if "is GPU-bound" in n and "--host PROFILE" in n]
    assert len(hint) == 1
    assert not any("--host PROFILE" in n for n in timed.notes + free.notes)


def test_without_step_ms_the_default_correction_is_stated():
    cal = fitted("transformer_compiled.json.gz")
    p = cal.trace.profiler
    assert p.method.startswith("default")
    assert p.removed_per_step_s == pytest.approx(DEFAULT_PROFILER_EVENT_S * p.events_per_step)
    # the compiled step's unprofiled time (measured, not used): the default correction lands
    # within 20% of it on the host side
    unprof = PLANTED["transformer_compiled.json.gz"]["step_ms"] * 1e-3
    assert cal.trace.self_check["step_predicted_s"] == pytest.approx(unprof, rel=0.2)


def test_runtime_is_named_from_the_trace():
    assert fitted("transformer_eager.json.gz").trace.runtime == "train-hf-eager"
    compiled = fitted("transformer_compiled.json.gz").trace
    assert "compiled" in compiled.runtime and compiled.runtime.startswith("train-")
    assert any("Triton" in e for e in compiled.runtime_evidence)


def test_matched_fraction_and_fit_reproduce_the_trace():
    name = "fp32_no_tf32.json.gz"
    cal = fitted(name)
    assert cal.trace.matched_fraction > 0.99
    # the fit's defining property, checked through the public diagnose: with the fitted
    # calibration the mapped ops' predicted GPU time equals what the trace measured, within
    # the families too small to fit
    r = diagnose(FIXTURES / name, calibration=cal)
    assert r.totals.predicted_s == pytest.approx(r.totals.mapped_measured_s, rel=0.02)


def test_family_scale_is_a_named_term_and_carries_to_another_gpu(tmp_path):
    cal = fitted("fp32_no_tf32.json.gz")
    path = cal.save(tmp_path / "mystep.yaml")
    op = gm.ops.Gemm(m=4096, n=4096, k=4096, dtype="fp32")
    base = gm.predict(op, "h100")
    mine = gm.predict(op, "h100", str(path))
    fit = {f.key: f for f in cal.trace.families}
    key = f"gemm/{'compute' if base.bound == 'compute' else base.bound}"
    assert key in fit and fit[key].fitted
    assert mine.time_s == pytest.approx(base.time_s * fit[key].scale, rel=1e-9)
    assert any(t.name == "trace-fitted family scale" for t in mine.terms)
    h200 = gm.load_calibration(path, for_gpu="h200")
    assert h200.parameters.family_time_scale[key] == pytest.approx(fit[key].scale)
    assert h200.trace.trace_sha256 == cal.trace.trace_sha256  # provenance kept


def test_other_point_of_the_same_runtime():
    # fit on the eager transformer step, predict the compiled one's mapped ops (other kernels,
    # same model): the calibrated model must not be worse than the shipped one by much
    cal = fitted("transformer_eager.json.gz")
    r_base = diagnose(FIXTURES / "transformer_compiled.json.gz")
    r_cal = diagnose(FIXTURES / "transformer_compiled.json.gz", calibration=cal)
    meas = r_cal.totals.mapped_measured_s
    cal_err = abs(r_cal.totals.predicted_s / meas - 1)
    base_err = abs(r_base.totals.predicted_s / meas - 1)
    assert cal_err < 0.10 and cal_err <= base_err
    # the shipped model prices this small H100 step 22% fast in all: its capturable AdamW
    # divides each parameter by a 0-dim CUDA tensor, 52 calls a step on PyTorch's
    # non-vectorised kernel, which took 3.9 us each even for 512 elements where a vectorised
    # kernel of that size is traced at 1.1-1.4 us: a fixed cost of that kernel the model does
    # not hold (diagnose prices traced kernels without the launch latency, TRACED_CONDITION)
    assert base_err < 0.25


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def test_cli_writes_and_reports(tmp_path, capsys):
    out = tmp_path / "step.yaml"
    rc, text, err = _cli(capsys, "calibrate", "--trace",
                         str(FIXTURES / "transformer_eager.json.gz"), "--step-ms",
                         str(PLANTED["transformer_eager.json.gz"]["step_ms"]), "--out", str(out))  # fmt: skip
    assert rc == 0, err
    assert "matched to modelled ops" in text and "step-ms" in text and out.exists()
    rc, text, err = _cli(capsys, "predict", "gemm", "--m", "1024", "--n", "1024", "--k", "1024",
                         "--gpu", "h100", "--calibration", str(out), "--json")  # fmt: skip
    assert rc == 0, err
    assert str(out) in json.loads(text)["calibration"]


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "content, message",
    [
        (b"not json at all", "Chrome trace"),
        (json.dumps({"traceEvents": [{"ph": "X", "name": "aten::mm", "cat": "cpu_op", "ts": 0,
                                      "dur": 5, "pid": 1, "tid": 1}]}).encode(), "no GPU kernels"),
        (json.dumps({"some": "other tool"}).encode(), "Chrome trace"),
    ],
)  # fmt: skip
def test_bad_traces_are_one_line_errors(tmp_path, capsys, content, message):
    path = _write(tmp_path / "t.json", content)
    rc, _, err = _cli(capsys, "calibrate", "--trace", str(path), "--out", str(tmp_path / "o.yaml"))
    assert rc == 2 and err.startswith("error:") and message in err, err
    assert "Traceback" not in err and err.count("\n") == 1
    assert not (tmp_path / "o.yaml").exists()


def test_truncated_gzip_and_csv_summary(tmp_path, capsys):
    raw = (FIXTURES / "item_sync.json.gz").read_bytes()
    path = _write(tmp_path / "cut.json.gz", raw[: len(raw) // 50])
    rc, _, err = _cli(capsys, "calibrate", "--trace", str(path), "--out", str(tmp_path / "o.yaml"))
    # diagnose reads a cut trace up to its last event; calibrate refuses it (issue 18 item 6):
    # a fit of part of a step prices the host per kernel off by the missing share
    assert rc == 2 and "truncated" in err and err.count("\n") == 1, err
    assert not (tmp_path / "o.yaml").exists()
    cut_json = _write(tmp_path / "cut.json", gzip.decompress(raw)[:200_000])
    rc, _, err = _cli(capsys, "calibrate", "--trace", str(cut_json))
    assert rc == 2 and "truncated" in err and err.count("\n") == 1, err
    rc, _, err = _cli(capsys, "calibrate", "--trace",
                      str(FIXTURES / "nsys_cuda_gpu_kern_sum_synthetic.csv"))  # fmt: skip
    assert rc == 2 and "Nsight Systems" in err


def test_bad_step_ms(capsys, tmp_path):
    rc, _, err = _cli(capsys, "calibrate", "--trace", str(FIXTURES / "item_sync.json.gz"),
                      "--step-ms", "-3", "--out", str(tmp_path / "o.yaml"))  # fmt: skip
    assert rc == 2 and "step-ms" in err


def _decoder_gemms(hidden, ffn, kv, vocab, layers, m=8):
    """The GEMMs of a Llama-style decoder's forward: q, k, v, o, gate, up, down per layer and the
    LM head (shapes from the architecture, widths below from the models' config.json)."""
    g = gm.ops.Gemm
    per_layer = [g(m=m, n=hidden, k=hidden), g(m=m, n=kv, k=hidden), g(m=m, n=kv, k=hidden),
                 g(m=m, n=hidden, k=hidden), g(m=m, n=ffn, k=hidden), g(m=m, n=ffn, k=hidden),
                 g(m=m, n=hidden, k=ffn)]  # fmt: skip
    return per_layer * layers + [g(m=m, n=vocab, k=hidden)]


def test_model_named_from_gemm_shapes():
    from gpumodel.tracecal import identify_model

    # Llama-3-8B: hidden 4096, intermediate 14336, 8 KV heads x 128, vocab 128256, 32 layers
    assert identify_model(_decoder_gemms(4096, 14336, 1024, 128256, 32))[0] == "llama-3-8b"
    # TinyLlama-1.1B: hidden 2048, intermediate 5632, 4 KV heads x 64, vocab 32000, 22 layers
    assert identify_model(_decoder_gemms(2048, 5632, 256, 32000, 22))[0] == "tinyllama-1.1b"
    # Llama-2-7B and Mistral-7B share hidden 4096 and vocab 32000; the FFN width tells them apart
    assert identify_model(_decoder_gemms(4096, 11008, 4096, 32000, 32))[0] == "llama-2-7b"
    assert identify_model(_decoder_gemms(4096, 14336, 1024, 32000, 32))[0] == "mistral-7b"
    name, why = identify_model(_decoder_gemms(1000, 3000, 1000, 7000, 2))
    assert name is None and "pass --model" in why


def test_fixture_trace_names_no_preset_and_says_so():
    cal = gm.calibrate_from_trace(FIXTURES / "transformer_eager.json.gz")
    assert cal.trace.model is None
    assert any(n.startswith("model: no shipped preset") for n in cal.trace.notes)
    # named by the user: no "pass --model" for what was passed
    named = gm.calibrate_from_trace(FIXTURES / "transformer_eager.json.gz", model="gpt2-small")
    assert named.trace.model == "gpt2-small"
    assert (
        "model: gpt2-small (given; no shipped preset's widths match the trace)" in named.trace.notes
    )
    assert not any("pass --model" in n for n in named.trace.notes)


def test_allocator_peaks_read_from_memory_events(tmp_path):
    """profile_memory=True adds "[memory]" instant events carrying the allocator's running
    totals; the calibration keeps the CUDA device's high-water marks (CPU events ignored)."""
    doc = json.loads(gzip.decompress((FIXTURES / "transformer_eager.json.gz").read_bytes()))
    ts = doc["traceEvents"][0].get("ts", 0)

    def mem(alloc, reserved, device_type):
        return {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
                "args": {"Device Type": device_type, "Device Id": 0, "Bytes": 1,
                         "Total Allocated": alloc, "Total Reserved": reserved}}  # fmt: skip

    doc["traceEvents"] += [mem(3e9, 4e9, 1), mem(5.5e9, 6e9, 1), mem(2e9, 6e9, 1),
                           mem(9e9, 9e9, 0)]  # fmt: skip
    path = tmp_path / "mem.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    fit = calibrate_from_trace(path).trace
    assert fit.peak_allocated_bytes == 5.5e9 and fit.peak_reserved_bytes == 6e9
    assert (
        calibrate_from_trace(FIXTURES / "transformer_eager.json.gz").trace.peak_allocated_bytes
        is None
    )


def test_a_named_host_beats_the_traces_host(tmp_path):
    """A trace calibration carries its machine's host cost per kernel; naming a host profile
    (the machine the prediction is for) replaces it; without one the trace's figure is used."""
    cal = gm.calibrate_from_trace(FIXTURES / "transformer_eager.json.gz")
    kw = dict(phase="decode", batch=8, context=2048, runtime="hf-eager", calibration=cal)
    traced = gm.predict_inference("llama-3-8b", "h100", **kw)
    named = gm.predict_inference("llama-3-8b", "h100", host="reference-h100", **kw)
    assert traced.host_source.startswith("trace")
    assert named.host_source == "host profile reference-h100"
    assert named.host_time_s != traced.host_time_s


def test_cat_maps_to_a_copy_of_its_inputs():
    """aten::cat as a Llama-3-8B eager decode recorded it (H100 trace, steps-h100-run2): two
    8 x 32 x 1 x 64 halves of a rotary embedding joined; 2 x 16,384 elements at 2 bytes."""
    from gpumodel.diagnose.mapping import map_op

    args = {"Input type": ["TensorList", "Scalar"], "Concrete Inputs": ["", "-1"],
            "Input Dims": [[[8, 32, 1, 64], [8, 32, 1, 64]], []],
            "Input Strides": [[[2048, 64, 2048, 1], [4096, 128, 4096, 1]], []]}  # fmt: skip
    m = map_op("aten::cat", args)
    assert isinstance(m.op, gm.ops.Copy) and m.op.bytes == 2 * 8 * 32 * 64 * 2
    assert m.family == "copy"


TINYLLAMA_TRACE = (Path(__file__).parents[1] / "validation" / "results" / "steps-h100-run2"
                   / "trace-tinyllama-1.1b-train-amp.json.gz")  # fmt: skip
# TinyLlama-1.1B's published config (hidden 2048, 22 layers, 32 heads, 4 kv heads of 64, ffn
# 5632, vocab 32000, untied): embedding + lm head 2 x 32000 x 2048; per layer q and o 2048^2,
# k and v 2048 x 256, three MLP 2048 x 5632, two norms of 2048; the final norm 2048
TINYLLAMA_PARAMS = 2 * 32000 * 2048 + 22 * (2 * 2048**2 + 2 * 2048 * 256 + 3 * 2048 * 5632
                                             + 2 * 2048) + 2048  # fmt: skip


@pytest.mark.skipif(not TINYLLAMA_TRACE.exists(), reason="the committed H100 training trace")
def test_fused_adamw_without_tensor_lists_takes_the_steps_parameters():
    """aten::_fused_adamw_ records no TensorList shapes; its parameters come from the step's
    AccumulateGrad records: TinyLlama's 1,100,048,384 fp32 parameters, priced as the
    calibrated fused-AdamW step over them (validate's ``adamw`` family: 28 B per parameter),
    and the trace's GPU time is then >= 95% matched (it was 89% with the optimizer
    unmatched). ``gpumodel diagnose`` prices it the same way."""
    from gpumodel.diagnose.model_match import match_optimizer
    from gpumodel.diagnose.parse import load_trace
    from gpumodel.diagnose.timeline import build_timeline

    assert TINYLLAMA_PARAMS == 1_100_048_384
    tl = build_timeline(load_trace(TINYLLAMA_TRACE))
    opt = [i for i in tl.instances if i.mapped is not None and i.mapped.family == "optimizer"]
    assert opt and all(i.mapped.op is None for i in opt)
    assert match_optimizer(load_trace(TINYLLAMA_TRACE), tl) >= 3  # one per profiled step
    done = [i.mapped for i in opt if i.mapped.op is not None]
    assert done and all(m.op == gm.ops.AdamW(params=TINYLLAMA_PARAMS) for m in done)
    assert calibrate_from_trace(TINYLLAMA_TRACE).trace.matched_fraction >= 0.95
    report = gm.diagnose(TINYLLAMA_TRACE, top=1000)
    (row,) = [o for o in report.ops if o.name == "aten::_fused_adamw_"]
    assert row.mapped and row.op == gm.ops.AdamW(params=TINYLLAMA_PARAMS).label()
    assert any(n.startswith("fused optimizer: ") for n in report.notes)


def test_training_step_is_issued_by_the_traced_host_unless_one_is_named():
    """A training step predicted with a trace calibration and no host takes the traced
    machine's host time per kernel (profiler removed) for every eager kernel: GPT-2 small in
    bf16 launches 757 kernels per micro-batch by the traced HF kernel counts (per layer 22
    forward + 37 backward, x 12 layers, + 15 + 34 outside); a named host profile beats it."""
    cal = fitted("transformer_eager.json.gz")
    per = cal.trace.host_per_kernel_s
    kw = dict(micro_batch=1, global_batch=1, seq=256, fusion="unfused", policy="bf16",
              recompute="none", calibration=cal)  # fmt: skip
    t = gm.predict_training_step("gpt2-small", "h100", 1, **kw)
    assert t.host["name"].startswith("trace-") and t.host_warning is None
    assert t.host_time_s == pytest.approx(757 * per, rel=1e-9)
    named = gm.predict_training_step("gpt2-small", "h100", 1, host="reference-h100", **kw)
    assert named.host["name"] == "reference-h100" and named.host_time_s != t.host_time_s


def test_a_synchronising_wait_is_not_host_time(tmp_path):
    """A step that ends in torch.cuda.synchronize() waits there for the GPU: the CPU range of
    the step grows by the wait, the host's work does not. Appending a 20 ms
    cudaDeviceSynchronize to every step of the fixture leaves the host time per step as it
    was (an H200 prefill trace spent 22 ms of a 61 ms step in it, and the fit had charged that
    to the host: 46 us per kernel instead of 29)."""
    name = "transformer_eager.json.gz"
    doc = json.loads(gzip.decompress((FIXTURES / name).read_bytes()))
    ev = doc["traceEvents"]
    steps = [e for e in ev if e.get("cat") == "user_annotation"
             and str(e.get("name", "")).startswith("ProfilerStep#")]  # fmt: skip
    wait_us = 20_000.0
    tid = next(e["tid"] for e in ev if e.get("cat") == "cuda_runtime")
    pid = next(e["pid"] for e in ev if e.get("cat") == "cuda_runtime")
    for s in sorted(steps, key=lambda e: e["ts"], reverse=True):
        end = s["ts"] + s["dur"]
        for e in ev:  # later events move by the wait
            if e.get("ts", 0) >= end and e.get("ph") in ("X", "i", "s", "f"):
                e["ts"] += wait_us
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize",
                   "pid": pid, "tid": tid, "ts": end, "dur": wait_us, "args": {}})  # fmt: skip
        s["dur"] += wait_us
    path = tmp_path / "sync.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    base = fitted(name).trace.profiler.profiled_host_step_s
    assert calibrate_from_trace(path).trace.profiler.profiled_host_step_s == pytest.approx(
        base, rel=1e-6
    )


def test_in_call_helper_kernels_do_not_dilute_the_host_time():
    """A traced HF eager decode step launches cuBLAS split-K and cuDNN split-KV reductions inside
    the GEMM and SDPA calls (192 of an H200 step's 1,493 kernels) that the model folds into those
    ops; the host time per kernel is the step's host time over the kernels the model counts, so
    the calibration reproduces its own traced point through ``predict_inference``."""
    root = Path(__file__).resolve().parents[1] / "validation" / "results" / "steps-h200-run4"
    steps = json.loads((root / "steps-llama-eager.json").read_text())
    traced = next(t for t in steps["traces"] if t["name"] == "trace-llama3-8b-decode-eager")
    point = traced["point"]
    rec = next(r for r in steps["records"] if r.get("phase") == "decode"
               and r.get("batch") == point["batch"] and r.get("context") == point["context"])  # fmt: skip
    step_s = rec["step_s"]["median"]
    cal = gm.calibrate_from_trace(root / traced["file"], step_ms=step_s * 1e3)
    fit = cal.trace
    assert fit.kernels_per_step == 1493
    p = gm.predict_inference("llama-3-8b", "h200", batch=point["batch"], context=point["context"],
                             runtime="hf-eager", calibration=cal)  # fmt: skip
    assert p.kernels_per_step == 1301
    assert fit.host_per_kernel_s * p.kernels_per_step == pytest.approx(
        fit.profiler.host_step_s, rel=1e-9)  # fmt: skip
    assert p.time_s == pytest.approx(step_s, rel=0.05)


def test_without_step_ms_a_host_profiles_measured_event_cost_is_used(tmp_path):
    """`--host` names the trace machine's profile: its measured profiler cost per event
    replaces the default, and the result says so; a profile without one keeps the default."""
    import yaml

    ref = yaml.safe_load((Path(gm.__file__).parent.parent / "specs/hosts/reference-h100.yaml")
                         .read_text())  # fmt: skip
    path = tmp_path / "box.yaml"
    path.write_text(yaml.safe_dump({**ref, "name": "box", "profiler_event_s": 2.0e-6}))
    name = "transformer_eager.json.gz"
    p = calibrate_from_trace(FIXTURES / name, host=str(path)).trace.profiler
    assert p.method == "host profile box: measured per-event cost"
    assert p.per_event_s == pytest.approx(2.0e-6)
    assert p.removed_per_step_s == pytest.approx(2.0e-6 * _events_per_step(name), rel=1e-9)
    assert fitted(name).trace.profiler.per_event_s == pytest.approx(DEFAULT_PROFILER_EVENT_S)
    # a profile that did not measure it: the default, as without --host
    q = calibrate_from_trace(FIXTURES / name, host="reference-h100").trace.profiler
    assert q.method.startswith("default") and q.per_event_s == pytest.approx(
        DEFAULT_PROFILER_EVENT_S
    )
    # --step-ms still wins: the host's figure is not used then
    unprof = PLANTED[name]["step_ms"]
    s = calibrate_from_trace(FIXTURES / name, step_ms=unprof, host=str(path)).trace.profiler
    assert s.method.startswith("step-ms")


def test_cli_calibrate_takes_the_traces_host(tmp_path, capsys):
    out = tmp_path / "c.yaml"
    rc = main(["calibrate", "--trace", str(FIXTURES / "transformer_eager.json.gz"),
               "--host", "reference-h100", "--out", str(out)])  # fmt: skip
    assert rc == 0 and out.is_file()
    assert "default per-event cost" in capsys.readouterr().out
    rc = main(["calibrate", "--trace", str(FIXTURES / "transformer_eager.json.gz"),
               "--host", "no-such-host", "--out", str(out)])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "no-such-host" in err
    rc = main(["calibrate", "--trace", str(FIXTURES / "transformer_eager.json.gz"),
               "--step-ms", "10", "--host", "no-such-host", "--out", str(out)])  # fmt: skip
    assert rc == 2 and "no-such-host" in capsys.readouterr().err


def test_an_eager_trace_without_step_ms_takes_the_host_profiles_speed(tmp_path, capsys):
    """H100 run 14's decode trace (77.6 ms per profiled step; the point's rounds ran 24-58 ms)
    leaves 38.7 us of host per kernel with its own host profile's profiler cost removed, 2.6x
    the profile's HF decoder layer (618 us / 41 kernels). Without --step-ms the calibration
    keeps the trace's host at the profile's speed, and warns outside 1/2-2x. With --step-ms,
    or for a training trace, the trace's own host is kept."""
    import yaml

    from gpumodel.tracecal import HOST_SPEED_WARN_RATIO

    run = Path(gm.__file__).parent.parent / "validation/results/steps-h100-run14"
    trace, host = run / "trace-llama3-8b-decode-eager.json.gz", run / "host-llama-eager.yaml"
    prof = yaml.safe_load(host.read_text())
    own = prof["hf_decoder_layer_s"] / prof["hf_decoder_layer_kernels"]
    fit = calibrate_from_trace(trace, host=str(host)).trace
    ratio = 1 / fit.profiler.host_speed_factor  # the trace's host per kernel over the profile's
    assert ratio == pytest.approx(2.56, abs=0.05) and ratio > HOST_SPEED_WARN_RATIO
    assert fit.host_per_kernel_s == pytest.approx(own)
    warn = [n for n in fit.notes if n.startswith("warning: the trace's host time per kernel")]
    assert len(warn) == 1 and f"{ratio:.2g}x" in warn[0] and "--step-ms" in warn[0]
    # a profile that measured the host half as fast: 1.3x, inside 1/2-2x: no warning, a note,
    # and every host time twice the first calibration's (the same trace at half the speed)
    slow = tmp_path / "slow.yaml"
    slow.write_text(yaml.safe_dump({**prof, "hf_decoder_layer_s": 2 * prof["hf_decoder_layer_s"]}))
    half = calibrate_from_trace(trace, host=str(slow)).trace
    assert not any(n.startswith("warning:") for n in half.notes)
    assert any(n.startswith("host: the trace's host time per kernel") for n in half.notes)
    assert half.host_per_kernel_s == pytest.approx(2 * own)
    assert half.profiler.host_step_s == pytest.approx(2 * fit.profiler.host_step_s)
    assert all(half.host_op_s[k] == pytest.approx(2 * v) for k, v in fit.host_op_s.items())
    timed = calibrate_from_trace(trace, host=str(host), step_ms=35.13).trace
    train = calibrate_from_trace(FIXTURES / "transformer_eager.json.gz", host=str(host)).trace
    assert train.runtime.startswith("train-")
    for kept in (timed, train):
        assert kept.profiler.host_speed_factor == 1.0
        assert not any(n.startswith(("warning: the trace's host", "host: the trace's host"))
                       for n in kept.notes)  # fmt: skip
    assert main(["calibrate", "--trace", str(trace), "--host", str(host),
                 "--out", str(tmp_path / "c.yaml")]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "\n  warning: the trace's host time per kernel" in out
    # the profiler line adds up: profiled host - removed, then the rescale, each shown
    p = fit.profiler
    assert (f"(host {p.profiled_host_step_s * 1e3:.3f} -> "
            f"{(p.profiled_host_step_s - p.removed_per_step_s) * 1e3:.3f} ms/step, "
            f"x{p.host_speed_factor:.3g} to the --host profile's speed: "
            f"{p.host_step_s * 1e3:.3f} ms/step)") in out  # fmt: skip


def test_a_traced_host_is_not_warned_about_as_the_reference_profile(monkeypatch):
    """With a trace calibration the eager host is the traced machine's, not the reference
    profile's: the "measured on another CPU" warning about that profile would name a host the
    step does not use. It stays where the profile prices something (no trace; --new-shapes)."""
    import gpumodel.hostprofile as hostprofile

    monkeypatch.setattr(hostprofile, "local_cpu_model", lambda: "Some Other CPU")
    run = Path(gm.__file__).parent.parent / "validation/results/steps-h100-run16"
    cal = calibrate_from_trace(run / "trace-llama3-8b-decode-eager.json.gz", gpu="h100",
                               model="llama-3-8b", step_ms=22.489)  # fmt: skip
    kw = dict(phase="decode", batch=8, context=2048, runtime="hf-eager")
    traced = gm.predict_inference("llama-3-8b", "h100", calibration=cal, **kw)
    assert traced.host_source.startswith("trace ") and traced.host_warning is None
    assert "Some Other CPU" in gm.predict_inference("llama-3-8b", "h100", **kw).host_warning
    built = gm.predict_inference("llama-3-8b", "h100", calibration=cal, new_shapes=True, **kw)
    assert "Some Other CPU" in built.host_warning


def test_a_trace_of_graph_replays_calibrates_its_host_and_says_why_no_family(capsys):
    """validation/results/steps-h200-fused-run1: 3 profiled steps, each one cudaGraphLaunch of
    483 kernels, 96 of them in-call helpers (split-K reductions, split-KV combines). The
    helpers came with the replay, not with launches of their own: counted as launches they made
    the host per kernel negative and calibrate crashed. No kernel has an operator, so no
    family is fitted, and the output says why rather than blaming record_shapes."""
    path = (Path(gm.__file__).parent.parent / "validation/results/steps-h200-fused-run1"
            / "trace-llama3-8b-decode-fused.json.gz")  # fmt: skip
    fit = calibrate_from_trace(path, step_ms=5.37).trace
    assert fit.runtime == "fused-graph" and fit.graph_launches_per_step == 1
    assert fit.kernels_per_step == 0 and fit.profiler.host_step_s > 0
    # its host is the one replay's, not an eager kernel's: eager kernels priced with this
    # calibration take the default host profile's (the tests' empty cache: typical)
    typical = gm.load_host("typical")
    assert fit.host_per_kernel_s == pytest.approx(
        typical.hf_decoder_layer_s / typical.hf_decoder_layer_kernels, rel=1e-12)  # fmt: skip
    assert "typical" in fit.eager_host_from
    # a few microseconds of memsets are matched; nothing is fitted from them
    assert fit.matched_fraction < 1e-3 and not any(f.fitted for f in fit.families)
    assert any(n.startswith("every kernel was replayed from a CUDA graph") for n in fit.notes)
    assert not any("record_shapes=False" in n for n in fit.notes)
    assert all(u["reason"].startswith("replayed from a CUDA graph") for u in fit.unmatched)
    assert main(["diagnose", str(path)]) == 0
    assert "every kernel was replayed from a CUDA graph" in capsys.readouterr().out


def test_a_step_waiting_on_its_dataloader_is_said_to_fold_it_into_the_host():
    """dataloader_starved: the DataLoader holds 20 ms of each 25 ms step (diagnose's
    data_loading finding); the host per kernel fitted from it carries that time into every
    what-if, and calibrate says so (before, silently: 748 us per kernel, a 974 ms decode)."""
    cal = calibrate_from_trace(FIXTURES / "dataloader_starved.json.gz", step_ms=23.94)
    warned = [n for n in cal.trace.notes if n.startswith("warning: the step waited")]
    assert len(warned) == 1 and "(80%)" in warned[0]
    quiet = calibrate_from_trace(FIXTURES / "fp32_no_tf32.json.gz")
    assert not any("DataLoader" in n for n in quiet.trace.notes)
