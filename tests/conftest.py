"""Shared fixtures: a tiny fixture GPU with round numbers, an isolated calibration cache, and
the unseen sets' scoring script as a module."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from gpumodel.specs import GPUSpec

TINY = {
    "id": "tiny",
    "name": "Tiny test GPU",
    "vendor": "nvidia",
    "architecture": "hopper",
    "compute_capability": "9.0",
    "sm_count": 10,
    "boost_clock": "1 GHz",
    "l2_cache": "4 MiB",
    "memory": {"type": "HBM", "capacity": "10 GB", "bandwidth": "1 TB/s"},
    "peak": {
        "tensor": {"bf16": "100 TFLOP/s", "fp16": "100 TFLOP/s", "tf32": "50 TFLOP/s"},
        "vector": {"fp32": "10 TFLOP/s", "bf16": "20 TFLOP/s"},
    },
    "interconnect": {"pcie": {"generation": 4, "lanes": 16}},
    "tdp": "100 W",
    "sources": [{"title": "made up for tests",
                 "fields": ["architecture", "compute_capability", "sm_count", "boost_clock",
                            "l2_cache", "memory", "peak", "interconnect", "tdp"]}],
}  # fmt: skip


@pytest.fixture
def tiny() -> GPUSpec:
    return GPUSpec.model_validate(TINY)


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path, monkeypatch):
    """Never read or write the real user cache from tests."""
    monkeypatch.setenv("GPUMODEL_CACHE_DIR", str(tmp_path / "cache"))
    from gpumodel import calibration

    calibration._find_default.cache_clear()
    calibration._system_files.cache_clear()
    yield
    calibration._find_default.cache_clear()
    calibration._system_files.cache_clear()


def uniform_host(per_op_s: float, name: str = "uniform-test-host"):
    """A host profile charging ``per_op_s`` for every eager op kind (views free): the single
    host cost per kernel the model used before host profiles (25.1 us without a calibration)."""
    from gpumodel.hostprofile import HostProfile

    kinds = ["matmul", "elementwise", "reduction", "norm", "cat", "copy", "index", "sdpa",
             "optimizer_step"]  # fmt: skip
    return HostProfile(host_profile=1, name=name, measured_at="2026-11-22T00:59:00+00:00",
                       cpu_model="test cpu", cpu_cores=1, python="3", torch="2", gpu="test",
                       eager_op_s={**dict.fromkeys(kinds, per_op_s), "view": 0.0},
                       kernel_launch_s=4.6e-6, graph_replay_s=20e-6,
                       graph_replay_per_kernel_s=1.21e-6, compiled_step_launch_s=20e-6)  # fmt: skip


@pytest.fixture
def old_host():
    """The pre-profile default: 25.1 us per eager kernel (4.6 us launch + 20.5 us HF/PyTorch)."""
    return uniform_host(25.1e-6, "old-default")


@pytest.fixture(scope="session")
def ev():
    """``validation/unseen/evaluate.py`` (a script, not a package), loaded as a module."""
    path = Path(__file__).resolve().parents[1] / "validation" / "unseen" / "evaluate.py"
    spec = importlib.util.spec_from_file_location("unseen_evaluate", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
