"""What a calibration fitted from a trace records: per-family fits, the profiler correction,
the host and the runtime, with the trace's provenance (see gpumodel.tracecal)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gpumodel._validators import (
    ByteCount,
    FiniteFloat,
    Fraction,
    HostCallSecondsOrZero,
    HostSecondsOrZero,
    HostStepSecondsOrZero,
    NonEmptyStr,
    NonNegativeFloat,
    PositiveFloat,
    PositiveSeconds,
    Seconds,
    SmallCount,
)

# the runtimes whose steps replay CUDA graphs (a trace of one issues no eager launch)
GRAPH_RUNTIMES = ("fused-graph", "hf-static-compiled")
# The runtimes ``tracecal.identify_runtime`` names: graphs of a serving engine or of
# torch.compile, compiled kernels launched eagerly, plain eager; ``train-`` in front for a step
# with a backward pass. A calibration file naming another is refused (it was dropped silently).
TraceRuntime = Literal[
    "hf-eager", "hf-static-compiled", "fused-graph", "compiled-eager",
    "train-hf-eager", "train-hf-static-compiled", "train-fused-graph", "train-compiled-eager",
]  # fmt: skip


def family_key(family: str, bound: str) -> str:
    """The key of a trace-fitted family scale: the op family and its bound class."""
    cls = (
        "compute" if bound in ("compute", "issue") else "memory" if bound == "memory" else "latency"
    )
    return f"{family}/{cls}"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class FamilyFit(_Frozen):
    """One family/bound pair: GPU time measured and predicted per step, and their ratio."""

    key: str  # "gemm/memory"
    kernels_per_step: NonNegativeFloat
    measured_s: Seconds  # per step
    predicted_s: Seconds  # per step, base calibration
    scale: NonNegativeFloat  # measured / predicted (stored when fitted)
    fitted: bool
    # smallest and largest predicted kernel of the family's traced ops (each op's largest,
    # seconds): where the scale holds (family_time_scale_span_s when fitted; predict.scale_at_size)
    span_lo_s: PositiveSeconds | None = None
    span_hi_s: PositiveSeconds | None = None


class ProfilerCorrection(_Frozen):
    """How the profiler's own host cost was taken out."""

    method: str  # "step-ms" (solved from the unprofiled step time) or "default per-event cost"
    per_event_s: Seconds
    events_per_step: NonNegativeFloat
    removed_per_step_s: Seconds
    profiled_host_step_s: Seconds
    host_step_s: Seconds  # after the correction (and the rescale below)
    # an eager inference trace calibrated with --host and without --step-ms: its host times
    # scaled to the profile's speed (tracecal._at_profile_speed);
    # host_step_s = (profiled_host_step_s - removed_per_step_s) x this
    host_speed_factor: PositiveFloat = 1.0


class TraceFit(_Frozen):
    """What was fitted from a trace, with its provenance (stored in the calibration)."""

    trace_path: str
    trace_sha256: str
    gpu_id: str
    device_name: str | None
    runtime: TraceRuntime
    runtime_evidence: list[str]
    created: datetime
    steps: SmallCount
    step_time_s: Seconds  # measured step period in the trace (profiled)
    unprofiled_step_s: PositiveSeconds | None  # --step-ms, when given
    gpu_busy_s: Seconds  # per step
    kernels_per_step: NonNegativeFloat
    graph_launches_per_step: NonNegativeFloat
    matched_fraction: Fraction  # of the step's GPU time, matched to modelled ops
    unmatched: list[dict[str, Any]]  # the largest unmatched kernels: name, family, s/step, reason
    families: list[FamilyFit]
    profiler: ProfilerCorrection
    # host seconds per eager kernel launch: the trace's own (profiler's cost removed), per
    # launched kernel; a trace of graph replays launches none, and holds the host profile's
    # figure (``eager_host_from`` says so). At most a host profile's call (MAX_HOST_CALL_S).
    host_per_kernel_s: HostCallSecondsOrZero
    # corrected median host time of one top-level call, by kind (a call of a step-level
    # figure at most: MAX_HOST_STEP_S; the committed traces' largest median is 2.2 ms)
    host_op_s: dict[str, HostStepSecondsOrZero]
    host_op_counts: dict[str, NonNegativeFloat]  # top-level calls per step, by kind
    self_check: dict[str, FiniteFloat]  # the fitted model on the traced step itself
    # NCCL kernels per step by collective ("all_reduce", "all_gather", ...; "nccl" where the
    # kind is not known): which multi-GPU layout the traced rank ran (none: one GPU)
    collectives: dict[str, NonNegativeFloat] = Field(default_factory=dict)
    model: str | None = None
    # allocator high-water marks of the traced steps (profile_memory=True), bytes
    peak_allocated_bytes: ByteCount | None = None
    peak_reserved_bytes: ByteCount | None = None
    notes: list[str] = Field(default_factory=list)
    # where ``host_per_kernel_s`` came from when the trace measured no eager launch (a trace of
    # graph replays: its host is one replay's, never a kernel's); None: the trace's own
    eager_host_from: NonEmptyStr | None = None

    @model_validator(mode="after")
    def _graph_host_is_not_a_kernels(self) -> TraceFit:
        """A graph trace written before 2026-12-01 stored one replay's host as its host per
        kernel (1.26 ms, where an eager kernel costs 15-20 us): priced per eager kernel it made
        a prefill 70x too slow. Such a file is refused, not priced."""
        graph = self.runtime.removeprefix("train-") in GRAPH_RUNTIMES
        if graph and self.graph_launches_per_step > 0 and self.eager_host_from is None:
            raise ValueError("a trace of graph replays whose host_per_kernel_s is one replay's "
                             "host, not an eager kernel's (written before 2026-12-01): "
                             "calibrate from the trace again")  # fmt: skip
        return self


class TraceHost(_Frozen):
    """The traced machine's host costs, as ``calibrate --trace`` records them beside the fit
    (profiler cost removed): eager op costs by kind, the launch cost, the graph replay."""

    host_profile: Literal[1]
    name: NonEmptyStr
    measured_at: NonEmptyStr
    source: NonEmptyStr
    eager_op_s: dict[NonEmptyStr, HostSecondsOrZero | None]
    kernel_launch_s: HostCallSecondsOrZero | None = None
    graph_replay_s: HostStepSecondsOrZero | None = None
    per_step_host_s: HostStepSecondsOrZero | None = None


__all__ = [
    "GRAPH_RUNTIMES",
    "FamilyFit",
    "ProfilerCorrection",
    "TraceFit",
    "TraceHost",
    "TraceRuntime",
    "family_key",
]
