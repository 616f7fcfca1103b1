"""Calibrate from a user's own profile: one torch.profiler trace -> a :class:`Calibration`.

What a trace of one training or inference step says, and what is fitted from it:

* **Kernel families on this GPU in this runtime.** Each kernel is matched to the model's ops by
  its recorded operator and shapes (the mapping ``gpumodel diagnose`` uses). Per family and
  bound (``gemm/memory``, ``attention/compute``, ...) the fit is the time-weighted ratio
  sum(measured) / sum(predicted) over the steady-state steps; it is stored as
  ``family_time_scale`` and applied by ``predict`` as a named term. A family/bound pair with
  less than ``MIN_FAMILY_SHARE`` of the step's GPU time keeps the base calibration. Beside
  each scale, ``family_time_scale_span_s``: the smallest and largest predicted kernel of the
  ops that fitted it (each op's largest kernel, ``gpumodel.predict.kernel_size_s``, backward
  multiple included; priced both as traced and in-workload); an op whose kernels are priced
  outside that span gets a scale faded toward 1 (``gpumodel.predict.scale_at_size``). The
  traced kernels are priced as ``gpumodel diagnose`` prices them (its ``TRACED_CONDITION``:
  no launch latency in a kernel's duration).
* **The host.** Per step: the CPU time of the step, the operators it ran and the kernels it
  launched. Per operator kind (matmul, elementwise, cat, ...): the median host time of one
  top-level call. The profiler itself slows the host: each recorded event costs
  ``overhead_per_event_s``. With the unprofiled step time (``step_ms``, from the user's own
  logs) that cost is solved for: (profiled step - unprofiled step) / events per step, when
  the profiled step is host-bound. Without it, the per-event cost that ``gpumodel validate
  --host-only`` measured on the trace's machine (``host=``, ``--host``: the profile's
  ``profiler_event_s``) is removed, else a default one (``DEFAULT_PROFILER_EVENT_S``). The
  result says which of the two was done and how large the
  correction was. A trace of graph replays issues no eager kernel: its host is the replays',
  and its host per (eager) kernel is the host profile's (``_graph_eager_host``).
* **The runtime.** Named from what the trace shows: CUDA-graph launches, compiled (Triton)
  kernels, the dynamic KV cache's concatenations, a backward pass, optimizer kernels.

The calibration keeps its provenance (trace SHA-256, GPU, runtime, host, date) and is used
like any other (``--calibration FILE``); carried to another GPU, the family scales go with it
(they are ratios to the model, which already carries clocks and bandwidths) and the host and
runtime stay.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import statistics
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpumodel._io import gc_paused
from gpumodel._validators import MAX_HOST_CALL_S, MAX_MULTIPLIER, MIN_RATIO
from gpumodel.calibration import Calibration, CalibrationParams, resolve
from gpumodel.diagnose.comms import FAMILY as COMM_FAMILY
from gpumodel.diagnose.model_match import identify_model, match_optimizer, optimizer_note
from gpumodel.diagnose.parse import (
    GRAPH_REPLAY_NOTE,
    CpuEvent,
    Trace,
    TraceFormatError,
    load_trace,
)
from gpumodel.diagnose.timeline import (
    Timeline,
    build_timeline,
    exposed_comm_us,
    loader_spans,
    short_name,
    span_overlap,
)
from gpumodel.predict import kernel_size_s
from gpumodel.specs import GPUSpec
from gpumodel.tracefit import GRAPH_RUNTIMES, FamilyFit, ProfilerCorrection, TraceFit, family_key
from gpumodel.tracegraph import GraphFit, GraphStep, fit_graph_families, priced_step

if TYPE_CHECKING:
    from gpumodel.hostprofile import HostProfile

# A family/bound pair must carry this share of the step's GPU time to be fitted: a ratio from
# a handful of microseconds is noise, not a property of the runtime.
MIN_FAMILY_SHARE = 0.005
# Host cost the profiler adds per recorded event (CPU operator or runtime call) with
# record_shapes=True, when the unprofiled step time is not given: the host-bound eager fixture
# tests/fixtures/traces/transformer_eager.json.gz (H100 host, torch 2.11, 2026-11-22) took
# 20.825 ms per step profiled and 13.238 ms unprofiled (planted_costs.json) over 2,063 recorded
# events per step: 3.68 us per event.
DEFAULT_PROFILER_EVENT_S = 3.68e-6
# ... and how far it moves from machine to machine: the p10 and p90 of the cost per event solved
# exactly (--step-ms) from the 18 host-bound HF eager decode traces of the H100 runs
# (2026-11-22..27: 0.39-14.7 us, median 3.5), the range of an estimate made without --step-ms
# (validation/experiments/diagnose_profiler_cost.py; scored on the H200 runs' traces, which it
# did not see: validation/results/diagnose-profiler-cost-2026-12-01.md)
PROFILER_EVENT_SPREAD_S = (1.21e-6, 6.87e-6)
# An unprofiled step no longer than this many times the GPU's work per step was set by the GPU:
# its time says only that the host took no longer (a tenth above it: kernels timed under the
# profiler and without differ by a few percent, and launch gaps add some).
GPU_BOUND_MARGIN = 1.1
# Kernels launched inside a cuBLAS or cuDNN call after its main kernel, which the model counts
# as part of that op: cuBLASLt's split-K reduction after a skinny decode GEMM and cuDNN's
# split-KV reduction after its flash decode kernel. An HF eager Llama-3-8B decode step on an
# H200 launched 1,493 kernels, 160 + 32 of them these, against the model's 1,301 (a prefill
# step: 1,301 and none); dividing the step's host time by all 1,493 priced the model's 1,301
# launches 13% short (validation/results/steps-h200-run4).
IN_CALL_HELPER_KERNELS = (
    "void cublasLt::splitKreduce_kernel",
    "void cudnn::fusion::lean_reduction_kernel",
    # FlashAttention-2's split-KV decode (torch's SDPA flash backend): one combine per call
    # (validation/results/steps-h200-fused-run1)
    "void pytorch_flash::flash_fwd_splitkv_combine_kernel",
)

# operator name -> host-profile kind (the eager_op_s keys of a host profile)
_KIND_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("sdpa", ("scaled_dot_product_attention", "flash_attention", "efficient_attention",
              "cudnn_attention")),
    ("matmul", ("aten::linear", "aten::mm", "aten::matmul", "aten::bmm", "aten::addmm",
                "aten::baddbmm", "aten::_scaled_mm", "aten::conv")),
    ("norm", ("layer_norm", "rms_norm", "group_norm", "batch_norm")),
    ("cat", ("aten::cat", "aten::stack")),
    ("index", ("index", "aten::scatter", "aten::gather", "aten::embedding", "aten::slice_scatter",
               "aten::masked_fill")),
    ("copy", ("aten::to", "aten::_to_copy", "aten::copy_", "aten::contiguous", "aten::clone",
              "aten::type_as")),
    ("reduction", ("aten::sum", "aten::mean", "aten::max", "aten::argmax", "aten::amax",
                   "aten::softmax", "aten::_softmax", "aten::log_softmax", "aten::cross_entropy",
                   "aten::nll_loss", "aten::norm")),
    ("view", ("aten::view", "aten::reshape", "aten::transpose", "aten::permute", "aten::expand",
              "aten::unsqueeze", "aten::squeeze", "aten::slice", "aten::select", "aten::t",
              "aten::split", "aten::chunk", "aten::narrow", "aten::unbind", "aten::flatten",
              "aten::detach", "aten::alias", "aten::as_strided", "aten::empty", "aten::zeros",
              "aten::ones", "aten::arange", "aten::full")),
    ("optimizer_step", ("Optimizer.step", "_fused_adamw", "_fused_adam", "_foreach_")),
)  # fmt: skip
# the note that says a trace of graph replays (a GRAPH_RUNTIMES step) was fitted by name
# (tracegraph)
GRAPH_NOTE = "graph trace: priced as"
HOST_KINDS = ("matmul", "elementwise", "reduction", "norm", "view", "cat", "copy", "index",
              "sdpa", "optimizer_step")  # fmt: skip
_LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx",
                 "cudaLaunchCooperativeKernel")  # fmt: skip


@functools.lru_cache(maxsize=1 << 12)  # a trace names a few hundred operators many times
def host_kind(name: str) -> str:
    """The host-profile kind of an operator name (default: elementwise)."""
    for kind, keys in _KIND_RULES:
        if any(k in name for k in keys):
            return kind
    return "elementwise"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------


@gc_paused()  # a trace is millions of objects: see gc_paused
def calibrate_from_trace(
    path: str | Path,
    gpu: GPUSpec | str | None = None,
    model: str | None = None,
    step_ms: float | None = None,
    calibration: Calibration | str | None = None,
    host: HostProfile | str | Path | None = None,
    batch: int | None = None,
    context: int | None = None,
    phase: str | None = None,
) -> Calibration:
    """Fit a calibration to one torch.profiler Chrome trace (``.json`` or ``.json.gz``).

    ``gpu``: used when the trace does not name its device. ``model``: the LLM preset the trace
    ran (default: the preset whose widths the trace's GEMM shapes show; recorded in the
    provenance). ``step_ms``: the
    step time measured without the profiler (e.g. from your training logs), used to take the
    profiler's own host cost out exactly. ``calibration``: the base the family scales apply to
    (None: the best found for the GPU). ``host``: the host profile of the machine that recorded
    the trace (a name, file or ``HostProfile``); without ``step_ms``, its measured
    ``profiler_event_s`` is the profiler's cost per event (else ``DEFAULT_PROFILER_EVENT_S``)
    and an eager inference trace's host is taken at the profile's speed; with a GPU-bound
    ``step_ms`` (which bounds the host from above only) the same for an eager inference trace.

    ``batch``, ``context``, ``phase`` (``"decode"``, the default, or ``"prefill"``): the step a
    trace of CUDA-graph replays ran (a ``fused-graph`` or ``hf-static-compiled`` step records no
    shapes); with them and ``model``
    the GEMM and attention kernels are fitted by name against the model's step
    (``gpumodel.tracegraph``). An eager trace reads its shapes from the trace instead.

    Refused (``TraceFormatError``, one line): a ``step_ms`` under ``MIN_STEP_OF_KERNELS`` x
    the traced kernels' GPU time or over ``MAX_STEP_OF_PROFILED`` x the profiled step, and a
    graph step that does not fit its trace (``DESCRIBED_STEP_FACTOR``, ``SELF_CHECK_FACTOR``).
    """
    from gpumodel._io import as_path
    from gpumodel._validators import check_number
    from gpumodel.diagnose.report import _group, _Predictor, _resolve_gpu, _rows, traced_load
    from gpumodel.llm.models import get_model

    path = as_path(path, "trace")
    if step_ms is not None and not (0 < check_number(step_ms, "--step-ms") < 1e9):
        raise TraceFormatError(
            f"--step-ms must be a positive number of milliseconds, not {step_ms}"
        )
    hp = _load_host_arg(host)  # a --host that names nothing is an error either way
    try:
        tr = load_trace(path)
    except TraceFormatError as exc:  # a cut gzip stream read as an empty or kernel-less trace
        raise _why_unreadable(path) or exc from None
    if tr.format != "torch_chrome_trace":
        raise TraceFormatError(
            f"{path}: calibrate needs a torch.profiler Chrome trace (.json or .json.gz), not an "
            "Nsight Systems summary: it has no shapes and no host timeline"
        )
    if tr.truncated:  # diagnose reports on what was read; a fit of part of a step is wrong
        where = ("its gzip stream ends early" if any("gzip" in w for w in tr.warnings)
                 else "its JSON ends mid-trace")  # fmt: skip
        raise TraceFormatError(f"{path}: the trace is truncated ({where}); calibrate fits whole "
                               "steps: export the trace again")  # fmt: skip
    if not any(g.kind == "kernel" for g in tr.gpu):
        raise TraceFormatError(
            f"{path}: the trace has no GPU kernels (profile with "
            "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])"
        )
    graph_step = _graph_step(batch, context, phase)
    tl = build_timeline(tr)
    notes = list(tr.warnings) + list(tl.notes)
    spec, info = _resolve_gpu(tr, gpu, tl.device, notes)
    base = resolve(calibration, spec)
    # the trace is fitted against the model's own times: a base that is itself a trace
    # calibration lends its kernel parameters, not its scales
    unscaled = _model_times(base) if base is not None else "none"
    runtime, evidence = identify_runtime(tr, tl)
    if graph_step is not None and runtime not in GRAPH_RUNTIMES:
        notes.append(f"--batch/--context ignored: a {runtime} trace's shapes are read from the "
                     "trace")  # fmt: skip
        graph_step = None
    if tr.graph_replayed and graph_step is None:
        notes.append(GRAPH_REPLAY_NOTE + "; the host and the step time are fitted, no family "
                     "(give the traced step's batch and context, and the model, to fit its "
                     "GEMM and attention kernels by name)")  # fmt: skip
    elif not tr.has_shapes and graph_step is None:
        notes.append("no shapes recorded (record_shapes=False): kernels are matched by name "
                     "only where possible; record with record_shapes=True to fit families")  # fmt: skip
    predictor = _Predictor(spec, unscaled)
    n_opt = match_optimizer(tr, tl, model)
    if n_opt:
        notes.append(optimizer_note(n_opt))
    groups = _group([i for i in tl.instances if i.step is not None])
    views, _ = _rows(groups, predictor)
    # the model prices a step's kernels at the clock of the step's average tensor activity and
    # DRAM traffic: the families are fitted against that, the traced step's own
    load = traced_load(views, spec)
    predictor = _Predictor(spec, unscaled, load=load)
    # a scale's span holds each traced op's size both as the trace is priced (diagnose) and as
    # predict prices it by default (in-workload: the launch latency in its floor), so a traced
    # shape lies inside it either way
    default = _Predictor(spec, unscaled, load=load, traced=False)

    def at_step_clock(v: Any) -> Any:
        pred = predictor(v.mapped.op) if v.mapped.op is not None else None
        per_call = pred.time_s * v.mapped.scale if pred is not None else None
        return dataclasses.replace(v, predict=predictor.seconds, pred_per_call_s=per_call)

    views = [at_step_clock(v) for v in views]
    periods = max(tl.steps_with_work, 1)

    # --- kernel families -----------------------------------------------------------------
    fam_meas: dict[str, float] = defaultdict(float)
    fam_pred: dict[str, float] = defaultdict(float)
    fam_count: dict[str, int] = defaultdict(int)
    # (smallest, largest) predicted time of one kernel of the key's ops: where its scale holds
    fam_span: dict[str, tuple[float, float]] = {}
    unmatched: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    reasons: dict[tuple[str, str], str] = {}
    matched = total = 0.0
    # NCCL kernels: the step pays only the part no compute hides; priced on any GPU by the
    # collective model (its links), never scaled from a trace whose kernels wait for other ranks
    comm = [v for v in views if v.mapped.family == COMM_FAMILY]
    comm_s = sum(v.measured_s for v in comm)
    exposed = exposed_comm_us([g for v in comm for i in v.instances for g in i.gpu], tl.activities)
    exposed_s = sum(exposed.values()) * 1e-6
    collectives: dict[str, float] = defaultdict(float)
    for v in comm:  # "nccl:all_reduce" -> "all_reduce"
        collectives[v.mapped.label.partition(":")[2] or "nccl"] += v.count / periods
    if comm:
        notes.append(
            f"collectives: {sum(v.count for v in comm) / periods:.3g} NCCL kernels per step, "
            f"{comm_s / periods * 1e3:.3g} ms, {exposed_s / periods * 1e3:.3g} ms of it with "
            "nothing else on the GPU (what the step pays); not fitted: a traced NCCL kernel "
            "also waits for the other ranks, so other GPUs price collectives from their links "
            "(`gpumodel validate --collectives` measures them)"
        )
    for v in views:
        measured = v.measured_s
        if v.mapped.family == COMM_FAMILY:
            total += measured
            matched += measured if v.pred_per_call_s is not None else 0.0
            continue
        total += measured
        op = v.mapped.op
        pred = predictor(op) if op is not None else None
        if pred is None or v.pred_per_call_s is None:
            for inst in v.instances:
                for g in inst.gpu:
                    key = (short_name(g.name), v.mapped.family)
                    unmatched[key][0] += g.dur * 1e-6
                    reasons.setdefault(
                        key,
                        v.mapped.reason or predictor.errors.get(op, "")
                        if op is not None
                        else v.mapped.reason or "no rule",
                    )
            continue
        matched += measured
        key = family_key(op.family, pred.bound)
        fam_meas[key] += measured
        fam_pred[key] += v.pred_per_call_s * v.count
        fam_count[key] += sum(len(i.gpu) for i in v.instances)
        # the size predict holds the scale to (its kernel_size_s), x the backward multiple: a
        # fused backward kernel (attention, norm) is that many times the forward's (a
        # convolution's two gradient kernels are each about the forward's: the span reaches
        # up to 2x above them)
        sizes = [kernel_size_s(p.kernels) * v.mapped.scale for p in (pred, default(op)) if p]
        if min(sizes) > 0:
            lo, hi = fam_span.get(key, (min(sizes), max(sizes)))
            fam_span[key] = (min(lo, *sizes), max(hi, *sizes))
    if total <= 0:
        raise TraceFormatError(f"{path}: no GPU kernel of the trace falls inside a profiled step")
    busy = total - comm_s + exposed_s  # the GPU time the step pays
    families = []
    scales: dict[str, float] = {}
    spans: dict[str, tuple[float, float]] = {}
    for key in sorted(fam_meas, key=lambda k: -fam_meas[k]):
        m, p = fam_meas[key], fam_pred[key]
        scale = m / p if p > 0 else 1.0
        # a ratio outside what a calibration file holds (a Multiplier) is a broken match, not
        # a fit: that family keeps the base calibration
        # (of the whole step: where little is matched, as in a trace of graph replays whose
        # only matched kernels are a few memsets, a share of the matched time fitted noise)
        fitted = p > 0 and m >= MIN_FAMILY_SHARE * total and MIN_RATIO <= scale <= MAX_MULTIPLIER
        span = fam_span.get(key)
        if fitted:
            scales[key] = scale
            if span is not None:
                spans[key] = span
        families.append(FamilyFit(key=key, kernels_per_step=fam_count[key] / periods,
                                  measured_s=m / periods, predicted_s=p / periods,
                                  scale=scale, fitted=fitted,
                                  span_lo_s=span[0] if span else None,
                                  span_hi_s=span[1] if span else None))  # fmt: skip
    top_unmatched = sorted(unmatched.items(), key=lambda kv: -kv[1][0])[:10]
    unmatched_rows = [
        {"kernel": k[0], "family": k[1], "s_per_step": v[0] / periods,
         "reason": reasons.get(k, "")}
        for k, v in top_unmatched
    ]  # fmt: skip

    # --- the model, from the GEMM shapes where the flag does not name it ---------------------
    if model is not None:
        model = get_model(model).id  # an unknown preset is a one-line error
    found, model_evidence = identify_model([v.mapped.op for v in views if v.mapped.op is not None])
    if model is None:
        model = found
    elif found is not None and found != model:
        notes.append(f"--model {model} given, but the trace's GEMM shapes match {found}")
    elif found is None and graph_step is not None:
        model_evidence = f"model: {model} (given; a graph's replays record no shapes)"
    elif found is None:  # nothing to pass: the user named it
        model_evidence = f"model: {model} (given; no shipped preset's widths match the trace)"
    notes.append(model_evidence)

    # --- host ------------------------------------------------------------------------------
    if graph_step is not None and comm:  # one rank of a tensor-parallel step
        notes.append("--batch/--context: not fitted: the graph runs NCCL kernels, one rank of a "
                     "tensor-parallel step whose width the trace does not record (the model "
                     "prices one GPU)")  # fmt: skip
        graph_step = None
    graph: GraphFit | None = None
    if graph_step is not None:  # kernels replayed from a graph: fitted by name (tracegraph)
        graph, unmatched_rows = _fit_graph(path, views, periods, total, spec, unscaled, model,
                                           runtime, graph_step, hp)  # fmt: skip
        if graph.misfit:  # the step named is not the one traced
            other = GraphStep(graph_step.batch, graph_step.context,
                              "decode" if graph_step.phase == "prefill" else "prefill")  # fmt: skip
            refit, _ = _fit_graph(path, views, periods, total, spec, unscaled, model, runtime,
                                  other, hp)  # fmt: skip
            raise TraceFormatError(_misdescribed(path, model, graph_step, graph, other, refit))
        families, scales, spans = graph.families, graph.scales, graph.spans
        notes += [f"{GRAPH_NOTE} {model} {graph_step.label()} in {runtime}", *graph.notes]
        matched = graph.matched_s * periods
    # the profile's cost per event, where step_ms does not settle the profiler's cost: with
    # --step-ms given, only for an eager inference trace, whose host the profile also prices
    # (a training trace: docs/trace-calibration.md)
    event_s = _profiler_event_s(hp) if step_ms is None or runtime == "hf-eager" else None
    host = _host_side(tr, tl, step_ms, periods, event_s, gpu_busy_s=busy / periods)
    if step_ms is not None:
        # the kernels' GPU time: the smaller of the time they took, summed, and the time the
        # GPU was busy (overlapping streams count once); the profiled step: the host's
        # ProfilerStep range, or the timeline's step where the host ran ahead of the GPU (2.3
        # of 13.9 ms in the fp32_no_tf32 fixture)
        gpu_s = min(busy / periods, tl.busy_us * 1e-6 / max(tl.periods, 1))
        _check_step_ms(path, step_ms, gpu_s, max(host["step_profiled_s"], tl.step_us * 1e-6))
    loader_s, step_s = host["loader_step_s"], host["step_profiled_s"]
    if step_s > 0 and loader_s >= LOADER_WARN_SHARE * step_s:
        notes.append(f"warning: the step waited {loader_s * 1e3:.3g} ms of each "
                     f"{step_s * 1e3:.3g} ms on its DataLoader ({loader_s / step_s:.0%}): left out "
                     "of the host per kernel fitted here (what-ifs price the model, not your "
                     "input pipeline) and added back to the traced step's check; give the "
                     "loader workers or prefetch to get it back")  # fmt: skip
    pair = _trace_and_profile_host(host["host_per_kernel_s"], runtime, host["step_solved"], hp)
    if pair is not None:
        assert hp is not None
        host = _at_profile_speed(host, pair, cap_s=step_ms * 1e-3 if step_ms else None)
        ratio = pair[0] / pair[1]
        head = (f"the trace's host time per kernel, {pair[0] * 1e6:.1f} us with the profiler's "
                f"cost removed, is {ratio:.2g}x what host profile {hp.name} measured "
                f"({pair[1] * 1e6:.1f} us per kernel of an HF decoder layer)")  # fmt: skip
        tail = ("its host times are taken at the profile's speed" + (
            f", under the {step_ms:g} ms step" if step_ms else
            "; pass --step-ms (the step time from your logs) to keep the trace's own"))  # fmt: skip
        if ratio >= HOST_SPEED_WARN_RATIO or ratio <= 1 / HOST_SPEED_WARN_RATIO:
            notes.append(f"warning: {head}: the host ran at another speed, or the profiler cost "
                         f"{'more' if ratio > 1 else 'less'} than the profile measured, while "
                         f"this trace was recorded; {tail}")  # fmt: skip
        else:
            notes.append(f"host: {head}; {tail}")
    elif hp is None and runtime == "hf-eager" and step_ms is not None and not host["step_solved"]:
        # the trace's own host, less an assumed cost per event, is all there is: from a
        # GPU-bound prefill trace it priced the host-bound 1 x 128-512 prompts of H200 runs 24,
        # 25 and 27 36-55% slow, where the machine's host profile gave 9-15% on runs 24 and 27
        # (run 25's host drifted, -39%)
        kept = ("cut to fit under the step time" if host["host_cut"]
                else "less an assumed profiler cost per event")  # fmt: skip
        notes.append(f"host: --step-ms {step_ms:g} is GPU-bound, so the trace's own host is "
                     f"used, {kept}; pass --host PROFILE (`gpumodel validate --host-only` on the "
                     "machine that recorded the trace) to price host-bound steps at its "
                     "measured speed")  # fmt: skip
    eager_from = None
    if runtime.removeprefix("train-") in GRAPH_RUNTIMES:  # no eager launch to measure
        host, eager_from = _graph_eager_host(host, hp)
        notes.append("host: a trace of graph replays times no eager kernel's host (its host "
                     "is the replays'): eager kernels priced with this calibration (a prefill, a "
                     f"training step) take {eager_from}, "
                     f"{host['host_per_kernel_s'] * 1e6:.3g} us each"
                     + ("" if hp is not None else "; pass --host PROFILE (`gpumodel validate "
                        "--host-only` on the machine that recorded the trace) for its own"))  # fmt: skip

    # --- the fitted model on the traced step ----------------------------------------------
    # the kernels outside the fit (unmatched, and NCCL's, matched or not) at their measured
    # time, NCCL's only where nothing else ran beside them
    comm_matched = sum(v.measured_s for v in comm if v.pred_per_call_s is not None)
    rest = (busy - (matched - comm_matched)) / periods
    fitted_gpu = sum(
        fam_meas[k] / periods if k in scales else fam_pred[k] / periods for k in fam_meas
    ) + rest  # fmt: skip
    base_gpu = sum(fam_pred.values()) / periods + rest
    if graph is not None:  # per class (its families repeat its totals, one row per key)
        fitted_gpu = rest + sum(m if ok else p for m, p, ok in graph.classes.values())
        base_gpu = rest + sum(p for _, p, _ in graph.classes.values())
    step_pred = max(fitted_gpu, host["host_step_s"]) + host["loader_step_s"]
    self_check = {
        "step_profiled_s": host["step_profiled_s"],
        # the step as the trace's timeline has it (what diagnose reports): the host's
        # ProfilerStep range above is shorter where the host runs ahead of the GPU
        "step_traced_s": tl.step_us * 1e-6,
        "step_predicted_s": step_pred,
        "gpu_busy_measured_s": busy / periods,
        "gpu_busy_predicted_s": fitted_gpu,
        "base_gpu_busy_predicted_s": base_gpu,
    }
    if step_ms is not None:  # the unprofiled step is what the model predicts
        self_check["step_measured_s"] = step_ms * 1e-3
        self_check["error_pct"] = 100.0 * (step_pred - step_ms * 1e-3) / (step_ms * 1e-3)
    base_params = base.parameters if base is not None else CalibrationParams()
    # a key this trace fits takes its scale and span (or none) from it; the base's other
    # trace-fitted keys stay as they were
    kept_spans = {k: v for k, v in base_params.family_time_scale_span_s.items() if k not in scales}
    params = base_params.model_copy(update={
        "family_time_scale": {**base_params.family_time_scale, **scales},
        "family_time_scale_span_s": {**kept_spans, **spans},
    })  # fmt: skip
    if host["host_per_kernel_s"] > MAX_HOST_CALL_S:  # TraceFit's bound, said as one line
        raise TraceFormatError(
            f"{path}: the traced step's host time per kernel is "
            f"{host['host_per_kernel_s'] * 1e3:.4g} ms, past any host call "
            f"({MAX_HOST_CALL_S * 1e3:g} ms): a step of so few kernels is not one calibrate fits"
        )
    fit = TraceFit(
        trace_path=str(path), trace_sha256=file_sha256(path), gpu_id=spec.id,
        device_name=info.device_name, runtime=runtime, runtime_evidence=evidence,
        created=datetime.now(timezone.utc), steps=tl.steps_with_work,
        step_time_s=tl.step_us * 1e-6,
        unprofiled_step_s=step_ms * 1e-3 if step_ms is not None else None,
        gpu_busy_s=busy / periods, kernels_per_step=host["kernels_per_step"],
        graph_launches_per_step=host["graphs_per_step"],
        matched_fraction=matched / total, unmatched=unmatched_rows, families=families,
        profiler=host["correction"], host_per_kernel_s=host["host_per_kernel_s"],
        host_op_s=host["op_s"], host_op_counts=host["op_counts"], self_check=self_check,
        collectives=dict(collectives), model=model, notes=notes, eager_host_from=eager_from,
        peak_allocated_bytes=tr.peak_allocated_bytes,
        peak_reserved_bytes=tr.peak_reserved_bytes,
    )  # fmt: skip
    env = dict(base.environment) if base is not None else {}
    env.update({"trace": path.name, "trace_sha256": fit.trace_sha256, "runtime": runtime})
    cal = Calibration(
        gpu_id=spec.id,
        device_name=info.device_name or spec.name,
        created=fit.created,
        backend="trace",
        environment=env,
        parameters=params,
        errors=base.errors if base is not None else {},
        trace=fit,
        host_profile=host_profile_from_fit(fit),
    )
    if graph is None:
        return cal
    assert graph_step is not None and model is not None  # a graph fit had both
    return _graph_self_check(cal, model, spec, graph_step, step_ms)


def _graph_self_check(
    cal: Calibration, model: str, spec: GPUSpec, step: GraphStep, step_ms: float | None
) -> Calibration:
    """A graph trace's self-check: the traced step predicted whole with the fitted calibration
    (its kernels, the in-graph gaps between them and the replay), not the sum of its kernels."""
    from gpumodel.llm.inference import predict_inference

    fit = cal.trace
    assert fit is not None
    pred = predict_inference(model, spec, step.phase, step.batch, seq=step.seq,  # type: ignore[arg-type]
                             context=step.context, runtime=fit.runtime, calibration=cal,
                             allow_oversubscribe=True)  # fmt: skip
    check = {**fit.self_check, "step_predicted_s": pred.time_s}
    if step_ms is not None:
        check["error_pct"] = 100.0 * (pred.time_s - step_ms * 1e-3) / (step_ms * 1e-3)
    # the step it was fitted on, priced whole, more than 2x off: the step named is not the one
    # traced (its classes each fitted, its other kernels or host not); the committed graph
    # traces named right come back within 5% of --step-ms (docs/trace-calibration.md)
    ran = step_ms * 1e-3 if step_ms is not None else fit.self_check["step_traced_s"]
    if not 1 / SELF_CHECK_FACTOR <= pred.time_s / ran <= SELF_CHECK_FACTOR:
        raise TraceFormatError(
            f"{fit.trace_path}: --model {model} --batch {step.batch} --context {step.context} "
            f"--phase {step.phase} does not describe the traced step: fitted on it, the model "
            f"prices it at {pred.time_s * 1e3:.4g} ms where it ran {ran * 1e3:.4g} ms "
            f"({'--step-ms' if step_ms is not None else 'traced'}); check those arguments"
        )
    return cal.model_copy(update={"trace": fit.model_copy(update={"self_check": check})})


def _graph_step(batch: int | None, context: int | None, phase: str | None) -> GraphStep | None:
    """The traced step of a graph trace from the user's flags (batch and context both or
    neither; a phase only with them)."""
    from gpumodel._validators import check_choice, check_counts

    if phase is not None:
        check_choice(phase, "phase", ("prefill", "decode"))
    if batch is None and context is None:
        if phase is not None:
            raise TraceFormatError("--phase goes with --batch and --context: the step of a "
                                   "trace of CUDA-graph replays (an eager trace shows its own)")  # fmt: skip
        return None
    if batch is None or context is None:
        raise TraceFormatError("--batch and --context go together: the traced step's batch "
                               "and its context (KV length) in tokens")  # fmt: skip
    check_counts(batch=batch, context=context)
    return GraphStep(batch=batch, context=context, phase=phase or "decode")


def _misdescribed(
    path: Path, model: str, step: GraphStep, fit: GraphFit, other: GraphStep, refit: GraphFit
) -> str:  # fmt: skip
    """One line: the graph step named (``step``) does not fit the trace's kernels (``fit``),
    and the argument most likely wrong: ``--phase`` where the other phase fits (``refit``),
    else ``--batch``/``--model`` for the GEMMs, ``--context``/``--batch`` for attention."""
    from gpumodel.tracegraph import DESCRIBED_STEP_FACTOR

    cls, scale = max(fit.misfit.items(), key=lambda kv: abs(math.log(kv[1])))
    m, p, _ = fit.classes[cls]
    if not refit.misfit:
        fits = ", ".join(f"{c} x{m_ / p_:.3g}" for c, (m_, p_, _) in refit.classes.items() if p_)
        hint = f"check --phase: as a {other.phase} step they fit ({fits})"
    elif cls in ("gemm", "grouped_gemm"):
        hint = ("check --batch and --model: a step's GEMM time is set by its tokens (batch, x "
                "context in a prefill) and the model's widths")  # fmt: skip
    else:
        hint = ("check --context and --batch: attention's time is set by the KV length times "
                "the batch")  # fmt: skip
    f = DESCRIBED_STEP_FACTOR
    return (
        f"{path}: --model {model} --batch {step.batch} --context {step.context} --phase "
        f"{step.phase} does not describe the traced step: the model prices its {cls} "
        f"kernels at {p * 1e3:.3g} ms a step, the trace ran them in {m * 1e3:.3g} ms "
        f"(x{scale:.3g}; a step named right fits within 1/{f:g}-{f:g}x); {hint}"
    )


def _fit_graph(
    path: Path, views: list[Any], periods: int, total: float, spec: GPUSpec,
    calibration: Calibration | str | None, model: str | None, runtime: str, step: GraphStep,
    hp: HostProfile | None,
) -> tuple[GraphFit, list[dict[str, Any]]]:  # fmt: skip
    """A graph trace's GEMM and attention kernels fitted by name against the model's step
    (``gpumodel.tracegraph``), and the other kernels as ``TraceFit.unmatched`` rows."""
    from gpumodel.diagnose.report import TRACED_CONDITION
    from gpumodel.hostprofile import load_host

    if model is None:
        raise TraceFormatError(f"{path}: a trace of CUDA-graph replays records no shapes to "
                               "name the model from: pass --model with --batch/--context")  # fmt: skip
    kernels = [(g.name, g.dur * 1e-6) for v in views if v.mapped.family != COMM_FAMILY
               for i in v.instances for g in i.gpu]  # fmt: skip
    host = hp or load_host(None)
    priced, default = (priced_step(model, spec, runtime, step, calibration, host, c)
                       for c in (TRACED_CONDITION, "in-workload"))  # fmt: skip
    gf = fit_graph_families(kernels, periods, priced, default, total, MIN_FAMILY_SHARE,
                            (MIN_RATIO, MAX_MULTIPLIER))  # fmt: skip
    reason = (f"graph, not fitted: {sum(gf.other_s.values()) * 1e3:.3g} ms of other kernels, "
              f"model {gf.other_predicted_s * 1e3:.3g} ms")  # fmt: skip
    rows = [{"kernel": k, "family": "other", "s_per_step": v, "reason": reason}
            for k, v in list(gf.other_s.items())[:10]]  # fmt: skip
    return gf, rows


def _why_unreadable(path: Path) -> TraceFormatError | None:
    """The error to give for a trace the reader refused, where its gzip stream ends early: what
    was read of a cut file looks empty, or holds no kernel (the CPU events come first), and
    the reader says so; the file is truncated. None where the stream is whole (or not gzip)."""
    import zlib

    from gpumodel._io import max_input_bytes, read_bytes

    raw = read_bytes(path, "trace", max_input_bytes())
    if raw[:2] != b"\x1f\x8b":
        return None
    d, pending, n = zlib.decompressobj(16 + zlib.MAX_WBITS), raw, 0
    try:
        while True:  # as _io.gunzip reads it, output counted, not kept
            piece = d.decompress(pending, 1 << 20)
            n, pending = n + len(piece), d.unconsumed_tail
            if d.eof or (not pending and not piece) or n > max_input_bytes():
                break
    except zlib.error:
        return None  # the reader said "corrupt gzip data" already
    if d.eof or n > max_input_bytes():
        return None
    return TraceFormatError(f"{path}: the trace is truncated or corrupt (its gzip stream ends "
                            f"early, after {n:,} bytes of JSON); calibrate fits whole steps: "
                            "export the trace again")  # fmt: skip


def _is_top_level(e: CpuEvent) -> bool:
    return e.cat == "cpu_op" and (e.parent is None or e.parent.cat != "cpu_op")


def _top_level(events: list[CpuEvent]) -> list[CpuEvent]:
    return [e for e in events if _is_top_level(e)]


def _tops_above(node: CpuEvent | None, memo: dict[int, tuple[int, ...]]) -> tuple[int, ...]:
    """The ids of the top-level operators on ``node``'s chain of parents, ``node`` included,
    memoised per node (a trace's events share their parents: one walk per node, not per event
    and ancestor)."""
    chain: list[CpuEvent] = []
    while node is not None and id(node) not in memo:
        chain.append(node)
        node = node.parent
    tops = memo[id(node)] if node is not None else ()
    for n in reversed(chain):
        tops = (id(n), *tops) if _is_top_level(n) else tops
        memo[id(n)] = tops
    return tops


# Without --step-ms a trace cannot tell its host's time from the profiler's own cost: with the
# host profile's measured cost per event taken out (the default where it measured none), the 44
# committed Llama-3-8B eager traces (H100 and H200 VMs, 2026-11-24/27) kept 0.18-2.85x the
# profile's host time per kernel (median 1.2): the profiler's cost per event moved from 1.7 to
# 8.4 us between calls, and the profile's own measurement of it did not follow. The profile,
# measured for the purpose on the same machine, is the better guide to the host's speed, so an
# eager inference trace calibrated with --host and without --step-ms (or with a GPU-bound one,
# which bounds the host from above only: H200 runs 24 and 25's prefill traces, taken at a
# GPU-bound point, kept about twice their host and put the host-bound 1 x 128-512 prompts
# 43-55% slow; at the profile's speed run 24's came to 9-13%) keeps the trace's mix of host
# work per operator kind at the profile's speed (``_at_profile_speed``). Outside 1/2-2x
# the output also warns: the trace was recorded in a slow (or fast) stretch, or its profiler
# cost was unusual. Both the rule and the threshold were decided after reading those traces' scores
# (validation/results/trace-calibration-errors-run14.md, -run15.md; docs/trace-calibration.md).
HOST_SPEED_WARN_RATIO = 2.0


def _trace_and_profile_host(
    host_per_kernel_s: float | None, runtime: str, step_solved: bool, hp: HostProfile | None
) -> tuple[float, float] | None:
    """(the trace's, the profile's host seconds per kernel) for an ``hf-eager`` inference trace
    calibrated with a host profile whose host time the unprofiled step time did not settle
    (``step_solved``: no ``step_ms``, or a GPU-bound one); else None (the trace's host kept)."""
    if step_solved or hp is None or not host_per_kernel_s:
        return None
    if runtime != "hf-eager":  # training (autograd's backward) and graphs cost otherwise
        return None
    if not hp.hf_decoder_layer_s or not hp.hf_decoder_layer_kernels:
        return None
    return host_per_kernel_s, hp.hf_decoder_layer_s / hp.hf_decoder_layer_kernels


def _at_profile_speed(
    host: dict[str, Any], pair: tuple[float, float], cap_s: float | None = None
) -> dict[str, Any]:
    """``_host_side``'s figures with every host time scaled by profile / trace per kernel, the
    host step held to ``cap_s`` (a GPU-bound unprofiled step: the host took no longer)."""
    factor = pair[1] / pair[0]
    if cap_s is not None and host["host_step_s"] * factor > cap_s:
        factor = cap_s / host["host_step_s"]
    corr = host["correction"]
    corr = corr.model_copy(update={"host_step_s": corr.host_step_s * factor,
                                   "host_speed_factor": factor})  # fmt: skip
    return {**host, "correction": corr, "host_step_s": host["host_step_s"] * factor,
            "host_per_kernel_s": pair[1],
            "op_s": {k: v * factor for k, v in host["op_s"].items()}}  # fmt: skip


def _graph_eager_host(host: dict[str, Any], hp: HostProfile | None) -> tuple[dict[str, Any], str]:
    """``_host_side``'s figures for a trace of graph replays, with the host per eager kernel
    taken from a host profile (``hp``, else the default: measured here, or ``typical``), and
    where from. Such a trace issues a step's kernels in one replay: its host per issued launch
    is a replay's (1.26 ms on steps-h200-graph2-run2's static decode), and priced per eager
    kernel it put a 1 x 512 hf-static-compiled prefill (eager kernels) at 1.76 s where 21-27 ms
    was measured on H200 VMs. The profile's figure is the one an HF step is priced with: its
    HF decoder layer's host time per kernel, else one eager elementwise call."""
    from gpumodel.hostprofile import load_host

    prof = hp if hp is not None else load_host(None)
    per = prof.per_layer_host_s()
    what = "its HF decoder layer's host time per kernel" if per else "one eager elementwise call"
    per = per if per is not None else prof.cost_s("elementwise")
    return {**host, "host_per_kernel_s": per}, f"host profile {prof.name} ({what})"


def _model_times(cal: Calibration) -> Calibration:
    """``cal`` without its trace-fitted family scales (and their spans)."""
    bare = cal.parameters.without_trace_scales()
    return cal if bare is cal.parameters else cal.model_copy(update={"parameters": bare})


def _check_step_ms(path: Path, step_ms: float, gpu_s: float, profiled_s: float) -> None:
    """Refuse a ``step_ms`` the trace says cannot be its step's unprofiled time: shorter than
    its kernels' GPU time, or far longer than the profiled step (bounds above)."""
    unprof = step_ms * 1e-3
    if unprof < MIN_STEP_OF_KERNELS * gpu_s:
        slip = MIN_STEP_OF_KERNELS * gpu_s <= unprof * 1e3 <= MAX_STEP_OF_PROFILED * profiled_s
        raise TraceFormatError(
            f"{path}: --step-ms {step_ms:.10g} is shorter than the traced step's kernels, "
            f"{gpu_s * 1e3:.4g} ms of GPU time a step: a step cannot run faster than its "
            "kernels; give the step time measured without the profiler, in milliseconds"
            + (f" ({step_ms:.10g} s is {step_ms * 1e3:g} ms)" if slip else "")
        )
    if unprof > MAX_STEP_OF_PROFILED * profiled_s:
        slip = MIN_STEP_OF_KERNELS * gpu_s <= unprof * 1e-3 <= MAX_STEP_OF_PROFILED * profiled_s
        raise TraceFormatError(
            f"{path}: --step-ms {step_ms:.10g} is {unprof / profiled_s:.3g}x the traced step "
            f"({profiled_s * 1e3:.4g} ms with the profiler, which only slows a step): not this "
            "step's time; give the step time measured without the profiler, in milliseconds"
            + (f" ({step_ms:.10g} us is {step_ms * 1e-3:g} ms)" if slip else "")
        )


def _load_host_arg(host: HostProfile | str | Path | None) -> HostProfile | None:
    if host is None:
        return None
    from gpumodel.hostprofile import load_host

    return load_host(host)


def _profiler_event_s(hp: HostProfile | None) -> tuple[float, str] | None:
    """(seconds per event, where from) of the host profile's measured profiler cost, if any."""
    if hp is None or hp.profiler_event_s is None:
        return None
    return hp.profiler_event_s, f"host profile {hp.name}: measured per-event cost"


# Bounds on --step-ms against the trace. Below: a step cannot run faster than its kernels, and
# a kernel runs about as long under the profiler as without it (a tenth, as GPU_BOUND_MARGIN:
# the 241 committed traces with a timed point ran 1.01x or more their kernels' GPU time); below
# it is a unit slip (0.0337 for 33.7 ms) or another step's time. Above: the profiler only
# adds time, so an unprofiled step is at most the profiled one, give or take a drifting host
# (those traces: 0.26-1.03x; the 1.03x, H200 run 29, was a drifting host); 10x is another
# step or unit.
MIN_STEP_OF_KERNELS = 0.9
MAX_STEP_OF_PROFILED = 10.0
# A graph fit whose fitted model misses the traced step by more than this factor is refused:
# the step named is not the one traced (_graph_self_check)
SELF_CHECK_FACTOR = 2.0
# the share of a traced step spent inside a DataLoader above which calibrate warns
LOADER_WARN_SHARE = 0.1


def _host_side(
    tr: Trace,
    tl: Timeline,
    step_ms: float | None,
    periods: int,
    event_s: tuple[float, str] | None = None,
    gpu_busy_s: float = 0.0,
    per_kind: bool = True,
) -> dict[str, Any]:
    """Host time per step, per kernel and per operator kind (``per_kind``: else only the step's
    and the kernel's), with the profiler's cost removed.

    With ``step_ms``: where the unprofiled step took longer than the GPU's work
    (``GPU_BOUND_MARGIN`` x ``gpu_busy_s``), the host set its pace and the profiler's cost is
    solved for exactly. Where it did not, the step time bounds the host from above only (a
    GPU-bound H100 prefill of 60.8 ms whose host took ~30 ms unprofiled solved for 0.43 us per
    event, leaving 56.7 ms of host; steps-h100-run12): the per-event cost is removed as
    without ``step_ms``, and the host is held to the step time (an eager inference trace with a
    host profile is then taken at the profile's speed, as without ``step_ms``:
    ``_at_profile_speed``)."""
    steps = [e for e in tr.cpu if e.cat == "user_annotation" and e.name.startswith("ProfilerStep#")]
    if steps:
        lo, hi = min(s.ts for s in steps), max(s.end for s in steps)
        n_steps = len(steps)
        # a step that ends in a synchronisation (a loss .item(), torch.cuda.synchronize) waits
        # there for the GPU: that wait is not host work (an H200 prefill step of 60.9 ms spent
        # 22.1 ms in cudaDeviceSynchronize)
        waits = [r for r in tr.runtime if "Synchronize" in r.name]
        # and a step that waits for its input pipeline (a DataLoader's next batch) spends that
        # host time in the user's loop, not on the model's kernels: left out of the host per
        # kernel, added back to the traced step's check
        loader = loader_spans(tr)
        host_step_prof = (
            statistics.median(
                s.dur - sum(r.dur for r in waits if s.ts <= r.ts <= s.end)
                - span_overlap(loader, s.ts, s.end) for s in steps
            )
            * 1e-6
        )
        loader_s = statistics.median(span_overlap(loader, s.ts, s.end) for s in steps) * 1e-6
        # the profiled step as the same statistic over the same ranges: the timeline's mean
        # over its GPU window mixed a slow first step (53 of 43-45 ms, H100 run 16's decode)
        # into what --step-ms is subtracted from, and took 4 ms too many off the host
        step_prof = statistics.median(s.dur for s in steps) * 1e-6
    else:
        lo, hi = float("-inf"), float("inf")
        n_steps = 1
        host_step_prof = tl.window_us * 1e-6
        step_prof = tl.step_us * 1e-6
        loader_s = 0.0

    def inside(ts: float) -> bool:
        return lo <= ts <= hi

    cpu_ops = [e for e in tr.cpu if e.cat == "cpu_op" and inside(e.ts)]
    runtime = [r for r in tr.runtime if inside(r.ts)]
    launches = sum(1 for r in runtime if r.name.startswith(_LAUNCH_CALLS))
    # kernels a library launches inside one call besides its main one, which the model folds
    # into that op: the host pays for the call, so they do not dilute the host time per kernel
    # (launched ones only: a graph's helper kernels came with its one replay)
    helpers = sum(1 for g in tr.gpu if g.kind == "kernel" and g.runtime is not None
                  and g.runtime.name.startswith(_LAUNCH_CALLS) and inside(g.runtime.ts)
                  and g.name.startswith(IN_CALL_HELPER_KERNELS))  # fmt: skip
    graphs = sum(1 for r in runtime if r.graph_launch)
    events = (len(cpu_ops) + len(runtime)) / n_steps
    kernels_per_step = launches / n_steps
    graphs_per_step = graphs / n_steps
    per_event, method = event_s or (DEFAULT_PROFILER_EVENT_S, "default per-event cost")
    by_event = min(per_event * events, 0.9 * host_step_prof)
    solved = cut = False
    if step_ms is None:
        removed = by_event
        if event_s is None:
            method += " (no --step-ms given)"
    else:
        # The profiler's cost shows only while the host sets the pace: solve for it from the
        # difference, never below zero, never more than the host had.
        unprof = step_ms * 1e-3
        removed = min(max(step_prof - unprof, 0.0), host_step_prof)
        solved = unprof > GPU_BOUND_MARGIN * gpu_busy_s
        if solved:
            method = "step-ms: solved from the unprofiled step time"
            if unprof > step_prof:  # the profiler only adds host time: the host itself moved
                method += (f"; but --step-ms {step_ms:g} is longer than the profiled step "
                           f"({step_prof * 1e3:.1f} ms), so the host ran slower when the step "
                           "was timed than while it was traced (a drifting host: time several "
                           "steps in the traced process); nothing removed")  # fmt: skip
        else:
            # GPU-bound: the step says only that the host took no longer. Removed: the largest
            # of the profiled step's excess over it (as solved above: a step that ends in a
            # sync holds the host's wait, which its host time leaves out), the cost per event
            # as without --step-ms, and what holds the host under the step
            excess, held = removed, max(host_step_prof - unprof, 0.0)
            removed = max(excess, by_event, held)
            cut = removed > by_event  # the host cut to fit the step, not by the cost per event
            method = (f"--step-ms {step_ms:g} is GPU-bound ({gpu_busy_s * 1e3:.1f} ms of "
                      "kernels), so it bounds the host from above only: removed the largest of "
                      f"the profiled step's excess over it ({excess * 1e3:.3g} ms), the {method} "
                      f"({per_event * 1e6:.3g} us an event: {by_event * 1e3:.3g} ms) and what "
                      f"holds the host under the step ({held * 1e3:.3g} ms)")  # fmt: skip
    per_event = removed / events if events else 0.0
    host_step = host_step_prof - removed
    correction = ProfilerCorrection(
        method=method, per_event_s=per_event, events_per_step=events,
        removed_per_step_s=removed, profiled_host_step_s=host_step_prof, host_step_s=host_step,
    )  # fmt: skip
    issued = (launches - helpers) / n_steps + graphs_per_step
    side = {
        "correction": correction,
        "loader_step_s": loader_s,
        "host_step_s": host_step,
        "step_solved": solved,  # the host's time solved from a host-bound --step-ms
        "host_cut": cut,  # a GPU-bound --step-ms cut the host more than the cost per event
        "step_profiled_s": step_prof,
        "host_per_kernel_s": host_step / issued if issued else host_step,
        "kernels_per_step": kernels_per_step,
        "graphs_per_step": graphs_per_step,
    }
    if not per_kind:
        return side
    # per-kind host time of one top-level operator call, less its own events' profiler cost
    # (each event counts once for every top-level operator above it, itself included)
    nested: dict[int, int] = defaultdict(int)
    tops_of: dict[int, tuple[int, ...]] = {}  # node -> ids of the top-level ops on its chain
    for node in [*cpu_ops, *(r.launcher for r in runtime)]:
        for top in _tops_above(node, tops_of):
            nested[top] += 1
    by_kind: dict[str, list[float]] = defaultdict(list)
    for e in _top_level(cpu_ops):
        by_kind[host_kind(e.name)].append(max(e.dur * 1e-6 - per_event * nested[id(e)], 0.0))
    op_s = {k: statistics.median(v) for k, v in by_kind.items() if v}
    op_counts = {k: len(v) / n_steps for k, v in by_kind.items()}
    return {**side, "op_s": op_s, "op_counts": op_counts}


def profiler_cost(
    tr: Trace,
    tl: Timeline,
    path: str | Path,
    step_ms: float | None = None,
    host: HostProfile | str | Path | None = None,
) -> tuple[ProfilerCorrection, float]:
    """(the profiler's host cost per step, the profiled step in seconds) of a loaded trace, as
    ``calibrate_from_trace`` takes it out: solved from ``step_ms`` (the step time measured
    without the profiler) where given and host-bound, else the recorded events times the cost
    per event (``host``'s measured ``profiler_event_s``, else ``DEFAULT_PROFILER_EVENT_S``).
    A ``step_ms`` the trace rules out is refused as in calibrate (``TraceFormatError``)."""
    from gpumodel._validators import check_number

    if step_ms is not None and not (0 < check_number(step_ms, "--step-ms") < 1e9):
        raise TraceFormatError(f"--step-ms must be a positive number of milliseconds, not {step_ms}")
    hp = _load_host_arg(host)
    periods = max(tl.periods, 1)
    busy_s = tl.busy_us * 1e-6 / periods
    side = _host_side(tr, tl, step_ms, periods, _profiler_event_s(hp), gpu_busy_s=busy_s,
                      per_kind=False)  # fmt: skip
    step_s = max(side["step_profiled_s"], tl.step_us * 1e-6)
    if step_ms is not None:
        _check_step_ms(Path(path), step_ms, busy_s, step_s)
    return side["correction"], side["step_profiled_s"]


def identify_runtime(tr: Trace, tl: Timeline) -> tuple[str, list[str]]:
    """Name the runtime the trace ran, with the evidence: a CUDA graph per step and compiled
    (Triton) kernels -> ``hf-static-compiled``; graphs without Triton -> ``fused-graph``; eager
    launches -> ``hf-eager``; a backward pass makes it a training step (``train-*``)."""
    names = [g.name for g in tr.gpu if g.kind == "kernel"]
    n = max(len(names), 1)
    triton = sum(1 for k in names if k.startswith("triton_") or "triton" in k.lower())
    graphs = sum(1 for r in tr.runtime if r.graph_launch)
    launches = sum(1 for r in tr.runtime if r.name.startswith(_LAUNCH_CALLS))
    cats = sum(1 for e in tr.cpu if e.name == "aten::cat")
    backward = any(i.phase == "backward" for i in tl.instances)
    optimizer = any(i.phase == "optimizer" for i in tl.instances)
    evidence = [f"{len(names)} kernels, {launches} kernel launches, {graphs} graph launches"]
    if triton:
        evidence.append(f"{triton} Triton kernels ({100 * triton / n:.0f}%): compiled regions")
    if cats and not backward:
        evidence.append(f"{cats} aten::cat calls (dynamic KV cache concatenation)")
    if backward:
        evidence.append("backward kernels present: a training step")
    if optimizer:
        evidence.append("optimizer kernels present")
    if graphs and graphs >= 0.2 * max(launches, 1):
        runtime = "hf-static-compiled" if triton else "fused-graph"
    elif triton:
        runtime = "compiled-eager"
    else:
        runtime = "hf-eager"
    if backward:
        runtime = f"train-{runtime}"
    return runtime, evidence


def host_profile_from_fit(fit: TraceFit) -> dict[str, Any]:
    """The traced host's costs (stored as the calibration's ``host_profile``, a ``TraceHost``):
    eager op costs by kind, the launch cost and the graph replay, profiler removed."""
    op_s = dict(fit.host_op_s)
    fallback = fit.host_per_kernel_s
    eager = {k: op_s.get(k, fallback) for k in HOST_KINDS}
    return {
        "host_profile": 1,
        "name": f"trace-{fit.trace_sha256[:12]}",
        "measured_at": fit.created.isoformat(),
        "source": f"torch.profiler trace {fit.trace_path} ({fit.profiler.method})",
        "eager_op_s": eager,
        # a graph trace launched no eager kernel: its host per kernel is a profile's
        "kernel_launch_s": None if fit.eager_host_from else fit.host_per_kernel_s,
        "graph_replay_s": fit.profiler.host_step_s if fit.graph_launches_per_step else None,
        "per_step_host_s": fit.profiler.host_step_s,
    }


__all__ = [
    "DEFAULT_PROFILER_EVENT_S",
    "GRAPH_RUNTIMES",
    "PROFILER_EVENT_SPREAD_S",
    "FamilyFit",
    "ProfilerCorrection",
    "TraceFit",
    "calibrate_from_trace",
    "host_kind",
    "identify_model",
    "identify_runtime",
    "profiler_cost",
]
