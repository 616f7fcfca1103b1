"""Kernel families from a trace of CUDA-graph replays (``calibrate --trace`` on a
``fused-graph`` or ``hf-static-compiled`` step).

A kernel replayed from a graph has no operator and no shapes in the trace: the profiler sees one
``cudaGraphLaunch`` per step. What the trace still says is each kernel's name and time. Given
the step it ran (model preset, batch, context, phase: ``--model --batch --context``), the model
prices the same step in the traced runtime, op by op; the trace's kernels are sorted into the
same classes by name, and per class the fit is the ratio sum(measured) / sum(predicted) over the
step, as for an eager trace's families:

* ``gemm``: cuBLAS / cuBLASLt / CUTLASS GEMM kernels (``nvjet_*``, ``*gemm*``, ``*xmma*``,
  ``cutlass``) with cuBLASLt's split-K reduction, which the model counts inside its GEMM ops
  (``tracecal.IN_CALL_HELPER_KERNELS``);
* ``grouped_gemm``: the mixture-of-experts grouped GEMM (``torch._grouped_mm``: CUTLASS's
  ``GroupProblemShape`` kernels and the kernel that prepares their arguments);
* ``attention``: FlashAttention, cuDNN SDPA and memory-efficient attention kernels with their
  split-KV combine;
* everything else (Triton-fused norms, RoPE, cache writes, the router's top-k): counted against
  the model's other ops of the step and reported, not fitted. In a graph those kernels cost
  about the in-graph per-kernel time each (a property of the machine, which the host profile
  measures), and a family scale would multiply the isolated-kernel floor that the step model
  replaces by it.

Each fitted scale is stored for every family/bound key of the class's ops in the priced step,
with the span of their kernels' predicted times (a prefill's GEMMs, far larger than a decode
step's, get a scale faded toward 1: ``gpumodel.predict.scale_at_size``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpumodel.predict import kernel_size_s
from gpumodel.tracefit import FamilyFit, family_key

if TYPE_CHECKING:
    from gpumodel.hostprofile import HostProfile
    from gpumodel.llm._timing import Timed
    from gpumodel.specs import GPUSpec

# classes fitted from a graph's kernels (the rest is counted, not fitted: module docstring)
FITTED_CLASSES = ("gemm", "grouped_gemm", "attention")
# A class's measured / predicted time outside 1/x-x of 1 says the step the user named (model,
# batch, context, phase) is not the one traced, and the fit is refused (``GraphFit.misfit``).
# The seven committed graph traces (H200), named as recorded, fit x0.86-1.13 on the shipped
# calibration and x1.20-2.08 on the datasheet alone (calibration="none"); named wrong (the
# static decode trace called a prefill, batch 99999 or 1 for 16, Llama-3-70B for 8B) a class
# fits x0.0002-0.23 or x6.3. 4x leaves a GPU whose datasheet misses twice as far as the H200's
# room, and catches a wrong phase, a batch or context off by 4x or more, or a model of another
# size (tests/test_trace_audit_describe.py).
DESCRIBED_STEP_FACTOR = 4.0
OTHER = "other"
_ATTENTION_MARKERS = ("flash", "fmha", "sdpa", "attention", "attn")
_GROUPED_MARKERS = ("groupproblemshape", "grouped_gemm")
_GEMM_MARKERS = ("gemm", "nvjet", "xmma", "cutlass", "splitkreduce", "gemv")


def kernel_class(name: str) -> str:
    """The class of a graph-replayed kernel by its name: gemm, grouped_gemm, attention or
    other. Triton
    kernels are Inductor's fusions (other), even where their names carry the attention op
    whose inputs they prepare (``triton_poi_fused__scaled_dot_product_cudnn_attention_...``)."""
    low = name.lower()
    if low.startswith("triton") or "triton_" in low:
        return OTHER
    if any(m in low for m in _ATTENTION_MARKERS):
        return "attention"
    if any(m in low for m in _GROUPED_MARKERS):
        return "grouped_gemm"
    if any(m in low for m in _GEMM_MARKERS):
        return "gemm"
    return OTHER


def _op_class(t: Timed) -> str:
    """The class of a priced op's kernels, as ``kernel_class`` names the traced ones."""
    if t.entry.op.family.startswith("grouped_gemm"):
        return "grouped_gemm"
    return t.entry.kind if t.entry.kind in ("gemm", "attention") else OTHER


@dataclass(frozen=True)
class GraphStep:
    """The step a graph trace ran, as the user names it (``--batch --context --phase``)."""

    batch: int
    context: int  # decode: the KV length; prefill: the prompt
    phase: str = "decode"

    @property
    def seq(self) -> int:
        """Tokens per sequence in the step: 1 for decode, the prompt for prefill."""
        return self.context if self.phase == "prefill" else 1

    def label(self) -> str:
        return f"{self.phase} batch {self.batch} x context {self.context}"


@dataclass(frozen=True)
class GraphFit:
    """Per class: what was fitted, and the keys and spans a calibration stores (seconds are
    per step)."""

    families: list[FamilyFit]  # one row per family/bound key of a fitted class
    scales: dict[str, float]
    spans: dict[str, tuple[float, float]]
    classes: dict[str, tuple[float, float, bool]]  # class -> (measured, predicted, fitted)
    matched_s: float  # measured time of the fitted classes' kernels
    other_s: dict[str, float]  # the other kernels' time by short name, largest first
    other_predicted_s: float  # the model's other ops
    notes: list[str]
    # the classes large enough to fit whose scale is outside DESCRIBED_STEP_FACTOR (whether
    # or not inside ``ratio_bounds``): the step named is not the one traced
    misfit: dict[str, float]


def priced_step(
    model: str, spec: GPUSpec, runtime: str, step: GraphStep, calibration: object,
    host: HostProfile, condition: str,
) -> list[tuple[Timed, int]]:  # fmt: skip
    """The step's ops in ``runtime`` timed on ``spec`` with ``calibration`` under
    ``condition``: (op, repetitions per step) for the pre, layer (x layers) and post blocks.
    The fit prices them as a trace records kernels (``diagnose.report.TRACED_CONDITION``: no
    launch latency in a kernel's duration, as the eager fit prices them)."""
    from gpumodel.llm.inference import _defaults, timed_ops
    from gpumodel.llm.models import get_model
    from gpumodel.llm.runtimes import resolve_step

    m = get_model(model)
    rt, attention, fusion, kv_cache, gqa = resolve_step(runtime, step.phase,
                                                        spec.compute_capability)  # fmt: skip
    seq, context = _defaults(m, step.phase, step.seq, step.context)
    _, _, _, (pre, layer, post) = timed_ops(
        m, spec, rt, host, step.batch, seq, context, dtype="bf16", tp=1, attention=attention,
        fusion=fusion, kv_cache=kv_cache, gqa=gqa, experts="grouped_mm", calibration=calibration,
        condition=condition)  # fmt: skip
    return [(t, 1) for t in pre] + [(t, m.layers) for t in layer] + [(t, 1) for t in post]


def fit_graph_families(
    kernels: Iterable[tuple[str, float]], periods: int, priced: Sequence[tuple[Timed, int]],
    priced_default: Sequence[tuple[Timed, int]], total_s: float, min_share: float,
    ratio_bounds: tuple[float, float],
) -> GraphFit:  # fmt: skip
    """Fit the gemm, grouped_gemm and attention classes of a graph trace: ``kernels`` (name,
    seconds) over ``periods`` steps, against the model's step ``priced`` as traced. Each key's
    span holds its ops' kernel sizes both as traced and as ``priced_default`` (the same ops as
    predict prices them by default), so a traced shape lies inside it either way. A class with
    less than ``min_share`` of ``total_s`` (the trace's GPU time over all periods) or a ratio
    outside ``ratio_bounds`` keeps the base calibration."""
    from gpumodel.diagnose.timeline import short_name

    measured: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    other: dict[str, float] = defaultdict(float)
    for name, dur_s in kernels:
        cls = kernel_class(name)
        measured[cls] += dur_s
        count[cls] += 1
        if cls == OTHER:
            other[short_name(name)] += dur_s / periods
    predicted: dict[str, float] = defaultdict(float)
    keys: dict[str, dict[str, tuple[float, float]]] = defaultdict(dict)  # class -> key -> span
    for (t, reps), (d, _) in zip(priced, priced_default, strict=True):
        cls = _op_class(t)
        predicted[cls] += t.time_s * reps
        if cls == OTHER or not t.kernels:
            continue
        bound = max(t.kernels, key=lambda k: k.time_s).bound
        key = family_key(t.entry.op.family, bound)
        sizes = (kernel_size_s(t.kernels), kernel_size_s(d.kernels))
        lo, hi = keys[cls].get(key, (min(sizes), max(sizes)))
        keys[cls][key] = (min(lo, *sizes), max(hi, *sizes))
    families: list[FamilyFit] = []
    scales: dict[str, float] = {}
    spans: dict[str, tuple[float, float]] = {}
    classes: dict[str, tuple[float, float, bool]] = {}
    notes: list[str] = []
    misfit: dict[str, float] = {}
    lo_ratio, hi_ratio = ratio_bounds
    for cls in FITTED_CLASSES:
        m, p = measured.get(cls, 0.0) / periods, predicted.get(cls, 0.0)
        if m <= 0 and p <= 0:
            continue
        scale = m / p if p > 0 else 1.0
        large = p > 0 and m * periods >= min_share * total_s
        if large and not 1 / DESCRIBED_STEP_FACTOR <= scale <= DESCRIBED_STEP_FACTOR:
            misfit[cls] = scale
        fitted = large and lo_ratio <= scale <= hi_ratio
        classes[cls] = (m, p, fitted and bool(keys[cls]))
        for key, span in sorted(keys[cls].items()) or [(cls, None)]:
            if fitted and span is not None:
                scales[key], spans[key] = scale, span
            families.append(FamilyFit(key=key, kernels_per_step=count[cls] / periods,
                                      measured_s=m, predicted_s=p, scale=scale,
                                      fitted=fitted and span is not None,
                                      span_lo_s=span[0] if span else None,
                                      span_hi_s=span[1] if span else None))  # fmt: skip
        if len(keys[cls]) > 1:
            notes.append(f"graph trace: the {cls} kernels fitted as one class ({m * 1e3:.3g} ms "
                         f"measured, {p * 1e3:.3g} ms predicted a step); its scale is stored "
                         f"for each of {', '.join(sorted(keys[cls]))}")  # fmt: skip
    other_m, other_p = measured.get(OTHER, 0.0) / periods, predicted.get(OTHER, 0.0)
    notes.append(f"graph trace: {count[OTHER] / periods:.0f} other kernels a step (Triton "
                 f"fusions, norms, cache writes, ...) ran {other_m * 1e3:.3g} ms, the model's "
                 f"other ops {other_p * 1e3:.3g} ms: not fitted (in a graph they cost about the "
                 "in-graph per-kernel time each, which the host profile measures)")  # fmt: skip
    matched = sum(measured.get(c, 0.0) for c in FITTED_CLASSES if predicted.get(c, 0.0) > 0)
    others = dict(sorted(other.items(), key=lambda kv: -kv[1]))
    return GraphFit(families, scales, spans, classes, matched / periods, others, other_p, notes,
                    misfit)  # fmt: skip


__all__ = ["DESCRIBED_STEP_FACTOR", "FITTED_CLASSES", "GraphFit", "GraphStep",
           "fit_graph_families", "kernel_class", "priced_step"]  # fmt: skip
