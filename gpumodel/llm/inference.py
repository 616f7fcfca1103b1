"""LLM inference: time of a prefill or decode step from the per-op model, plus host overhead.

    GPU time  = sum over the step's kernels of their predicted time (gpumodel.predict)
    eager     : step = queue(kernels, host per step, host cost per kernel)
                (>= max(GPU time, host per step + n * host per kernel))
    graph     : step = GPU time + one graph launch

Eager frameworks issue kernels from Python asynchronously: the GPU waits only when the host is
slower than the kernels it launches. ``queue_time`` plays that queue kernel by kernel (the host
spends the per-step time, then issues kernel i at (i+1) x host cost; the GPU starts it when both
it and the previous kernel are done), which is exact for a host with a constant cost per kernel
and reduces to max(GPU time, host time) when the kernels are alike. Each step starts with an
empty queue: generation synchronises on the sampled token.

Host time of an eager HF step = a per-step part (``host_per_step_s``: forward entry, HF's
decorators, mask and cache bookkeeping, output wrapping; it does not grow with the layers) + a
cost per kernel (``host_per_kernel_s``: the Python of the modules, PyTorch's dispatcher, the
launch). The default per kernel is

    host_per_kernel = launch_host_s + EAGER_FRAMEWORK_HOST_PER_KERNEL_S

``launch_host_s`` is the calibration's back-to-back launch cost of a bare kernel (``gpumodel
validate``; ``DEFAULT_LAUNCH_HOST_S`` without one). ``EAGER_FRAMEWORK_HOST_PER_KERNEL_S`` is
what PyTorch + HF add per kernel, measured on an H100 host (2026-11-22T00:59, torch 2.11,
transformers 5.17, Python 3.12; validation/results/h100-sxm/llm-report.md and
llm-measurements.json): a 4-layer Llama of tiny width (GPU time negligible), decoding one token
with a DynamicCache before any profiler ran in the process, issued its kernels in 4.545 ms =
25.1 us per modelled kernel (181), of which 4.62 us is the bare launch ``gpumodel validate``
measured on that host. The StaticCache eager steps of the full-width model in the same run
agree (5.27 / 5.43 ms for 212 modelled kernels: 24.9 / 25.6 us). The per-step part is not
separated in those runs (one depth): its default is 0 and the per-kernel figure carries it,
spread over the 181 kernels of a 4-layer step, so deep models are slightly over-predicted.
``benchmarks/llm_device.py`` now measures both on narrow replicas of two depths.

Caveat, same run: the full-width DynamicCache prefill and decode steps, each timed after
torch.profiler sessions, issued their kernels in 6.8-7.8 ms (38-43 us per kernel), ~2.5 ms per
step more than the figures above, and the same tiny model timed right after two profiler
sessions (batch 8 and 64) took 6.2 / 6.6 ms. Whether that is the profiler's lasting effect or
host work of the DynamicCache path (cache concat, SDPA with enable_gqa) is what the benchmark's
next run separates. Steps the defaults call host-bound can take up to ~1.6x the prediction on
such a host; pass the host costs measured for the runtime at hand (``host_per_kernel_s``,
``host_per_step_s``).

In-stream kernel floor (``stream_floor_s``, off by default). The op model's fixed cost per
kernel is calibrated on kernels timed one at a time with CUDA events (elementwise ~4.4 us on
an H100), which includes launch latency and event overheads that consecutive kernels of a step
overlap: profiled, the ~150 small kernels of an eager decode step are busy ~1.7 us each. With
``stream_floor_s`` every non-GEMM kernel of the step pays that in-stream cost per kernel instead
(``gpumodel.llm._timing.in_stream``); cuBLAS GEMMs keep their fitted floor.

Decode at small batch reads every weight once per step: the GEMMs are weight-bandwidth bound
(AI ~ batch FLOP/B, far below the ~295 FLOP/B ridge of an H100), which the GEMM op's byte
count captures. Weights and the KV cache stream from HBM (``l2="cold"``); the norms, RoPE and
elementwise ops read activations the previous kernel just wrote (``l2="warm"``: L2 bandwidth
when the working set fits and the calibration measured it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from gpumodel._validators import check_choice, check_counts, check_dtype
from gpumodel.calibration import Calibration
from gpumodel.errors import SpecError, UnsupportedError
from gpumodel.llm._timing import OpTime, Timed, Timer, queue_time_blocks, summarize
from gpumodel.llm.layers import GQA, AttentionImpl, Fusion, KVCache, model_ops, tp_shape
from gpumodel.llm.models import ModelSpec, get_model
from gpumodel.specs import BYTES_PER_ELEMENT, GPUSpec, get_gpu
from gpumodel.units import format_quantity, format_time

# Bare launch of one kernel, host side, back to back (cupy RawKernel, ``gpumodel validate`` on
# the H100 host of validation/results/h100-sxm, 2026-11-22: 4.62 us; an earlier host measured
# 7.01 us); calibration.parameters.launch_host_s replaces it.
DEFAULT_LAUNCH_HOST_S = 4.6e-6
# Eager PyTorch + HF transformers host time per kernel beyond the bare launch: 25.1 us per
# modelled kernel (4.545 ms host issue time / 181 kernels, tiny-width 4-layer Llama decode, H100
# host, torch 2.11, transformers 5.17) minus the 4.62 us bare launch of that host. See the
# module docstring (the earlier host of llm-report-initial.md: 18.0 us per kernel in all).
EAGER_FRAMEWORK_HOST_PER_KERNEL_S = 20.5e-6
# What an eager HF step costs per kernel without a calibration (the sum of the two).
DEFAULT_EAGER_HOST_PER_KERNEL_S = DEFAULT_LAUNCH_HOST_S + EAGER_FRAMEWORK_HOST_PER_KERNEL_S
# Per-step host time of an eager HF step beyond its kernels: not separated yet (carried by the
# per-kernel figure above); benchmarks/llm_device.py measures it from two depths.
DEFAULT_EAGER_HOST_PER_STEP_S = 0.0
# One CUDA graph replay plus the per-step Python around it (cudaGraphLaunch is a few us).
DEFAULT_GRAPH_LAUNCH_S = 20e-6

# Shown when no calibration applies: the roofline on datasheet peaks is a lower bound on time.
DATASHEET_NOTE = (
    "no calibration for this GPU: GEMMs at 100% of the datasheet peak and memory at 100% of its "
    "bandwidth (a lower bound on time); run `gpumodel validate` there or pass a calibration"
)

Phase = Literal["prefill", "decode"]
Runtime = Literal["eager", "graph"]


class InferenceResult(BaseModel):
    """One inference step (per model replica of ``tp`` GPUs) and what it is made of."""

    model_config = ConfigDict(frozen=True, extra="forbid")
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
    runtime: Runtime
    fusion: Fusion
    kv_cache: KVCache
    attention: AttentionImpl
    gqa: GQA = "native"
    calibration: str
    step_time_s: float
    gpu_time_s: float
    host_time_s: float
    host_overhead_s: float
    host_per_kernel_s: float
    host_per_step_s: float = 0.0
    stream_floor_s: float | None = None
    tokens_per_s: float
    time_to_first_token_s: float | None
    time_per_output_token_s: float | None
    kernels_per_step: int
    kernels_per_layer: int
    flops_per_step: float
    bytes_per_step: float
    weights_bytes: float
    kv_cache_bytes: float
    bound: str
    bound_shares: dict[str, float]
    breakdown: tuple[OpTime, ...]
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def explain(self, top: int = 12) -> str:
        per = "TTFT" if self.phase == "prefill" else "TPOT"
        lines = [
            f"{self.model} {self.phase} on {self.gpu} (tp={self.tp}, {self.runtime}, "
            f"batch {self.batch}, seq {self.seq}, context {self.context}, {self.dtype})",
            f"  step {format_time(self.step_time_s)} ({per}), {self.tokens_per_s:,.0f} tokens/s"
            f" over {self.replicas} replica(s); {self.bound}-bound",
            f"  GPU time {format_time(self.gpu_time_s)}; host "
            + (f"{format_time(self.host_per_step_s)} per step + " if self.host_per_step_s else "")
            + f"{self.kernels_per_step} kernels x {self.host_per_kernel_s * 1e6:.3g} us = "
            f"{format_time(self.host_time_s)}"
            + (f" -> host overhead {format_time(self.host_overhead_s)}"
               if self.host_overhead_s > 0 else ""),
            f"  per GPU: weights {format_quantity(self.weights_bytes, 'B')}, KV cache "
            f"{format_quantity(self.kv_cache_bytes, 'B')}, {format_quantity(self.flops_per_step, 'FLOP')}"
            f" and {format_quantity(self.bytes_per_step, 'B')} moved per step",
            f"  calibration: {self.calibration}",
            "  ops (per step, all layers):",
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
        return "\n".join(lines)


def eager_host_per_kernel(cal: Calibration | None) -> tuple[float, str]:
    """Host seconds per kernel of an eager PyTorch + HF step and a note saying where it came
    from: a calibration fitted from the user's own trace (``calibrate --trace``: the host
    time per launched kernel it measured, profiler removed), else the calibration's bare
    launch (or the default) + the framework's dispatch."""
    if cal is not None and cal.trace is not None:
        t = cal.trace
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


def host_costs(
    runtime: str,
    cal: Calibration | None,
    host_per_kernel_s: float | None,
    host_per_step_s: float | None,
) -> tuple[float, float, str]:
    """(host seconds per kernel, per step, a note on their source) of an eager step; zeros for
    a graph step (its host cost is the graph launch)."""
    if runtime != "eager":
        return 0.0, 0.0, ""
    note = ""
    if host_per_kernel_s is None:
        host_per_kernel_s, note = eager_host_per_kernel(cal)
    if host_per_step_s is None:
        host_per_step_s = DEFAULT_EAGER_HOST_PER_STEP_S
    if host_per_kernel_s < 0 or host_per_step_s < 0:
        raise SpecError("host_per_kernel_s and host_per_step_s must be >= 0")
    return host_per_kernel_s, host_per_step_s, note


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
    runtime: str,
    host_per_kernel_s: Any,
    host_per_step_s: Any,
    graph_launch_s: Any = DEFAULT_GRAPH_LAUNCH_S,
) -> dict[str, np.ndarray]:
    """Step, GPU and host time of many steps at once from their kernels' GPU times (arrays
    steps x kernels per block, see ``kernel_blocks``); the one formula ``predict_inference``
    and ``sweep_inference`` share.

        eager: step = max(queue(kernels, host per step, host per kernel),
                          host per step + kernels x host per kernel)
        graph: step = GPU time + one graph launch"""
    gpu = pre.sum(axis=-1) + layers * layer.sum(axis=-1) + post.sum(axis=-1)
    n = pre.shape[-1] + layers * layer.shape[-1] + post.shape[-1]
    if runtime == "eager":
        host = np.broadcast_to(host_per_step_s + n * np.asarray(host_per_kernel_s, dtype=float),
                               gpu.shape)  # fmt: skip
        # the step ends after the host returns (it records the end / samples the token)
        step = np.maximum(
            queue_time_blocks(pre, layer, layers, post, host_per_kernel_s, host_per_step_s), host
        )
    else:
        host = np.broadcast_to(np.asarray(graph_launch_s, dtype=float), gpu.shape)
        step = gpu + graph_launch_s
    return {"step": step, "gpu": gpu, "host": host, "kernels": np.asarray(n)}


def _defaults(
    model: ModelSpec, phase: str, seq: int | None, context: int | None
) -> tuple[int, int]:
    if phase == "prefill":
        seq = seq if seq is not None else min(2048, model.max_context)
        context = context if context is not None else seq
    elif phase == "decode":
        seq = seq if seq is not None else 1
        context = context if context is not None else min(2048, model.max_context)
    else:
        raise SpecError(f"phase must be 'prefill' or 'decode', got '{phase}'")
    if seq < 1 or context < seq:
        raise SpecError(f"need 1 <= seq <= context, got seq {seq}, context {context}")
    if context > model.max_context:
        raise UnsupportedError(
            f"context {context} exceeds {model.id}'s max_context {model.max_context}"
        )
    return seq, context


def predict_inference(
    model: ModelSpec | str,
    gpu: GPUSpec | str,
    phase: Phase = "decode",
    batch: int = 1,
    seq: int | None = None,
    context: int | None = None,
    dtype: str = "bf16",
    gpus: int = 1,
    tp: int | None = None,
    runtime: Runtime = "eager",
    calibration: Any = None,
    *,
    attention: AttentionImpl = "flash",
    fusion: Fusion | None = None,
    kv_cache: KVCache | None = None,
    gqa: GQA | None = None,
    host_per_kernel_s: float | None = None,
    host_per_step_s: float | None = None,
    graph_launch_s: float = DEFAULT_GRAPH_LAUNCH_S,
    op_times: Mapping[str, float] | None = None,
    stream_floor_s: float | None = None,
) -> InferenceResult:
    """Predict one prefill or decode step of ``model`` on ``gpu``.

    ``phase="prefill"``: ``batch`` prompts of ``seq`` tokens (context = seq, or more for a
    chunk after cached tokens); ``"decode"``: ``batch`` sequences each add ``seq`` (1) token
    attending to ``context`` tokens. ``gpus`` GPUs form ``gpus / tp`` replicas of ``tp``-way
    tensor parallelism (``tp`` defaults to ``gpus``); ``batch`` is per replica.
    ``runtime="eager"`` is Hugging Face transformers in eager PyTorch (unfused kernels,
    DynamicCache concat, no attention mask so SDPA reads K/V at ``kv_heads``, host launch
    overhead); ``"graph"`` a CUDA-graph engine (fused kernels, static cache, one graph launch).
    ``fusion``/``kv_cache`` override those choices. ``gqa`` (default ``"native"``, or
    ``"repeat"`` for ``runtime="graph", fusion="unfused", kv_cache="static"``: an HF model with
    a StaticCache captured in a CUDA graph, where HF builds a mask and calls ``repeat_kv``) says
    whether K/V are expanded to every query head before attention. ``host_per_kernel_s``
    replaces the eager host cost per kernel and ``host_per_step_s`` the per-step host time
    (default ``DEFAULT_EAGER_HOST_PER_STEP_S``; see the module docstring).
    ``stream_floor_s``: GPU time per small kernel back to back in a stream, replacing the
    isolated-kernel floor of every non-GEMM kernel (off by default). ``op_times`` replaces
    the op model's time of named layer ops by measured seconds per execution (e.g.
    ``{"lm_head": 2e-3}``): the step model (queue, host, the other ops) then runs on them.
    """
    check_counts(batch=batch, seq=seq, context=context, gpus=gpus, tp=tp)
    check_dtype(dtype)
    check_choice(phase, "phase", ("prefill", "decode"))
    spec = get_model(model)
    g = get_gpu(gpu)
    if runtime not in ("eager", "graph"):
        raise SpecError(f"runtime must be 'eager' or 'graph', got '{runtime}'")
    if batch < 1 or gpus < 1:
        raise SpecError(f"batch and gpus must be >= 1, got batch {batch}, gpus {gpus}")
    tp = gpus if tp is None else tp
    if gpus % tp:
        raise SpecError(f"gpus ({gpus}) must be a multiple of tp ({tp})")
    seq, context = _defaults(spec, phase, seq, context)
    fusion = fusion or ("unfused" if runtime == "eager" else "fused")
    kv_cache = kv_cache or ("concat" if runtime == "eager" else "static")
    if gqa is None:
        hf_static = runtime == "graph" and fusion == "unfused" and kv_cache == "static"
        gqa = "repeat" if hf_static else "native"
    ops = model_ops(spec, batch, seq, context, dtype=dtype, tp=tp, attention=attention,
                    fusion=fusion, kv_cache=kv_cache, logits="last", gqa=gqa)  # fmt: skip
    if stream_floor_s is not None and stream_floor_s < 0:
        raise SpecError(f"stream_floor_s must be >= 0, got {stream_floor_s}")
    timer = Timer(g, calibration, op_times, stream_floor_s=stream_floor_s)
    unknown = set(op_times or {}) - {e.name for e in (*ops.pre, *ops.layer, *ops.post)}
    if unknown:
        raise SpecError(f"op_times names no op of this step: {', '.join(sorted(unknown))}")
    pre, layer, post = timer.time_all(ops.pre), timer.time_all(ops.layer), timer.time_all(ops.post)
    breakdown = summarize([(pre, 1), (layer, spec.layers), (post, 1)])
    blocks = kernel_blocks(pre, layer, post)

    cal = timer.calibration
    notes = list(ops.notes)
    if cal is None:
        notes.append(DATASHEET_NOTE)
    if op_times:
        notes.append(f"measured times used for: {', '.join(sorted(op_times))}")
    if stream_floor_s is not None:
        notes.append(f"in-stream floor: non-GEMM kernels cost {stream_floor_s * 1e6:.3g} us each "
                     "back to back instead of the isolated-kernel floor")  # fmt: skip
    host_per_kernel_s, host_per_step_s, host_note = host_costs(
        runtime, cal, host_per_kernel_s, host_per_step_s
    )
    notes += [host_note] if host_note else []
    pre_k, layer_k, post_k = (np.array([b], dtype=float) for b in blocks)  # one step
    times = step_times(pre_k, layer_k, spec.layers, post_k, runtime=runtime,
                       host_per_kernel_s=host_per_kernel_s, host_per_step_s=host_per_step_s,
                       graph_launch_s=graph_launch_s)  # fmt: skip
    step, gpu_time, host_time = (float(times[k][0]) for k in ("step", "gpu", "host"))
    n_kernels = int(times["kernels"])
    if runtime == "graph":
        host_per_kernel_s = host_per_step_s = 0.0
    host_overhead = max(0.0, step - gpu_time)

    shares: dict[str, float] = {}
    for o in breakdown:
        shares[o.bound] = shares.get(o.bound, 0.0) + o.time_s
    shares = {k: v / gpu_time for k, v in shares.items()} if gpu_time else {}
    gpu_bound = max(shares, key=shares.__getitem__) if shares else "memory"
    # host-bound: the host's issue time exceeds the GPU's busy time (the queue runs dry)
    bound = "host" if host_time > gpu_time and runtime == "eager" else gpu_bound

    b = BYTES_PER_ELEMENT[dtype]
    s = tp_shape(spec, tp)
    kv_bytes = 2.0 * spec.layers * s.kv_heads * spec.head_dim * b * spec.attended(context) * batch
    replicas = gpus // tp
    tokens = batch * seq
    return InferenceResult(
        model=spec.id, gpu=g.id, phase=phase, batch=batch, seq=seq, context=context, dtype=dtype,
        tp=tp, gpus=gpus, replicas=replicas, runtime=runtime, fusion=fusion, kv_cache=kv_cache,
        attention=attention, gqa=gqa, calibration=timer.label, step_time_s=step, gpu_time_s=gpu_time,
        host_time_s=host_time, host_overhead_s=host_overhead, host_per_kernel_s=host_per_kernel_s,
        host_per_step_s=host_per_step_s, stream_floor_s=stream_floor_s,
        tokens_per_s=replicas * tokens / step,
        time_to_first_token_s=step if phase == "prefill" else None,
        time_per_output_token_s=step if phase == "decode" else None,
        kernels_per_step=n_kernels,
        kernels_per_layer=sum(t.launches for t in layer),
        flops_per_step=sum(o.flops for o in breakdown),
        bytes_per_step=sum(o.bytes for o in breakdown),
        weights_bytes=spec.param_count() * b / tp,
        kv_cache_bytes=kv_bytes,
        bound=bound, bound_shares=shares, breakdown=tuple(breakdown), notes=tuple(notes),
    )  # fmt: skip
