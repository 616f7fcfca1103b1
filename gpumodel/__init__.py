"""gpumodel: an analytical GPU performance model and cost calculator, calibrated on real hardware.

    import gpumodel as gm
    p = gm.predict(gm.ops.Gemm(m=2048, n=4096, k=4096, dtype="bf16"), "h100")
    print(p.time_s, p.bound); print(p.explain())

Heavy packages (sympy, matplotlib, cupy, torch) are imported only by the functions that use them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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

# The rest of the public API is imported on first use (PEP 562), so `import gpumodel` and the
# CLI stay fast: name -> module that defines it.
_LAZY = {
    **dict.fromkeys(
        ["AmdahlResult", "DPScaling", "DPStep", "amdahl", "amdahl_from_times",
         "data_parallel_step", "scaling_curve"], "gpumodel.model.amdahl"),
    **dict.fromkeys(["Concurrency", "Waves", "concurrency", "littles_law", "waves"],
                    "gpumodel.model.littles_law"),
    **dict.fromkeys(["Occupancy", "occupancy", "occupancy_table"], "gpumodel.model.occupancy"),
    **dict.fromkeys(["SystemSpec", "get_system", "list_systems", "load_system_file"],
                    "gpumodel.systems"),
    **dict.fromkeys(
        ["InferenceResult", "MemoryBreakdown", "ModelSpec", "ServingPlan", "TrainingPlan", "fits",
         "get_model", "list_models", "max_batch", "max_context", "plan_serving", "plan_training",
         "predict_inference", "predict_training_step"], "gpumodel.llm"),
    **dict.fromkeys(["DiagnoseReport", "TraceFormatError", "diagnose"], "gpumodel.diagnose"),
    **dict.fromkeys(["SweepResult", "sweep_inference", "sweep_training"], "gpumodel.llm.sweep"),
    **dict.fromkeys(["Price", "parse_prices", "price_for"], "gpumodel.prices"),
    **dict.fromkeys(["TrainingSearch", "search_training"], "gpumodel.llm.planning"),
    "explain_symbolic": "gpumodel.symbolic",
    "calibrate_from_trace": "gpumodel.tracecal",
}  # fmt: skip

if TYPE_CHECKING:  # pragma: no cover - for type checkers and editors
    from gpumodel import llm
    from gpumodel.diagnose import DiagnoseReport, TraceFormatError, diagnose
    from gpumodel.llm import (
        InferenceResult,
        MemoryBreakdown,
        ModelSpec,
        ServingPlan,
        TrainingPlan,
        fits,
        get_model,
        list_models,
        max_batch,
        max_context,
        plan_serving,
        plan_training,
        predict_inference,
        predict_training_step,
    )  # fmt: skip
    from gpumodel.llm.planning import TrainingSearch, search_training
    from gpumodel.llm.sweep import SweepResult, sweep_inference, sweep_training
    from gpumodel.model.amdahl import (
        AmdahlResult,
        DPScaling,
        DPStep,
        amdahl,
        amdahl_from_times,
        data_parallel_step,
        scaling_curve,
    )  # fmt: skip
    from gpumodel.model.littles_law import Concurrency, Waves, concurrency, littles_law, waves
    from gpumodel.model.occupancy import Occupancy, occupancy, occupancy_table
    from gpumodel.prices import Price, parse_prices, price_for
    from gpumodel.symbolic import explain_symbolic
    from gpumodel.systems import SystemSpec, get_system, list_systems, load_system_file
    from gpumodel.tracecal import calibrate_from_trace


def __getattr__(name: str) -> Any:
    import importlib

    if name == "llm":
        return importlib.import_module("gpumodel.llm")
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gpumodel' has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "AmdahlResult",
    "Calibration",
    "CalibrationError",
    "Concurrency",
    "DPScaling",
    "DPStep",
    "DeviceError",
    "DiagnoseReport",
    "GPUSpec",
    "GpumodelError",
    "InfeasibleError",
    "InferenceResult",
    "KernelPrediction",
    "MemoryBreakdown",
    "ModelSpec",
    "Occupancy",
    "Prediction",
    "Price",
    "ServingPlan",
    "SpecError",
    "SweepResult",
    "SystemSpec",
    "Term",
    "TraceFormatError",
    "TrainingPlan",
    "TrainingSearch",
    "UnitError",
    "UnknownGPUError",
    "UnknownModelError",
    "UnsupportedError",
    "Waves",
    "__version__",
    "amdahl",
    "amdahl_from_times",
    "calibrate_from_trace",
    "concurrency",
    "data_parallel_step",
    "diagnose",
    "explain_symbolic",
    "fits",
    "format_quantity",
    "format_time",
    "get_gpu",
    "get_model",
    "get_system",
    "list_gpus",
    "list_models",
    "list_systems",
    "littles_law",
    "llm",
    "load_calibration",
    "load_spec_file",
    "load_system_file",
    "max_batch",
    "max_context",
    "occupancy",
    "occupancy_table",
    "ops",
    "parse_prices",
    "parse_quantity",
    "plan_serving",
    "plan_training",
    "predict",
    "predict_inference",
    "predict_training_step",
    "price_for",
    "scaling_curve",
    "search_training",
    "sweep",
    "sweep_inference",
    "sweep_training",
    "waves",
]
