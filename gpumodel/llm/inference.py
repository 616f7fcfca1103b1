"""LLM inference: time of a prefill or decode step from the per-op model, plus the host.

    GPU time  = sum over the step's kernels of their predicted time (gpumodel.predict), each
                non-GEMM kernel paying the in-graph/back-to-back floor of the host profile
    hf-eager  : step = queue(kernels, host cost of each kernel)      (>= max(GPU, host))
    graphs    : step = host launch of the graph (replay, or the compiled call) + GPU time

Runtimes by name (``runtime=``; ``gpumodel.llm.runtimes`` lists their kernels): ``hf-eager``,
``hf-static-compiled``, ``fused-graph`` (the default, ``DEFAULT_RUNTIME``). The old names
``eager``/``graph`` and the flags ``fusion``/``kv_cache``/``gqa`` remain as expert overrides.

The host is a measured host profile (``host=``: a name, a file or a ``HostProfile``;
``gpumodel.hostprofile``), named in the result. Eager frameworks issue kernels from Python
asynchronously: the GPU waits only when the host is slower than the kernels it launches.
``queue_time`` plays that queue kernel by kernel (the host spends the per-step time, then
issues each kernel after its own host cost; the GPU starts it when both it and the previous
kernel are done). Each step starts with an empty queue: generation synchronises on the token.

Host cost of an hf-eager kernel: the profile's eager cost of its op kind (``eager_op_s``:
matmul, sdpa, cat, copy, index, reduction, elementwise, norm) plus the layer's views
(``HF_VIEWS_PER_LAYER`` x ``eager_op_s.view``) spread over its kernels; when the profile
measured an HF decoder layer (``hf_decoder_layer_s``), a layer's kernels share that instead;
when it measured whole HF models (``hf_model_layer_s``, ``hf_model_step_s``: the slope and
intercept of two small Llamas' decode forwards over their layer counts), a layer's kernels share
the per-layer figure and the model's own work is host time per step, spent before the first
layer (a real step's trace spends ~1 ms there: validation/results/steps-h200-run4).
Over several GPUs (tensor parallelism) each rank is its own process and the step waits for the
slowest rank's host (``llm/ranks.py``); each ``torch.distributed`` call costs the host its own
time (``hostprofile.COLLECTIVE_OVER_ELEMENTWISE``), and under HF's own TP plan each sharded
projection's hooks theirs (``runtimes.HF_TP_HOOKS_OVER_ELEMENTWISE``).
``host_per_kernel_s`` / ``host_per_step_s`` override it with one figure per kernel (experts).
With no host given or measured here, the shipped ``typical`` host (the median of the profiles
measured on the project's device machines) is assumed. The reference host ``reference-h100``
carries the figures the model assumed before hosts were measured: 26.64 us per eager kernel
(the H100 calibration's bare launch 6.14 us + 20.5 us of HF/PyTorch dispatch per kernel,
4.545 ms / 181 kernels of a tiny-width 4-layer Llama decode, H100 host, 2026-11-22, torch 2.11,
transformers 5.17; validation/results/h100-sxm/llm-report.md).
Host-bound steps are noisy on shared machines (32 -> 40 ms drift within one run, issue 17):
the profile's ``spread`` says how much.

Decode at small batch reads every weight once per step: the GEMMs are weight-bandwidth bound
(AI ~ batch FLOP/B, far below the ~295 FLOP/B ridge of an H100), which the GEMM op's byte
count captures. Weights and the KV cache stream from HBM (``l2="cold"``); the norms, RoPE and
elementwise ops read activations the previous kernel just wrote (``l2="warm"``: L2 bandwidth
when the working set fits and the calibration measured it).

Memory: the step must fit (``gpumodel.llm.memory``, phase prefill or decode, the same
accounting as ``memory``/``fits``/``plan serve``); a step that does not fit raises
InfeasibleError ("needs N GB, has M GB; fits: batch <= X / tp >= Y") unless
``allow_oversubscribe=True``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import ConfigDict, Field

from gpumodel._validators import (
    check_args,
    check_bool,
    check_choice,
    check_counts,
    check_dtype,
    check_int,
)
from gpumodel.accuracy import measured_host, parallel_layout, step_accuracy
from gpumodel.calibration import Calibration
from gpumodel.errors import SpecError
from gpumodel.hostprofile import HostProfile, host_dict, load_host
from gpumodel.llm._timing import (
    OpTime,
    StepResult,
    Timed,
    Timer,
    drift_range_line,
    keeps_fixed_work,
    queue_time_blocks,
    summarize,
)
from gpumodel.llm.layers import (
    EXPERTS,
    GQA,
    AttentionImpl,
    Experts,
    Fusion,
    KVCache,
    ModelOps,
    RunAttention,
    activation_dtype,
    expert_loop_syncs,
    model_ops,
    step_attention,
    tp_shape,
)
from gpumodel.llm.memory import MemoryBreakdown, memory, require_fit, weights_bytes, what_fits
from gpumodel.llm.models import ModelSpec, get_model
from gpumodel.llm.ranks import rank_host
from gpumodel.llm.runtimes import (
    HF_TP_HOOKS_OVER_ELEMENTWISE,
    HF_VIEWS_PER_LAYER,
    Runtime,
    check_eager_options,
    check_hf_tensor_parallel,
    host_kind,
    resolve_step,
    sdpa_graph_build_s,
    traced_runtime,
)
from gpumodel.predict import DEFAULT_LAUNCH_HOST_S, power_watts  # a bare launch, host side
from gpumodel.prediction import KernelPrediction, accuracy_line
from gpumodel.specs import BYTES_PER_ELEMENT, GPUSpec, get_gpu
from gpumodel.units import format_quantity, format_time

# Eager PyTorch + HF transformers host time per kernel beyond the bare launch: 25.1 us per
# modelled kernel (4.545 ms host issue time / 181 kernels, tiny-width 4-layer Llama decode, H100
# host, torch 2.11, transformers 5.17) minus the 4.62 us bare launch of that host. See the
# module docstring (the earlier host of llm-report-initial.md: 18.0 us per kernel in all).
EAGER_FRAMEWORK_HOST_PER_KERNEL_S = 20.5e-6
# What an eager HF step costs per kernel without a calibration (the sum of the two).
DEFAULT_EAGER_HOST_PER_KERNEL_S = DEFAULT_LAUNCH_HOST_S + EAGER_FRAMEWORK_HOST_PER_KERNEL_S
# Per-step host time of an eager HF step beyond its kernels: not separated yet (carried by the
# per-kernel figure above); validation/experiments/llm_device.py measures it from two depths.
DEFAULT_EAGER_HOST_PER_STEP_S = 0.0
# One CUDA graph replay plus the per-step Python around it (cudaGraphLaunch is a few us).
DEFAULT_GRAPH_LAUNCH_S = 20e-6
# The host term of a step at new attention shapes (``new_shapes``; runtimes.sdpa_graph_build_s).
BUILD_TERM = "cuDNN attention graph build (new shapes)"

# Shown when no calibration applies: the roofline on datasheet peaks is a lower bound on time.
DATASHEET_NOTE = (
    "no calibration for this GPU: GEMMs at 100% of the datasheet peak and memory at 100% of its "
    "bandwidth (a lower bound on time); run `gpumodel validate` there or pass a calibration"
)

Phase = Literal["prefill", "decode"]
RuntimeName = str  # a runtime name (RUNTIME_NAMES) or an old name ("eager", "graph")


class InferenceResult(StepResult):
    """One inference step (per model replica of ``tp`` GPUs) and what it is made of."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    model: str
    gpu: str
    phase: Phase
    batch: int
    seq: int
    context: int
    dtype: str
    tp: int
    gpus: int
    replicas: int
    runtime: str
    fusion: Fusion
    kv_cache: KVCache
    attention: RunAttention
    gqa: GQA = "native"
    calibration: str
    host: dict[str, str]
    host_warning: str | None = None
    time_s: float
    # the step with the host at the p10 and p90 of its profile's measured drift (host_drift);
    # None where the profile measured none or did not price the host (a trace, a given figure)
    time_range_s: tuple[float, float] | None = None
    gpu_time_s: float
    host_time_s: float
    host_overhead_s: float
    host_per_kernel_s: float
    host_per_step_s: float = 0.0
    host_by_kind_s: dict[str, float] = Field(default_factory=dict)
    host_source: str = ""
    kernels_by_kind: dict[str, int] = Field(default_factory=dict)
    stream_floor_s: float | None = None
    # tokens the step processes per second, all replicas: batch x seq a step (decode: every
    # query token of a sequence counted as an output token, as time_per_output_token_s)
    tokens_per_s: float
    time_to_first_token_s: float | None
    # decode: the step over the seq tokens each sequence gets from it (one token: the step;
    # seq > 1, a speculative verification: the time per token when every one is kept)
    time_per_output_token_s: float | None
    kernels_per_step: int
    kernels_per_layer: int
    flops_per_step: float
    bytes_per_step: float
    weights_bytes: float
    kv_cache_bytes: float
    memory: MemoryBreakdown
    bound: str
    bound_shares: dict[str, float]
    breakdown: tuple[OpTime, ...]
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def explain(self, top: int = 12) -> str:
        per = "TTFT" if self.phase == "prefill" else "TPOT"
        if self.phase == "decode" and self.seq > 1 and self.time_per_output_token_s:
            per = (f"{self.seq} tokens per sequence: TPOT "
                   f"{format_time(self.time_per_output_token_s)} if every one is kept")
        who = self.host["name"]
        if self.host_source and not self.host_source.startswith(PROFILE_SOURCE):
            who = f"{self.host_source}; profile {who}"  # a trace or a given figure won
        host_line = (
            f"  host ({who}): "
            + (f"{format_time(self.host_per_step_s)} per step + " if self.host_per_step_s else "")
            + f"{self.kernels_per_step} kernels, mean {self.host_per_kernel_s * 1e6:.3g} us each"
            f" = {format_time(self.host_time_s)}"
            if self.runtime == "hf-eager" or (self.fusion == "unfused" and self.host_per_kernel_s)
            else f"  host ({who}): graph launch {format_time(self.host_time_s)}"
        )
        if self.host_by_kind_s:
            kinds = sorted(self.host_by_kind_s.items(), key=lambda kv: -kv[1])
            host_line += " (" + ", ".join(f"{k} {format_time(v)}" for k, v in kinds[:5]) + ")"
        lines = [
            f"{self.model} {self.phase} on {self.gpu} (tp={self.tp}, {self.runtime}, "
            f"{self.attention} attention, batch {self.batch}, seq {self.seq}, "
            f"context {self.context}, {self.dtype})",
            f"  step {format_time(self.time_s)} ({per}), {self.tokens_per_s:,.0f} tokens/s"
            f" over {self.replicas} replica(s); {self.bound}-bound",
        ]
        if self.time_range_s is not None:
            lines.append(drift_range_line(self.time_range_s, self.host))
        lines.append(accuracy_line(self.accuracy))
        if self.bound == "host" and SYNC_TERM in self.host_by_kind_s:
            lines.append(f"  HOST-BOUND: the host issues the step's kernels in "
                         f"{format_time(self.host_time_s)} and waits for the GPU at each sync; "
                         f"the GPU needs {format_time(self.gpu_time_s)}: the step is the two "
                         "in turn")  # fmt: skip
        elif self.bound == "host":
            lines.append(f"  HOST-BOUND: the host issues the step's kernels in "
                         f"{format_time(self.host_time_s)}, the GPU needs "
                         f"{format_time(self.gpu_time_s)}: the host sets the step, its issue "
                         "time plus the GPU time of the kernels still queued when it ends "
                         f"(+{format_time(self.host_overhead_s)} over the GPU time)")  # fmt: skip
        lines += [
            f"  GPU time {format_time(self.gpu_time_s)}"
            + (f"; host overhead {format_time(self.host_overhead_s)}"
               if self.host_overhead_s > 0 else ""),
            host_line,
            f"  memory per GPU ({self.memory.phase}): {self.memory.message()} (weights "
            f"{format_quantity(self.weights_bytes, 'B')}, KV cache "
            f"{format_quantity(self.kv_cache_bytes, 'B')}); "
            f"{format_quantity(self.flops_per_step, 'FLOP')} and "
            f"{format_quantity(self.bytes_per_step, 'B')} moved per step",
            f"  calibration: {self.calibration}",
            "  ops (per step, all layers; GPU time):",
        ]  # fmt: skip
        ops = sorted(self.breakdown, key=lambda o: -o.time_s)
        for o in ops[:top]:
            share = 100 * o.time_s / self.gpu_time_s if self.gpu_time_s else 0.0
            lines.append(f"    {o.name:<24} x{o.count:<5} {format_time(o.time_s):>10} "
                         f"{share:5.1f}%  {o.bound}")  # fmt: skip
        if len(ops) > top:
            rest = sum(o.time_s for o in ops[top:])
            lines.append(f"    {'(other ops)':<24} {'':6} {format_time(rest):>10}")
        lines += [f"  note: {n}" for n in self.notes]
        if self.host_warning:
            lines.append(f"  warning: {self.host_warning}")
        return "\n".join(lines)


def eager_host_per_kernel(cal: Calibration | None) -> tuple[float, str]:
    """Host seconds per kernel of an eager PyTorch + HF step and a note saying where it came
    from: a calibration fitted from the user's own trace (``calibrate --trace``: the host
    time per launched kernel it measured, profiler removed), else the calibration's bare
    launch (or the default) + the framework's dispatch."""
    if cal is not None and cal.trace is not None:
        t = cal.trace
        if t.eager_host_from is not None:  # a trace of graph replays: no eager host of its own
            return t.host_per_kernel_s, (
                f"eager host cost {t.host_per_kernel_s * 1e6:.3g} us per kernel, from "
                f"{t.eager_host_from} (the trace {t.trace_path} replays graphs: its host is a "
                "replay's, not an eager kernel's)")  # fmt: skip
        return t.host_per_kernel_s, (
            f"eager host cost {t.host_per_kernel_s * 1e6:.3g} us per kernel, from the trace "
            f"{t.trace_path} ({t.runtime}; profiler's cost removed: {t.profiler.method})"
        )
    launch = cal.parameters.launch_host_s if cal else None
    total = (
        DEFAULT_LAUNCH_HOST_S if launch is None else launch
    ) + EAGER_FRAMEWORK_HOST_PER_KERNEL_S
    src = "default" if launch is None else "calibrated"
    return total, (
        f"eager host cost {total * 1e6:.3g} us per kernel = {src} launch "
        f"{(total - EAGER_FRAMEWORK_HOST_PER_KERNEL_S) * 1e6:.3g} us + HF/PyTorch dispatch "
        f"{EAGER_FRAMEWORK_HOST_PER_KERNEL_S * 1e6:.3g} us (measured on an H100 host, tiny-width "
        "model; full-width DynamicCache steps measured up to ~1.6x that there: pass "
        "host_per_kernel_s / host_per_step_s to use your own)"
    )


@dataclass(frozen=True)
class HostTerms:
    """The host side of one step: per-kernel eager costs (one list per block, in issue order:
    ``pre``, one layer, ``post``) or a graph launch, and where the figures came from."""

    eager: bool
    per_kernel: tuple[list[float], list[float], list[float]]
    per_step_s: float
    launch_s: float
    by_kind_s: dict[str, float] = field(default_factory=dict)
    kernels_by_kind: dict[str, int] = field(default_factory=dict)
    source: str = ""
    notes: tuple[str, ...] = ()
    # the host syncs with the GPU inside the step (HF's experts loop): host and GPU take turns
    serial: bool = False

    @property
    def from_profile(self) -> bool:
        """Whether the host profile priced the host (not a trace's figure or a given one): its
        drift range and its machine-mismatch warning apply."""
        return self.source.startswith(PROFILE_SOURCE)


# ``HostTerms.source`` when the host profile priced the host
PROFILE_SOURCE = "host profile"
# The host term of HF's tensor-parallel hooks (``runtimes.HF_TP_HOOKS_OVER_ELEMENTWISE``)
HOOKS_TERM = "HF tensor-parallel hooks"
# An HF grouped-experts MoE decoder layer's host time inside a model over a Llama layer's,
# each per unit of its kernels' per-kind costs, where a profile did not measure the MoE layer
# (``hf_moe_layer_s``): 1.06 on the one H200 VM profile that did (1,603 us per Mixtral layer
# against 843 per Llama layer, per-kind prices 707 and 395 us; validation/results/
# steps-h200-moe-run4/host-moe.yaml, transformers 5.17, torch 2.11)
REFERENCE_MOE_LAYER_SPEED = 1.06

# the host-time term of HF's experts loop's syncs (``HostTerms.by_kind_s``)
SYNC_TERM = "host-device syncs (experts loop)"


def host_terms(
    rt: Runtime,
    hp: HostProfile,
    cal: Calibration | None,
    blocks: tuple[Sequence[Timed], Sequence[Timed], Sequence[Timed]],
    layers: int,
    fusion: str,
    *,
    host_per_kernel_s: float | None = None,
    host_per_step_s: float | None = None,
    graph_launch_s: float | None = None,
    host_given: bool = False,
    graph_build_s: float = 0.0,
    llama_layer: Sequence[Timed] | None = None,
    moe_layer: Sequence[Timed] | None = None,
    syncs: int = 0,
) -> HostTerms:
    """What the host costs for the step's kernels ``blocks`` (pre, one layer, post) under
    runtime ``rt``. Eager, per kernel, the first that applies:

        host_per_kernel_s given                      that figure for every kernel (expert)
        the calibration was fitted from a trace      its host time per launched kernel, unless
                                                     a host was named (``host_given``): the
                                                     trace's machine need not be this one
        the host profile ``hp`` (measured or named)  the eager cost of the kernel's op kind,
                                                     + the HF layer's views spread over its
                                                     kernels; or the measured HF decoder layer

    A measured HF layer is a Llama layer: for a model whose HF modules launch other kernels
    (``llama_layer``: the same layer laid out as Llama's modules; Qwen3's q/k norms, Phi-3's
    fused projections) it is scaled by the ratio of the two layers' eager host costs by op kind.

    Graph runtimes: one launch per step (``graph_launch_s``, else the profile's replay or its
    compiled-call launch). ``graph_build_s``: host time of the step's cuDNN attention graph
    builds (``runtimes.sdpa_graph_build_s``), spent per step before its kernels issue (the
    first layer's SDPA call blocks the host while the GPU has only a few kernels queued). The
    one rule ``predict_inference`` and ``sweep_inference`` share."""
    counts: dict[str, int] = {}
    kinds: dict[str, float] = {}
    per_kernel: list[list[float]] = []
    ranks = tensor_parallel_ranks(blocks[1])
    given = hp  # the figures as measured (the notes quote them)
    if rt.host == "eager":  # each rank its own process: the step waits for the slowest host
        hp = rank_host(hp, ranks) or hp
    measured_layer = hp.hf_decoder_layer_s if fusion == "unfused" else None
    # HF modules sharded by HF's TP plan: each projection's hooks, host time only
    hooks_s = (HF_TP_HOOKS_OVER_ELEMENTWISE * hp.cost_s("elementwise")
               * sum(t.entry.kind == "gemm" for t in blocks[1])
               if fusion == "unfused" and ranks > 1 else 0.0)  # fmt: skip
    # the whole model measured (intercept + slope over its layer count): its own per-step work
    # is spent before the first layer, its layers cost what they cost inside it
    in_model = fusion == "unfused" and hp.hf_model_layer_s is not None
    if in_model:
        measured_layer = hp.hf_model_layer_s
    for i, timed in enumerate(blocks):
        reps = layers if i == 1 else 1
        costs: list[float] = []
        comm: list[bool] = []  # a tensor-parallel collective: not in a measured HF layer
        block_kinds: dict[str, float] = {}
        for t in timed:
            for k in t.kernels:
                kind = host_kind(t.entry.kind, k.name)
                n = k.launches * t.entry.count
                counts[kind] = counts.get(kind, 0) + reps * n
                costs += [hp.cost_s(kind)] * n
                comm += [kind == "collective"] * n
                block_kinds[kind] = block_kinds.get(kind, 0.0) + n * hp.cost_s(kind)
        if i == 1 and costs and measured_layer is not None and not all(comm):
            # measured per layer (one GPU): replaces the layer's own kernels' costs; its
            # collectives, which the measured layer never issued, keep theirs
            label = "in the model" if in_model else "alone"
            layer_s, ref, name = measured_layer, llama_layer, "HF decoder layer"
            if moe_layer is not None and in_model and hp.hf_moe_layer_s is not None:
                layer_s, ref, name = hp.hf_moe_layer_s, moe_layer, "HF MoE decoder layer"
            elif moe_layer is not None:  # a profile without a measured MoE layer
                layer_s *= REFERENCE_MOE_LAYER_SPEED
                label += f"; x{REFERENCE_MOE_LAYER_SPEED:g} for an MoE layer (reference)"
            own = sum(c for c, x in zip(costs, comm) if not x)
            if ref is not None:
                ratio = own / _eager_host_s(ref, hp)
                layer_s *= ratio
                label += f"; x{ratio:.3g} for this model's kernels"
            n_own = comm.count(False)
            costs = [c if x else (layer_s + hooks_s) / n_own for c, x in zip(costs, comm)]
            collectives = {k: v for k, v in block_kinds.items() if k == "collective"}
            block_kinds = {f"{name} (measured {label})": layer_s, **collectives}
            if hooks_s:
                block_kinds[HOOKS_TERM] = hooks_s
        elif i != 1 and in_model:  # the model's own host time, per step below (but its
            # collectives: the model was measured on one GPU)
            costs = [c if x else 0.0 for c, x in zip(costs, comm)]
            block_kinds = {k: v for k, v in block_kinds.items() if k == "collective"}
        elif i == 1 and costs and fusion == "unfused":  # the layer's views: host time only
            extra = HF_VIEWS_PER_LAYER * hp.cost_s("view")
            block_kinds["view"] = block_kinds.get("view", 0.0) + extra
            if hooks_s:
                block_kinds[HOOKS_TERM] = hooks_s
            costs = [c + (extra + hooks_s) / len(costs) for c in costs]
        for kind, v in block_kinds.items():
            kinds[kind] = kinds.get(kind, 0.0) + reps * v
        per_kernel.append(costs)
    pk = (per_kernel[0], per_kernel[1], per_kernel[2])
    if rt.host != "eager":
        launch = hp.compiled_launch_s if rt.host == "compiled-graph" else hp.replay_s
        source = f"{PROFILE_SOURCE} {hp.name}"
        if graph_launch_s is not None:
            if graph_launch_s < 0:
                raise SpecError(f"graph_launch_s must be >= 0, got {graph_launch_s}")
            launch, source = graph_launch_s, "given (graph_launch_s)"
        zeros = ([0.0] * len(pk[0]), [0.0] * len(pk[1]), [0.0] * len(pk[2]))
        return HostTerms(False, zeros, 0.0, launch, {}, counts, source)
    notes: list[str] = []
    per_step = 0.0 if host_per_step_s is None else host_per_step_s
    if per_step < 0:
        raise SpecError("host_per_step_s must be >= 0")
    uniform = host_per_kernel_s
    source = f"{PROFILE_SOURCE} {hp.name}"
    if uniform is not None:
        if uniform < 0:
            raise SpecError("host_per_kernel_s must be >= 0")
        source = "given (host_per_kernel_s)"
    elif cal is not None and cal.trace is not None and not host_given:
        uniform, note = eager_host_per_kernel(cal)
        source = f"trace {cal.trace.trace_path}"
        notes.append(note + f" (beats the host profile {hp.name})")
    elif in_model:
        own = hp.hf_model_step_s or 0.0
        per_step += own
        kinds["HF model, outside its layers (measured)"] = own
        notes.append(f"host: HF model measured on {hp.name}: "
                     f"{(given.hf_model_step_s or 0.0) * 1e6:.4g} us per step + "
                     f"{(given.hf_model_layer_s or 0.0) * 1e6:.4g} us per decoder layer")  # fmt: skip
    elif measured_layer is not None:
        notes.append(f"host: HF decoder layer measured at "
                     f"{(given.hf_decoder_layer_s or 0.0) * 1e6:.4g} us per layer on {hp.name}")  # fmt: skip
    elif fusion == "unfused":
        notes.append(f"host: {hp.name} measured no HF decoder layer: each kernel at its op kind's "
                     "eager cost, plus the layer's views (a profile from `gpumodel validate "
                     "--host-only` measures the layer, which prices HF steps closer)")  # fmt: skip
    if uniform is not None:
        n = len(pk[0]) + layers * len(pk[1]) + len(pk[2])
        pk = ([uniform] * len(pk[0]), [uniform] * len(pk[1]), [uniform] * len(pk[2]))
        kinds = {source: uniform * n}
    elif ranks > 1:
        flat = given.eager_op_s.view == 0 and given.hf_decoder_layer_s is None
        notes.append(
            f"host: the slowest of the {ranks} tensor-parallel ranks' hosts, x"
            f"{hp.cost_s('elementwise') / given.cost_s('elementwise'):.3g} on every figure "
            f"(llm/ranks.py{', measured up to 8 ranks' if ranks > 8 else ''})"
            + (f"; HF's tensor-parallel hooks {format_time(hooks_s)} per layer "
               f"({HF_TP_HOOKS_OVER_ELEMENTWISE:.3g} x the eager elementwise op per sharded "
               "projection, fitted on measured profiles"
               + ("; this profile prices every op at one flat per-kernel figure, ~3x a measured "
                  "elementwise op, so its hooks come out high" if flat else "") + ")"
               if hooks_s else ""))  # fmt: skip
    if graph_build_s > 0:
        per_step += graph_build_s
        kinds[BUILD_TERM] = graph_build_s
        notes.append(f"new attention shapes: torch's cuDNN attention builds a graph for them, "
                     f"{format_time(graph_build_s)} of host per step ({hp.name})")  # fmt: skip
    if syncs:
        sync = syncs * hp.sync_s()
        per_step += sync
        kinds[SYNC_TERM] = sync
        notes.append(f"experts loop: {syncs} host-device syncs per step (.item(), nonzero) at "
                     f"{format_time(hp.sync_s())} each ({hp.name}); the host waits for the GPU "
                     "at each, so the step is host time + GPU time")  # fmt: skip
    return HostTerms(True, pk, per_step, 0.0, kinds, counts, source, tuple(notes),
                     serial=bool(syncs))  # fmt: skip


def tensor_parallel_ranks(layer: Sequence[Timed]) -> int:
    """Ranks of the layer's tensor-parallel collectives (1: none)."""
    return max((t.entry.op.gpus for t in layer if t.entry.kind == "comm"), default=1)


def _eager_host_s(block: Sequence[Timed], hp: HostProfile) -> float:
    """Eager host cost of a block's kernels but its collectives, each at the profile's cost of
    its op kind."""
    kinds = ((host_kind(t.entry.kind, k.name), k.launches * t.entry.count)
             for t in block for k in t.kernels)  # fmt: skip
    return sum(hp.cost_s(kind) * n for kind, n in kinds if kind != "collective")


def llama_layer_kernels(
    spec: ModelSpec, fusion: str, gpu: GPUSpec, *args: Any, **kwargs: Any
) -> list[Timed] | None:
    """The eager layer of ``spec`` (built by ``model_ops(spec, *args, **kwargs)``) as HF's
    Llama modules lay it out, unpriced (what ``host_terms`` reads: kernel names and launches),
    where it differs from ``spec``'s own; None otherwise."""
    if fusion != "unfused" or spec.hf_layout == "llama":
        return None
    return _unpriced_layer(model_ops(spec.llama_layout(), *args, fusion=fusion, **kwargs), gpu)


def moe_layer_kernels(
    spec: ModelSpec, fusion: str, gpu: GPUSpec, *args: Any, experts: str = "grouped_mm",
    **kwargs: Any,
) -> list[Timed] | None:  # fmt: skip
    """The eager layer of ``spec`` as HF's Mixtral modules lay it out (Llama's attention, the
    grouped experts), unpriced, for an MoE model under HF's grouped experts; None otherwise."""
    if fusion != "unfused" or spec.moe is None or experts != "grouped_mm":
        return None
    ops = model_ops(spec.llama_layout(moe=True), *args, fusion=fusion, experts=experts, **kwargs)
    return _unpriced_layer(ops, gpu)


def _unpriced_layer(ops: Any, gpu: GPUSpec) -> list[Timed]:
    return [Timed(e, tuple(KernelPrediction.model_construct(name=k.name, launches=k.launches)
                           for k in e.op.kernels(gpu))) for e in ops.layer]  # fmt: skip


def kernel_blocks(
    pre: Sequence[Timed], layer: Sequence[Timed], post: Sequence[Timed]
) -> tuple[list[float], list[float], list[float]]:
    """GPU time of each launch of the step's first ops, one layer and its last ops, in issue
    order (the step runs ``pre + layer * layers + post``)."""
    return tuple([x for t in block for x in t.kernel_times()] for block in (pre, layer, post))  # type: ignore[return-value]


def step_times(
    pre: np.ndarray,
    layer: np.ndarray,
    layers: int,
    post: np.ndarray,
    *,
    eager: bool,
    host_per_kernel_s: Any,
    host_per_step_s: Any,
    graph_launch_s: Any = DEFAULT_GRAPH_LAUNCH_S,
    serial: bool = False,
) -> dict[str, np.ndarray]:
    """Step, GPU and host time of many steps at once from their kernels' GPU times (arrays
    steps x kernels per block, see ``kernel_blocks``); the one formula ``predict_inference``
    and ``sweep_inference`` share. ``host_per_kernel_s``: one figure (broadcast over the
    steps) or three arrays shaped as ``pre``, ``layer``, ``post`` (each kernel's own cost).

        eager: step = max(queue(kernels, host per step, host per kernel),
                          host per step + sum of the kernels' host costs)
        eager, ``serial`` (the host syncs with the GPU throughout the step): host + GPU time
        graph: step = GPU time + one graph launch"""
    gpu = pre.sum(axis=-1) + layers * layer.sum(axis=-1) + post.sum(axis=-1)
    n = pre.shape[-1] + layers * layer.shape[-1] + post.shape[-1]
    if eager:
        if isinstance(host_per_kernel_s, tuple):
            hp_, hl, hq = (np.asarray(h, dtype=float) for h in host_per_kernel_s)
            issue = hp_.sum(axis=-1) + layers * hl.sum(axis=-1) + hq.sum(axis=-1)
        else:
            issue = n * np.asarray(host_per_kernel_s, dtype=float)
        host = np.broadcast_to(host_per_step_s + issue, gpu.shape)
        # the step ends after the host returns (it records the end / samples the token)
        step = host + gpu if serial else np.maximum(
            queue_time_blocks(pre, layer, layers, post, host_per_kernel_s, host_per_step_s), host
        )  # fmt: skip
    else:
        host = np.broadcast_to(np.asarray(graph_launch_s, dtype=float), gpu.shape)
        step = gpu + graph_launch_s
    return {"step": step, "gpu": gpu, "host": host, "kernels": np.asarray(n)}


def _defaults(
    model: ModelSpec, phase: str, seq: int | None, context: int | None
) -> tuple[int, int]:
    if phase == "prefill":  # a prompt of 2048 tokens, or of the context where only that is given
        seq = seq if seq is not None else context if context is not None else min(2048, model.max_context)
        context = context if context is not None else seq
    elif phase == "decode":
        seq = seq if seq is not None else 1
        context = context if context is not None else min(2048, model.max_context)
    else:
        raise SpecError(f"phase must be 'prefill' or 'decode', got '{phase}'")
    if seq < 1 or context < seq:
        raise SpecError(f"need 1 <= seq <= context, got seq {seq}, context {context}")
    return seq, model.check_context(context)


def timed_ops(
    spec: ModelSpec,
    g: GPUSpec,
    rt: Runtime,
    hp: HostProfile,
    batch: int,
    seq: int,
    context: int,
    *,
    dtype: str,
    tp: int,
    attention: str,
    fusion: Fusion,
    kv_cache: KVCache,
    gqa: GQA,
    experts: Experts,
    calibration: Any,
    op_times: Mapping[str, float] | None = None,
    stream_floor_s: float | None = None,
    condition: str = "in-workload",
) -> tuple[ModelOps, Timer, float | None, tuple[list[Timed], list[Timed], list[Timed]]]:
    """The ops of one step in runtime ``rt`` (already resolved for its phase), timed on ``g``
    at the step's clock under ``condition``: (ops, the step's timer, the in-stream floor it
    used, the timed pre / layer / post ops)."""
    ops = model_ops(spec, batch, seq, context, dtype=dtype, tp=tp, attention=attention,
                    fusion=fusion, kv_cache=kv_cache, logits="last", gqa=gqa, experts=experts)  # fmt: skip
    # in a graph a kernel's launch is replaced by the in-graph per-kernel time; eager kernels
    # keep the calibration's isolated-kernel floor unless stream_floor_s is given
    floor: float | None = stream_floor_s
    if floor is None and rt.host != "eager":
        floor = hp.in_graph_kernel_s
    timer = Timer(g, calibration, op_times, stream_floor_s=floor, graph=rt.host != "eager")
    # one clock for the whole step: the power limit sees the step's average tensor activity
    timer = timer.at_step((ops.pre, ops.layer, ops.post), spec.layers)
    if condition != timer.condition:
        timer = timer.at(condition=condition, activity=timer.activity,
                         dram_bytes_per_s=timer.dram_bytes_per_s)  # fmt: skip
    unknown = set(op_times or {}) - {e.name for e in (*ops.pre, *ops.layer, *ops.post)}
    if unknown:
        raise SpecError(f"op_times names no op of this step: {', '.join(sorted(unknown))}")
    timed = (timer.time_all(ops.pre), timer.time_all(ops.layer), timer.time_all(ops.post))
    return ops, timer, floor, timed


def predict_inference(
    model: ModelSpec | str,
    gpu: GPUSpec | str,
    phase: Phase = "decode",
    batch: int = 1,
    seq: int | None = None,
    context: int | None = None,
    dtype: str = "bf16",
    gpus: int | None = None,
    tp: int | None = None,
    runtime: RuntimeName | None = None,
    calibration: Any = None,
    *,
    attention: AttentionImpl | None = None,
    fusion: Fusion | None = None,
    kv_cache: KVCache | None = None,
    gqa: GQA | None = None,
    host: HostProfile | str | None = None,
    host_per_kernel_s: float | None = None,
    host_per_step_s: float | None = None,
    graph_launch_s: float | None = None,
    op_times: Mapping[str, float] | None = None,
    stream_floor_s: float | None = None,
    allow_oversubscribe: bool = False,
    new_shapes: bool = False,
    experts: Experts = "grouped_mm",
) -> InferenceResult:
    """Predict one prefill or decode step of ``model`` on ``gpu``.

    ``phase="prefill"``: ``batch`` prompts of ``seq`` tokens (context = seq, or more for a
    chunk after cached tokens); ``"decode"``: ``batch`` sequences each add ``seq`` (1) token
    attending to ``context`` tokens. ``gpus`` GPUs form ``gpus / tp`` replicas of ``tp``-way
    tensor parallelism (``tp`` defaults to ``gpus``, ``gpus`` to ``tp``: one replica, as
    ``infer --tp`` and ``sweep_inference``); ``batch`` is per replica.

    ``runtime``: ``"hf-eager"``, ``"hf-static-compiled"`` or ``"fused-graph"`` (default; see
    ``gpumodel.llm.runtimes``; ``"eager"``/``"graph"`` are the old names of the first and last).
    Left out with a ``calibration`` fitted from a trace (``calibrate --trace``), the runtime that
    trace ran in (``runtimes.traced_runtime``), said in the notes.
    ``host``: the host profile (name, file or HostProfile; default: the locally measured one,
    else ``typical``). ``attention``: ``"flash"``, ``"cudnn"`` or ``"naive"`` (default:
    the runtime's own, ``runtimes.runtime_attention``: cuDNN for the HF runtimes' decode on an
    H100/H200/B200, else FlashAttention). Expert overrides: ``fusion``/``kv_cache``/``gqa``
    replace the runtime's kernel choices; ``host_per_kernel_s``/``host_per_step_s`` the eager
    host cost (one figure per kernel); ``graph_launch_s`` the graph runtimes' launch; ``stream_floor_s``
    the GPU time per small kernel back to back (default: the profile's in-graph per-kernel
    time); ``op_times`` replaces the op model's time of named layer ops by measured seconds
    per execution (e.g. ``{"lm_head": 2e-3}``).

    ``experts`` (mixture-of-experts models, ``hf-eager``): how HF runs the experts,
    ``"grouped_mm"`` (transformers 5's default on CUDA: one grouped GEMM per projection) or
    ``"loop"`` (``experts_implementation="eager"``, transformers 4: a Python loop over experts).

    ``new_shapes=True`` prices the step as the first the process runs at its attention shapes
    (every decode step of the longest generation so far: its KV length is new; a prefill at a
    new batch x prompt length): where SDPA runs cuDNN eagerly (hf-eager on an H100/H200/B200
    with torch 2.5+), torch builds a cuDNN graph for it, the host profile's
    ``sdpa_graph_build_s`` (~50 ms on an H100 VM, torch 2.11). The default prices the steady
    state, shapes the process has run before.

    A step whose memory (``memory(phase=...)``) does not fit raises InfeasibleError unless
    ``allow_oversubscribe=True``.
    """
    check_int(batch, "batch")  # required: None is an error, not 'not given'
    check_counts(seq=seq, context=context, tp=tp, gpus=gpus)
    check_dtype(dtype)
    check_bool(allow_oversubscribe, "allow_oversubscribe")
    check_bool(new_shapes, "new_shapes")
    check_choice(phase, "phase", ("prefill", "decode"))
    check_choice(experts, "experts", EXPERTS)
    check_args(attention="flash" if attention is None else attention, fusion=fusion,
               kv_cache=kv_cache, gqa=gqa, host_per_kernel_s=host_per_kernel_s,
               host_per_step_s=host_per_step_s, graph_launch_s=graph_launch_s, op_times=op_times,
               stream_floor_s=stream_floor_s)  # fmt: skip
    spec = get_model(model)
    g = get_gpu(gpu)
    traced = None
    if runtime is None:  # a calibration from the user's trace prices the runtime it ran in
        from gpumodel.calibration import resolve

        runtime = traced = traced_runtime(resolve(calibration, g))
    rt, kernel, fusion, kv_cache, gqa = resolve_step(
        runtime, phase, g.compute_capability, attention, fusion, kv_cache, gqa
    )
    check_eager_options(rt, phase, new_shapes, host_per_kernel_s, host_per_step_s)
    kernel = step_attention(kernel, attention, dtype)  # an fp32 model: the efficient kernel
    if tp is not None and tp < 1:
        raise SpecError(f"tp must be >= 1, got {tp}")
    gpus = (tp or 1) if gpus is None else gpus  # one replica of tp GPUs unless told
    if batch < 1 or gpus < 1:
        raise SpecError(f"batch and gpus must be >= 1, got batch {batch}, gpus {gpus}")
    tp = gpus if tp is None else tp
    if gpus % tp:
        raise SpecError(f"gpus ({gpus}) must be a multiple of tp ({tp})")
    check_hf_tensor_parallel(rt, spec.id, spec.kv_heads, tp)
    seq, context = _defaults(spec, phase, seq, context)
    hp = load_host(host)
    mem = memory(spec, g, batch=batch, seq=context, dtype=dtype, tp=tp, phase=phase,
                 attention=kernel, prefill_tokens=batch * seq)  # fmt: skip
    if not allow_oversubscribe and not mem.fits:
        require_fit(mem, what_fits(spec, g, batch=batch, seq=context, dtype=dtype, tp=tp,
                                   phase=phase, attention=kernel))  # fmt: skip
    if stream_floor_s is not None and stream_floor_s < 0:
        raise SpecError(f"stream_floor_s must be >= 0, got {stream_floor_s}")
    ops, timer, floor, (pre, layer, post) = timed_ops(
        spec, g, rt, hp, batch, seq, context, dtype=dtype, tp=tp, attention=kernel,
        fusion=fusion, kv_cache=kv_cache, gqa=gqa, experts=experts, calibration=calibration,
        op_times=op_times, stream_floor_s=stream_floor_s)  # fmt: skip
    refs = dict(dtype=dtype, tp=tp, attention=kernel, kv_cache=kv_cache, logits="last", gqa=gqa)
    llama_layer = llama_layer_kernels(spec, fusion, g, batch, seq, context, **refs)
    moe_layer = moe_layer_kernels(spec, fusion, g, batch, seq, context, experts=experts, **refs)
    breakdown = summarize([(pre, 1), (layer, spec.layers), (post, 1)])
    blocks = kernel_blocks(pre, layer, post)

    cal = timer.calibration
    notes = list(ops.notes)
    if traced is not None:
        notes.append(f"runtime {traced}: the one the trace calibration was recorded in "
                     "(name a runtime to price another)")  # fmt: skip
    if cal is None:
        notes.append(DATASHEET_NOTE)
    if op_times:
        notes.append(f"measured times used for: {', '.join(sorted(op_times))}")
    if power_watts(timer.params, g) is not None:
        notes.append(f"sustained clock: the step's tensor activity {timer.activity:.2f} (time-weighted "
                     f"over its kernels) and DRAM traffic {(timer.dram_bytes_per_s or 0) / 1e12:.2f} "
                     "TB/s set the power-limited clock of all of them")  # fmt: skip
    else:
        notes.append(f"sustained clock: not modelled for {g.architecture} (no calibrated power "
                     f"behaviour): the maximum clock is assumed")  # fmt: skip
    if floor is not None:
        kept = any(keeps_fixed_work(e.op) for e in ops.layer)
        notes.append(f"in-stream floor: non-GEMM kernels cost {floor * 1e6:.3g} us each back to "
                     "back (in a graph) instead of the isolated-kernel floor"
                     + ("; cuDNN's attention keeps its own fixed work (its floor less the launch "
                        "latency)" if kept else ""))  # fmt: skip

    one = tuple(np.array([b], dtype=float) for b in blocks)  # one step
    syncs = expert_loop_syncs(spec, batch * seq, fusion, experts)

    def build_of(profile: HostProfile) -> float:  # cuDNN graph build, a step at new shapes
        return sdpa_graph_build_s(rt, g.compute_capability, kernel, profile.graph_build_s,
                                  True)  # fmt: skip

    def step_on(profile: HostProfile) -> tuple[HostTerms, dict[str, Any]]:
        """The step's host terms and times with ``profile`` as its host."""
        terms = host_terms(rt, profile, cal, (pre, layer, post), spec.layers, fusion,
                           host_per_kernel_s=host_per_kernel_s, host_per_step_s=host_per_step_s,
                           graph_launch_s=graph_launch_s, host_given=host is not None,
                           graph_build_s=build_of(profile) if new_shapes else 0.0,
                           llama_layer=llama_layer, moe_layer=moe_layer, syncs=syncs)  # fmt: skip
        return terms, step_times(*one[:2], spec.layers, one[2], eager=terms.eager,
                                 host_per_kernel_s=tuple(np.array([h]) for h in terms.per_kernel),
                                 host_per_step_s=terms.per_step_s, graph_launch_s=terms.launch_s,
                                 serial=terms.serial)  # fmt: skip

    ht, times = step_on(hp)
    notes += ht.notes
    build = build_of(hp)
    if build and not new_shapes:
        notes.append(f"steady state: attention shapes this process has run before; a step at "
                     f"new ones (a decode step at a new KV length) adds {format_time(build)} "
                     f"of cuDNN graph build (new_shapes=True, --new-shapes)")  # fmt: skip
    step, gpu_time, host_time = (float(times[k][0]) for k in ("step", "gpu", "host"))
    # the host's measured drift, where the profile priced the host: the step at its p10/p90
    time_range: tuple[float, float] | None = None
    if hp.host_drift is not None and ht.from_profile:
        lo, hi = (float(step_on(hp.scaled(f))[1]["step"][0]) for f in hp.host_drift)
        time_range = (lo, hi)
    n_kernels = int(times["kernels"])
    eager = ht.eager
    mean_host = (host_time - ht.per_step_s) / n_kernels if eager and n_kernels else 0.0
    host_per_step_s = ht.per_step_s
    host_overhead = max(0.0, step - gpu_time)

    shares: dict[str, float] = {}
    for o in breakdown:
        shares[o.bound] = shares.get(o.bound, 0.0) + o.time_s
    shares = {k: v / gpu_time for k, v in shares.items()} if gpu_time else {}
    gpu_bound = max(shares, key=shares.__getitem__) if shares else "memory"
    # host-bound: the host's issue time exceeds the GPU's busy time (the queue runs dry)
    bound = "host" if host_time > gpu_time and eager else gpu_bound

    b = BYTES_PER_ELEMENT[activation_dtype(dtype)]  # an 8-bit model's cache is bf16
    s = tp_shape(spec, tp)
    kv_bytes = 2.0 * spec.layers * s.kv_heads * spec.head_dim * b * spec.attended(context) * batch
    replicas = gpus // tp
    tokens = batch * seq
    return InferenceResult(
        model=spec.id, gpu=g.id, phase=phase, batch=batch, seq=seq, context=context, dtype=dtype,
        tp=tp, gpus=gpus, replicas=replicas, runtime=rt.name, fusion=fusion, kv_cache=kv_cache,
        attention=ops.attention, gqa=ops.gqa,  # type: ignore[arg-type]
        calibration=timer.label, host=host_dict(hp),
        host_warning=hp.mismatch() if (ht.from_profile and ht.eager) or new_shapes else None,
        time_s=step, time_range_s=time_range, gpu_time_s=gpu_time,
        accuracy=step_accuracy(rt.name, phase, g.id, cal, measured_host(hp),
                               layout=parallel_layout(tp=tp),
                               metric="time, first round" if new_shapes else "time"),
        host_time_s=host_time, host_overhead_s=host_overhead, host_per_kernel_s=mean_host,
        host_per_step_s=host_per_step_s, host_by_kind_s=ht.by_kind_s, stream_floor_s=floor,
        kernels_by_kind=ht.kernels_by_kind, host_source=ht.source,
        tokens_per_s=replicas * tokens / step,
        time_to_first_token_s=step if phase == "prefill" else None,
        time_per_output_token_s=step / seq if phase == "decode" else None,
        kernels_per_step=n_kernels,
        kernels_per_layer=sum(t.launches for t in layer),
        flops_per_step=sum(o.flops for o in breakdown),
        bytes_per_step=sum(o.bytes for o in breakdown),
        weights_bytes=weights_bytes(spec, dtype) / tp,
        kv_cache_bytes=kv_bytes, memory=mem,
        bound=bound, bound_shares=shares, breakdown=tuple(breakdown), notes=tuple(notes),
    )  # fmt: skip
