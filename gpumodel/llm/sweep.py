"""Vectorised LLM planning: inference and training steps over grids of batch, context/seq, tp,
pp, dp and GPUs, with memory, fit and cost per point, as one table.

    r = gm.sweep_inference("llama-3-8b", ["h100", "h200"], batch=[1, 8, 64],
                           context=[1024, 4096], tp=[1, 2], dp=[1, 4], runtime="fused-graph")
    r["time_s"], r["fits"], r["usd_per_million_tokens"]       # numpy columns, one row a point
    gm.sweep_training("llama-2-7b", "h100", tp=[1, 2, 4], pp=[1, 2], dp=[8, 16, 32])

Same model as the scalar functions, not a copy of it. A point's step time is
``predict_inference`` / ``predict_training_step``'s, to rounding (tests hold them equal to
1e-9 relative point by point: tests/test_llm_sweep.py, tests/test_sweep_arrays.py). An
inference sweep builds the step's ops once per tp over numpy arrays of the points' batch, seq
and context (``layers.model_ops`` with arrays: ``ops.base.build``), so each op's ``kernels``
give arrays of FLOPs and bytes; ``vectorised.op_kernel_times`` times them with the terms of
``predict.kernel_time`` over the arrays (efficiencies, tile quantization, the block
scheduler's tail, Little's law, the sustained clock, the family floor, the in-stream floor),
and ``collectives.time_array`` the tensor-parallel all-reduces over their sizes. Points whose
kernels differ (decode's split-KV and one-split attention) are split and joined; where the
ops do not build over arrays (MoE: the active experts change an op's count) the sweep times
each distinct step through ``Timer`` (the scalar op model). The step is then assembled as
arrays with the scalar functions' own formulas (``inference.step_times``, which holds the
eager host/GPU queue ``_timing.queue_time_blocks``; ``training.combine_step``). A training
sweep times each distinct layer once per (tp, micro-batch, seq) and combines the layouts as
arrays.

The grid (``grid=True``, default) is the Cartesian product of the values given, in the order
GPU, tp, pp, dp, batch, seq, context; ``grid=False`` broadcasts the arrays against each other
instead (numpy rules), for a list of points. Bad values (batch 0, a tp that does not split the
heads, a context past the model's) raise the scalar function's error.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from gpumodel._validators import (
    GPU_ARGS,
    MAX_ELEMENTS,
    MAX_GPUS,
    MAX_TOKENS,
    _show,
    check_args,
    check_bool,
    check_choice,
    check_dtype,
    check_int,
    check_number,
)
from gpumodel.calibration import (
    calibration_label,
    calibration_short,
    choose_calibration,
    mixed_calibration_warning,
    mixed_collectives_warning,
)
from gpumodel.errors import SpecError, UnsupportedError
from gpumodel.hostprofile import HostProfile, host_dict, load_host
from gpumodel.llm._comm import Collective
from gpumodel.llm._timing import (
    KEEP_ISOLATED_FLOOR,
    Timed,
    Timer,
    dram_bytes,
    keeps_fixed_work,
    step_activity,
    step_traffic,
    tensor_roof_s,
)
from gpumodel.llm.ddp import ddp_host_s, is_ddp, with_ddp_host
from gpumodel.llm.fsdp import fsdp_unit_host_s, is_fsdp, with_unit_host
from gpumodel.llm.inference import (
    _defaults,
    host_terms,
    kernel_blocks,
    llama_layer_kernels,
    moe_layer_kernels,
    step_times,
)
from gpumodel.llm.layers import (
    EXPERTS,
    AttentionImpl,
    Experts,
    Fusion,
    LayerOp,
    expert_loop_syncs,
    in_flight_microbatches,
    model_ops,
    stage_layers,
    step_attention,
    tp_shape,
)
from gpumodel.llm.memory import Policy, Recompute, check_policy_dtype, memory_of
from gpumodel.llm.models import ModelSpec, get_model
from gpumodel.llm.ranks import rank_host
from gpumodel.llm.runtimes import (
    check_eager_options,
    check_hf_tensor_parallel,
    for_phase,
    get_runtime,
    kernel_flags,
    runtime_attention,
    sdpa_graph_build_s,
)
from gpumodel.llm.training import (
    combine_step,
    default_global_batch,
    hooks_host,
    model_flops_per_token,
    p2p_time,
    stage_times,
    sync_times,
    trace_fragmentation,
    training_host,
    training_memory,
)
from gpumodel.model.power import sustained_clock_ratio_array
from gpumodel.ops.base import MixedKernels
from gpumodel.ops.collectives import time_array
from gpumodel.predict import dram_power, empty_kernel_s, power_watts
from gpumodel.prediction import KernelPrediction
from gpumodel.prices import (
    Price,
    PriceArg,
    mixed_price_warning,
    price_for,
    resolve_price_keys,
)
from gpumodel.specs import GPUSpec, get_gpu
from gpumodel.vectorised import op_kernel_times

# the largest grid one call builds: at the 8,000-30,000 points a second of a 2-core laptop
# (benchmarks/bench_llm_sweep.py; distinct eager steps are the slow end) about half a minute,
# ~40 MB of rows (~150 bytes each). 10^7 ran past 100 s and 3.7 GB (fuzz, 2026-11-30).
MAX_POINTS = 250_000


@dataclass(frozen=True)
class SweepResult:
    """A table of points (``table``: a numpy structured array, one row a point) and what every
    row's numbers rest on: each GPU's calibration (full label) and price (provider, date,
    source), and a warning when the GPUs mix calibrated and datasheet-only models."""

    kind: Literal["inference", "training"]
    model: str
    table: np.ndarray
    calibrations: dict[str, str]
    prices: dict[str, Price | None]
    warnings: tuple[str, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, column: str) -> np.ndarray:
        return self.table[column]

    def __len__(self) -> int:
        return len(self.table)

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(self.table.dtype.names or ())

    def records(self) -> list[dict[str, Any]]:
        """Rows as dicts of Python values (a cost without a price is None)."""
        names = self.columns
        out = []
        for row in self.table.tolist():
            out.append({k: (None if isinstance(v, float) and math.isnan(v) else v)
                        for k, v in zip(names, row)})  # fmt: skip
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "model": self.model,
            "settings": self.settings,
            "columns": list(self.columns),
            "rows": self.records(),
            "calibrations": self.calibrations,
            "prices": {g: p.to_dict() if p else None for g, p in self.prices.items()},
            "warnings": list(self.warnings),
        }


def _ints(name: str, value: Any) -> np.ndarray:
    """Whole numbers within the shared bounds (gpumodel._validators): GPU counts (tp, pp, dp)
    at most 10**6, sizes at most 2**53; the scalar functions take the same."""
    arr = np.atleast_1d(np.asarray(value))
    if arr.size == 0:
        raise SpecError(f"{name}: no values")
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise SpecError(f"{name} must be whole numbers, got {_show(value)}")
    elif arr.dtype.kind not in "iu":
        raise SpecError(f"{name} must be integers, got {_show(value)}")
    if np.any(arr < 1):
        raise SpecError(f"{name} must be >= 1, got {_show(value)}")
    top = MAX_GPUS if name in GPU_ARGS else MAX_ELEMENTS
    if np.any(arr > top):
        raise SpecError(f"{name} must be <= {top:,}, got {_show(value)}")
    return arr.astype(np.int64)


def _gpus(gpu: GPUSpec | str | Iterable[GPUSpec | str]) -> list[GPUSpec]:
    if isinstance(gpu, (str, GPUSpec)):
        items = [gpu]
    elif isinstance(gpu, Iterable):
        items = list(gpu)
    else:
        raise SpecError(f"gpu must be a GPU name, a spec or a list of them, got {_show(gpu)}")
    if not items:
        raise SpecError("no GPU given")
    return [get_gpu(g) for g in items]


def _points(axes: dict[str, np.ndarray], grid: bool) -> dict[str, np.ndarray]:
    """The grid's points, one flat array per axis (Cartesian product, or broadcast)."""
    if grid:
        size = math.prod(a.size for a in axes.values())
        if size > MAX_POINTS:
            raise SpecError(f"the grid has {size:,} points, more than {MAX_POINTS:,}: use a "
                            "coarser step (e.g. 1:8192:x2) or split it")  # fmt: skip
        mesh = np.meshgrid(*(a.ravel() for a in axes.values()), indexing="ij")
        return {k: m.ravel() for k, m in zip(axes, mesh)}
    try:
        arrays = np.broadcast_arrays(*axes.values())
    except ValueError as exc:
        raise SpecError(f"grid=False: the arrays do not broadcast ({exc})") from None
    if arrays[0].size > MAX_POINTS:
        raise SpecError(f"{arrays[0].size:,} points, more than {MAX_POINTS:,}; split them")
    return {k: a.ravel() for k, a in zip(axes, arrays)}


def _costs(price: Price | None, gpus: np.ndarray, tokens_per_s: np.ndarray) -> tuple:
    if price is None:
        nan = np.full(gpus.shape, np.nan)
        return nan, nan, nan
    usd = np.full(gpus.shape, price.usd_per_gpu_hour)
    per_hour = gpus * usd
    return usd, per_hour, per_hour / (tokens_per_s * 3600.0) * 1e6


def _table(columns: dict[str, np.ndarray]) -> np.ndarray:
    dtypes = []
    for name, col in columns.items():
        kind = col.dtype.kind
        dt = (col.dtype if kind in "U" else np.dtype(bool) if kind == "b"
              else np.dtype(np.int64) if kind in "iu" else np.dtype(float))  # fmt: skip
        dtypes.append((name, dt))
    n = len(next(iter(columns.values())))
    out = np.empty(n, dtype=dtypes)
    for name, col in columns.items():
        out[name] = col
    return out


def _paced_by_ranks(host: HostProfile | None, ranks: list[int]) -> dict[int, HostProfile | None]:
    """``host`` as the slowest rank of a job of each size in ``ranks`` runs it."""
    return {r: rank_host(host, r) for r in ranks}


def _group_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct rows of an integer matrix and, for each row, the index of its distinct row."""
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    return uniq, inverse.ravel()


def sweep_inference(
    model: ModelSpec | str,
    gpu: GPUSpec | str | Iterable[GPUSpec | str],
    *,
    phase: Literal["prefill", "decode"] = "decode",
    batch: Any = 1,
    seq: Any = None,
    context: Any = None,
    tp: Any = 1,
    pp: Any = 1,
    dp: Any = 1,
    dtype: str = "bf16",
    runtime: str | None = None,
    attention: AttentionImpl | None = None,
    fusion: Fusion | None = None,
    kv_cache: Any = None,
    gqa: Any = None,
    calibration: Any = None,
    calibration_from: str | None = None,
    host: HostProfile | str | None = None,
    host_per_kernel_s: float | None = None,
    host_per_step_s: float | None = None,
    graph_launch_s: float | None = None,
    stream_floor_s: float | None = None,
    price: PriceArg = None,
    grid: bool = True,
    new_shapes: bool = False,
    experts: Experts = "grouped_mm",
) -> SweepResult:
    """``predict_inference`` over a grid: each point is a replica of ``tp`` GPUs stepping
    ``batch`` sequences of ``seq`` new tokens attending to ``context``, ``dp`` replicas
    (``gpus = tp x dp``). Columns: gpu, calibration (short; full label in ``calibrations``),
    batch, seq, context, tp, pp, dp, gpus, time_s (the step: TTFT for prefill, TPOT for decode),
    gpu_time_s, host_time_s, tokens_per_s (all replicas), memory_bytes (per GPU: weights, KV
    cache of ``context`` tokens, buffers, overhead; ``gpumodel.memory``), capacity_bytes, fits,
    usd_per_gpu_hour, usd_per_hour, usd_per_million_tokens (NaN without a price).

    ``runtime`` (default ``DEFAULT_RUNTIME``), ``host`` and ``new_shapes`` as
    ``predict_inference``. Points
    whose memory does not fit are kept, with ``fits`` False (the sweep answers "what fits";
    ``predict_inference`` refuses them unless ``allow_oversubscribe``).

    ``pp`` is accepted for symmetry with ``sweep_training`` but must be 1: the inference model
    has no pipeline-parallel step."""
    spec = get_model(model)
    rt = get_runtime(runtime)
    hp = load_host(host)
    check_choice(phase, "phase", ("prefill", "decode"))
    check_choice(experts, "experts", EXPERTS)
    check_dtype(dtype)
    check_bool(grid, "grid")
    check_bool(new_shapes, "new_shapes")
    # the same declared constraints as predict_inference's
    check_args(attention="flash" if attention is None else attention, fusion=fusion,
               kv_cache=kv_cache, gqa=gqa, host_per_kernel_s=host_per_kernel_s,
               host_per_step_s=host_per_step_s, graph_launch_s=graph_launch_s,
               stream_floor_s=stream_floor_s)  # fmt: skip
    gpus = _gpus(gpu)
    pp_arr = _ints("pp", pp)
    if np.any(pp_arr != 1):
        raise UnsupportedError("inference sweeps take tp and dp (replicas); pipeline-parallel "
                               "inference (pp > 1) is not modelled")  # fmt: skip
    seq_default, ctx_default = _defaults(spec, phase, None, None)
    seq_arr = _ints("seq", seq_default if seq is None else seq)
    ctx_given = context is not None
    ctx_arr = _ints("context", context) if ctx_given else np.array([0])
    axes = {"tp": _ints("tp", tp), "pp": pp_arr, "dp": _ints("dp", dp),
            "batch": _ints("batch", batch), "seq": seq_arr, "context": ctx_arr}  # fmt: skip
    pts = _points(axes, grid)
    if not ctx_given:  # the scalar's default: the prompt (prefill) or min(2048, max) (decode)
        pts["context"] = (
            pts["seq"].copy() if phase == "prefill" else np.full_like(pts["seq"], ctx_default)
        )
    elif phase == "prefill" and seq is None:  # the scalar's default: a prompt of the context
        pts["seq"] = pts["context"].copy()
    rt = for_phase(rt, phase)
    check_eager_options(rt, phase, new_shapes, host_per_kernel_s, host_per_step_s)
    check_hf_tensor_parallel(rt, spec.id, spec.kv_heads, pts["tp"])
    fusion, kv_cache, gqa = kernel_flags(rt, fusion, kv_cache, gqa, phase)
    if stream_floor_s is not None and stream_floor_s < 0:
        raise SpecError(f"stream_floor_s must be >= 0, got {stream_floor_s}")
    floor = stream_floor_s
    if floor is None and rt.host != "eager":
        floor = hp.in_graph_kernel_s
    price = resolve_price_keys(price, used=gpus)

    n = len(pts["tp"])
    keys = np.stack([pts["tp"], pts["batch"], pts["seq"], pts["context"]], axis=1)
    uniq, inverse = _group_rows(keys)
    _check_shapes(spec, phase, uniq)
    parts: list[dict[str, np.ndarray]] = []
    calibrations: dict[str, str] = {}
    prices: dict[str, Price | None] = {}
    # the ops of a step depend on the shape and the attention kernel, not on the GPU: built
    # once per kernel the GPUs run (``runtime_attention``), over arrays of batch, seq and
    # context for each tp (``ops.base.build``)
    # per GPU: the kernel each runs (the runtime's own where none was named)
    kernel_of = {g.id: step_attention(runtime_attention(rt, g.compute_capability, attention),
                                      attention, dtype) for g in gpus}  # fmt: skip
    built: dict[str, tuple[dict[str, Any], list[tuple[np.ndarray, Any]]]] = {}
    for att in set(kernel_of.values()):
        flags = {"dtype": dtype, "attention": att, "fusion": fusion, "kv_cache": kv_cache,
                 "logits": "last", "gqa": gqa, "experts": experts}  # fmt: skip
        built[att] = (flags, _shape_groups(spec, uniq, flags))
    # bytes per GPU do not depend on the GPU (only its capacity does) nor on which fused
    # attention kernel runs (neither keeps the scores): once per layout
    need = np.array([memory_of(spec, gpus[0], batch=b, seq=c, dtype=dtype, tp=t, phase=phase,
                               attention=next(iter(built)), prefill_tokens=b * s).total_bytes
                     for t, b, s, c in uniq.tolist()])  # fmt: skip
    for g in gpus:
        flags, groups = built[kernel_of[g.id]]
        timer = Timer(g, choose_calibration(g, calibration, calibration_from, gpus=len(gpus)),
                      stream_floor_s=floor, graph=rt.host != "eager")  # fmt: skip
        calibrations[g.id] = timer.label
        m = len(uniq)
        step, gpu_t, host_t = np.empty(m), np.empty(m), np.empty(m)
        mem, cap, fits = np.empty(m), np.empty(m), np.empty(m, dtype=bool)
        build = sdpa_graph_build_s(rt, g.compute_capability, flags["attention"],
                                   hp.graph_build_s, new_shapes)  # fmt: skip
        hosts = {"host_per_kernel_s": host_per_kernel_s, "host_per_step_s": host_per_step_s,
                 "graph_launch_s": graph_launch_s, "host_given": host is not None,
                 "graph_build_s": build}  # fmt: skip
        for idx, ops in groups:
            times = None
            if ops is not None:  # the points of a group run the same kernels: the first's
                at = {**hosts, "llama_layer": _llama_layer(spec, g, uniq[idx[0]], flags)}
                times = _array_step(spec, timer, rt, hp, ops, len(idx), flags, at)
            if times is None:  # one step at a time (MoE, repeated K/V, mixed kernels)
                times = _scalar_steps(spec, timer, rt, hp, uniq[idx], flags, hosts)
            step[idx], gpu_t[idx], host_t[idx] = times["step"], times["gpu"], times["host"]
        mem[:], cap[:] = need, g.memory.capacity_bytes
        fits[:] = need <= cap  # MemoryBreakdown.fits
        if not np.all(np.isfinite(step) & (step >= 0)):
            raise SpecError(f"{spec.id} on {g.id}: the model gives a non-finite step time; the "
                            "inputs are outside what the model covers (docs/hardening.md#bounds)")  # fmt: skip
        t_step = step[inverse]
        n_gpus = pts["tp"] * pts["dp"]
        tokens_per_s = pts["dp"] * (pts["batch"] * pts["seq"]) / t_step
        prices[g.id] = price_for(g, price)
        usd, per_hour, per_m = _costs(prices[g.id], n_gpus, tokens_per_s)
        parts.append({
            "gpu": np.full(n, g.id), "calibration": np.full(n, calibration_short(timer.label)),
            **{k: pts[k] for k in ("batch", "seq", "context", "tp", "pp", "dp")},
            "gpus": n_gpus, "time_s": t_step, "gpu_time_s": gpu_t[inverse],
            "host_time_s": host_t[inverse], "tokens_per_s": tokens_per_s,
            "memory_bytes": mem[inverse], "capacity_bytes": cap[inverse], "fits": fits[inverse],
            "usd_per_gpu_hour": usd, "usd_per_hour": per_hour, "usd_per_million_tokens": per_m,
        })  # fmt: skip
    columns = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    warnings = (*mixed_calibration_warning(calibrations),
                *mixed_collectives_warning(gpus, columns["tp"], calibration_from is not None),
                *mixed_price_warning(prices))
    return SweepResult(
        kind="inference", model=spec.id, table=_table(columns), calibrations=calibrations,
        prices=prices, warnings=warnings,
        settings={"phase": phase, "runtime": rt.name, "dtype": dtype, "fusion": fusion,
                  "kv_cache": kv_cache, "gqa": gqa, "new_shapes": new_shapes,
                  "host": host_dict(hp), "attention": kernel_of},
    )  # fmt: skip


def sweep_training(
    model: ModelSpec | str,
    gpu: GPUSpec | str | Iterable[GPUSpec | str],
    *,
    micro_batch: Any = 1,
    seq: Any = None,
    tp: Any = 1,
    pp: Any = 1,
    dp: Any = 1,
    zero: int = 1,
    global_batch: int | None = None,
    dtype: str = "bf16",
    recompute: Recompute = "selective",
    fusion: Fusion = "fused",
    attention: AttentionImpl | None = None,
    calibration: Any = None,
    calibration_from: str | None = None,
    tokens: float | None = None,
    price: PriceArg = None,
    grid: bool = True,
    policy: Policy | None = None,
    host: HostProfile | str | None = None,
    fragmentation: float | None = None,
    virtual_stages: int = 1,
) -> SweepResult:
    """``predict_training_step`` over a grid of layouts: ``gpus = tp x pp x dp`` GPUs,
    micro-batches of ``micro_batch`` sequences of ``seq`` tokens, ``global_batch`` sequences per
    step (default ~4M tokens, rounded up to a multiple of dp x micro-batch). Columns: gpu,
    calibration, micro_batch, seq, tp, pp, dp, gpus, global_batch, microbatches, time_s (the
    step), tokens_per_s, mfu, memory_bytes (per GPU, ZeRO stage ``zero``), capacity_bytes,
    fits, usd_per_gpu_hour, usd_per_hour; with ``tokens``: train_time_s (whole steps to see
    ``tokens`` tokens), days, cost_usd. Layouts the scalar rejects (pp not dividing the layers,
    a global batch that dp x micro-batch does not divide) raise its error. ``policy``,
    ``host`` and ``fragmentation`` as ``predict_training_step``. ``virtual_stages`` v: the
    interleaved schedule on each layout it applies to (pp > 1, micro-batches a multiple of
    pp, at most a chunk a layer of the stage), plain 1F1B on the others; the column
    ``virtual_stages`` says which."""
    spec = get_model(model)
    # the same declared constraints as predict_training_step's
    check_args(zero=zero, recompute=recompute, fusion=fusion, policy=policy,
               attention="flash" if attention is None else attention,
               fragmentation=fragmentation, global_batch=global_batch)  # fmt: skip
    check_bool(grid, "grid")
    hp = (
        load_host(host) if fusion == "unfused" or host is not None else None
    )  # a given host is checked
    hp = hp if fusion == "unfused" else None
    check_dtype(dtype)
    check_policy_dtype(policy, dtype)
    if tokens is not None:
        tokens = check_number(tokens, "tokens", gt=0, le=MAX_TOKENS)
    gpus = _gpus(gpu)
    seq_default = min(spec.max_context, 8192)
    axes = {"tp": _ints("tp", tp), "pp": _ints("pp", pp), "dp": _ints("dp", dp),
            "micro_batch": _ints("micro_batch", micro_batch),
            "seq": _ints("seq", seq_default if seq is None else seq)}  # fmt: skip
    pts = _points(axes, grid)
    bad = sorted({int(p) for p in pts["pp"] if p > spec.layers})
    if bad:
        raise SpecError(f"{spec.id}: pp={bad[0]} stages for {spec.layers} layers")
    for t in np.unique(pts["tp"]).tolist():
        tp_shape(spec, t)
    per_step = pts["dp"] * pts["micro_batch"]
    if global_batch is None:
        gb = default_global_batch(pts["seq"], per_step)
    else:
        gb = np.full(per_step.shape, _ints("global_batch", global_batch)[0])
        if np.any(gb % per_step):
            i = int(np.argmax(gb % per_step != 0))
            raise SpecError(f"global batch {int(gb[i])} is not a multiple of dp x micro_batch "
                            f"= {int(per_step[i])}")  # fmt: skip
    m = gb // per_step
    check_int(virtual_stages, "virtual_stages", le=MAX_GPUS)
    pp_ = pts["pp"]
    layers = stage_layers(spec.layers, pp_)
    v = np.where((pp_ > 1) & (m % pp_ == 0) & (virtual_stages <= layers), virtual_stages, 1)
    price = resolve_price_keys(price, used=gpus)
    n = len(m)
    parts: list[dict[str, np.ndarray]] = []
    calibrations: dict[str, str] = {}
    prices: dict[str, Price | None] = {}
    need_by_layout: dict[tuple, float] = {}  # bytes per GPU by layout and fragmentation
    for g in gpus:
        peak = g.peak_flops(dtype, "tensor") or g.peak_flops(dtype, "vector") or 0.0
        if not peak:
            raise UnsupportedError(f"{g.id} has no {dtype} rate in its spec")
        timer = Timer(g, choose_calibration(g, calibration, calibration_from, gpus=len(gpus)))
        calibrations[g.id] = calibration_label(timer.calibration)
        hp_g = training_host(host, timer.calibration, fusion)  # a traced host per calibration
        ranks = pts["tp"] * pts["pp"] * pts["dp"]
        runiq, rinv = np.unique(ranks, return_inverse=True)
        paced = _paced_by_ranks(hp_g, runiq.tolist())  # the slowest rank's host per job size
        frag = fragmentation if fragmentation is not None else trace_fragmentation(
            timer.calibration)  # fmt: skip
        # per (tp, micro-batch, seq): one layer's, the head's and the embedding's op times
        fields = ("layer_fwd_s", "head_fwd_s", "pre_fwd_s", "layer_bwd_s", "head_bwd_s",
                  "layer_selective_s", "layer_comm_fwd_s", "layer_comm_bwd_s", "layer_host_s",
                  "head_host_s", "pre_host_s", "layer_synced_s")  # fmt: skip
        skey = np.stack([pts["tp"], pts["micro_batch"], pts["seq"], ranks], axis=1)
        suniq, sinv = _group_rows(skey)
        svals = np.empty((len(suniq), len(fields)))
        for i, (t, b, s, r) in enumerate(suniq.tolist()):
            st = stage_times(spec, g, timer, b, s, t, dtype, fusion, attention, policy, paced[r])
            svals[i] = [getattr(st, f) for f in fields]
        stage = _Stage(**{f: svals[sinv, j] for j, f in enumerate(fields)})
        most_dp = int(pts["dp"].max())  # a layout's hooks are added where dp > 1
        fsdp_hp = hooks_host(hp_g, timer.calibration, "fsdp")
        if fsdp_hp is not None and is_fsdp(fusion, zero, most_dp):  # FSDP's per-unit hooks
            hooks = paced if fsdp_hp is hp_g else _paced_by_ranks(fsdp_hp, runiq.tolist())
            unit_s = np.array([fsdp_unit_host_s(hooks[r]) for r in runiq.tolist()])
            stage = with_unit_host(stage, np.where(pts["dp"] > 1, unit_s[rinv.ravel()], 0.0))
        ddp_hp = hooks_host(hp_g, timer.calibration, "ddp")
        if ddp_hp is not None and is_ddp(fusion, zero, most_dp):  # DDP's host work
            hooks = paced if ddp_hp is hp_g else _paced_by_ranks(ddp_hp, runiq.tolist())
            tpp = np.stack([pts["tp"], pts["pp"], ranks], axis=1)
            tuniq, tinv = _group_rows(tpp)
            ddp_s = np.array([ddp_host_s(spec, hooks[r], t, p)
                              for t, p, r in tuniq.tolist()])[tinv]  # fmt: skip
            stage = with_ddp_host(stage, np.where(pts["dp"] > 1, ddp_s, 0.0))
        # pipeline sends per (tp, pp, tokens); gradient sync and optimizer per (tp, pp, dp)
        tokens_mb = pts["micro_batch"] * pts["seq"]
        puniq, pinv = _group_rows(np.stack([pts["tp"], pts["pp"], tokens_mb], axis=1))
        p2p = np.array([p2p_time(spec, timer, tok, t, p, dtype)
                        for t, p, tok in puniq.tolist()])[pinv]  # fmt: skip
        duniq, dinv = _group_rows(np.stack([pts["tp"], pts["pp"], pts["dp"]], axis=1))
        dvals = np.array([sync_times(spec, timer, t, p, d, zero, dtype, policy, paced[t * p * d],
                                     fusion)[:5]
                          for t, p, d in duniq.tolist()]).reshape(-1, 5)  # fmt: skip
        res = combine_step(stage, layers, pts["pp"], m, recompute, p2p,
                           *(dvals[dinv, j] for j in range(5)), v)  # fmt: skip
        step = res["step"]
        # memory per (tp, pp, dp, micro-batch, seq, micro-batches in flight, chunks a stage)
        # (whether gradients accumulate over micro-batches: min(m, 2))
        # the fewest micro-batches that keep as many in flight: more hold no more
        held = np.ceil(in_flight_microbatches(pts["pp"], m, v)).astype(int)
        mkey = np.stack([pts["tp"], pts["pp"], pts["dp"], pts["micro_batch"], pts["seq"],
                         held, np.minimum(m, 2), v], axis=1)  # fmt: skip
        muniq, minv = _group_rows(mkey)
        need = np.empty(len(muniq))
        for i, (t, p, d, b, s, mb, acc, vs) in enumerate(muniq.tolist()):
            key = (t, p, d, b, s, mb, acc, vs, frag)  # bytes do not depend on the GPU
            if key not in need_by_layout:
                need_by_layout[key] = training_memory(
                    spec, g, micro_batch=b, seq=s, dtype=dtype, tp=t, pp=p, dp=d, zero=zero,
                    recompute=recompute, microbatches=mb, fusion=fusion, policy=policy,
                    fragmentation=frag, accumulation=int(acc),
                    virtual_stages=vs).total_bytes  # fmt: skip
            need[i] = need_by_layout[key]
        cap = g.memory.capacity_bytes
        n_gpus = pts["tp"] * pts["pp"] * pts["dp"]
        tokens_step = gb * pts["seq"]
        seqs, seq_inv = np.unique(pts["seq"], return_inverse=True)  # once per distinct seq
        flops_token = np.array([model_flops_per_token(spec, s) for s in seqs.tolist()])[seq_inv]
        tokens_per_s = tokens_step / step
        prices[g.id] = price_for(g, price)
        usd, per_hour, _ = _costs(prices[g.id], n_gpus, tokens_per_s)
        cols = {
            "gpu": np.full(n, g.id), "calibration": np.full(n, calibration_short(timer.label)),
            "micro_batch": pts["micro_batch"], "seq": pts["seq"], "tp": pts["tp"],
            "pp": pts["pp"], "dp": pts["dp"], "virtual_stages": v, "gpus": n_gpus,
            "global_batch": gb,
            "microbatches": m, "time_s": step, "tokens_per_s": tokens_per_s,
            "mfu": tokens_step * flops_token / (step * n_gpus * peak),
            "memory_bytes": need[minv], "capacity_bytes": np.full(n, cap),
            "fits": need[minv] <= cap, "usd_per_gpu_hour": usd,
            "usd_per_hour": per_hour,
        }  # fmt: skip
        if tokens is not None:
            steps = np.ceil(tokens / tokens_step)
            train_s = steps * step
            cols.update({"train_time_s": train_s, "days": train_s / 86400.0,
                         "cost_usd": n_gpus * train_s / 3600.0 * usd})  # fmt: skip
        parts.append(cols)
    columns = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    warnings = (*mixed_calibration_warning(calibrations),
                *mixed_collectives_warning(gpus, columns["tp"], calibration_from is not None),
                *mixed_price_warning(prices))
    return SweepResult(
        kind="training", model=spec.id, table=_table(columns), calibrations=calibrations,
        prices=prices, warnings=warnings,
        settings={"zero": zero, "recompute": recompute, "dtype": dtype, "fusion": fusion,
                  "attention": attention, "tokens": tokens, "policy": policy,
                  "host": host_dict(hp) if hp else None},
    )  # fmt: skip


def _check_shapes(spec: ModelSpec, phase: str, shapes: np.ndarray) -> None:
    """The scalar's checks of (tp, batch, seq, context) rows: its error for the first bad one."""
    seq, ctx = shapes[:, 2], shapes[:, 3]
    bad = (ctx < seq) | (ctx > spec.max_context)
    if np.any(bad):
        _t, _b, s, c = shapes[int(np.argmax(bad))].tolist()
        _defaults(spec, phase, s, c)
    for t in np.unique(shapes[:, 0]).tolist():
        tp_shape(spec, t)


def _shape_groups(
    spec: ModelSpec, uniq: np.ndarray, flags: dict[str, Any]
) -> list[tuple[np.ndarray, Any]]:
    """(row indices of ``uniq``, their ops built over arrays) per tp; None where the rows do
    not build together (``_scalar_steps`` then prices them one at a time)."""
    groups: list[tuple[np.ndarray, Any]] = []
    for t in np.unique(uniq[:, 0]).tolist():
        idx = np.flatnonzero(uniq[:, 0] == t)
        try:
            groups.append((idx, _array_ops(spec, uniq[idx], flags)))
        except MixedKernels:  # e.g. prompts both longer and shorter than a sliding window
            for s in np.unique(uniq[idx, 2]).tolist():
                sub = idx[uniq[idx, 2] == s]
                try:
                    groups.append((sub, _array_ops(spec, uniq[sub], flags)))
                except MixedKernels:
                    groups.append((sub, None))
    return groups


def _array_ops(spec: ModelSpec, shapes: np.ndarray, flags: dict[str, Any]) -> Any:
    """The step's ops over the arrays of batch, seq and context of ``shapes`` (rows tp, batch,
    seq, context; one tp), or None where they do not build over arrays: MoE (the number of
    active experts, an op's count, changes with the tokens). MixedKernels where the points
    run different ops (the caller splits them by seq)."""
    if spec.moe is not None:
        return None
    _tp, batch, seq, context = shapes.T
    return model_ops(spec, batch, seq, context, tp=int(shapes[0, 0]), **flags)


def _llama_layer(spec: ModelSpec, gpu: Any, shape: np.ndarray, flags: dict[str, Any]) -> Any:
    """``llama_layer_kernels`` at one (tp, batch, seq, context) row."""
    t, b, s, c = (int(x) for x in shape.tolist())
    rest = {k: v for k, v in flags.items() if k not in ("fusion", "experts")}
    return llama_layer_kernels(spec, flags["fusion"], gpu, b, s, c, tp=t, **rest)


def _moe_layer(spec: ModelSpec, gpu: Any, shape: np.ndarray, flags: dict[str, Any]) -> Any:
    """``moe_layer_kernels`` at one (tp, batch, seq, context) row."""
    t, b, s, c = (int(x) for x in shape.tolist())
    rest = {k: v for k, v in flags.items() if k != "fusion"}
    return moe_layer_kernels(spec, flags["fusion"], gpu, b, s, c, tp=t, **rest)


def _scalar_steps(spec, timer, rt, hp, shapes, flags, hosts) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    """Step times of shapes (rows tp, batch, seq, context) one at a time through ``Timer``
    (the scalar op model), combined as arrays; the sweep's path where ops do not build over
    arrays."""
    by_shape: dict[tuple[int, ...], list[tuple[int, tuple]]] = {}
    for i, (t, b, s, c) in enumerate(shapes.tolist()):
        ops = model_ops(spec, b, s, c, tp=t, **flags)
        # as predict_inference: the step's average tensor activity sets its clock
        at = timer.at_step((ops.pre, ops.layer, ops.post), spec.layers)
        timed = (at.time_all(ops.pre), at.time_all(ops.layer), at.time_all(ops.post))
        blocks = kernel_blocks(*timed)
        syncs = expert_loop_syncs(spec, b * s, flags["fusion"], flags["experts"])
        ht = host_terms(rt, hp, timer.calibration, timed, spec.layers, flags["fusion"], **hosts,
                        llama_layer=_llama_layer(spec, timer.gpu, np.array([t, b, s, c]), flags),
                        moe_layer=_moe_layer(spec, timer.gpu, np.array([t, b, s, c]), flags),
                        syncs=syncs)  # fmt: skip
        by_shape.setdefault(tuple(len(x) for x in blocks), []).append(
            (i, (*blocks, *ht.per_kernel, ht))
        )  # type: ignore[arg-type]
    out = {k: np.empty(len(shapes)) for k in ("step", "gpu", "host")}
    for rows in by_shape.values():
        idx = np.array([i for i, _ in rows])
        pre, layer, post, h_pre, h_layer, h_post = (
            np.array([blk[j] for _, blk in rows], dtype=float).reshape(len(rows), -1)
            for j in range(6))  # fmt: skip
        terms = [blk[6] for _, blk in rows]
        times = step_times(pre, layer, spec.layers, post, eager=terms[0].eager,
                           host_per_kernel_s=(h_pre, h_layer, h_post),
                           host_per_step_s=np.array([t.per_step_s for t in terms]),
                           graph_launch_s=np.array([t.launch_s for t in terms]),
                           serial=terms[0].serial)  # fmt: skip
        for k in out:
            out[k][idx] = times[k]
    return out


def _array_step(spec, timer, rt, hp, ops, n, flags, hosts) -> dict[str, np.ndarray] | None:  # type: ignore[no-untyped-def]
    """Step times of the ``n`` shapes of one tp whose ops were built over arrays of batch,
    seq and context (``ops``): every kernel timed over the arrays
    (``vectorised.op_kernel_times``), the host's costs (``host_terms``) from the kernels' kinds,
    names and launches, which the points share. None where they do not run the same kernels."""
    params = timer.params
    # as predict_inference: the step's average tensor activity at the max clock sets its clock
    reps, steps = (1, spec.layers, 1), (ops.pre, ops.layer, ops.post)
    try:
        iso = [[_entry_times(e, timer, params, n, "isolated") for e in b] for b in steps]
        roof_s = sum(r * sum(tensor_roof_s(e, timer.gpu, n) for e in b)
                     for r, b in zip(reps, steps))  # fmt: skip
        moved = sum(r * sum(dram_bytes(e, timer.gpu, n) for e in b)
                    for r, b in zip(reps, steps))  # fmt: skip
    except MixedKernels:
        return None
    gpu_s = sum(r * sum(sum(t for t, _, _ in ks) * e.count for e, ks in zip(b, kb))
                for r, b, kb in zip(reps, steps, iso))  # fmt: skip
    activity = step_activity(np.broadcast_to(gpu_s, (n,)), np.broadcast_to(roof_s, (n,)))
    dram = step_traffic(np.broadcast_to(gpu_s, (n,)), np.broadcast_to(moved, (n,)))
    mem_w = dram_power(params, timer.gpu, dram)
    # where the step's clock is the maximum at every point for every tensor dtype (fp8 draws
    # its own power: PowerParams.tensor_power_dtype_factor), its kernels take their isolated
    # times (predict.in_workload_time at ratio 1): the first pass is the answer
    factors = params.power.tensor_power_dtype_factor if params.power else {}
    limit = timer.gpu.tdp_watts
    at_max = all(
        watts is None
        or bool(np.all(sustained_clock_ratio_array(activity, limit, *watts, mem_w) == 1.0))
        for watts in {power_watts(params, timer.gpu, d) for d in (None, *factors)}
    )
    blocks, timed = [], []
    for i, entries in enumerate(steps):
        cols: list[np.ndarray] = []
        block = []
        for j, e in enumerate(entries):
            try:
                kernels = (iso[i][j] if at_max else
                           _entry_times(e, timer, params, n, activity=activity, dram=dram))  # fmt: skip
            except MixedKernels:
                return None
            cols += [
                np.broadcast_to(t / k, (n,)) for t, k, _ in kernels for _ in range(k)
            ] * e.count
            # what host_terms reads of a timed op: its entry, its kernels' names and launches
            block.append(Timed(e, tuple(KernelPrediction.model_construct(name=name, launches=k)
                                        for _, k, name in kernels)))  # fmt: skip
        blocks.append(np.stack(cols, axis=1) if cols else np.zeros((n, 0)))
        timed.append(block)
    ht = host_terms(rt, hp, timer.calibration, tuple(timed), spec.layers, flags["fusion"], **hosts)
    return step_times(blocks[0], blocks[1], spec.layers, blocks[2], eager=ht.eager,
                      host_per_kernel_s=tuple(np.array(h, dtype=float) for h in ht.per_kernel),
                      host_per_step_s=ht.per_step_s, graph_launch_s=ht.launch_s)  # fmt: skip


def _entry_times(
    e: LayerOp, timer: Timer, params: Any, n: int, condition: str = "in-workload",
    activity: Any = None, dram: Any = None,
) -> list[tuple]:  # fmt: skip
    """(time at every point, launches, name) of each kernel of one op built over arrays, under
    ``condition`` (and a step's ``activity`` and DRAM traffic ``dram`` per point)."""
    if isinstance(e.op, Collective) and e.op.nodes == 1:  # the collective model over sizes
        sizes = np.broadcast_to(np.asarray(e.op.bytes, dtype=float), (n,))
        launches = 1 if e.op.gpus > 1 else 0  # as _comm.collective_kernel
        op = timer.as_run(e.op)
        return [(time_array(op, timer.gpu, timer.calibration, sizes), launches, op.op_name)]
    if isinstance(e.op, Collective):  # across nodes: once per distinct size
        sizes, inverse = np.unique(np.broadcast_to(np.asarray(e.op.bytes), (n,)),
                                   return_inverse=True)  # fmt: skip
        kps = [timer.kernels(replace(e, op=type(e.op)(**{**e.op.__dict__, "bytes": float(v)})))[0]
               for v in sizes.tolist()]  # fmt: skip
        return [(np.array([k.time_s for k in kps])[inverse.ravel()], kps[0].launches, kps[0].name)]
    floor = timer.stream_floor_s if e.kind not in KEEP_ISOLATED_FLOOR else None
    empty = empty_kernel_s(params) if keeps_fixed_work(e.op) else None
    return op_kernel_times(e.op, timer.gpu, params, n, l2=e.l2, stream_floor_s=floor,
                           condition=condition, activity=activity, dram=dram,
                           stream_empty_s=empty)  # fmt: skip


@dataclass(frozen=True)
class _Stage:
    """StageTimes' sums as arrays over the points (what ``combine_step`` reads)."""

    layer_fwd_s: np.ndarray
    head_fwd_s: np.ndarray
    pre_fwd_s: np.ndarray
    layer_bwd_s: np.ndarray
    head_bwd_s: np.ndarray
    layer_selective_s: np.ndarray
    layer_comm_fwd_s: np.ndarray
    layer_comm_bwd_s: np.ndarray
    layer_host_s: np.ndarray
    head_host_s: np.ndarray
    pre_host_s: np.ndarray
    layer_synced_s: np.ndarray


__all__ = ["SweepResult", "sweep_inference", "sweep_training"]
