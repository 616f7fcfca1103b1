"""gpumodel: an analytical GPU performance model and cost calculator, calibrated on real hardware.

    import gpumodel as gm
    p = gm.predict(gm.ops.Gemm(m=2048, n=4096, k=4096, dtype="bf16"), "h100")
    print(p.time_s, p.bound); print(p.explain())

Heavy packages (sympy, matplotlib, cupy, torch) are imported only by the functions that use them.
"""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

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

# Everything else is imported on first use (PEP 562): `import gpumodel` loads only the error
# types, and a command loads only what it uses (pydantic, numpy and the specs are not loaded
# until a name that needs them is touched): name -> module that defines it.
_LAZY = {
    "Accuracy": "gpumodel.accuracy",
    **dict.fromkeys(["Calibration", "load_calibration"], "gpumodel.calibration"),
    "predict": "gpumodel.predict",
    **dict.fromkeys(["KernelPrediction", "Prediction", "Term"], "gpumodel.prediction"),
    **dict.fromkeys(["GPUSpec", "get_gpu", "list_gpus", "load_spec_file"], "gpumodel.specs"),
    **dict.fromkeys(["format_quantity", "format_time", "parse_quantity"], "gpumodel.units"),
    "sweep": "gpumodel.vectorised",
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
    **dict.fromkeys(["HostProfile", "list_hosts", "load_host"], "gpumodel.hostprofile"),
    **dict.fromkeys(["SweepResult", "sweep_inference", "sweep_training"], "gpumodel.llm.sweep"),
    **dict.fromkeys(["Price", "parse_prices", "price_for"], "gpumodel.prices"),
    **dict.fromkeys(["TrainingSearch", "search_training"], "gpumodel.llm.planning"),
    "explain_symbolic": "gpumodel.symbolic",
    "speed_of_light": "gpumodel.sol",
    "calibrate_from_trace": "gpumodel.tracecal",
    "write_report": "gpumodel.report",
}  # fmt: skip
_SUBMODULES = ("ops", "llm")

if TYPE_CHECKING:  # pragma: no cover - for type checkers and editors
    from gpumodel import llm, ops
    from gpumodel.accuracy import Accuracy
    from gpumodel.calibration import Calibration, load_calibration
    from gpumodel.diagnose import DiagnoseReport, TraceFormatError, diagnose
    from gpumodel.hostprofile import HostProfile, list_hosts, load_host
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
    from gpumodel.predict import predict
    from gpumodel.prediction import KernelPrediction, Prediction, Term
    from gpumodel.prices import Price, parse_prices, price_for
    from gpumodel.report import write_report
    from gpumodel.sol import speed_of_light
    from gpumodel.specs import GPUSpec, get_gpu, list_gpus, load_spec_file
    from gpumodel.symbolic import explain_symbolic
    from gpumodel.systems import SystemSpec, get_system, list_systems, load_system_file
    from gpumodel.tracecal import calibrate_from_trace
    from gpumodel.units import format_quantity, format_time, parse_quantity
    from gpumodel.vectorised import sweep


def __getattr__(name: str) -> Any:
    import importlib

    if name in _SUBMODULES:
        return importlib.import_module(f"gpumodel.{name}")
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'gpumodel' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """``gpumodel.predict`` and ``gpumodel.diagnose`` are functions named like the modules that
    define them. Importing such a module binds the module on the package (the import system's
    ``setattr(parent, child, module)``); here that binding keeps the function instead, as the
    eager ``from gpumodel.predict import predict`` did."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _SHADOWED and isinstance(value, types.ModuleType):
            value = getattr(value, name)
        super().__setattr__(name, value)


_SHADOWED = frozenset(n for n, module in _LAZY.items() if module == f"gpumodel.{n}")
sys.modules[__name__].__class__ = _Package


__version__ = "0.1.0"

__all__ = [
    "Accuracy",
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
    "HostProfile",
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
    "list_hosts",
    "list_models",
    "list_systems",
    "littles_law",
    "llm",
    "load_calibration",
    "load_host",
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
    "speed_of_light",
    "sweep",
    "sweep_inference",
    "sweep_training",
    "waves",
    "write_report",
]
