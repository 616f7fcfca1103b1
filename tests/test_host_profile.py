"""Host profile: aggregation and writer (no torch needed), CLI errors, a CPU measurement (torch)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

import gpumodel as gm
from gpumodel.errors import GpumodelError, SpecError
from gpumodel.validate.host import (
    EAGER_OP_KINDS,
    SCALAR_KEYS,
    build_profile,
    model_step_and_layer,
    profile_yaml,
    quantile,
    summarize,
    write_host_profile,
)

RESULTS = Path(__file__).resolve().parents[1] / "validation" / "results"

META = {
    "name": "measured-box-20261124",
    "measured_at": "2026-11-24T12:00:00Z",
    "cpu_model": "Test CPU",
    "cpu_cores": 16,
    "python": "3.12.3",
    "torch": "2.11.0",
    "transformers": None,
    "cuda_driver": "580.159.04",
    "gpu": "NVIDIA H100 80GB HBM3",
}


def fake_samples() -> dict:
    """Ten samples per figure: k * [1..10] microseconds, k the figure's position."""
    keys = [f"eager_op_s.{k}" for k in EAGER_OP_KINDS] + list(SCALAR_KEYS)
    out: dict = {key: [i * (n + 1) * 1e-6 for i in range(1, 11)] for n, key in enumerate(keys)}
    out["hf_decoder_layer_s"] = None  # not measured (no transformers)
    return out


def test_quantile_matches_numpy_linear_definition():
    # numpy.percentile([1, 2, 3, 4], [10, 50, 90]) == [1.3, 2.5, 3.7] (type-7, by hand:
    # position (n-1)q = 0.3, 1.5, 2.7)
    assert quantile([4.0, 1.0, 3.0, 2.0], 0.1) == pytest.approx(1.3)
    assert quantile([4.0, 1.0, 3.0, 2.0], 0.5) == pytest.approx(2.5)
    assert quantile([4.0, 1.0, 3.0, 2.0], 0.9) == pytest.approx(3.7)
    assert quantile([7.0], 0.9) == 7.0


def test_summarize_refuses_bad_samples():
    with pytest.raises(SpecError):
        summarize([])
    with pytest.raises(SpecError):
        summarize([1.0, float("nan")])
    with pytest.raises(SpecError):
        summarize([1.0, -2.0])


def test_build_profile_schema_and_values():
    p = build_profile(fake_samples(), META, {"hf_decoder_layer_kernels": None}, {"device": "cuda"})
    # schema fields in the contract order, extra fields after them
    assert list(p)[:10] == ["host_profile", *META]
    assert p["host_profile"] == 1
    assert list(p["eager_op_s"]) == list(EAGER_OP_KINDS)
    # matmul is figure 1: samples 1..10 us -> median 5.5 us, p10 1.9 us, p90 9.1 us
    assert p["eager_op_s"]["matmul"] == pytest.approx(5.5e-6)
    assert p["spread"]["eager_op_s.matmul"] == pytest.approx([1.9e-6, 9.1e-6])
    # elementwise is figure 2: twice that
    assert p["eager_op_s"]["elementwise"] == pytest.approx(11e-6)
    # kernel_launch_s is figure 16 (after the 15 eager kinds)
    assert len(EAGER_OP_KINDS) == 15
    assert p["kernel_launch_s"] == pytest.approx(16 * 5.5e-6)
    assert p["hf_decoder_layer_s"] is None
    assert "hf_decoder_layer_s" not in p["spread"]
    assert p["hf_decoder_layer_kernels"] is None
    assert p["device"] == "cuda"


def test_build_profile_refuses_missing_and_unknown_keys():
    s = fake_samples()
    del s["eager_op_s.sdpa"]
    with pytest.raises(SpecError, match=r"eager_op_s\.sdpa"):
        build_profile(s, META)
    s = fake_samples()
    s["eager_op_s.pool"] = [1e-6]
    with pytest.raises(SpecError, match="pool"):
        build_profile(s, META)
    with pytest.raises(SpecError, match="cpu_model"):
        build_profile(fake_samples(), {k: v for k, v in META.items() if k != "cpu_model"})
    with pytest.raises(SpecError, match="overwrite"):
        build_profile(fake_samples(), META, extra={"gpu": "x"})


def test_yaml_round_trip_and_atomic_write(tmp_path):
    p = build_profile(fake_samples(), META, {"hf_decoder_layer_kernels": 14})
    text = profile_yaml(p)
    assert text.startswith("# gpumodel host profile")
    assert "eager_op_s.matmul: [" in text  # spread pairs on one line
    assert yaml.safe_load(text) == p
    target = write_host_profile(p, tmp_path / "hosts" / "box.yaml")
    assert yaml.safe_load(target.read_text()) == p
    assert [f.name for f in target.parent.iterdir()] == ["box.yaml"]  # no temp file left


def test_cli_host_only_without_cuda_is_one_line_exit_2(capsys):
    """On a machine with no CUDA GPU (CI), --host-only refuses in one line with exit 2."""
    from gpumodel.cli import main

    if importlib.util.find_spec("torch") is not None:
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has a CUDA GPU: the refusal path is not reachable")
    assert main(["validate", "--host-only"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: measuring the host needs")
    assert len(err.strip().splitlines()) == 1


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch (CPU is enough)")
def test_measure_on_cpu_gives_a_complete_profile(tmp_path):
    """The measurement code path end to end on the CPU: every eager figure measured and > 0,
    CUDA-only figures (fp8 ``_scaled_mm`` among them) null, the file loads back."""
    from gpumodel.errors import DeviceError
    from gpumodel.validate.host import measure_host_profile

    try:
        p = measure_host_profile(device="cpu", repeats=3, calls=5, compile_step=False,
                                 window_s=0.2)  # fmt: skip
    except DeviceError as exc:  # pragma: no cover - torch importable but broken
        pytest.skip(f"torch present but unusable: {exc}")
    if p["hf_model_layer_s"] is not None:  # transformers installed: the window ran
        window = p["method"]["window"]
        assert window["seconds"] == 0.2 and window["samples"] >= 1
        assert window["speed_factor"] > 0
    ops = dict(p["eager_op_s"])
    assert ops.pop("scaled_mm") is None  # torch._scaled_mm: fp8 GPUs only
    assert all(v > 0 for v in ops.values())
    assert p["kernel_launch_s"] > 0
    assert p["graph_replay_s"] is None and p["graph_replay_per_kernel_s"] is None
    assert p["compiled_step_launch_s"] is None
    assert p["sdpa_graph_build_s"] is None  # cuDNN attention: CUDA only
    assert p["device"] == "cpu" and p["cuda_driver"] is None
    out = write_host_profile(p, tmp_path / "h.yaml")
    assert yaml.safe_load(out.read_text())["eager_op_s"] == p["eager_op_s"]


def test_gpumodel_error_is_the_root():
    assert issubclass(SpecError, GpumodelError)


def test_model_step_and_layer_is_the_intercept_and_slope_per_round():
    # round 1: a 2-layer forward 2.6 ms, a 10-layer one 8.2 ms -> 0.7 ms per layer, 1.2 ms of
    # the model's own; round 2 noise makes the intercept negative -> 0, never a negative time
    steps, layers = model_step_and_layer([2.6e-3, 1.0e-3], [8.2e-3, 9.0e-3], 2, 10)
    assert layers == pytest.approx([0.7e-3, 1.0e-3])
    assert steps == pytest.approx([1.2e-3, 0.0])
    with pytest.raises(SpecError):
        model_step_and_layer([1e-3], [2e-3, 3e-3], 2, 10)
    with pytest.raises(SpecError):
        model_step_and_layer([1e-3], [2e-3], 10, 2)


def _reference_with(tmp_path, **fields) -> Path:
    data = yaml.safe_load((Path(gm.__file__).parent.parent / "specs/hosts/reference-h100.yaml")
                          .read_text())  # fmt: skip
    data.update(fields, name="measured-test")
    path = tmp_path / "measured-test.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_measured_hf_model_prices_its_layers_and_its_own_step(tmp_path):
    """hf-eager: with the whole model measured, the host time of a Llama-3-8B decode step is
    the model's own per step + 32 layers at the in-model figure (the ops before and after the
    layers are inside the model's own); the explanation names both terms."""
    host = _reference_with(tmp_path, hf_model_step_s=1.0e-3, hf_model_layer_s=0.8e-3,
                           hf_decoder_layer_s=0.6e-3, hf_decoder_layer_kernels=41)  # fmt: skip
    r = gm.predict_inference("llama-3-8b", "h100", "decode", batch=1, context=512,
                             runtime="hf-eager", host=str(host))  # fmt: skip
    assert r.host_time_s == pytest.approx(1.0e-3 + 32 * 0.8e-3, rel=1e-9)
    assert any("1000 us per step + 800 us per decoder layer" in n for n in r.notes)
    # the layer alone (no model measured): 32 x 0.6 ms + the eager costs of the ops around it
    alone = _reference_with(tmp_path, hf_decoder_layer_s=0.6e-3, hf_decoder_layer_kernels=41)
    r2 = gm.predict_inference("llama-3-8b", "h100", "decode", batch=1, context=512,
                              runtime="hf-eager", host=str(alone))  # fmt: skip
    assert 32 * 0.6e-3 < r2.host_time_s < 32 * 0.6e-3 + 1.0e-3
    # graph runtimes do not use it
    g = gm.predict_inference("llama-3-8b", "h100", "decode", batch=1, context=512,
                             runtime="fused-graph", host=str(host))  # fmt: skip
    assert g.host_time_s < 1e-4


def test_new_shapes_add_one_cudnn_graph_build_per_step(tmp_path):
    """A step at attention shapes new to the process: where SDPA runs cuDNN eagerly (hf-eager on
    compute capability 9.0/10.0, or attention="cudnn"), the host spends the profile's
    sdpa_graph_build_s once per step (one shape for all layers: 40 ms here, not 32 x 40);
    flash GPUs, graph runtimes and the naive kernels pay nothing; the steady state (default)
    pays nothing but says what a new shape would add."""
    host = str(_reference_with(tmp_path, hf_model_step_s=1.0e-3, hf_model_layer_s=0.8e-3,
                               sdpa_graph_build_s=0.04))  # fmt: skip
    kw = dict(phase="decode", batch=1, context=512, host=host)

    def pair(gpu, **extra):
        args = {**kw, "runtime": "hf-eager", **extra}
        return (gm.predict_inference("llama-3-8b", gpu, **args),
                gm.predict_inference("llama-3-8b", gpu, new_shapes=True, **args))  # fmt: skip

    steady, new = pair("h100")
    assert steady.host_time_s == pytest.approx(1.0e-3 + 32 * 0.8e-3, rel=1e-9)
    assert new.host_time_s - steady.host_time_s == pytest.approx(0.04, rel=1e-9)
    assert new.time_s - steady.time_s == pytest.approx(0.04, rel=1e-9)  # host-bound: all of it
    assert any("adds 40 ms of cuDNN graph build" in n for n in steady.notes)
    assert "cuDNN attention graph build (new shapes) 40 ms" in new.explain().replace("\n", " ")
    for gpu in ("h200", "b200"):  # the other GPUs torch prefers cuDNN on
        s, n = pair(gpu)
        assert n.host_time_s - s.host_time_s == pytest.approx(0.04, rel=1e-9)
    for gpu, extra, paid in (("a100", {}, 0.0), ("a100", {"attention": "cudnn"}, 0.04),
                             ("h100", {"attention": "naive"}, 0.0)):  # fmt: skip
        s, n = pair(gpu, **extra)
        assert n.host_time_s - s.host_time_s == pytest.approx(paid, abs=1e-12), (gpu, extra)
    # hf-static-compiled's prefill runs eagerly: it pays; a replayed graph has fixed shapes:
    # new_shapes there is an error, not a silent nothing
    args = {**kw, "runtime": "hf-static-compiled", "phase": "prefill", "seq": 256, "context": None}
    s = gm.predict_inference("llama-3-8b", "h100", **args)
    n = gm.predict_inference("llama-3-8b", "h100", new_shapes=True, **args)
    assert n.host_time_s - s.host_time_s == pytest.approx(0.04, abs=1e-12)
    for runtime in ("fused-graph", "hf-static-compiled"):
        with pytest.raises(SpecError, match="replays a graph captured at fixed shapes"):
            gm.predict_inference("llama-3-8b", "h100", new_shapes=True,
                                 **{**kw, "runtime": runtime})  # fmt: skip
    # a profile that did not measure it: the reference build time (50.2 ms, H100 VM)
    ref = gm.predict_inference("llama-3-8b", "h100", runtime="hf-eager", new_shapes=True,
                               **{**kw, "host": "reference-h100"})  # fmt: skip
    base = gm.predict_inference("llama-3-8b", "h100", runtime="hf-eager",
                                **{**kw, "host": "reference-h100"})  # fmt: skip
    assert ref.host_time_s - base.host_time_s == pytest.approx(50.2e-3, rel=1e-9)
    # the sweep prices it the same way
    sw = gm.sweep_inference("llama-3-8b", "h100", batch=[1], context=[512], runtime="hf-eager",
                            host=host, new_shapes=True)  # fmt: skip
    assert sw["time_s"][0] == pytest.approx(new.time_s, rel=1e-6)
    with pytest.raises(SpecError):
        gm.predict_inference("llama-3-8b", "h100", runtime="hf-eager", new_shapes="yes")


def test_cli_new_shapes(tmp_path, capsys):
    from gpumodel.cli import main

    host = str(_reference_with(tmp_path, sdpa_graph_build_s=0.04))
    args = ["infer", "--model", "llama-3-8b", "--gpu", "h100", "--runtime", "hf-eager",
            "--host", host, "--json"]  # fmt: skip
    import json

    assert main(args) == 0
    steady = json.loads(capsys.readouterr().out)
    assert main([*args, "--new-shapes"]) == 0
    new = json.loads(capsys.readouterr().out)
    assert new["host_time_s"] - steady["host_time_s"] == pytest.approx(0.04, rel=1e-6)


def test_host_only_summary_names_the_graph_build(tmp_path, monkeypatch, capsys):
    """`validate --host-only` prints what it measured, the cuDNN graph build included (the
    measurement itself needs CUDA; here it is replaced by a built profile)."""
    import gpumodel.validate.host as host_mod
    from gpumodel.cli.validate import _host_profile

    samples = fake_samples()
    samples["sdpa_graph_build_s"] = [0.05, 0.06, 0.07]
    samples["host_drift"] = [0.02, 0.01, 0.03]  # median 20 ms; p10 12, p90 28 -> 0.6, 1.4
    for n, kind in enumerate(("h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable")):
        samples[f"host_copy_s.{kind}"] = [(20 + n) * 1e-6] * 3  # 20, 21, 22, 23 us

    def fake(repeats=9, progress=None, window_s=0.0):
        return build_profile(samples, META, extra={"method": {"window": {
            "seconds": 60.0, "samples": 250, "speed_factor": 1.18}}})  # fmt: skip

    monkeypatch.setattr(host_mod, "measure_host_profile", fake)
    _host_profile(str(tmp_path / "h.yaml"), as_json=False, no_progress=True)
    out = capsys.readouterr().out
    assert "cuDNN attention graph build: 60.0 ms of host per new shape" in out
    assert "forward at x0.6 - x1.4 its median time" in out
    assert "host speed over 60 s more of the HF models: x1.18 the rounds' time" in out
    assert ("4 KB host copies with their sync, us: h2d pinned 20.0, h2d pageable 21.0, "
            "d2h pinned 22.0, d2h pageable 23.0") in " ".join(out.split())  # rich wraps lines
    loaded = gm.load_host(str(tmp_path / "h.yaml"))
    assert loaded.copy_cost_s("d2h", True) == pytest.approx(22e-6)
    assert loaded.graph_build_s == pytest.approx(0.06)
    assert loaded.host_drift == pytest.approx((0.6, 1.4))


def test_host_drift_is_the_step_like_calls_p10_p90_over_its_median():
    """host_drift from nine per-round samples 1..9 ms: median 5, p10 1.8, p90 8.2 (type-7
    quantiles, by hand) -> [0.36, 1.64]; absent samples write no drift."""
    s = fake_samples()
    s["host_drift"] = [i * 1e-3 for i in range(9, 0, -1)]
    p = build_profile(s, META)
    assert p["host_drift"] == pytest.approx([0.36, 1.64])
    assert "host_drift" not in build_profile(fake_samples(), META)
    # what `validate --host-only` writes loads back with the drift
    from gpumodel.hostprofile import HostProfile

    assert HostProfile.model_validate(p).host_drift == pytest.approx((0.36, 1.64))


@pytest.mark.parametrize("drift", [[1.2, 1.5], [0.8, 0.9], [0.0, 1.2], [0.8, float("inf")]])
def test_a_drift_that_is_not_p10_below_p90_above_the_median_is_refused(tmp_path, drift, capsys):
    from gpumodel.cli import main

    path = _reference_with(tmp_path, host_drift=drift)
    with pytest.raises(SpecError, match="host_drift"):
        gm.load_host(str(path))
    assert main(["infer", "--model", "llama-3-8b", "--runtime", "hf-eager", "--host",
                 str(path)]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert "host_drift" in err and len(err.splitlines()) == 1


def test_scaled_profile_multiplies_host_times_not_gpu_times(tmp_path):
    h = gm.load_host(str(_reference_with(tmp_path, hf_model_layer_s=0.8e-3,
                                         sdpa_graph_build_s=0.05)))  # fmt: skip
    s = h.scaled(1.5)
    assert s.hf_model_layer_s == pytest.approx(1.2e-3)
    assert s.sdpa_graph_build_s == pytest.approx(0.075)
    assert s.cost_s("matmul") == pytest.approx(1.5 * h.cost_s("matmul"))
    assert s.compiled_launch_s == pytest.approx(1.5 * h.compiled_launch_s)
    assert s.in_graph_kernel_s == h.in_graph_kernel_s  # GPU time per kernel in a graph


def test_time_range_is_the_step_with_the_host_at_its_drift(tmp_path):
    """A host-bound eager decode (batch 1: the GPU needs a few ms, the host ~27 ms) moves with
    the host: its range is the host term times 0.5 and 2 (plus what the GPU adds); a GPU-bound
    step (batch 64 x 4096, KV concatenation: the GPU ~45 ms) does not move; no drift measured
    or a host figure given: no range."""
    fields = dict(hf_model_step_s=1.0e-3, hf_model_layer_s=0.8e-3)
    host = str(_reference_with(tmp_path, host_drift=[0.5, 2.0], **fields))
    kw = dict(phase="decode", runtime="hf-eager", host=host)
    r = gm.predict_inference("llama-3-8b", "h100", batch=1, context=512, **kw)
    assert r.bound == "host"
    lo, hi = r.time_range_s
    assert lo < r.time_s < hi
    # the step's host term is 1 ms + 32 x 0.8 ms = 26.6 ms; doubled: 53.2 ms, and the step
    # ends a few GPU kernels after the host issues the last one
    assert hi == pytest.approx(2 * 26.6e-3 + (r.time_s - r.host_time_s), rel=0.02)
    assert lo == pytest.approx(max(0.5 * 26.6e-3, r.gpu_time_s), rel=0.15)
    assert r.to_dict()["time_range_s"] == [lo, hi]
    assert "range " in r.explain() and "0.5-2 x its median time" in r.explain().replace("\n", " ")
    # a GPU-bound step whose host, even at double time (2 x (1 + 32 x 0.5) = 34 ms), stays
    # under its GPU time (~45 ms: the KV concatenation and cuDNN's attention reading the cache)
    light = str(_reference_with(tmp_path, host_drift=[0.5, 2.0], hf_model_step_s=1.0e-3,
                                hf_model_layer_s=0.5e-3))  # fmt: skip
    g = gm.predict_inference("llama-3-8b", "h100", batch=64, context=4096,
                             **{**kw, "host": light})  # fmt: skip
    assert g.bound != "host" and g.gpu_time_s > 2 * 17e-3
    assert g.time_range_s[0] == pytest.approx(g.time_s, rel=0.03)
    assert g.time_range_s[1] == pytest.approx(g.time_s, rel=0.03)
    plain = str(_reference_with(tmp_path, **fields))
    assert gm.predict_inference("llama-3-8b", "h100", batch=1, context=512,
                                **{**kw, "host": plain}).time_range_s is None  # fmt: skip
    given = gm.predict_inference("llama-3-8b", "h100", batch=1, context=512,
                                 host_per_kernel_s=20e-6, **kw)  # fmt: skip
    assert given.time_range_s is None  # the figure given is not the profile's


def test_training_time_range_scales_the_eager_host(tmp_path):
    """GPT-2 small at batch 4 (amp, eager HF): host-bound on the reference host; with drift
    [0.5, 2] its range is the host's micro-batch time at half and double speed."""
    host = str(_reference_with(tmp_path, host_drift=[0.5, 2.0]))
    kw = dict(micro_batch=4, global_batch=4, seq=1024, policy="amp", fusion="unfused",
              recompute="none", host=host)  # fmt: skip
    r = gm.predict_training_step("gpt2-small", "h100", 1, **kw)
    lo, hi = r.time_range_s
    assert lo <= r.time_s < hi
    gpu_mb = r.forward_s + r.backward_s + r.recompute_s
    assert r.host_time_s > gpu_mb  # host-bound: the step is the host's issue time + optimizer
    assert hi - r.time_s == pytest.approx(r.host_time_s, rel=0.05)
    assert "range " in r.explain()
    fused = gm.predict_training_step("gpt2-small", "h100", 1, **{**kw, "fusion": "fused"})
    assert fused.time_range_s is None  # no eager host


@pytest.mark.parametrize(("field", "value", "message"), [
    ("sdpa_graph_build_s", 1000.0, "sdpa_graph_build_s"),  # a step-level figure: <= 10 s
    ("hf_model_layer_s", 1.0, "hf_model_layer_s"),  # one HF layer: <= 0.1 s
    ("hf_decoder_layer_kernels", 1e30, "hf_decoder_layer_kernels"),
    ("probe_kernels", {"sdpa": -50}, "launches 1-64 kernels"),
    ("probe_kernels", {"sdpa": 10**6}, "launches 1-64 kernels"),
    ("probe_kernels", {"matmul": 1}, "probe_kernels"),
])
def test_a_profile_past_any_machine_is_refused_when_read(tmp_path, field, value, message):
    """Audit, 2026-12-01: 3,600 s a call passed (a sweep priced 33 h a step), a negative probe
    count priced an SDPA call at 255 us, 1e30 kernels a layer took the host to 4e-30 s."""
    with pytest.raises(SpecError, match=message):
        gm.load_host(str(_reference_with(tmp_path, **{field: value})))


def test_a_scaled_profile_is_derived_not_read_again(tmp_path):
    """A profile near its bounds slowed by its drift or the slowest rank stays a profile (it was
    validated when read); the CLI had refused it naming 'typical x1.581', a name the user never
    wrote."""
    h = gm.load_host(str(_reference_with(tmp_path, sdpa_graph_build_s=9.0, hf_model_layer_s=0.09)))
    s = h.scaled(1.6)
    assert s.sdpa_graph_build_s == pytest.approx(14.4) and s.hf_model_layer_s == pytest.approx(0.144)
    with pytest.raises(SpecError, match="slow-down factor"):
        h.scaled(float("nan"))


def test_host_repeats_reach_the_measurement_and_are_checked(tmp_path, monkeypatch, capsys):
    """`validate --host-only --host-repeats 30` measures 30 interleaved rounds; out of 3-1000
    is one line and exit 2, before anything is measured."""
    import gpumodel.validate.host as host_mod
    from gpumodel.cli import main

    seen = []

    def fake(repeats=9, progress=None, window_s=0.0):
        seen.append((repeats, window_s))
        return build_profile(fake_samples(), META)

    monkeypatch.setattr(host_mod, "measure_host_profile", fake)
    out = str(tmp_path / "h.yaml")
    assert main(["validate", "--host-only", "--host-out", out, "--host-repeats", "30",
                 "--no-progress"]) == 0  # fmt: skip
    assert seen == [(30, 60.0)]  # the window's default: 60 s
    assert main(["validate", "--host-only", "--host-out", out, "--host-window", "0",
                 "--no-progress"]) == 0  # fmt: skip
    assert seen[-1] == (9, 0.0)
    capsys.readouterr()
    for opt, bad, msg in (("--host-repeats", "2", "--host-repeats must be 3-1000"),
                          ("--host-repeats", "1001", "--host-repeats must be 3-1000"),
                          ("--host-window", "-1", "--host-window must be 0-3600 seconds"),
                          ("--host-window", "3601", "--host-window must be 0-3600 seconds"),
                          ("--host-window", "nan", "--host-window must be 0-3600 seconds")):  # fmt: skip
        assert main(["validate", "--host-only", opt, bad]) == 2
        err = capsys.readouterr().err.strip()
        assert msg in err and len(err.splitlines()) == 1
    assert len(seen) == 2


def test_window_rescales_the_rounds_host_figures_to_the_median_speed():
    """Rounds saw the larger HF model at 10 ms, a window after them at 20 ms (x5 samples): the
    median over both is 20 ms, so every host-side figure sampled in the rounds doubles (by
    hand); GPU-side and model figures are left alone, a figure that was not measured stays
    None, and an empty window changes nothing."""
    from gpumodel.validate.host import to_window_speed

    s = {"eager_op_s.matmul": [1e-6, 2e-6, 3e-6], "kernel_launch_s": [5e-6],
         "graph_replay_per_kernel_s": [2e-6], "hf_model_layer_s": [6e-4],
         "sdpa_graph_build_s": None}  # fmt: skip
    note = to_window_speed(s, [0.01] * 3, [0.02] * 5)
    assert note == {"samples": 5, "speed_factor": 2.0}
    assert s["eager_op_s.matmul"] == pytest.approx([2e-6, 4e-6, 6e-6])
    assert s["kernel_launch_s"] == pytest.approx([1e-5])
    assert s["graph_replay_per_kernel_s"] == [2e-6] and s["hf_model_layer_s"] == [6e-4]
    assert s["sdpa_graph_build_s"] is None
    before = dict(s)
    assert to_window_speed(s, [0.01] * 3, []) == {"samples": 0, "speed_factor": 1.0}
    assert s == before


@pytest.mark.parametrize("window_s", [-1.0, 3601.0, float("nan")])
def test_measurement_refuses_a_bad_window(window_s):
    from gpumodel.validate.host import measure_host_samples

    with pytest.raises(SpecError, match="window of 0-3600 s"):
        measure_host_samples(device="cpu", window_s=window_s)


def test_conv_probe_note_compares_the_old_single_shape_with_the_figure():
    """notes.conv_probe: each shape's median in microseconds, and the single heuristic-planned
    shape of earlier profiles over the profile's figure (medians: 20 us / 25 us = 0.8)."""
    from gpumodel.validate.host import CONV_PROBE_LABELS, _conv_probe_note

    samples = {"eager_op_s.conv": [24e-6, 25e-6, 30e-6],
               "conv_shape.heuristic 64x14x14 3x3": [19e-6, 20e-6, 21e-6],
               f"conv_shape.{CONV_PROBE_LABELS[0]}": [22e-6, 23e-6, 40e-6],
               "eager_op_s.matmul": [1e-5]}  # fmt: skip
    note = _conv_probe_note(samples)
    assert note["host_us_per_call"] == {"heuristic 64x14x14 3x3": 20.0, CONV_PROBE_LABELS[0]: 23.0}
    assert note["heuristic_single_over_figure"] == pytest.approx(0.8)
    assert _conv_probe_note({"eager_op_s.conv": None}) == {"host_us_per_call": {}}


def test_a_profile_of_the_new_conv_probe_counts_one_launch_per_call():
    """The probe's description still names F.conv2d and channels_last: one kernel a call, so the
    eager floor adds nothing for a channels-last conv and two launches for an NCHW one."""
    from gpumodel.hostprofile import HostProfile
    from gpumodel.validate.host import EAGER_OPS_PROBES

    hp = HostProfile.model_validate(build_profile(fake_samples(), META, extra={
        "shapes": {"eager_ops": EAGER_OPS_PROBES}}))  # fmt: skip
    assert "cudnn.benchmark" in EAGER_OPS_PROBES and hp.probe_launches("conv") == 1


def test_build_profile_writes_the_copies_when_measured_and_null_when_not():
    """Samples 1..10 us per copy kind: median 5.5 us, p10 1.9, p90 9.1 (numpy's linear rule)."""
    from gpumodel.hostprofile import HostProfile

    samples = fake_samples()
    assert build_profile(samples, META)["host_copy_s"] is None
    for kind in ("h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable"):
        samples[f"host_copy_s.{kind}"] = [i * 1e-6 for i in range(1, 11)]
    prof = build_profile(samples, META)
    assert prof["host_copy_s"] == {k: pytest.approx(5.5e-6) for k in
                                     ("h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable")}
    assert prof["spread"]["host_copy_s.h2d_pinned"] == [pytest.approx(1.9e-6),
                                                        pytest.approx(9.1e-6)]  # fmt: skip
    assert HostProfile.model_validate(prof).copy_cost_s("d2h", False) == pytest.approx(5.5e-6)


def test_the_default_host_is_the_median_measured_machine():
    """The shipped ``typical`` host, recomputed here with numpy from the committed profiles of
    the device machines (one per device call: the same time and CPU count once), those measured
    before the cutoff it names: each figure their median, its drift the p10/p90 of a machine's
    HF layer time over the median's."""
    import numpy as np

    h = gm.load_host()  # no profile in the test's cache: the shipped default
    from gpumodel.hostprofile import SHIPPED_REFERENCE_HOSTS

    assert h.name == "typical" and h.name in SHIPPED_REFERENCE_HOSTS
    cutoff = h.notes["profiles_measured_before"]
    root = Path(__file__).resolve().parents[1] / "validation" / "results"
    profiles = {}
    for path in root.glob("**/host*.yaml"):
        d = yaml.safe_load(path.read_text())
        if isinstance(d, dict) and d.get("host_profile") == 1 and str(d["measured_at"]) < cutoff:
            profiles[(str(d["measured_at"]), d["cpu_model"])] = d
    assert len(profiles) >= 250
    for kind in ("matmul", "elementwise", "sdpa", "optimizer_step"):
        values = [d["eager_op_s"][kind] for d in profiles.values()]
        assert h.cost_s(kind) == pytest.approx(np.median(values), rel=1e-4), kind
    layer = np.array([d["hf_model_layer_s"] for d in profiles.values()
                      if d.get("hf_model_layer_s") is not None])  # fmt: skip
    assert h.hf_model_layer_s == pytest.approx(np.median(layer), rel=1e-4)
    assert h.host_drift == pytest.approx(np.percentile(layer, [10, 90]) / np.median(layer),
                                         abs=1e-3)  # fmt: skip
    # 2-3x below the flat 26.6 us per call the model assumed before (reference-h100)
    old = gm.load_host("reference-h100")
    assert 2 < old.cost_s("elementwise") / h.cost_s("elementwise") < 4


@pytest.mark.parametrize("name", ["lab\x1b[31mred", "two\nlines", " ", "x" * 201])
def test_a_profile_name_every_prediction_prints_is_plain_text(tmp_path, name):
    """A host profile's name is printed beside every prediction that uses it: an escape
    sequence in a shared YAML would recolour or rewrite a user's terminal, a newline split the
    line. Such a name is refused when the file is read, one line naming the field."""
    src = RESULTS / "steps-h200-run39" / "host-llama-eager.yaml"
    profile = yaml.safe_load(src.read_text())
    profile["name"] = name
    path = tmp_path / "host.yaml"
    path.write_text(yaml.safe_dump(profile))
    with pytest.raises(SpecError, match="name: must"):
        gm.predict_inference("llama-3-8b", "h200", host=str(path))
