"""Host profile: aggregation and writer (no torch needed), CLI errors, a CPU measurement (torch)."""

from __future__ import annotations

import importlib.util

import pytest
import yaml

from gpumodel.errors import GpumodelError, SpecError
from gpumodel.validate.host import (
    EAGER_OP_KINDS,
    SCALAR_KEYS,
    build_profile,
    profile_yaml,
    quantile,
    summarize,
    write_host_profile,
)

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
    # kernel_launch_s is figure 11
    assert p["kernel_launch_s"] == pytest.approx(11 * 5.5e-6)
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
    s["eager_op_s.conv"] = [1e-6]
    with pytest.raises(SpecError, match="conv"):
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
    CUDA-only figures null, the file loads back."""
    from gpumodel.errors import DeviceError
    from gpumodel.validate.host import measure_host_profile

    try:
        p = measure_host_profile(device="cpu", repeats=3, calls=5, compile_step=False)
    except DeviceError as exc:  # pragma: no cover - torch importable but broken
        pytest.skip(f"torch present but unusable: {exc}")
    assert all(v > 0 for v in p["eager_op_s"].values())
    assert p["kernel_launch_s"] > 0
    assert p["graph_replay_s"] is None and p["graph_replay_per_kernel_s"] is None
    assert p["compiled_step_launch_s"] is None
    assert p["device"] == "cpu" and p["cuda_driver"] is None
    out = write_host_profile(p, tmp_path / "h.yaml")
    assert yaml.safe_load(out.read_text())["eager_op_s"] == p["eager_op_s"]


def test_gpumodel_error_is_the_root():
    assert issubclass(SpecError, GpumodelError)
