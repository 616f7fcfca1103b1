"""Shared fixtures: a tiny fixture GPU with round numbers, and an isolated calibration cache."""

from __future__ import annotations

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
