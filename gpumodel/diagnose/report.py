"""``diagnose(trace) -> DiagnoseReport``: per-op speed of light, step findings, Amdahl summary.

Per op (grouped by operator, input shapes, dtype and phase): measured time (sum over calls of
the call's kernel durations), predicted time on the trace's GPU (``predict(op, gpu,
calibration)`` as a trace records kernels: ``TRACED_CONDITION``, ``WARM_OPS``), speed of light
(``gpumodel.sol.speed_of_light``: roofs no kernel can beat, so speed-of-light % = speed of
light / measured never exceeds 100), the bound, and recoverable time = measured - predicted
(never below zero).

The JSON form (``DiagnoseReport.to_dict()``, ``gpumodel diagnose --json``) is versioned by
``schema_version``; its keys are documented on each model below and pinned by a test. Times are
in seconds (``*_s``), per step where the name says so.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from gpumodel._io import gc_paused
from gpumodel.calibration import DATASHEET_LABEL, Calibration
from gpumodel.diagnose.comms import FAMILY as COMM_FAMILY
from gpumodel.diagnose.findings import (
    FIXES,
    HOST_PACED,
    Draft,
    GroupView,
    idle_findings,
    kernel_findings,
    without_profiler,
)
from gpumodel.diagnose.gpus import gpu_from_device_name
from gpumodel.diagnose.mapping import Mapped
from gpumodel.diagnose.model_match import match_optimizer, optimizer_note
from gpumodel.diagnose.parse import GRAPH_REPLAY_NOTE, Trace, TraceFormatError, load_trace
from gpumodel.diagnose.timeline import (
    SHORT_KERNEL_US,
    Instance,
    Timeline,
    build_timeline,
    short_name,
)
from gpumodel.errors import GpumodelError
from gpumodel.ops import Conv2d, Gemm, Op
from gpumodel.predict import predict
from gpumodel.prediction import Prediction
from gpumodel.sol import speed_of_light
from gpumodel.specs import GPUSpec, get_gpu
from gpumodel.tracefit import ProfilerCorrection

if TYPE_CHECKING:
    from gpumodel.hostprofile import HostProfile

# 2: sol_per_call_s added; sol_pct is the speed-of-light bound, not the model. 3: the profiler's
# own host cost (``profiler``, ``steps.unprofiled_step_time_s``) is taken out of the findings
SCHEMA_VERSION = 3
MIN_FINDING_FRACTION = 0.01  # findings worth less than 1% of the step are not reported
MIN_FINDING_S = 5e-6


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)


class SourceInfo(_Frozen):
    """Where the profile came from."""

    path: str | None
    format: str  # "torch_chrome_trace" or "nsys_kern_sum_csv"
    truncated: bool = False
    record_shapes: bool | None = None
    events: int = 0


class GpuInfo(_Frozen):
    """The GPU the predictions are for."""

    id: str
    name: str
    device_name: str | None = None  # as CUDA named it in the trace
    source: str  # "trace" or "argument"


class StepInfo(_Frozen):
    """The analysed window and what one step of it looks like."""

    count: int  # profiled steps with GPU work
    step_time_s: float
    window_s: float
    periods: int  # whole step periods in the window
    source: str  # "ProfilerStep", "ProfilerStep (one step)", "whole trace", "kernel summary"
    gpu_busy_s: float | None  # per step
    gpu_idle_s: float | None  # per step
    gpu_utilization_pct: float | None
    kernels_per_step: float | None
    # the step without the profiler's own host cost (``DiagnoseReport.profiler``): the step
    # the findings and Amdahl's times are for; None for a kernel summary
    unprofiled_step_time_s: float | None = None
    # its range where it was estimated (no step_ms): the profiler's cost per event at the p10
    # and p90 of what it was on traced machines (gpumodel.tracecal.PROFILER_EVENT_SPREAD_S)
    unprofiled_step_range_s: tuple[float, float] | None = None


class OpRow(_Frozen):
    """One operator (same name, input shapes, dtype and phase) over all its calls."""

    name: str
    phase: str  # "forward", "backward", "optimizer" or ""
    shapes: list[list[int]]
    dtype: str
    op: str | None  # the gpumodel op it was mapped to (label), None when unmapped
    mapped: bool
    reason: str | None  # why it is unmapped
    count: int
    measured_s: float
    measured_per_call_s: float
    predicted_per_call_s: float | None
    predicted_s: float | None
    sol_per_call_s: float | None  # speed of light (gpumodel.sol): no kernel can beat it
    sol_pct: float | None  # speed of light / measured x 100 (<= 100)
    bound: str | None
    recoverable_s: float  # measured - predicted, >= 0 (0 when unmapped)
    flops_per_call: float | None
    bytes_per_call: float | None
    arithmetic_intensity: float | None
    achieved_flops_per_s: float | None
    kernels: list[str]
    notes: list[str]


class Finding(_Frozen):
    """A step-level problem, what it costs per step and the fix."""

    kind: str  # data_loading, host_sync, launch_bound, host_other, pageable_copy,
    # fp32_matmul, misaligned_matmul, fusion
    title: str
    recoverable_s: float | None  # per step
    pct_of_step: float | None
    step_time_if_fixed_s: float | None
    fix: str
    evidence: list[str]
    details: dict[str, Any]


class AmdahlEntry(_Frozen):
    kind: str
    step_time_s: float
    speedup: float | None  # None when the fix would remove the whole step


class Amdahl(_Frozen):
    """Step time if each finding were fixed alone, and if all were."""

    step_time_s: float
    per_finding: list[AmdahlEntry]
    all_fixed_step_time_s: float
    all_fixed_speedup: float | None
    speed_of_light_step_s: float | None  # every mapped op at its speed of light, no idle
    # (the bound of gpumodel.sol for mapped ops, measured time for the rest)
    note: str


class OmittedOps(_Frozen):
    count: int
    measured_s: float


class Totals(_Frozen):
    measured_s: float  # all GPU activity in the analysed ops
    mapped_measured_s: float
    predicted_s: float  # for the mapped ops
    unmapped_measured_s: float
    recoverable_s: float


class DiagnoseReport(_Frozen):
    """What ``gpumodel diagnose`` found in a profile."""

    schema_version: int = SCHEMA_VERSION
    source: SourceInfo
    gpu: GpuInfo
    calibration: str
    steps: StepInfo
    ops: list[OpRow]
    ops_omitted: OmittedOps
    totals: Totals
    findings: list[Finding]
    amdahl: Amdahl
    # the profiler's host cost per step and how it was found (None: a kernel summary)
    profiler: ProfilerCorrection | None = None
    notes: list[str] = Field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def finding(self, kind: str) -> Finding | None:
        return next((f for f in self.findings if f.kind == kind), None)


# ---------------------------------------------------------------------------------------------


@gc_paused()  # a trace is millions of objects: see gc_paused
def diagnose(
    trace: str | Path | dict[str, Any] | Trace,
    gpu: GPUSpec | str | None = None,
    calibration: Calibration | str | None = None,
    top: int | None = None,
    step_ms: float | None = None,
    host: HostProfile | str | Path | None = None,
) -> DiagnoseReport:
    """Diagnose a profile: a path to a torch.profiler Chrome trace (``.json``/``.json.gz``) or an
    Nsight Systems kernel summary CSV, a loaded trace dict, or a :class:`Trace`.

    ``gpu``: used when the trace does not name its device (or names one not in the library).
    ``calibration``: as for :func:`gpumodel.predict` (None: the best one found for the GPU).
    ``top``: keep the ``top`` ops with the most recoverable time (the rest are summed); >= 0.

    The profiler slows the host (each recorded event costs it a few microseconds), so a
    host-bound step runs longer traced than it does in the user's job. Its cost is taken out of
    the host-paced idle findings, and the findings and Amdahl's times are for the step without
    it (``steps.unprofiled_step_time_s``; how: ``profiler``): solved from ``step_ms``, the step
    time measured without the profiler (your logs), where given; else estimated from the
    recorded events at ``host``'s measured cost per event (a host profile: name, file or
    ``HostProfile``), or the default one (``gpumodel.tracecal.DEFAULT_PROFILER_EVENT_S``).
    """
    if top is not None:
        from gpumodel._validators import check_int

        top = check_int(top, "top", ge=0)
    tr = load_trace(trace)
    notes = list(tr.warnings)
    if tr.format == "nsys_kern_sum_csv":
        if step_ms is not None or host is not None:
            raise TraceFormatError(
                f"{tr.path or 'the profile'}: --step-ms and --host take the profiler's host cost "
                "out of a torch.profiler trace's timeline; an Nsight kernel summary has none"
            )
        spec, info = _resolve_gpu(tr, gpu, None, notes)
        return _diagnose_nsys(tr, spec, info, calibration, top, notes)
    tl = build_timeline(tr)
    notes += tl.notes
    spec, info = _resolve_gpu(tr, gpu, tl.device, notes)
    n_opt = match_optimizer(tr, tl)
    if n_opt:
        notes.append(optimizer_note(n_opt))
    if tr.graph_replayed:
        notes.append(GRAPH_REPLAY_NOTE + "; the timeline findings below do not need them")
    elif not tr.has_shapes:
        notes.append("no shapes recorded: record with record_shapes=True for per-op speed of "
                     "light; the timeline findings below do not need them")  # fmt: skip
    groups = _group(tl.instances)
    views, _ = _rows(groups, _Predictor(spec, calibration))
    predictor = _Predictor(spec, calibration, load=traced_load(views, spec))
    views, rows = _rows(groups, predictor)
    step_s = tl.step_us * 1e-6
    drafts = idle_findings(tl) + kernel_findings(views, spec, tl)
    prof, unprof_s, unprof_span, drafts = _without_profiler(tr, tl, drafts, step_s, step_ms, host)
    findings, amdahl = _summarise(drafts, unprof_s, tl, views)
    kernels = [g for g in tl.kernels_in_window if g.kind == "kernel"]
    steps = StepInfo(
        count=tl.steps_with_work, step_time_s=step_s, window_s=tl.window_us * 1e-6,
        periods=tl.periods, source=tl.step_source,
        gpu_busy_s=tl.busy_us / tl.periods * 1e-6,
        gpu_idle_s=(tl.window_us - tl.busy_us) / tl.periods * 1e-6,
        gpu_utilization_pct=100.0 * tl.busy_us / tl.window_us if tl.window_us > 0 else None,
        kernels_per_step=len(kernels) / tl.periods, unprofiled_step_time_s=unprof_s,
        unprofiled_step_range_s=unprof_span,
    )  # fmt: skip
    return _assemble(tr, info, predictor.label, steps, rows, top, findings, amdahl, notes, prof)


def _without_profiler(
    tr: Trace,
    tl: Timeline,
    drafts: list[Draft],
    step_s: float,
    step_ms: float | None,
    host: HostProfile | str | Path | None,
) -> tuple[ProfilerCorrection, float, tuple[float, float] | None, list[Draft]]:
    """(the profiler's cost, the step without it, that step's range where it was estimated, the
    findings without it). The step loses the host time the profiler added only while the host
    set its pace: at most the host-paced idle time (``HOST_PACED``), unless ``step_ms`` says by
    how much."""
    from gpumodel.tracecal import PROFILER_EVENT_SPREAD_S, profiler_cost

    prof, _ = profiler_cost(tr, tl, tr.path or "trace", step_ms, host)
    paced_us = sum(d.per_step_us or 0.0 for d in drafts if d.idle and d.kind in HOST_PACED)
    idle_us = sum(d.per_step_us or 0.0 for d in drafts if d.idle)
    if step_ms is not None:  # the step measured without the profiler: it loses the difference
        cut_us = min(max(step_s - step_ms * 1e-3, 0.0) * 1e6, idle_us)
        return prof, step_s - cut_us * 1e-6, None, without_profiler(drafts, cut_us, "solved "
                                                                     "from --step-ms")  # fmt: skip

    def cut(per_event_s: float) -> float:  # as tracecal removes it: at most 90% of the host
        removed = min(per_event_s * prof.events_per_step, 0.9 * prof.profiled_host_step_s)
        return min(removed * 1e6, paced_us)

    cut_us = min(prof.removed_per_step_s * 1e6, paced_us)
    unprof_s = step_s - cut_us * 1e-6
    lo_s, hi_s = PROFILER_EVENT_SPREAD_S  # a host profile's own cost may lie outside it
    span = (min(step_s - cut(hi_s) * 1e-6, unprof_s), max(step_s - cut(lo_s) * 1e-6, unprof_s))
    how = f"{prof.events_per_step:.0f} recorded events at {prof.per_event_s * 1e6:.3g} us"
    return prof, unprof_s, span, without_profiler(drafts, cut_us, how)


# How a traced kernel is priced. A profiler records a kernel's duration on the GPU, from its
# start to its end: the launch latency that a kernel timed alone with CUDA events carries (what
# the calibrated per-kernel floors hold) is not in it, as it is not in a kernel replayed from a
# CUDA graph, so kernels are priced with that condition's floor (``predict.graph_floor_s``). On
# the H100 training fit set's traces (validation/results/train-fitset-h100, fit data), kernels
# traced at 1-8 us were priced 2.1-2.9x their durations with the event-timed floor.
TRACED_CONDITION = "in-graph"
# Ops whose inputs the previous kernel just wrote: read from L2 where they fit (``l2="warm"``),
# as the step model prices its norms and elementwise ops (``gpumodel.llm.layers.WARM_KINDS``);
# GEMMs, attention and convolutions stream weights and caches from DRAM.
WARM_OPS = frozenset({"elementwise", "strided_elementwise", "layernorm", "rmsnorm", "softmax",
                      "reduction"})  # fmt: skip


def traced_load(views: list[GroupView], gpu: GPUSpec) -> tuple[float, float]:
    """The traced step's (tensor activity, DRAM bytes/s) as the power limit sees them
    (``gpumodel.llm._timing.step_activity``, ``step_traffic``): the tensor work of its priced
    ops at the max-clock roof, and their DRAM bytes, over the measured GPU time of all its ops.
    The model prices a step's kernels at the clock of those, as it prices an LLM step: in an
    H100 training trace (Llama-600m, bf16, validation/results/train-fitset-h100) the GEMMs ran
    at 758 TFLOP/s, where back to back they would be held to 657 by the power limit (priced
    15-22% slow at that clock)."""
    from gpumodel.llm._timing import op_dram_bytes, op_tensor_roof_s, step_activity, step_traffic

    priced = [v for v in views if v.pred_per_call_s is not None and v.mapped.op is not None]
    roof = sum(op_tensor_roof_s(v.mapped.op, gpu) * v.count for v in priced)
    moved = sum(op_dram_bytes(v.mapped.op, gpu) * v.count for v in priced)
    # NCCL kernels run beside the compute, on their own stream: not the compute's GPU time
    busy = sum(v.measured_s for v in views if v.mapped.family != COMM_FAMILY)
    return float(step_activity(busy, roof)), float(step_traffic(busy, moved))


class _Predictor:
    """``predict`` with a cache, turning unsupported ops into None. ``traced``: kernels priced as
    a trace records them (``TRACED_CONDITION``, ``WARM_OPS``), a host copy as the code waits for
    it; else as ``predict`` prices them by default (in-workload, cold L2)."""

    def __init__(
        self,
        gpu: GPUSpec,
        calibration: Calibration | str | None,
        load: tuple[float, float] | None = None,
        *,
        traced: bool = True,
    ):
        self.gpu = gpu
        self.calibration = calibration
        # the traced step's (tensor activity, DRAM bytes/s): predict's ``activity``,
        # ``dram_bytes_per_s``
        self.activity, self.dram = load if load is not None else (None, None)
        self.traced = traced
        self.cache: dict[Op, Prediction | None] = {}
        self.label = DATASHEET_LABEL
        self.errors: dict[Op, str] = {}
        self.sol_cache: dict[Op, float | None] = {}

    def __call__(self, op: Op) -> Prediction | None:
        if op not in self.cache:
            try:
                traced = self.traced and op.op_name != "host_transfer"
                warm = traced and op.op_name in WARM_OPS
                p = predict(op, self.gpu, self.calibration, activity=self.activity,
                            dram_bytes_per_s=self.dram,
                            condition=TRACED_CONDITION if traced else "in-workload",
                            l2="warm" if warm else "cold")  # fmt: skip
                self.label = p.calibration
                self.cache[op] = p
            except GpumodelError as exc:
                self.cache[op] = None
                self.errors[op] = str(exc)
        return self.cache[op]

    def sol(self, op: Op) -> float | None:
        """Speed-of-light seconds per call (None where the op has no kernels to bound)."""
        if op not in self.sol_cache:
            try:
                self.sol_cache[op] = speed_of_light(op, self.gpu).time_s
            except GpumodelError:
                self.sol_cache[op] = None
        return self.sol_cache[op]

    def seconds(self, op: Op) -> float:
        p = self(op)
        if p is None:
            raise GpumodelError(self.errors.get(op, f"cannot predict {op.label()}"))
        return p.time_s


def _resolve_gpu(
    tr: Trace, gpu: GPUSpec | str | None, device: Any, notes: list[str]
) -> tuple[GPUSpec, GpuInfo]:
    props = tr.device_properties(device)
    name = str(props.get("name") or "") if props else ""
    if name:
        spec = gpu_from_device_name(name, props.get("numSms"), props.get("totalGlobalMem"))
        if spec is not None:
            if gpu is not None and get_gpu(gpu).id != spec.id:
                notes.append(f"the trace was recorded on {name} ({spec.id}); --gpu "
                             f"{get_gpu(gpu).id} is ignored")  # fmt: skip
            return spec, GpuInfo(id=spec.id, name=spec.name, device_name=name, source="trace")
        if gpu is None:
            raise TraceFormatError(
                f"the trace's GPU '{name}' is not in the spec library: pass --gpu with the "
                "closest spec (see `gpumodel specs list`)"
            )
        notes.append(f"the trace's GPU '{name}' is not in the spec library: using --gpu")
    if gpu is None:
        raise TraceFormatError(
            "the trace does not say which GPU it was recorded on: pass --gpu (e.g. --gpu h100)"
        )
    spec = get_gpu(gpu)
    return spec, GpuInfo(id=spec.id, name=spec.name, device_name=name or None, source="argument")


@dataclasses.dataclass
class _Group:
    key: tuple
    name: str
    phase: str
    mapped: Mapped
    instances: list[Instance]


def _group(instances: list[Instance]) -> list[_Group]:
    groups: dict[tuple, _Group] = {}
    for inst in instances:
        m = inst.mapped
        assert m is not None
        label = (m.label or m.op.label()) if m.op is not None else ""
        key = (inst.name, m.shapes, m.dtype, inst.phase, label)
        g = groups.get(key)
        if g is None:
            groups[key] = _Group(key, inst.name, inst.phase, m, [inst])
        else:
            g.instances.append(inst)
    return list(groups.values())


def _infer_tf32(m: Mapped, measured_per_call_s: float, predictor: _Predictor) -> Mapped:
    """An fp32 product faster than the fp32 CUDA-core peak allows (datasheet roofline, no
    calibration) must have run on TF32 tensor cores."""
    op = m.op
    if not isinstance(op, (Gemm, Conv2d)) or op.dtype != "fp32" or m.tf32 is not None:
        return m
    try:
        roof = predict(op, predictor.gpu, "none").roofline_time_s
    except GpumodelError:
        return m
    if measured_per_call_s >= 0.95 * roof * m.scale:
        return m
    if not predictor.gpu.peak_flops("tf32", "tensor"):
        return m
    new = op.model_copy(update={"dtype": "tf32"})
    return dataclasses.replace(m, op=new, tf32=True, dtype="fp32 (ran as TF32)",
                               notes=(*m.notes, "faster than fp32 CUDA cores allow: TF32 was on"))  # fmt: skip


def _rows(groups: list[_Group], predictor: _Predictor) -> tuple[list[GroupView], list[OpRow]]:
    views: list[GroupView] = []
    rows: list[OpRow] = []
    seconds: Callable[[Op], float] = predictor.seconds
    for g in groups:
        measured = sum(i.measured_us for i in g.instances) * 1e-6
        count = len(g.instances)
        m = _infer_tf32(g.mapped, measured / count, predictor)
        if m is not g.mapped:
            for inst in g.instances:
                inst.mapped = m
        pred = predictor(m.op) if m.op is not None else None
        reason = m.reason
        if m.op is not None and pred is None:
            reason = predictor.errors.get(m.op, "cannot predict")
        per_call = pred.time_s * m.scale if pred is not None else None
        sol = predictor.sol(m.op) if pred is not None and m.op is not None else None
        sol_per_call = sol * m.scale if sol is not None else None
        views.append(GroupView(name=g.name, phase=g.phase, mapped=m, instances=g.instances,
                               predict=seconds, pred_per_call_s=per_call,
                               sol_per_call_s=sol_per_call))  # fmt: skip
        predicted = per_call * count if per_call is not None else None
        flops = pred.flops * m.scale if pred is not None else None
        nbytes = pred.bytes * m.scale if pred is not None else None
        ai = pred.arithmetic_intensity if pred is not None else None
        kernels = sorted({_kernel_label(k) for i in g.instances for k in i.kernel_names})
        rows.append(OpRow(
            name=g.name, phase=g.phase, shapes=[list(s) for s in m.shapes], dtype=m.dtype,
            op=(m.label or m.op.label()) if m.op is not None and pred is not None else None,
            mapped=pred is not None, reason=None if pred is not None else reason,
            count=count, measured_s=measured, measured_per_call_s=measured / count,
            predicted_per_call_s=per_call, predicted_s=predicted,
            sol_per_call_s=sol_per_call,
            sol_pct=(100.0 * sol_per_call * count / measured
                     if sol_per_call is not None and measured > 0 else None),
            bound=pred.bound if pred is not None else None,
            # a traced NCCL kernel's excess is mostly waiting beside compute: what the step
            # pays of it is the comm_exposed finding's
            recoverable_s=(max(measured - predicted, 0.0)
                           if predicted is not None and m.family != COMM_FAMILY else 0.0),
            flops_per_call=flops, bytes_per_call=nbytes,
            arithmetic_intensity=ai if ai is not None and math.isfinite(ai) else None,
            achieved_flops_per_s=(flops * count / measured if flops and measured > 0 else None),
            kernels=kernels[:5], notes=list(m.notes),
        ))  # fmt: skip
    return views, rows


def _kernel_label(name: str) -> str:
    return short_name(name)


def _summarise(
    drafts: list[Draft], step_s: float, tl: Timeline | None, views: list[GroupView]
) -> tuple[list[Finding], Amdahl]:
    keep = [
        d for d in drafts
        if d.per_step_us is not None
        and d.per_step_us * 1e-6 >= max(MIN_FINDING_FRACTION * step_s, MIN_FINDING_S)
    ]  # fmt: skip
    keep.sort(key=lambda d: -(d.per_step_us or 0.0))
    findings = []
    entries = []
    for d in keep:
        # never negative, never more than the step: a fix cannot return more than it takes
        rec = min(max((d.per_step_us or 0.0) * 1e-6, 0.0), max(step_s, 0.0))
        findings.append(Finding(
            kind=d.kind, title=d.title, recoverable_s=rec,
            pct_of_step=100.0 * rec / step_s if step_s > 0 else None,
            step_time_if_fixed_s=step_s - rec, fix=d.fix, evidence=d.evidence,
            details=_jsonable(d.details),
        ))  # fmt: skip
        entries.append(AmdahlEntry(kind=d.kind, step_time_s=step_s - rec,
                                   speedup=step_s / (step_s - rec) if step_s > rec else None))  # fmt: skip
    n_steps = tl.steps_with_work if tl is not None else 1
    idle = sum((d.per_step_us or 0.0) for d in keep if d.idle) * 1e-6
    claims: dict[int, float] = {}
    for d in keep:
        if not d.idle:
            for k, v in d.claims.items():
                claims[k] = max(claims.get(k, 0.0), v)
    busy_cut = sum(claims.values()) * 1e-6 / n_steps
    total = min(idle + busy_cut, step_s)
    all_fixed = step_s - total
    sol = None
    if views:
        s = 0.0
        for v in views:  # unmapped ops keep their measured time
            bound = v.sol_per_call_s * v.count if v.sol_per_call_s is not None else None
            s += min(bound, v.measured_s) if bound is not None else v.measured_s
        sol = s / n_steps
    note = ("idle gaps are disjoint and add up; kernel fixes that claim the same kernel call "
            "count once (the larger claim); capped at the step time. Fixing kernels helps only "
            "while the GPU, not the host, sets the pace")  # fmt: skip
    launch = next((d for d in keep if d.kind == "launch_bound"), None)
    if launch is not None and step_s > 0 and (launch.per_step_us or 0) * 1e-6 > 0.2 * step_s:
        note += ("; this step is launch-bound, so kernel speedups turn into idle time until the "
                 "launch overhead is removed")  # fmt: skip
    amdahl = Amdahl(
        step_time_s=step_s, per_finding=entries, all_fixed_step_time_s=all_fixed,
        all_fixed_speedup=step_s / all_fixed if all_fixed > 0 else None,
        speed_of_light_step_s=sol, note=note,
    )  # fmt: skip
    return findings, amdahl


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in (sorted(value) if isinstance(value, set) else value)]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _assemble(
    tr: Trace,
    info: GpuInfo,
    calibration: str,
    steps: StepInfo,
    rows: list[OpRow],
    top: int | None,
    findings: list[Finding],
    amdahl: Amdahl,
    notes: list[str],
    profiler: ProfilerCorrection | None = None,
) -> DiagnoseReport:
    rows.sort(key=lambda r: (-r.recoverable_s, -r.measured_s))
    shown = rows if top is None else rows[: max(top, 0)]
    rest = rows[len(shown) :]
    mapped = [r for r in rows if r.mapped]
    totals = Totals(
        measured_s=sum(r.measured_s for r in rows),
        mapped_measured_s=sum(r.measured_s for r in mapped),
        predicted_s=sum(r.predicted_s or 0.0 for r in mapped),
        unmapped_measured_s=sum(r.measured_s for r in rows if not r.mapped),
        recoverable_s=sum(r.recoverable_s for r in rows),
    )
    return DiagnoseReport(
        source=SourceInfo(path=tr.path, format=tr.format, truncated=tr.truncated,
                          record_shapes=tr.has_shapes if tr.format == "torch_chrome_trace" else False,
                          events=tr.events_read),
        gpu=info, calibration=calibration, steps=steps, ops=shown,
        ops_omitted=OmittedOps(count=len(rest), measured_s=sum(r.measured_s for r in rest)),
        totals=totals, findings=findings, amdahl=amdahl, profiler=profiler,
        notes=list(dict.fromkeys(notes)),
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Nsight Systems kernel summary: per-kernel times only


def _diagnose_nsys(
    tr: Trace,
    spec: GPUSpec,
    info: GpuInfo,
    calibration: Calibration | str | None,
    top: int | None,
    notes: list[str],
) -> DiagnoseReport:
    from gpumodel.diagnose.mapping import _FP32_KERNEL

    notes.append("an Nsight Systems kernel summary has no shapes and no timeline: kernels are "
                 "listed with their time, and step findings need a torch.profiler trace "
                 "(record_shapes=True)")  # fmt: skip
    total = sum(r.total_s for r in tr.kernel_summary)
    rows = [
        OpRow(name=short_name(r.name), phase="", shapes=[], dtype="", op=None, mapped=False,
              reason="Nsight kernel summary: no shapes", count=r.instances, measured_s=r.total_s,
              measured_per_call_s=r.avg_s, predicted_per_call_s=None, predicted_s=None,
              sol_per_call_s=None, sol_pct=None, bound=None, recoverable_s=0.0, flops_per_call=None,
              bytes_per_call=None, arithmetic_intensity=None, achieved_flops_per_s=None,
              kernels=[r.name[:200]], notes=[])
        for r in tr.kernel_summary
    ]  # fmt: skip
    findings = []
    short = [r for r in tr.kernel_summary if r.avg_s < SHORT_KERNEL_US * 1e-6]
    n = sum(r.instances for r in tr.kernel_summary)
    n_short = sum(r.instances for r in short)
    if n and n_short / n >= 0.3:
        findings.append(Finding(
            kind="launch_bound", recoverable_s=None, pct_of_step=None, step_time_if_fixed_s=None,
            title=f"{n_short / n:.0%} of {n} kernel launches are shorter than "
                  f"{SHORT_KERNEL_US:.0f} us: likely launch-bound",
            fix=_fix("launch_bound"),
            evidence=["the summary has no timeline: the idle time between launches is unknown"],
            details={"kernels": n, "short_kernels": n_short},
        ))  # fmt: skip
    fp32 = [
        r for r in tr.kernel_summary if _FP32_KERNEL.search(r.name) and "gemm" in r.name.lower()
    ]
    if fp32:
        t = sum(r.total_s for r in fp32)
        findings.append(Finding(
            kind="fp32_matmul", recoverable_s=None, pct_of_step=100.0 * t / total if total else None,
            step_time_if_fixed_s=None,
            title=f"fp32 GEMM kernels on CUDA cores take {t * 1e3:.2f} ms "
                  f"({100.0 * t / total:.0f}% of kernel time)",
            fix=_fix("fp32_matmul"), evidence=[short_name(r.name) for r in fp32[:3]], details={},
        ))  # fmt: skip
    steps = StepInfo(count=1, step_time_s=total, window_s=total, periods=1,
                     source="kernel summary", gpu_busy_s=None, gpu_idle_s=None,
                     gpu_utilization_pct=None, kernels_per_step=None)  # fmt: skip
    amdahl = Amdahl(step_time_s=total, per_finding=[], all_fixed_step_time_s=total,
                    all_fixed_speedup=1.0, speed_of_light_step_s=None,
                    note="not quantified: the kernel summary has no shapes and no timeline")  # fmt: skip
    label = "none (no shapes to predict)"
    del calibration
    return _assemble(tr, info, label, steps, rows, top, findings, amdahl, notes)


def _fix(kind: str) -> str:
    return FIXES[kind]


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
    "diagnose",
]
