"""What a calibration fitted from a trace records: per-family fits, the profiler correction,
the host and the runtime, with the trace's provenance (see gpumodel.tracecal)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


def family_key(family: str, bound: str) -> str:
    """The key of a trace-fitted family scale: the op family and its bound class."""
    cls = (
        "compute" if bound in ("compute", "issue") else "memory" if bound == "memory" else "latency"
    )
    return f"{family}/{cls}"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FamilyFit(_Frozen):
    """One family/bound pair: GPU time measured and predicted per step, and their ratio."""

    key: str  # "gemm/memory"
    kernels_per_step: float
    measured_s: float  # per step
    predicted_s: float  # per step, base calibration
    scale: float  # measured / predicted (stored when fitted)
    fitted: bool


class ProfilerCorrection(_Frozen):
    """How the profiler's own host cost was taken out."""

    method: str  # "step-ms" (solved from the unprofiled step time) or "default per-event cost"
    per_event_s: float
    events_per_step: float
    removed_per_step_s: float
    profiled_host_step_s: float
    host_step_s: float  # after the correction


class TraceFit(_Frozen):
    """What was fitted from a trace, with its provenance (stored in the calibration)."""

    trace_path: str
    trace_sha256: str
    gpu_id: str
    device_name: str | None
    runtime: str
    runtime_evidence: list[str]
    created: datetime
    steps: int
    step_time_s: float  # measured step period in the trace (profiled)
    unprofiled_step_s: float | None  # --step-ms, when given
    gpu_busy_s: float  # per step
    kernels_per_step: float
    graph_launches_per_step: float
    matched_fraction: float  # of the step's GPU time, matched to modelled ops
    unmatched: list[dict[str, Any]]  # the largest unmatched kernels: name, family, s/step, reason
    families: list[FamilyFit]
    profiler: ProfilerCorrection
    host_per_kernel_s: float  # corrected host time per launched kernel (eager) or per graph
    host_op_s: dict[str, float]  # corrected median host time of one top-level call, by kind
    host_op_counts: dict[str, float]  # top-level calls per step, by kind
    self_check: dict[str, float]  # the fitted model on the traced step itself
    model: str | None = None
    # allocator high-water marks of the traced steps (profile_memory=True), bytes
    peak_allocated_bytes: float | None = None
    peak_reserved_bytes: float | None = None
    notes: list[str] = Field(default_factory=list)


__all__ = ["FamilyFit", "ProfilerCorrection", "TraceFit", "family_key"]
