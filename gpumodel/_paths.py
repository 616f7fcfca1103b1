"""Where shipped data lives: inside the wheel (gpumodel._specs, gpumodel._validation) or, when
running from a source checkout, the top-level ``specs/`` and ``validation/`` folders."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def _data_dir(package: str, checkout_name: str) -> Path:
    installed = _PKG / package
    if installed.is_dir():
        return installed
    return _PKG.parent / checkout_name


def specs_dir() -> Path:
    """Shipped GPU spec YAML files."""
    return _data_dir("_specs", "specs")


def models_dir() -> Path:
    """Shipped LLM preset YAML files."""
    return specs_dir() / "models"


def systems_dir() -> Path:
    """Shipped multi-GPU system (node/cluster) YAML files."""
    return specs_dir() / "systems"


def validation_dir() -> Path:
    """CUDA kernel sources and shipped calibration results."""
    return _data_dir("_validation", "validation")


def kernels_dir() -> Path:
    return validation_dir() / "kernels"


def results_dir() -> Path:
    return validation_dir() / "results"
