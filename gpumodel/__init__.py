"""gpumodel: an analytical GPU performance model and cost calculator, calibrated on real hardware.

    import gpumodel as gm
    p = gm.predict(gm.ops.Gemm(m=2048, n=4096, k=4096, dtype="bf16"), "h100")
    print(p.time_s, p.bound); print(p.explain())

Heavy packages (sympy, matplotlib, cupy, torch) are imported only by the functions that use them.
"""

from __future__ import annotations

from gpumodel import ops
from gpumodel.calibration import Calibration, load_calibration
from gpumodel.errors import (
    CalibrationError,
    DeviceError,
    GpumodelError,
    InfeasibleError,
    SpecError,
    UnitError,
    UnknownGPUError,
    UnknownModelError,
    UnsupportedError,
)
from gpumodel.predict import predict
from gpumodel.prediction import KernelPrediction, Prediction, Term
from gpumodel.specs import GPUSpec, get_gpu, list_gpus, load_spec_file
from gpumodel.units import format_quantity, format_time, parse_quantity
from gpumodel.vectorised import sweep


__version__ = "0.1.0"

__all__ = [
    "Calibration",
    "CalibrationError",
    "DeviceError",
    "GPUSpec",
    "GpumodelError",
    "InfeasibleError",
    "KernelPrediction",
    "Prediction",
    "SpecError",
    "Term",
    "UnitError",
    "UnknownGPUError",
    "UnknownModelError",
    "UnsupportedError",
    "__version__",
    "format_quantity",
    "format_time",
    "get_gpu",
    "list_gpus",
    "load_calibration",
    "load_spec_file",
    "ops",
    "parse_quantity",
    "predict",
    "sweep",
]
