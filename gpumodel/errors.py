"""One error hierarchy: every error a user can cause is a GpumodelError.

The CLI catches GpumodelError, prints its one-line message and exits 2. Subclasses also inherit
the matching builtin so library callers can catch ``ValueError``/``LookupError`` as usual.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class GpumodelError(Exception):
    """Root of all errors gpumodel raises on bad input or impossible requests."""


class SpecError(GpumodelError, ValueError):
    """A spec, op or calibration value is malformed (wrong unit, missing field, bad number)."""


class UnitError(SpecError):
    """A quantity string could not be parsed into the expected dimension."""


class UnknownGPUError(GpumodelError, LookupError):
    """No GPU spec with that id or alias; the message lists close matches."""

    def __init__(self, name: str, known: Iterable[str]):
        self.name = name
        self.known = sorted(set(known))
        if "," in name:  # a list where one GPU is asked for
            super().__init__(f"one GPU id here, got the list '{name}' (predict, plan serve and "
                             "sweep-llm compare GPUs: run this once per GPU)")  # fmt: skip
            return
        close = difflib.get_close_matches(name.lower(), self.known, n=4, cutoff=0.4)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        super().__init__(f"unknown GPU '{name}'{hint} (see `gpumodel specs list`)")


class UnknownModelError(GpumodelError, LookupError):
    """No model preset with that name."""

    def __init__(self, name: str, known: Iterable[str], what: str = "model"):
        self.name = name
        self.known = sorted(set(known))
        close = difflib.get_close_matches(name.lower(), self.known, n=4, cutoff=0.4)
        hint = (
            f"; did you mean {', '.join(close)}?" if close else f"; known: {', '.join(self.known)}"
        )
        super().__init__(f"unknown {what} '{name}'{hint}")


class UnsupportedError(GpumodelError, ValueError):
    """The request is well formed but the GPU or model cannot do it (e.g. fp8 on an A100)."""


class InfeasibleError(GpumodelError, ValueError):
    """A plan does not fit: 'needs 152 GB, has 80 GB'."""

    def __init__(self, message: str, needed: float | None = None, available: float | None = None):
        self.needed = needed
        self.available = available
        super().__init__(message)


class CalibrationError(GpumodelError, ValueError):
    """A calibration file is corrupt, truncated, or belongs to another GPU."""


class DeviceError(GpumodelError, RuntimeError):
    """The local GPU (or CuPy / PyTorch) needed for a measurement is not available."""
