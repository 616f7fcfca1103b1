"""Diagnose a real profile: every op against its speed of light, and what holds the step back.

    import gpumodel as gm
    report = gm.diagnose("trace.json.gz")            # torch.profiler export_chrome_trace
    for f in report.findings:
        print(f"{f.recoverable_s * 1e3:.2f} ms/step ({f.pct_of_step:.0f}%): {f.title}")
    report.to_dict()                                  # the --json form (schema_version 1)

Input: a torch.profiler Chrome trace recorded with ``record_shapes=True`` (gzip or not), or an
Nsight Systems kernel summary CSV (``nsys stats --report cuda_gpu_kern_sum --format csv``).
"""

from __future__ import annotations

import sys
import types
from typing import Any

from gpumodel.diagnose.gpus import gpu_from_device_name
from gpumodel.diagnose.parse import Trace, TraceFormatError, load_trace
from gpumodel.diagnose.report import (
    SCHEMA_VERSION,
    Amdahl,
    AmdahlEntry,
    DiagnoseReport,
    Finding,
    GpuInfo,
    OmittedOps,
    OpRow,
    SourceInfo,
    StepInfo,
    Totals,
    diagnose,
)

__all__ = [
    "SCHEMA_VERSION",
    "Amdahl",
    "AmdahlEntry",
    "DiagnoseReport",
    "Finding",
    "GpuInfo",
    "OmittedOps",
    "OpRow",
    "SourceInfo",
    "StepInfo",
    "Totals",
    "Trace",
    "TraceFormatError",
    "diagnose",
    "gpu_from_device_name",
    "load_trace",
]


class _CallableModule(types.ModuleType):
    """``gpumodel.diagnose`` is both this package and the function: once the package is
    imported, Python sets ``gpumodel.diagnose`` to the package, so calling it calls the function
    (``gm.diagnose(trace)`` works whichever was imported first)."""

    def __call__(self, *args: Any, **kwargs: Any) -> DiagnoseReport:
        return diagnose(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
