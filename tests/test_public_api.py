"""The public API is a contract: names may be added, never silently removed."""

import subprocess
import sys

import gpumodel as gm

CONTRACT = {
    "get_gpu", "predict", "ops", "load_calibration", "Prediction", "GPUSpec", "Calibration",
    "GpumodelError", "SpecError", "UnknownGPUError", "InfeasibleError", "CalibrationError",
    "UnsupportedError", "sweep", "list_gpus", "speed_of_light", "calibrate_from_trace",
    "sweep_inference", "sweep_training", "SweepResult", "Price", "parse_prices", "price_for",
    "HostProfile", "load_host", "list_hosts", "search_training", "TrainingSearch",
    "write_report", "Accuracy",
}  # fmt: skip


def test_all_is_complete_and_importable():
    assert CONTRACT <= set(gm.__all__)
    for name in gm.__all__:
        assert hasattr(gm, name), name


def test_ops_contract():
    for name in ("Gemm", "Conv2d", "Kernel", "Elementwise", "Reduction", "LayerNorm", "RMSNorm",
                 "Softmax", "Attention", "Copy", "ExpandCopy", "HostTransfer", "Embedding"):  # fmt: skip
        assert hasattr(gm.ops, name), name


def test_error_hierarchy():
    assert issubclass(gm.SpecError, ValueError) and issubclass(gm.SpecError, gm.GpumodelError)
    assert issubclass(gm.UnknownGPUError, LookupError)


def test_import_is_light():
    code = ("import sys, gpumodel, gpumodel.cli; "
            "heavy = [m for m in ('sympy', 'matplotlib', 'cupy', 'torch') if m in sys.modules]; "
            "print(','.join(heavy))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
