"""op + GPU + calibration -> Prediction. The one pure call at the centre of gpumodel.

Each kernel's time is built from named terms (each shown by ``explain()`` and ``--json``):

    t = launch floor [+ first DRAM load] [+ reduction tail] + overlap(t_compute, t_memory)

    t_compute = FLOPs / (peak(unit, dtype) x efficiency x instruction mix x tail efficiency)
                (efficiency: the unit's, a cuBLAS GEMM's with its alignment penalty, times the
                 kernel family's; instruction mix 0.5 without FMA; tail efficiency for blocks
                 of unequal work)
                [+ elements / (SMs x clock x elements per SM-cycle)] for kernels bound by
                per-element instructions (strided copies, casts, row ops; calibrated per
                family; then t = max(t_compute, t_memory))
    t_memory  = bytes / min(DRAM bandwidth x efficiency(read/write mix, family),
                            Little's-law limit of the resident threads)
                (L2 bandwidth for warm working sets that fit)
    overlap   = (t_c^p + t_m^p)^(1/p)

With ``calibration="none"`` every efficiency is 1, the overlap is the roofline's max and the
floor is a datasheet-free default; a calibration replaces each with what ``gpumodel validate``
measured.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from gpumodel._validators import MAX_BYTES, MAX_FLOPS
from gpumodel.calibration import Calibration, CalibrationParams, calibration_label, resolve
from gpumodel.errors import InfeasibleError, SpecError, UnsupportedError
from gpumodel.model import gemm as gemm_model
from gpumodel.model.roofline import arithmetic_intensity, overlap_time, ridge_point
from gpumodel.model.scheduling import FILL_TILE, fill_efficiency, schedule_efficiency
from gpumodel.ops.base import KernelWork, Op, is_array
from gpumodel.prediction import Bound, KernelPrediction, Prediction, Term
from gpumodel.sol import host_link_roof_bytes_per_s, kernel_sol, max_clock_peak_flops, roof_time_s
from gpumodel.specs import GPUSpec, get_gpu
from gpumodel.tracefit import family_key
from gpumodel.units import format_quantity, format_time

if TYPE_CHECKING:
    from gpumodel.hostprofile import HostProfile
    from gpumodel.ops.simple import HostTransfer

# A bare kernel launch, host side, back to back, where no calibration measured one
# (``launch_host_s``): the CuPy RawKernel launch of `gpumodel validate` on the H100 host of
# validation/results/h100-sxm, 2026-11-22: 4.62 us (an earlier host measured 7.01 us).
DEFAULT_LAUNCH_HOST_S = 4.6e-6

# GPU-side cost of one kernel when nothing is calibrated: an empty kernel timed with CUDA
# events takes a few microseconds (seeds 002 and 004: "5-10 us" host launch, "a few us").
DEFAULT_KERNEL_OVERHEAD_S = 2.5e-6
# A host<->device copy's fixed cost (driver call + DMA setup) before calibration.
DEFAULT_TRANSFER_OVERHEAD_S = 10e-6

L2Mode = Literal["cold", "warm", "dirty"]
L2_MODES: tuple[str, ...] = ("cold", "warm", "dirty")
# isolated: one call at the short-burst boost clock (what validate's harness times);
# in-workload: back to back with other kernels (the power-limited sustained clock);
# in-graph: in-workload's clock and L2, the kernels replayed from a captured CUDA graph
# (torch.compile mode="reduce-overhead", an engine's decode graphs): no launch gap between them
Condition = Literal["in-workload", "isolated", "in-graph"]
CONDITIONS: tuple[str, ...] = ("in-workload", "isolated", "in-graph")


# A trace-fitted family scale holds between the smallest and largest kernel of the traced ops
# that fitted it (its span, in predicted time per kernel: ``kernel_size_s``); beyond the nearer
# edge it fades to 1 linearly in log10 distance and is 1 from this factor beyond it on. Set a
# priori, before any scoring: an order of magnitude in a kernel's time puts it in another
# tile/grid regime (another cuBLAS kernel, a grid that fills the GPU where the traced one did
# not), where the ratio the trace measured says nothing.
SCALE_FADE_FACTOR = 10.0


def predict(
    op: Op,
    gpu: GPUSpec | str,
    calibration: Calibration | str | None = None,
    *,
    l2: L2Mode = "cold",
    condition: Condition = "in-workload",
    host: Any = None,
    activity: float | None = None,
    dram_bytes_per_s: float | None = None,
) -> Prediction:
    """Predict the time of ``op`` on ``gpu``.

    ``calibration``: None uses the best profile found for that GPU (user cache, then shipped),
    ``"none"`` the datasheet alone, a path or Calibration object that calibration.
    ``l2``: ``"cold"`` (default: inputs in DRAM, L2 clean), ``"warm"`` (inputs already in L2,
    produced by the previous kernel, when they fit) or ``"dirty"`` (L2 full of dirty lines that
    nobody has paid for, as after ``triton.testing.do_bench``'s writing flush: this kernel
    pays their DRAM write-back).
    ``condition``: ``"in-workload"`` (default: back to back with other kernels, as in training
    and inference: the power-limited sustained clock) or ``"isolated"`` (one call at the
    short-burst boost clock: what validate's harness times). The in-workload term needs a
    calibration that measured it (``gpumodel validate --conditions``). ``"in-graph"``: the
    in-workload kernel replayed from a CUDA graph, which hides each launch's latency
    (``graph_floor_s``, with the ``host`` profile's ``graph_replay_per_kernel_s``, else the
    reference host's).
    ``host``: the op called from eager PyTorch on that host (a host profile: name, file or
    ``HostProfile``; ``gpumodel validate --host-only`` measures one): one call takes at least
    the profile's host time for the call's kind (``eager_op_s``: F.conv2d, matmul, ...) and a
    bare launch (the calibration's ``launch_host_s``) per further kernel it launches, since
    back to back the GPU waits for the host when the kernels are shorter (``eager_floor``).
    ``activity`` (0..1, in-workload or in-graph): the tensor activity the power limit sees, when the
    kernel runs inside a step whose time-weighted average is that (``gpumodel.llm`` passes
    it); None: the kernel's own, as back to back with itself. ``dram_bytes_per_s`` (with
    ``activity``): that step's average DRAM traffic at the maximum clock, whose power the limit
    sees too (``gpumodel.model.power``); None: none.

    The result's ``accuracy``: how wrong predictions like this one measured on sets never
    fitted to (``gpumodel.accuracy``; None where none was measured, or inside a step).
    """
    check_condition(condition, l2)
    if not isinstance(op, Op):
        raise SpecError(f"predict needs an op (gpumodel.ops.*), got {type(op).__name__}")
    if activity is not None and not (isinstance(activity, (int, float)) and 0 <= activity <= 1):
        raise SpecError(f"activity must be a number in [0, 1], got {activity!r}")
    if dram_bytes_per_s is not None and (
        activity is None or not isinstance(dram_bytes_per_s, (int, float))
        or not 0 <= dram_bytes_per_s < math.inf
    ):  # fmt: skip
        raise SpecError("dram_bytes_per_s is a step's average DRAM traffic (a finite number "
                        f">= 0) given with its activity, got {dram_bytes_per_s!r}")  # fmt: skip
    if activity is not None and condition == "isolated":
        raise SpecError("activity sets the in-workload clock; an isolated call runs at the "
                        "maximum clock (pass condition='in-workload')")  # fmt: skip
    gpu = get_gpu(gpu)
    op = op.on(gpu)  # the kernel that runs it there named (attention's SDPA dispatch)
    cal = resolve(calibration, gpu)
    custom = getattr(op, "predict_on", None)
    if calibration is None and cal is None and hasattr(op, "with_system_calibration"):
        cal = op.with_system_calibration(gpu, None)  # a system fit even without a device one
    hp = None
    copy = op.op_name == "host_transfer"  # a host profile prices its fixed cost, not a floor
    if copy and condition == "in-graph":
        raise SpecError("in-graph prices kernels replayed from a CUDA graph; a host copy is "
                        "priced in-workload (as your code waits for it) or isolated")  # fmt: skip
    if host is not None:
        from gpumodel.hostprofile import load_host

        if op.host_kind is None and not copy and condition != "in-graph":
            raise SpecError(f"host= prices one eager PyTorch call or a host copy; {op.op_name} "
                            "is neither (collectives price their own host side)")  # fmt: skip
        hp = load_host(host)
        if copy and (condition != "in-workload" or hp.host_copy_s is None):
            raise SpecError("a host profile prices a host copy as the user's code waits for it "
                            "(condition in-workload) from the profile's own 4 KB copies; "
                            + (f"host profile {hp.name} did not time them (measured before "
                               "2026-11-28): measure again with gpumodel validate --host-only"
                               if hp.host_copy_s is None else "isolated is the harness's time "
                               "(CUDA events), which has no host side"))  # fmt: skip
    if custom is not None:
        p = custom(gpu, cal)
    else:
        params = cal.parameters if cal else CalibrationParams()
        label = calibration_label(cal)
        graph_s = None if hp is None else hp.in_graph_kernel_s
        p = predict_with_params(op, gpu, params, label, l2, condition, activity=activity,
                                dram_bytes_per_s=dram_bytes_per_s, graph_kernel_s=graph_s)  # fmt: skip
    if hp is not None and condition != "in-graph":  # a graph's kernels wait for no dispatch
        if copy:
            p = host_copy_cost(p, op, hp)  # type: ignore[arg-type]
        else:
            launch_s = cal.parameters.launch_host_s if cal else None
            p = eager_floor(p, op, gpu, hp, DEFAULT_LAUNCH_HOST_S if launch_s is None else launch_s,
                            op.host_call_factor(gpu))  # fmt: skip
    p = _finite_result(p)
    if l2 != "cold" or activity is not None:  # inside a step, or an L2 no set measured
        return p
    from gpumodel.accuracy import kernel_accuracy, measured_host

    if hp is not None and not measured_host(hp):  # a shipped host (typical, reference-h100):
        return p  # no set timed an eager loop against one, and the GPU-paced figures do not apply
    acc = kernel_accuracy(op, gpu.id, cal, condition, host=hp is not None)
    return p.model_copy(update={"accuracy": acc}) if acc is not None else p


def eager_floor(
    p: Prediction, op: Op, gpu: GPUSpec, hp: Any, launch_s: float, call_factor: float = 1.0
) -> Prediction:
    """``p`` as one call of an eager PyTorch loop on host ``hp``. Back to back, the host issues
    one call every ``hp.cost_s(kind)`` x ``call_factor`` seconds (``Op.host_call_factor``:
    cuBLAS's split-K reduction launch), plus ``launch_s`` (a bare launch) for each further
    kernel the call launches from inside the library (cuDNN's NCHW transposes), so a call takes
    max(GPU time, that): the GPU drains the queue faster than the host fills it. Shown as the
    term "eager dispatch"; where it binds the bound is "launch"."""
    kind = op.host_kind or ""
    launches = op.host_launches(gpu) or sum(k.launches for k in p.kernels) or 1
    # the profile's figure is a call of its own probe, which may itself launch several kernels
    probe = hp.probe_launches(kind)
    floor_s = max(hp.cost_s(kind) * call_factor + (launches - probe) * launch_s, launch_s)
    stand_in = hp.measured_kind(kind)
    what = kind if stand_in == kind else f"{stand_in} ({kind} not measured)"
    extra = ""
    if launches != probe:
        extra = f", {launches} kernel{'s' if launches > 1 else ''} against its probe's {probe}"
    elif launches > 1:
        extra = f" ({launches} kernels, as its probe)"
    if call_factor != 1.0:
        extra += f" x {call_factor:g} (cuBLAS splits K: its reduction's launch)"
    binds = floor_s > p.time_s
    note = (f"host profile {hp.name}: one eager {what} call{extra}; "
            f"{'the GPU waits for the host' if binds else 'below the GPU time'}")  # fmt: skip
    terms = (*p.terms, Term(name="eager dispatch", value=floor_s, note=note))
    update: dict[str, Any] = {"terms": terms}
    if hp.host_drift is not None:  # the host's speed moves: so does a host-bound call
        lo, hi = hp.host_drift
        update["time_range_s"] = (max(p.time_s, floor_s * lo), max(p.time_s, floor_s * hi))
        update["host_drift"] = f"{lo:g}-{hi:g}"
    if binds:
        update.update(time_s=floor_s, bound="launch")
    return p.model_copy(update=update)


def host_copy_cost(p: Prediction, op: HostTransfer, hp: HostProfile) -> Prediction:
    """``p``, a host copy, with its fixed cost taken from host ``hp``'s own 4 KB copies (the
    same call, direction and host memory, with its synchronisation) instead of the
    calibration's, which carries the host of the machine it was fitted on: a 4 KB pinned
    ``.to('cuda')`` took 15.6-29.5 us on eight VMs of one type. The profile's 4 KB time less
    that copy's own link time at the calibrated rate, so a 4 KB copy predicts the profile's
    figure; the rate and the first touch of new pages stay the calibration's."""
    from gpumodel.hostprofile import HOST_COPY_PROBE_BYTES

    terms = {t.name: t for t in p.terms}
    link, fixed = terms["host link time"], terms["transfer overhead"]
    probe_link_s = link.value * HOST_COPY_PROBE_BYTES / op.bytes
    kind = f"{op.direction} {'pinned' if op.pinned else 'pageable'}"
    measured = hp.copy_cost_s(op.direction, op.pinned)
    assert measured is not None  # predict() refuses a profile without copies
    cost = max(measured - probe_link_s, 0.0)
    new = Term(name="transfer overhead", value=cost,
               note=f"host profile {hp.name}: a {HOST_COPY_PROBE_BYTES} B {kind} copy and its "
                    f"synchronisation took {measured * 1e6:.1f} us on that host, less its "
                    "link time (the calibration's "
                    f"{fixed.value * 1e6:.1f} us is its own machine's)")  # fmt: skip

    def swap(ts: tuple[Term, ...]) -> tuple[Term, ...]:
        return tuple(new if t.name == "transfer overhead" else t for t in ts)

    time_s = p.time_s - fixed.value + cost
    kernels = tuple(k.model_copy(update={"terms": swap(k.terms), "time_s": k.time_s - fixed.value
                                         + cost}) for k in p.kernels)  # fmt: skip
    bound = "latency" if cost > link.value else "memory"
    return p.model_copy(update={"terms": swap(p.terms), "kernels": kernels, "time_s": time_s,
                                "bound": bound})  # fmt: skip


def check_condition(condition: str, l2: str = "cold") -> None:
    from gpumodel._validators import _show

    if condition not in CONDITIONS:
        raise SpecError(f"unknown condition {_show(condition)}: use "
                        f"{', '.join(CONDITIONS[:-1])} or {CONDITIONS[-1]}")  # fmt: skip
    if l2 not in L2_MODES:
        raise SpecError(f"unknown l2 state {_show(l2)}: use {', '.join(L2_MODES)}")


def _finite_result(p: Prediction) -> Prediction:
    """The last guard of the boundary: a time that is not a finite number >= 0 is an error, never
    an output (inputs are bounded so that this does not happen; this names it if it does)."""
    if not (math.isfinite(p.time_s) and p.time_s >= 0):
        raise SpecError(f"{p.op} on {p.gpu}: the model gives a time of {p.time_s!r} s; "
                        "the inputs are outside what the model covers (docs/hardening.md#bounds)")  # fmt: skip
    return p


def _check_work(op: Op, work: list[KernelWork]) -> None:
    """Each kernel's FLOPs and bytes within what can exist (docs/hardening.md#bounds)."""
    for k in work:
        if not (0 <= k.total_flops <= MAX_FLOPS):
            raise SpecError(f"{op.label()}: {k.name} does {k.total_flops:.3g} FLOPs, more than "
                            f"the {MAX_FLOPS:.0e} any kernel does (docs/hardening.md#bounds)")  # fmt: skip
        if not (0 <= k.bytes <= MAX_BYTES):
            raise SpecError(f"{op.label()}: {k.name} moves {k.bytes:.3g} bytes, more than 2**60 "
                            "(1 EiB) (docs/hardening.md#bounds)")  # fmt: skip


def empty_kernel_s(params: CalibrationParams) -> float:
    """An empty kernel's isolated time (launch and CUDA events): the calibration's, else the
    default."""
    return params.kernel_overhead_s or DEFAULT_KERNEL_OVERHEAD_S


def graph_floor_s(isolated_s: float, graph_kernel_s: float, empty_kernel_s: float) -> float:
    """A launch's floor when its kernel is replayed from a captured CUDA graph.

    A graph hides each launch's latency: the host's launch and the GPU front end's fetch of the
    next kernel overlap the kernel before it (CUDA Programming Guide, "CUDA Graphs"). What it
    hides is an empty kernel's isolated time (``empty_kernel_s``, the calibration's
    ``kernel_overhead_s``: launch and CUDA events included) less an empty kernel's time in a
    replayed graph (``graph_kernel_s``, the host profile's ``graph_replay_per_kernel_s``). The
    launch's isolated floor ``isolated_s`` loses that, and stays between ``graph_kernel_s`` and
    ``isolated_s``: a kernel's own fixed work (a cuDNN convolution's prologue) stays."""
    hidden = max(0.0, empty_kernel_s - graph_kernel_s)
    return min(isolated_s, max(graph_kernel_s, isolated_s - hidden))


def stream_floor(isolated_s: float, floor_s: float, empty_s: float | None) -> float:
    """A launch's floor back to back in a stream, ``floor_s`` per kernel (the GPU time of a
    small kernel issued back to back) in place of its isolated floor ``isolated_s``; with
    ``empty_s`` (an empty kernel's isolated time) only the launch latency is hidden and the
    kernel's own fixed GPU work stays, as in a replayed graph (``graph_floor_s``)."""
    return floor_s if empty_s is None else graph_floor_s(isolated_s, floor_s, empty_s)


# Qualifiers of a kernel family (an attention kernel's dropout or grouped heads, an fp32 row
# kernel) that a calibration may not have measured: the kernel without them is the nearest it
# did. qualifier -> what pricing a kernel as its family without it leaves out
FAMILY_QUALIFIERS = {
    ":dropout": "dropout's random mask",
    ":gqa": "the grouped heads' dK/dV sum",
    ":spill": "the rate of a row kernel that reads its row three times",
    ":smem": "the rate of a row kernel that holds its row in shared memory",
    ":16-bit": "the 16-bit kernel's own rate",
    ":fp32": "the fp32 kernel's own calibrated rate",
}


def _calibrated(family: str, params: CalibrationParams) -> bool:
    return (family in params.family_efficiency or family in params.family_bandwidth_efficiency
            or family in params.family_overhead_s)  # fmt: skip


def calibrated_family(family: str, params: CalibrationParams) -> str:
    """``family``, or for a kernel that this calibration never measured with a qualifier (an
    attention kernel with SDPA's dropout or grouped K/V heads in its backward, ``...:dropout``,
    ``...:gqa``; an fp32 row kernel, ``...:fp32``) the same kernel's family without it (a
    datasheet-only GPU, or a calibration from before they were measured)."""
    if _calibrated(family, params) or not any(q in family for q in FAMILY_QUALIFIERS):
        return family
    bare = family
    for q in FAMILY_QUALIFIERS:
        bare = bare.replace(q, "")
    one_less = [family.replace(q, "") for q in FAMILY_QUALIFIERS if q in family]
    return next((f for f in one_less if _calibrated(f, params)), bare)


def predict_with_params(
    op: Op,
    gpu: GPUSpec,
    params: CalibrationParams,
    label: str = "parameters",
    l2: L2Mode = "cold",
    condition: Condition = "in-workload",
    *,
    activity: float | None = None,
    dram_bytes_per_s: float | None = None,
    graph_kernel_s: float | None = None,
) -> Prediction:
    """``predict`` with explicit model parameters (what the calibration fit iterates on: the
    fit passes ``condition="isolated"``, the condition its measurements were taken in).
    ``graph_kernel_s`` (in-graph only): the GPU time per kernel of a replayed graph (None: the
    reference host's ``REFERENCE_GRAPH_KERNEL_S``)."""
    op = op.on(gpu)
    work = op.kernels(gpu)
    _check_work(op, work)
    kernels = []
    for k in work:
        family = calibrated_family(k.family or op.family, params)
        kp = kernel_time(k, gpu, params, family, l2, condition, activity=activity,
                         dram_bytes_per_s=dram_bytes_per_s, graph_kernel_s=graph_kernel_s)  # fmt: skip
        if family != (k.family or op.family):
            left = "; ".join(v for q, v in FAMILY_QUALIFIERS.items() if q in (k.family or op.family)
                             and q not in family)  # fmt: skip
            kp = kp.model_copy(update={"terms": (*kp.terms, Term(
                name="nearest calibrated family", value=1.0, unit="x",
                note=f"no {k.family or op.family} in this calibration: priced as {family} "
                     f"({left} unpriced)"))})  # fmt: skip
        kernels.append(kp)
    # the floor compares raw model times; a trace-fitted scale applies to the result once
    unscaled = params.without_trace_scales()
    floors = [(predict_with_params(f, gpu, unscaled, label, l2, condition, activity=activity,
                                   dram_bytes_per_s=dram_bytes_per_s,
                                   graph_kernel_s=graph_kernel_s).time_s, f)
              for f in floor_ops(op, gpu)]  # fmt: skip
    if floors:
        floor, floor_op = max(floors, key=lambda tf: tf[0])
        gap = floor - sum(k.time_s for k in kernels)
        if gap > 0:
            i = max(range(len(kernels)), key=lambda j: kernels[j].time_s)
            kp = kernels[i]
            note = (f"never faster than {floor_op.label()} ({format_quantity(floor, 's')}), "
                    "the neighbouring kernel family's largest smaller op: time is monotone "
                    "in every size")  # fmt: skip
            kernels[i] = kp.model_copy(update={
                "time_s": kp.time_s + gap,
                "terms": (*kp.terms, Term(name="family floor", value=gap, note=note)),
            })  # fmt: skip
    pred = assemble(op.label(), gpu, label, trace_scaled(kernels, params, op.family), work)
    return pred.model_copy(update={"condition": condition})


def kernel_size_s(kernels: Sequence[KernelPrediction]) -> float:
    """The size a trace-fitted scale is held to: the op's largest kernel, seconds per launch.

    Per kernel, not the op's sum: the LLM step model prices an eager RMSNorm as one op of 8
    kernels, each one traced call of ~5 us; ``N`` identical kernels priced as one
    (``KernelWork.repeats``) count as ``N`` launches."""
    return max((k.time_s / max(k.launches, 1) for k in kernels), default=0.0)


def scale_at_size(scale: float, span: tuple[float, float] | None, time_s: float) -> float:
    """A trace-fitted family ``scale`` at a kernel the model prices at ``time_s`` before it.

    Inside ``span`` (the smallest and largest traced kernel's predicted time; None: no span
    recorded) the whole scale; outside, the scale moves toward 1 linearly in the log10
    distance d from the nearer edge, in units of ``SCALE_FADE_FACTOR``:
    ``scale + (1 - scale) * min(1, d)``, d = |log10(time_s / edge)| / log10(factor). A kernel
    with no time (``time_s <= 0``) gets 1.
    """
    if span is None:
        return scale
    lo, hi = span
    if lo <= time_s <= hi:
        return scale
    if time_s <= 0:
        return 1.0
    edge = lo if time_s < lo else hi
    d = abs(math.log10(time_s / edge)) / math.log10(SCALE_FADE_FACTOR)
    return 1.0 if d >= 1 else scale + (1 - scale) * d


def span_text(span: tuple[float, float]) -> str:
    """A scale's span for a note or a table: 'kernels of 14.4 µs to 17 µs' ('kernels of 9.3 µs'
    for one size)."""
    lo, hi = format_time(span[0]), format_time(span[1])
    return f"kernels of {lo}" if lo == hi else f"kernels of {lo} to {hi}"


def trace_scaled(
    kernels: list[KernelPrediction], params: CalibrationParams, family: str
) -> list[KernelPrediction]:
    """Apply the family/bound scale fitted from a user's own trace (``calibrate --trace``):
    measured / predicted time of that family's kernels in the traced runtime, at the op's size
    (``scale_at_size``). The size is ``kernel_size_s`` of the op's kernels before the scale:
    the figure ``calibrate --trace`` took from each traced call's prediction for the span, so a
    kernel of a traced shape lies inside it."""
    if not params.family_time_scale or not kernels:
        return kernels
    bound = max(kernels, key=lambda k: k.time_s).bound
    key = family_key(family, bound)
    name = key if key in params.family_time_scale else family
    fitted = params.family_time_scale.get(name)
    if fitted is None:
        return kernels
    span = params.family_time_scale_span_s.get(name)
    size_s = kernel_size_s(kernels)
    scale = scale_at_size(fitted, span, size_s)
    if scale == 1.0:
        return kernels
    note = f"{key} kernels ran {fitted:.3g}x the model's time in the traced step"
    if span is not None:
        note += f" ({span_text(span)})"
        if scale != fitted:
            note += (f"; this op's largest kernel ({format_time(size_s)}) is outside that span: "
                     f"{scale:.3g}x")  # fmt: skip
    term = Term(name="trace-fitted family scale", value=scale, unit="x", note=note)
    return [k.model_copy(update={"time_s": k.time_s * scale, "terms": (*k.terms, term)})
            for k in kernels]  # fmt: skip


def assemble(
    op_label: str,
    gpu: GPUSpec,
    calibration_label: str,
    kernels: list[KernelPrediction],
    work: list[KernelWork],
    details: dict[str, Any] | None = None,
) -> Prediction:
    """Combine per-kernel predictions into the op's Prediction (totals, roof, bound, advice)."""
    flops_by_unit: dict[str, float] = {}
    for kw in work:
        for part in kw.flops:  # ``repeats`` identical kernels each do the part's FLOPs
            key = f"{part.unit}:{part.dtype}"
            flops_by_unit[key] = flops_by_unit.get(key, 0.0) + part.flops * part.useful * kw.repeats
    flops = sum(flops_by_unit.values())
    nbytes = sum(k.bytes for k in kernels)
    main = max(flops_by_unit, key=flops_by_unit.__getitem__) if flops_by_unit else "vector:fp32"
    unit, dtype = main.split(":")
    peak = gpu.peak_flops(dtype, unit) or 0.0
    bw = gpu.memory_bandwidth_bytes_per_s
    if work and all(kw.transfer for kw in work):  # a host copy: the host link is its memory
        bw = host_link_roof_bytes_per_s(gpu)
    ai = arithmetic_intensity(flops, nbytes)
    ridge = ridge_point(peak, bw) if peak else 0.0
    attainable = min(peak, ai * bw) if math.isfinite(ai) else peak
    time_s = sum(k.time_s for k in kernels)
    slowest = max(kernels, key=lambda k: k.time_s)
    terms = list(slowest.terms) if len(kernels) == 1 else _totals(kernels)
    return Prediction(
        op=op_label,
        gpu=gpu.id,
        calibration=calibration_label,
        time_s=time_s,
        flops=flops,
        bytes=nbytes,
        arithmetic_intensity=ai,
        unit=unit,
        dtype=dtype,
        peak_flops=peak,
        bandwidth_bytes_per_s=bw,
        ridge_point=ridge,
        attainable_flops=attainable,
        bound=slowest.bound,
        flops_by_unit=flops_by_unit,
        terms=tuple(terms),
        kernels=tuple(kernels),
        advice=tuple(_advice(kernels, work, gpu)),
        details=details or {},
    )


def _totals(kernels: list[KernelPrediction]) -> list[Term]:
    terms = [Term(name=f"{k.name}", value=k.time_s, note=f"{k.bound}-bound") for k in kernels]
    return terms


def kernel_time(
    kw: KernelWork,
    gpu: GPUSpec,
    params: CalibrationParams,
    family: str = "kernel",
    l2: L2Mode = "cold",
    condition: Condition = "isolated",
    *,
    clock_ratio: float = 1.0,
    activity: float | None = None,
    dram_bytes_per_s: float | None = None,
    graph_kernel_s: float | None = None,
) -> KernelPrediction:
    """Time of one kernel from its work and the GPU, as a sum/max of named terms
    (``kw.repeats`` identical kernels: one priced, times the count). ``clock_ratio`` (sustained
    / max clock) is what ``in_workload_time`` passes for the in-workload condition.
    ``graph_kernel_s``: an empty kernel's GPU time in a replayed graph, for ``"in-graph"`` (None:
    the reference host's); ``in_workload_time`` passes it with ``"isolated"`` for the floor."""
    if kw.repeats != 1:
        one = kernel_time(replace(kw, repeats=1), gpu, params, family, l2, condition,
                          clock_ratio=clock_ratio, activity=activity,
                          dram_bytes_per_s=dram_bytes_per_s, graph_kernel_s=graph_kernel_s)  # fmt: skip
        n = kw.repeats
        return one.model_copy(update={
            "name": f"{one.name} x {n:,}", "time_s": one.time_s * n, "flops": one.flops * n,
            "bytes": one.bytes * n, "launches": one.launches * n,
            "terms": (*one.terms, Term(name="kernels", value=n, unit="x",
                                        note=f"{n:,} identical kernels, one after another")),
        })  # fmt: skip
    if kw.transfer:
        return _transfer_time(kw, gpu, params, condition)
    if condition == "in-workload":
        return in_workload_time(kw, gpu, params, family, l2, activity, dram_bytes_per_s)
    if condition == "in-graph":
        from gpumodel.hostprofile import REFERENCE_GRAPH_KERNEL_S

        graph = REFERENCE_GRAPH_KERNEL_S if graph_kernel_s is None else graph_kernel_s
        return in_workload_time(kw, gpu, params, family, l2, activity, dram_bytes_per_s,
                                graph_kernel_s=graph)  # fmt: skip
    terms: list[Term] = []
    t_compute = 0.0
    fam_compute = params.family_efficiency.get(family, 1.0)
    for part in kw.flops:
        if part.flops <= 0:
            continue
        peak = gpu.peak_flops(part.dtype, part.unit)
        if not peak:  # ops pick units the spec has; a hand-made KernelWork might not
            raise UnsupportedError(f"{gpu.id} has no {part.unit} {part.dtype} rate in its spec")
        rate, note = peak, f"{part.unit} {part.dtype} peak {format_quantity(peak, 'FLOP/s')}"
        if part.unit == "sfu":
            per_clk = peak / (gpu.sm_count * gpu.boost_clock_hz)
            note = (f"special function units {format_quantity(peak, 'exp/s')} ({per_clk:.0f} per "
                    "SM per clock: the softmax's exponentials)")  # fmt: skip
        if part.unit == "vector" and not kw.fma:
            # FMA counts 2 FLOPs; a stream of separate adds and multiplies issues 1 per lane-cycle
            rate *= 0.5
            note += " x 0.5 (no FMA: separate add and multiply)"
        eff = compute_efficiency(params, part.unit, part.dtype, kw.fma)
        if kw.gemm is not None and part is kw.flops[0]:  # the matrix product itself
            factor, gemm_terms = gemm_model.efficiency(kw.gemm, gpu, params)
            eff = factor  # cuBLAS-calibrated GEMM efficiency replaces the unit's
            terms += gemm_terms
        if kw.tile_work and part is kw.flops[0]:
            slots = gpu.sm_count * kw.tile_blocks_per_sm
            tail = schedule_efficiency(kw.tile_work, kw.tile_groups, slots)
            eff *= tail
            blocks = len(kw.tile_work) * kw.tile_groups
            terms.append(Term(name="tail efficiency", value=tail, unit="x",
                              note=f"{blocks:,} thread blocks of unequal work on {slots} SM slots "
                                   "in launch order: the last blocks finish alone"))  # fmt: skip
        elif eff != 1.0:
            note += f" x efficiency {eff:.3g}"
        half_fill = params.conv_half_fill_tiles_per_sm
        if kw.output_tiles and half_fill and part is kw.flops[0]:
            fill = fill_efficiency(kw.output_tiles, gpu.sm_count, half_fill)
            eff *= fill
            terms.append(Term(name="SM fill", value=fill, unit="x",
                              note=f"{kw.output_tiles:,} output tiles of {FILL_TILE}x{FILL_TILE} "
                                   f"on {gpu.sm_count} SMs (half rate at {half_fill:.3g} tiles "
                                   "per SM, calibrated)"))  # fmt: skip
        if fam_compute != 1.0 and family != "gemm":
            # how far this op family's kernels (cuDNN, flash attention...) are from that
            eff *= fam_compute
            note += f" x {family} kernel efficiency {fam_compute:.3g}"
            if f"{family}:{part.dtype}" in params.published_floor_scale:
                note += (" (raised to the published efficiency of this generation's own "
                         "kernels: specs/published/kernels.yaml)")  # fmt: skip
        t = part.flops / (rate * eff * clock_ratio)
        t_compute += t
        terms.append(Term(name=f"compute time ({part.unit} {part.dtype})", value=t, note=note))

    issue = issue_time(kw, gpu, params, family)
    if issue is not None and clock_ratio != 1.0:
        issue = (issue[0] / clock_ratio, issue[1] + f", at {clock_ratio:.3g} x the clock")
    if issue is not None:
        t_compute += issue[0]
        terms.append(Term(name="SM issue time", value=issue[0], note=issue[1]))

    in_l2 = inputs_in_l2(kw, gpu, params, l2)
    bandwidth, mem_note = memory_bandwidth(kw, gpu, params, family, in_l2)
    t_memory = kw.bytes / bandwidth if kw.bytes else 0.0
    latency_bound = False
    limit = latency_limited_bandwidth(kw, gpu, params, in_l2)
    if limit is not None and not math.isfinite(limit[0]):
        mem_note, limit = f"{mem_note}; {limit[1]}", None
    if limit is not None and kw.bytes and kw.bytes_in_flight_per_thread:
        # a looping kernel: its loads wait on each other, its stores do not
        chained = kw.chained_read_bytes
        if chained is None:
            chained = kw.bytes - (kw.bytes_written or 0.0)
        t_reads = chained / limit[0]
        if t_reads > t_memory:
            latency_bound = True
            t_memory, mem_note = t_reads, f"reads {limit[1]}"
    elif limit is not None and kw.bytes and limit[0] < bandwidth:
        latency_bound = True
        t_memory = kw.bytes / limit[0]
        mem_note = limit[1]
    terms.append(Term(name="memory time", value=t_memory, note=mem_note))
    dirty_bytes = dirty_l2_bytes(kw, gpu, params, l2)
    if dirty_bytes > 0:
        t_dirty = dirty_bytes / bandwidth
        t_memory += t_dirty
        terms.append(Term(name="dirty-L2 write-back", value=t_dirty,
                          note=f"{format_quantity(dirty_bytes, 'B')} of dirty lines left in L2 "
                               "(by a flush that wrote) go to DRAM as this kernel evicts them "
                               f"({params.dirty_l2_writeback_fraction:.3g} x min(L2, bytes "
                               "moved), calibrated)"))  # fmt: skip

    # a cuBLAS GEMM's own overlap and floor; other GEMM-shaped kernels (cuDNN convolution,
    # flash attention) have their family's
    fitted_gemm = (
        params.gemm.get(kw.gemm.dtype) if kw.gemm is not None and family == "gemm" else None
    )
    p, whole_tiles = core_overlap(params, fitted_gemm, kw.gemm,
                                  full_overlap=issue is not None or kw.pipelined)
    if whole_tiles:
        p = math.inf
    t_core = overlap_time(t_compute, t_memory, p)
    roof = max(t_compute, t_memory)
    if math.isfinite(p) and roof > 0:
        terms.append(
            Term(name="overlap factor", value=t_core / roof, unit="x",
                 note=f"(t_c^p + t_m^p)^(1/p), p = {p:.3g}: compute and memory overlap imperfectly")
        )  # fmt: skip
    t_serial = serial_loop_s(kw, gpu)
    serial = t_serial > t_core
    if serial:
        terms.append(Term(name="serial block loop", value=t_serial - t_core,
                          note=f"each of {float(kw.serial_blocks):.4g} thread blocks runs "
                               f"{float(kw.serial_cycles):.4g} SM cycles of dependent steps, "
                               f"{kw.serial_blocks_per_sm:g} at once per SM: "
                               f"{format_time(t_serial)} whatever the bandwidth"))  # fmt: skip
        t_core = t_serial
    t_sol = sol_floor_s(kw, gpu, l2, clock_ratio)
    floored = t_core < t_sol
    if floored:
        terms.append(Term(name="speed-of-light floor", value=t_sol - t_core,
                          note=f"no kernel beats {format_quantity(t_sol, 's')} for this work "
                               "at this clock and L2 state (gm.speed_of_light's roofs: DRAM's "
                               "rate for what L2 cannot hold): a calibrated efficiency above "
                               "the roofs is held to them"))  # fmt: skip
        t_core = t_sol
    overhead, source = kernel_overhead(params, family, fitted_gemm)
    if graph_kernel_s is None:
        t_floor = kw.launches * overhead
        terms.append(
            Term(name="launch floor", value=t_floor,
                 note=f"{kw.launches} kernel(s) x {overhead * 1e6:.3g} us fixed cost per kernel ({source})")
        )  # fmt: skip
    else:
        empty_s = empty_kernel_s(params)
        per = graph_floor_s(overhead, graph_kernel_s, empty_s)
        t_floor = kw.launches * per
        terms.append(Term(
            name="in-graph floor", value=t_floor,
            note=f"{kw.launches} kernel(s) x {per * 1e6:.3g} us replayed from a graph: the "
                 f"isolated {overhead * 1e6:.3g} us ({source}) less the launch latency a graph "
                 f"hides (an empty kernel: {empty_s * 1e6:.3g} us isolated, "
                 f"{graph_kernel_s * 1e6:.3g} us in a graph)"))  # fmt: skip
    if reads_dram(kw.bytes, kw.bytes_written) and params.dram_first_load_s and not in_l2:
        t_floor += params.dram_first_load_s
        terms.append(Term(name="first DRAM load", value=params.dram_first_load_s,
                          note="inputs not in L2: the first loads wait a DRAM round trip "
                               "(calibrated; L2-resident inputs skip it)"))  # fmt: skip
    if kw.bytes_written == 0 and kw.bytes and params.reduction_tail_s:
        t_floor += params.reduction_tail_s
        terms.append(Term(name="reduction tail", value=params.reduction_tail_s,
                          note="a grid-wide reduction ends with a dependent step (atomics, the "
                               "last block's final sum): calibrated"))  # fmt: skip
    time_s = t_floor + t_core
    bound: Bound
    if t_floor >= t_core:
        bound = "launch"
    elif floored:  # the roof that binds the speed of light
        bound = kernel_sol(kw, gpu).bound
    elif serial:  # a loop of dependent steps, neither roof
        bound = "latency"
    elif issue is not None and issue[0] >= max(t_compute - issue[0], t_memory):
        bound = "issue"
    elif t_compute >= t_memory:
        bound = "compute"
    else:
        bound = "latency" if latency_bound else "memory"
    return KernelPrediction(
        name=kw.name, time_s=time_s, bound=bound, flops=kw.useful_flops, bytes=kw.bytes,
        launches=kw.launches, terms=tuple(terms),
    )  # fmt: skip


def serial_loop_s(kw: KernelWork, gpu: GPUSpec) -> Any:
    """The time of a kernel's latency-bound per-block loop (``KernelWork.serial_cycles``): one
    block's cycles at the boost clock, times the waves its blocks need at
    ``serial_blocks_per_sm`` per SM (at least one); 0 without one. Numbers or a sweep's
    arrays."""
    slots = kw.serial_blocks_per_sm * gpu.sm_count
    if is_array(kw.serial_cycles) or is_array(kw.serial_blocks):
        import numpy as np

        waves = np.maximum(1.0, np.asarray(kw.serial_blocks, dtype=float) / slots)
        return np.asarray(kw.serial_cycles, dtype=float) / gpu.boost_clock_hz * waves
    if not kw.serial_cycles:
        return 0.0
    return kw.serial_cycles / gpu.boost_clock_hz * max(1.0, kw.serial_blocks / slots)


def floor_ops(op: Op, gpu: GPUSpec) -> tuple[Op, ...]:
    """``op.monotone_floor(gpu)`` as a tuple: none, one op, or several (the time is at least
    the largest of theirs)."""
    got = op.monotone_floor(gpu)
    return () if got is None else got if isinstance(got, tuple) else (got,)


def sol_floor_s(kw: KernelWork, gpu: GPUSpec, l2: str = "warm", clock_ratio: Any = 1.0) -> Any:
    """The speed-of-light time of ``kw`` (``sol.roof_time_s``) in the state priced, numbers or a
    sweep's arrays: the families fitted on compute-bound points leave their DRAM efficiency free
    (up to 50x), which priced memory-bound calls below what DRAM can deliver. ``l2`` cold or
    dirty: the inputs start in DRAM, so L2 can hold at most its capacity of the outputs (not
    twice it: a 2.15 GB cuDNN attention call was priced at 3.47 TB/s on a 3.35 TB/s H100);
    ``clock_ratio``: the compute roofs at the sustained clock (a 1x1 bf16 convolution was
    priced at 108% of the H100's dense peak at a 0.75x clock)."""
    parts = [(part.unit, part.dtype, part.flops) for part in kw.flops]
    return roof_time_s(parts, kw.bytes, gpu, reread_bytes=kw.reread_bytes,
                       min_flops_fraction=kw.min_flops_fraction,
                       l2_held_bytes=sol_l2_held_bytes(gpu, l2), clock_ratio=clock_ratio)  # fmt: skip


def sol_l2_held_bytes(gpu: GPUSpec, l2: str) -> float | None:
    """What the speed of light lets L2 serve of a kernel's bytes in the state priced: warm,
    ``roof_time_s``'s 2 x L2 (None); cold or dirty, the inputs start in DRAM and L2 holds at
    most its capacity of the outputs (``sol_floor_s``; the sweeps take the same)."""
    return None if l2 == "warm" else gpu.l2_cache_bytes


def core_overlap(
    params: CalibrationParams, fitted_gemm: Any, shape: Any, full_overlap: Any = False
) -> tuple[float, Any]:
    """How a kernel's compute and memory times overlap, as (p, whole_tiles): the exponent of
    ``(t_c^p + t_m^p)^(1/p)`` (``model.roofline.overlap_time``) and where the larger of the two
    holds instead.

    p is the cuBLAS dtype's fitted exponent for a GEMM (``fitted_gemm``), else the
    calibration's; infinite (the roofline's max) for an issue-bound kernel, whose memory stream
    runs far below DRAM's rate and does not slow its issue (fitted on H100 and H200 alike this
    gives the same elements per SM-cycle, 1.87 and 1.91, where the fitted overlap gave 2.47 and
    2.32), and for a kernel that pipelines its loads under its products (``full_overlap`` true
    for either). ``whole_tiles``: a misaligned-N x @ W.T of ``shape`` priced in whole tiles, loads
    included (``model.gemm.misaligned_rows``), a bool or an array over a sweep's shapes."""
    p = math.inf if full_overlap else params.overlap_exponent or math.inf
    if fitted_gemm is None:
        return p, False
    if fitted_gemm.overlap_exponent:
        p = fitted_gemm.overlap_exponent
    return p, gemm_model.misaligned_rows(shape)


def tensor_roof_time(kw: KernelWork, gpu: GPUSpec) -> Any:
    """Seconds the tensor cores would take for one of ``kw``'s tensor FLOPs at their peak and
    the max clock (gpumodel.sol), summed over dtypes; 0 without tensor work. numpy-ready (a
    kernel built over arrays of sizes gives an array)."""
    total: Any = 0.0
    for part in kw.flops:
        roof = max_clock_peak_flops(gpu, part.dtype, "tensor") if part.unit == "tensor" else 0
        if roof:
            total = total + part.flops / roof
    return total


def tensor_activity(kw: KernelWork, gpu: GPUSpec, time_s: float) -> float:
    """Tensor-core activity u of a kernel that takes ``time_s``: its tensor work at the
    max-clock roof over that time (``tensor_roof_time``), at most 1; 0 without tensor work."""
    if time_s <= 0:
        return 0.0
    return min(1.0, tensor_roof_time(kw, gpu) / time_s)


def power_watts(
    params: CalibrationParams, gpu: GPUSpec, dtype: str | None = None
) -> tuple[float, float] | None:
    """(static W, full tensor-activity W at the max clock) on ``gpu`` from the calibrated
    per-SM power of its architecture, scaled by SMs x clock^3, for tensor work of ``dtype``
    (``PowerParams.full_power_factor``; None: the 16-bit products'); None when not calibrated."""
    pw = params.power
    if pw is None or pw.architecture != gpu.architecture:
        return None
    scale = gpu.sm_count * (gpu.boost_clock_hz / pw.reference_clock_hz) ** 3
    full_w = pw.tensor_power_w_per_sm * scale * pw.full_power_factor(dtype)
    return pw.static_power_fraction * gpu.tdp_watts, full_w


def dram_energy(params: CalibrationParams, gpu: GPUSpec) -> float:
    """Joules per DRAM byte on ``gpu``: the calibration's fitted value (validate --conditions)
    where its power behaviour is of this architecture, else the architecture's measured constant
    (``gpumodel.model.power.DRAM_ENERGY_J_PER_BYTE``), else 0."""
    from gpumodel.model.power import DRAM_ENERGY_J_PER_BYTE

    pw = params.power
    fitted = pw.dram_energy_j_per_byte if pw is not None else None
    if fitted is not None and pw.architecture == gpu.architecture:  # type: ignore[union-attr]
        return fitted
    return DRAM_ENERGY_J_PER_BYTE.get(gpu.architecture, 0.0)


def dram_power(params: CalibrationParams, gpu: GPUSpec, bytes_per_s: Any) -> Any:
    """Watts of a DRAM stream of ``bytes_per_s`` (a number or an array) on ``gpu``:
    ``dram_energy`` x the rate (``gpumodel.model.power``)."""
    from gpumodel.model.power import dram_power_w

    return dram_power_w(dram_energy(params, gpu), bytes_per_s)


def tensor_dtype(kw: KernelWork) -> str | None:
    """The dtype of a kernel's tensor-core work (its largest tensor part), None without any."""
    parts = [p for p in kw.flops if p.unit == "tensor"]
    return max(parts, key=lambda p: p.flops).dtype if parts else None


def sustained_clock(
    kw: KernelWork,
    gpu: GPUSpec,
    params: CalibrationParams,
    isolated_s: float,
    activity: float | None = None,
    dram_bytes_per_s: float | None = None,
) -> tuple[float, Term | None]:
    """(sustained / max clock, its term) for ``kw`` under ``gpu``'s power limit
    (gpumodel.model.power): at its own tensor activity and DRAM traffic (back to back with
    itself), or at ``activity`` and ``dram_bytes_per_s``, a step's averages; (1, None) without
    calibrated power behaviour."""
    from gpumodel.model.power import sustained_clock_ratio

    dtype = tensor_dtype(kw)
    watts = power_watts(params, gpu, dtype)
    if not kw.total_flops:
        return 1.0, None
    if watts is None:  # said, not silent: a long compute-bound run may hold a lower clock
        whose = (f"the calibration's power behaviour is {params.power.architecture}'s"
                 if params.power is not None else "no power behaviour in this calibration: "
                 "`gpumodel validate` measures it, so far on Hopper only")  # fmt: skip
        return 1.0, Term(name="sustained clock", value=1.0, unit="x", note=(
            f"not modelled for {gpu.architecture} ({whose}): the maximum clock "
            f"({gpu.boost_clock_hz / 1e6:.0f} MHz) is assumed; a long compute-bound run may hold "
            "a lower one"))  # fmt: skip
    static_w, full_w = watts
    own = activity is None
    u = tensor_activity(kw, gpu, isolated_s) if own else activity
    if own:  # no more than DRAM's datasheet rate: bytes L2 holds do not cross it
        traffic = min(kw.bytes / isolated_s, gpu.memory_bandwidth_bytes_per_s) if isolated_s > 0 else 0.0
    else:
        traffic = dram_bytes_per_s or 0.0
    mem_w = float(dram_power(params, gpu, traffic))
    ratio = sustained_clock_ratio(u, gpu.tdp_watts, static_w, full_w, mem_w)
    mhz, max_mhz = ratio * gpu.boost_clock_hz / 1e6, gpu.boost_clock_hz / 1e6
    whose = "tensor activity" if own else "the step's average tensor activity"
    dram = f" beside {mem_w:.0f} W of DRAM traffic ({traffic / 1e12:.2f} TB/s)" if mem_w else ""
    factor = params.power.full_power_factor(dtype) if params.power else 1.0
    if factor != 1.0:
        whose = f"{dtype} ({factor:.3g}x the 16-bit products' power) {whose}"
    if ratio < 1.0:
        why = (f"power-limited at {gpu.tdp_watts:.0f} W for this intensity: {whose} "
               f"{u:.2f}{dram} would draw {static_w + mem_w + u * full_w:.0f} W at "
               f"{max_mhz:.0f} MHz")  # fmt: skip
    else:
        why = (f"not power-limited: {whose} {u:.2f}{dram} draws "
               f"{static_w + mem_w + u * full_w:.0f} W of {gpu.tdp_watts:.0f} W at "
               f"{max_mhz:.0f} MHz")  # fmt: skip
    note = f"{mhz:.0f} MHz of {max_mhz:.0f} MHz ({why}; compute time x {1 / ratio:.3g})"
    return ratio, Term(name="sustained clock", value=ratio, unit="x", note=note)


def in_workload_time(
    kw: KernelWork,
    gpu: GPUSpec,
    params: CalibrationParams,
    family: str,
    l2: L2Mode,
    activity: float | None = None,
    dram_bytes_per_s: float | None = None,
    *,
    graph_kernel_s: float | None = None,
) -> KernelPrediction:
    """The in-workload time of one kernel: its isolated time's compute at the sustained clock
    (the tensor activity and DRAM traffic are read from the isolated time: the clock the power
    limit allows; a step's ``activity`` and ``dram_bytes_per_s`` instead where given).
    ``graph_kernel_s``: replayed from a CUDA graph (``graph_floor_s``), the clock read as above.

    No dirty-L2 term here: in a real step the lines a kernel wrote were paid for as that
    kernel's own DRAM writes (every op counts its output bytes), so a later write-back moves
    time between kernels but adds none to the step; charging it again overshot both committed
    transformer traces (+12% and +40% on their mapped kernels, vs +4% and +19% without).
    ``l2="dirty"`` prices the case where nobody paid: after do_bench's writing flush."""
    iso = kernel_time(kw, gpu, params, family, l2, "isolated")
    ratio, clock_term = sustained_clock(kw, gpu, params, iso.time_s, activity, dram_bytes_per_s)
    kp = iso
    if ratio != 1.0 or graph_kernel_s is not None:
        kp = kernel_time(kw, gpu, params, family, l2, "isolated", clock_ratio=ratio,
                         graph_kernel_s=graph_kernel_s)  # fmt: skip
    if clock_term is not None:
        kp = kp.model_copy(update={"terms": (clock_term, *kp.terms)})
    return kp


def dirty_l2_bytes(kw: KernelWork, gpu: GPUSpec, params: CalibrationParams, l2: L2Mode) -> float:
    """Extra DRAM write-back bytes of a kernel that starts with L2 full of unpaid dirty lines
    (``l2="dirty"``): the calibrated fraction x min(L2, bytes moved); 0 otherwise."""
    from gpumodel.model.power import dirty_writeback_bytes

    if l2 != "dirty" or not params.dirty_l2_writeback_fraction:
        return 0.0
    return dirty_writeback_bytes(kw.bytes, gpu.l2_cache_bytes, params.dirty_l2_writeback_fraction)


def reads_dram(nbytes: Any, bytes_written: Any) -> Any:
    """Whether a kernel reads anything (it then waits for its first DRAM loads); numpy-ready."""
    if bytes_written is None:
        return nbytes > 0
    return (nbytes > 0) & (bytes_written < nbytes)


def issue_time(
    kw: KernelWork, gpu: GPUSpec, params: CalibrationParams, family: str
) -> tuple[float, str] | None:
    """Time the SMs take to issue a kernel's per-element instructions (a strided copy computes
    each element's source offset with integer division per dimension): elements / (SMs x clock
    x the family's calibrated elements per SM per cycle). None without that calibration: the
    datasheet has no instruction count."""
    rate = params.family_elements_per_sm_cycle.get(family)
    if not kw.elements or not rate:
        return None
    t = kw.elements / (gpu.sm_count * gpu.boost_clock_hz * rate)
    return t, (
        f"{kw.elements:.3g} elements / ({gpu.sm_count} SMs x "
        f"{format_quantity(gpu.boost_clock_hz, 'Hz')} x {rate:.3g} elements per SM-cycle, "
        f"calibrated for {family}): per-element instructions"
    )


def compute_efficiency(params: CalibrationParams, unit: str, dtype: str, fma: bool = True) -> float:
    """Calibrated fraction of the peak for ``unit:dtype``; kernels without FMA have their own
    entry (their instruction mix differs), falling back to the FMA one."""
    if not fma and f"{unit}:{dtype}:no-fma" in params.compute_efficiency:
        return params.compute_efficiency[f"{unit}:{dtype}:no-fma"]
    return params.compute_efficiency.get(f"{unit}:{dtype}", 1.0)


def memory_bandwidth(
    kw: KernelWork, gpu: GPUSpec, params: CalibrationParams, family: str, in_l2: bool
) -> tuple[float, str]:
    """Bandwidth this kernel streams at: DRAM x efficiency, or the calibrated L2 bandwidth when
    its inputs sit in L2 (``inputs_in_l2``; the datasheet has no L2 bandwidth)."""
    bandwidth = gpu.memory_bandwidth_bytes_per_s
    note = f"HBM/DRAM {format_quantity(bandwidth, 'B/s')}"
    if in_l2 and params.l2_bandwidth_bytes_per_s:
        bw = params.l2_bandwidth_bytes_per_s
        return bw, f"working set fits in L2: L2 {format_quantity(bw, 'B/s')}"
    gemm_dtype = kw.gemm.dtype if kw.gemm is not None else None
    w = min(1.0, kw.bytes_written / kw.bytes) if kw.bytes_written is not None and kw.bytes else None
    eff = bandwidth_efficiency(params, family, gemm_dtype, w)
    if mixed_stream(params, family, gemm_dtype, w):
        note += f" x {eff:.3g} for a {100 * w:.0f}% write stream (read/write mix)"  # type: ignore[operator]
    elif eff != 1.0:
        note += f" x efficiency {eff:.3g}"
    if kw.gemm is not None and family == "gemm":
        from gpumodel.model.gemm import stream_factor

        slow = stream_factor(kw.gemm, params.gemm.get(gemm_dtype))  # type: ignore[arg-type]
        if slow != 1.0:
            eff *= slow
            why = ("M = 1: cuBLAS's GEMV kernels" if kw.gemm.m == 1
                   else "misaligned x @ W.T, M > 1: cuBLAS's slow kernels")  # fmt: skip
            note += f" x {slow:.3g} ({why})"
    if kw.bandwidth_fraction != 1.0:
        eff *= kw.bandwidth_fraction
        note += f" x {kw.bandwidth_fraction:.3g} (this kernel's share of its family's rate)"
    return bandwidth * eff, note


def mixed_stream(
    params: CalibrationParams, family: str, gemm_dtype: str | None, write_fraction: Any
) -> bool:
    """Whether a kernel's DRAM efficiency comes from its read/write mix: no family or GEMM
    dtype of its own is calibrated, and its written share is known."""
    own = (family == "gemm" and gemm_dtype in params.gemm) or (
        family in params.family_bandwidth_efficiency
    )
    return not own and write_fraction is not None and bool(params.dram_read_efficiency)


def bandwidth_efficiency(
    params: CalibrationParams, family: str, gemm_dtype: str | None, write_fraction: Any
) -> Any:
    """Achieved / datasheet DRAM bandwidth of a kernel (works on numpy arrays of write
    fractions too): the GEMM dtype's or the family's calibrated value, else the read/write
    mix's, else the calibrated stream efficiency, else 1."""
    if family == "gemm" and gemm_dtype in params.gemm:
        return params.gemm[gemm_dtype].small_m_bandwidth_efficiency  # type: ignore[index]
    if family in params.family_bandwidth_efficiency:
        return params.family_bandwidth_efficiency[family]
    if mixed_stream(params, family, gemm_dtype, write_fraction):
        return mixed_stream_efficiency(params, write_fraction)
    return params.dram_efficiency or 1.0


def inputs_in_l2(kw: KernelWork, gpu: GPUSpec, params: CalibrationParams, l2: L2Mode) -> bool:
    """Inputs already in L2 (``l2="warm"``) and a working set small enough to stay there (the
    calibrated hot-set limit, else half the L2): loads wait on L2, not DRAM."""
    ws = kw.working_set_bytes if kw.working_set_bytes is not None else kw.bytes
    return l2 == "warm" and ws <= (params.l2_hot_max_bytes or gpu.l2_cache_bytes / 2)


def mixed_stream_efficiency(params: CalibrationParams, write_fraction: float) -> float:
    """DRAM efficiency of a stream that writes ``write_fraction`` of its bytes: the read and
    write efficiencies weighted by the mix, less a bus-turnaround loss that peaks at a 50/50
    mix (switching the DRAM bus between reads and writes costs cycles, JEDEC tWTR/tRTW)."""
    w = write_fraction
    read = params.dram_read_efficiency or params.dram_efficiency or 1.0
    write = params.dram_write_efficiency or read
    return (1 - w) * read + w * write - 4 * w * (1 - w) * (params.dram_turnaround or 0.0)


# registers per thread assumed for a described kernel whose register count is unknown
ASSUMED_REGISTERS_PER_THREAD = 32


def latency_limited_bandwidth(
    kw: KernelWork, gpu: GPUSpec, params: CalibrationParams, in_l2: bool = False
) -> tuple[float, str] | None:
    """Little's law (Volkov 2016): a kernel with ``threads`` resident threads, each with its
    bytes in flight, sustains at most ``threads x bytes / latency``. Applies to kernels whose
    launch geometry is known (``Kernel(threads=...)``); the latency is L2's for L2-resident
    inputs, DRAM's otherwise. A GPU without occupancy rules gets (inf, why): no limit, stated."""
    if not kw.threads or not kw.threads_per_block or gpu.sm_limits is None or not kw.bytes:
        return None
    from gpumodel.model.littles_law import dram_latency_s, l2_latency_s, sustained_bandwidth
    from gpumodel.model.occupancy import has_rules

    if not has_rules(gpu):
        # no occupancy rules (an AMD architecture not modelled): the datasheet roofline alone
        return math.inf, (
            f"no occupancy rules for {gpu.id} ({gpu.architecture}): the latency (Little's law) "
            "limit is not applied, datasheet roofline only"
        )

    resident_threads, occ = resident(kw, gpu)
    bytes_per_thread = kw.bytes_in_flight_per_thread or kw.bytes / kw.threads
    if in_l2:
        latency_s, source = l2_latency_s(gpu, params)
    else:
        latency_s, source = dram_latency_s(gpu, params)
    limit = sustained_bandwidth(resident_threads * bytes_per_thread, latency_s)
    note = (
        f"latency-limited (Little's law): occupancy {100 * occ.occupancy:.0f}% "
        f"({', '.join(occ.limiters)}-limited), {resident_threads:,} resident threads x "
        f"{bytes_per_thread:.3g} B in flight / {latency_s * 1e9:.0f} ns ({source}) = "
        f"{format_quantity(limit, 'B/s')}"
    )
    return limit, note


def resident(kw: KernelWork, gpu: GPUSpec) -> tuple[Any, Any]:
    """(threads of ``kw`` resident at once: its blocks, up to what occupancy lets every SM
    hold, and the occupancy). ``kw.threads`` may be a numpy array of points (the sweeps)."""
    from gpumodel.model.occupancy import occupancy
    from gpumodel.ops.base import at_most

    regs = kw.registers_per_thread
    occ = occupancy(gpu, kw.threads_per_block,
                    ASSUMED_REGISTERS_PER_THREAD if regs is None else regs,
                    kw.shared_mem_per_block)  # fmt: skip
    if occ.blocks_per_sm == 0:
        raise InfeasibleError(f"this launch configuration cannot run: {occ.note or occ.summary()}")
    blocks = -(-kw.threads // kw.threads_per_block)  # type: ignore[operator]
    return at_most(blocks, occ.blocks_per_sm * gpu.sm_count) * kw.threads_per_block, occ


def kernel_overhead(params: CalibrationParams, family: str, gemm: Any = None) -> tuple[float, str]:
    """Fixed GPU-side cost of one kernel: the op family's calibrated floor, else the GPU's, else
    the uncalibrated default."""
    if gemm is not None and gemm.overhead_s is not None:
        return gemm.overhead_s, "calibrated for this GEMM dtype"
    if family in params.family_overhead_s:
        return params.family_overhead_s[family], f"calibrated for {family}"
    if params.kernel_overhead_s is not None:
        return params.kernel_overhead_s, "calibrated empty-kernel time"
    return DEFAULT_KERNEL_OVERHEAD_S, "default, uncalibrated"


def _transfer_time(
    kw: KernelWork, gpu: GPUSpec, params: CalibrationParams, condition: Condition = "isolated"
) -> KernelPrediction:
    """A host<->device copy: fixed cost + bytes / link rate. In-workload with ``host_wall``
    calibrated: the rates and fixed cost of a framework copy as the user's code waits for it
    (torch ``copy_`` + synchronise, wall clock); otherwise the harness's (CUDA events)."""
    kind = "pinned" if kw.pinned else "pageable"
    wall = condition == "in-workload" and params.host_wall is not None
    host = params.host_wall if wall and params.host_wall is not None else params.host
    how = "torch copy + synchronise, wall clock, " if wall else ""
    fixed = (
        "framework call, driver call, DMA setup and the wake-up from the synchronisation "
        "(calibrated, wall clock)" if wall else "driver call and DMA setup"
    )  # fmt: skip
    measured = getattr(host, f"{kw.transfer}_{kind}_bytes_per_s")
    large_min = getattr(host, f"{kw.transfer}_{kind}_large_min_bytes")
    large_rate = getattr(host, f"{kw.transfer}_{kind}_large_bytes_per_s")
    if measured and large_min is not None and large_rate and kw.bytes > large_min:
        bw = large_rate
        note = (f"measured {how}{kind} {kw.transfer} {format_quantity(large_rate, 'B/s')} for "
                f"copies above {format_quantity(large_min, 'B')} "
                f"({format_quantity(measured, 'B/s')} below: "
                + ("a source this large is staged from DRAM, not the host's caches)"
                   if kind == "pageable" else "measured)"))  # fmt: skip
    elif measured:
        bw = measured
        note = f"measured {how}{kind} {kw.transfer} {format_quantity(measured, 'B/s')}"
    elif gpu.interconnect is not None:
        bw = gpu.interconnect.pcie.per_direction_bytes_per_s
        note = (
            f"PCIe Gen{gpu.interconnect.pcie.generation} x{gpu.interconnect.pcie.lanes} "
            f"{format_quantity(bw, 'B/s')} per direction (line rate; pinned copies reach ~85-90%, "
            "pageable far less: calibrate)"
        )
    else:
        bw, note = gpu.memory_bandwidth_bytes_per_s, "host memory bandwidth (no host link)"
    overhead = getattr(host, f"{kw.transfer}_{kind}_overhead_s")
    if overhead is None:
        overhead = host.overhead_s
    overhead = DEFAULT_TRANSFER_OVERHEAD_S if overhead is None else overhead
    t_link = kw.bytes / bw
    terms = (
        Term(name="host link time", value=t_link, note=note),
        Term(name="transfer overhead", value=overhead, note=fixed),
    )
    t_touch = _first_touch_time(kw, params)
    if t_touch is not None:
        terms += (t_touch,)
    bound: Bound = "latency" if overhead > t_link else "memory"
    return KernelPrediction(
        name=kw.name, time_s=overhead + t_link + (t_touch.value if t_touch else 0.0),
        bound=bound, flops=0.0, bytes=kw.bytes, terms=terms,
    )  # fmt: skip


# glibc's malloc serves blocks above its mmap threshold from new mappings, and that threshold
# adapts upward to at most 32 MiB on 64-bit systems (mallopt(3), M_MMAP_THRESHOLD): a new
# pageable tensor larger than this (PyTorch's CPU allocator is posix_memalign) gets pages the
# process has never touched, each faulted in (and zeroed) by the kernel as the copy writes it
FIRST_TOUCH_MIN_BYTES = 32 * 2**20


def _first_touch_time(kw: KernelWork, params: CalibrationParams) -> Term | None:
    """The first touch of a new pageable destination's pages (``Tensor.cpu()`` of a large
    tensor): measured on an H100 VM at 2.2-3.3 us per 4 KB page, which made a 1 GB ``.cpu()``
    take 728 ms where the link alone needs ~100 ms (validation/results/unseen-h100-run3)."""
    if not kw.fresh_host_pages or kw.bytes <= FIRST_TOUCH_MIN_BYTES:
        return None
    per_byte = params.pageable_first_touch_s_per_byte
    if per_byte is None:
        return Term(name="first touch of new pages", value=0.0, note="not calibrated: run "
                    "gpumodel validate on this machine (a new pageable tensor's pages are "
                    "faulted in as the copy writes them)")  # fmt: skip
    return Term(name="first touch of new pages", value=kw.bytes * per_byte,
                note=f"a new pageable tensor above {FIRST_TOUCH_MIN_BYTES >> 20} MiB: every "
                     f"page faulted in, {per_byte * 4096 * 1e6:.2f} us per 4 KB page "
                     "(calibrated); copy into a tensor that exists, or a pinned one, to avoid "
                     "it")  # fmt: skip


def _advice(kernels: list[KernelPrediction], work: list[KernelWork], gpu: GPUSpec) -> list[str]:
    out: list[str] = []
    for kp, kw in zip(kernels, work):
        if kw.gemm is not None:
            out += gemm_model.advice(kw.gemm, gpu)
        out += [f"{kp.name}: {note}" for note in kw.notes]
        if kp.bound == "launch":
            graph = any(t.name == "in-graph floor" for t in kp.terms)  # replayed already
            out.append(f"{kp.name}: the fixed per-kernel cost dominates; fuse small kernels"
                       + ("" if graph else " or replay them with CUDA graphs"))  # fmt: skip
        if kp.bound == "issue":
            out.append(f"{kp.name}: bound by per-element instructions (index arithmetic, type "
                       "conversions), not by DRAM: more bandwidth will not help; fusing it into "
                       "a neighbouring kernel saves the pass")  # fmt: skip
        if kp.bound == "memory" and kp.flops and kw.gemm is None:
            out.append(f"{kp.name}: memory-bound; fuse it with its neighbours to skip DRAM trips")
        if not kw.fma and kp.flops and kw.gemm is None:  # a GEMM's adds are its library's
            out.append(f"{kp.name}: use fused multiply-add (fmaf / Horner form) to double the roof")
        if kw.transfer and not kw.pinned:
            out.append("pageable host memory: pin it (pin_memory / cudaHostAlloc) for full speed")
    for name in ("QK^T", "PV"):
        if any(k.name == name for k in kernels):
            out.append("naive attention writes the score matrix to HBM; a fused (flash) kernel "
                       "reads Q, K, V once")  # fmt: skip
            break
    return list(dict.fromkeys(out))
