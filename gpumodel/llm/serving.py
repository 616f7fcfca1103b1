"""Serving plan: for each GPU type, the replicas, GPUs, latency and dollars to serve a request
rate, side by side, with the best buy marked.

Per GPU type:
  1. tp: every tensor-parallel size (1, 2, 4, 8) whose decode steady state of one request
     (weights + KV cache of prompt + output tokens + working buffers + overhead: ``memory(...,
     phase="decode")``, the accounting every command shares) fits is tried; the plan keeps
     the one that needs the fewest GPUs for the rate (the smallest that fits can leave no room
     for a batch: Llama-2-70B on one H200).
  2. max batch: the most concurrent requests whose decode steady state fits (``max_batch(...,
     phase="decode", seq=prompt + output)``: what ``gpumodel memory --phase decode`` says).
  3. For batches up to that, a continuous-batching replica (``runtime``, default
     ``fused-graph``: fused kernels, static/paged KV cache, CUDA graphs, as vLLM or
     TensorRT-LLM; docs/llm-runtimes.md; ``host`` the host profile) completes B requests per
     cycle of B prefills and ``output`` decode steps at batch B:

         cycle(B)   = B * t_prefill(prompt) + output * t_decode(B, context = prompt + output/2)
         TTFT       = t_prefill                          (no queueing delay)
         TPOT       = (cycle - t_prefill) / output        (decode steps + other requests' prefills)
         latency    = TTFT + output * TPOT = cycle
         throughput = B / cycle requests per second

     The capacity batch is the one with the highest throughput that meets the latency targets
     given (TTFT, TPOT, end-to-end), else the one closest to them (the smallest worst ratio of
     a time to its target).
  4. replicas = ceil(rate / capacity throughput); each replica then serves rate / replicas, and
     the batch it runs is the smallest whose throughput covers that (Little's law: requests in
     flight = arrival rate x latency, and B / cycle(B) is B over its latency): at 0.01 req/s a
     replica runs one request at a time, not its capacity batch. TTFT, TPOT and latency are the
     ones at that batch. GPUs = replicas * tp; $/hour = GPUs * price;
     $ per 1M tokens = $/hour / (rate * (prompt + output) * 3600) * 1e6 (prompt and output
     tokens both count; the output-token price is reported too).

The best buy is the feasible GPU with the lowest $ per 1M tokens that meets the targets.

Each option names the calibration its times come from. GPUs with a calibration get measured
efficiencies; the others the datasheet roofline, which is a different yardstick (on an H100 the
datasheet-only LLM step missed the measured one by 24% for prefill and 30% for decode, median:
validation/results/h100-sxm/llm-report.md), so a plan that mixes the two says so in
``warnings``. ``calibration_from`` carries one GPU's calibration to every GPU of its vendor
instead (validated H100 -> H200 only: transfer-report.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from gpumodel._validators import (
    _show,
    check_args,
    check_dtype,
    check_int,
    check_number,
)
from gpumodel.calibration import (
    DATASHEET_LABEL,
    calibration_label,
    choose_calibration,
    mixed_calibration_warning,
    resolve,
)
from gpumodel.errors import GpumodelError, SpecError
from gpumodel.hostprofile import host_dict, load_host
from gpumodel.llm.inference import Runtime, predict_inference
from gpumodel.llm.layers import tp_shape
from gpumodel.llm.memory import infeasible_message, max_batch, memory
from gpumodel.llm.models import ModelSpec, get_model
from gpumodel.llm.runtimes import DEFAULT_RUNTIME, check_hf_tensor_parallel, get_runtime
from gpumodel.llm.sweep import sweep_inference
from gpumodel.prices import (
    Price,
    mixed_price_warning,
    price_footnote,
    price_for,
    resolve_price_keys,
)
from gpumodel.specs import GPUSpec, get_gpu
from gpumodel.units import format_time

TP_SIZES = (1, 2, 4, 8)

# Latency targets (TTFT s, TPOT s). MLPerf Inference's LLM server scenarios (MLCommons
# inference repository, loadgen/mlperf.conf, 99th-percentile constraints):
#   llama2-70b-interactive: ttft_latency = 450 ms, tpot_latency = 40 ms  -> "chat"
#   llama2-70b (Server):    ttft_latency = 2000 ms, tpot_latency = 200 ms -> "server"
# 40 ms per token is 25 tokens/s, faster than people read; MLPerf's Llama-3.1-8B interactive
# scenario is stricter (500 ms, 30 ms). This model's TTFT and TPOT are means without queueing,
# MLPerf's are p99s under load: meeting "chat" here is necessary, not sufficient.
SLO_PRESETS: dict[str, tuple[float | None, float | None]] = {
    "chat": (0.450, 0.040),
    "server": (2.0, 0.200),
    "none": (None, None),
}
DEFAULT_SLO = "chat"


class ServingOption(BaseModel):
    """One GPU type's way to serve the load."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    gpu: str
    feasible: bool
    reason: str = ""
    tp: int | None = None
    max_batch: int | None = None
    batch: int | None = None  # requests in flight per replica at the rate (Little's law)
    capacity_batch: int | None = None  # the batch of the replica's capacity (sets replicas)
    ttft_s: float | None = None
    tpot_s: float | None = None
    latency_s: float | None = None
    requests_per_s_per_replica: float | None = None
    output_tokens_per_s_per_replica: float | None = None
    replicas: int | None = None
    gpus: int | None = None
    usd_per_gpu_hour: float | None = None
    usd_per_hour: float | None = None
    usd_per_million_tokens: float | None = None
    usd_per_million_output_tokens: float | None = None
    meets_slo: bool = False
    memory_per_gpu_bytes: float | None = None
    best: bool = False
    calibration: str = DATASHEET_LABEL
    price: dict[str, Any] | None = None


class ServingPlan(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    model: str
    prompt: int
    output: int
    rate_per_s: float
    dtype: str
    runtime: str
    host: dict[str, str] | None = None
    ttft_slo_s: float | None
    tpot_slo_s: float | None
    latency_slo_s: float | None
    slo: str = DEFAULT_SLO
    options: tuple[ServingOption, ...]
    best: str | None
    warnings: tuple[str, ...] = ()
    prices: dict[str, dict[str, Any] | None] = {}
    calibrations: dict[str, str] = {}

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def explain(self) -> str:
        lines = [f"serve {self.model}: {self.rate_per_s:g} req/s of {self.prompt} prompt + "
                 f"{self.output} output tokens ({self.runtime} runtime, {self.dtype})"]  # fmt: skip
        for o in self.options:
            mark = " <- best buy" if o.best else ""
            if not o.feasible:
                lines.append(f"  {o.gpu}: infeasible: {o.reason}")
                continue
            cost = (f"${o.usd_per_hour:,.2f}/h, ${o.usd_per_million_tokens:.3g}/1M tokens"
                    if o.usd_per_hour is not None else "no price")  # fmt: skip
            tpot = format_time(o.tpot_s) if o.tpot_s is not None else "- (no output)"
            lines.append(
                f"  {o.gpu}: tp={o.tp}, batch {o.batch} at this rate (capacity "
                f"{o.capacity_batch}, memory for {o.max_batch}), TTFT "
                f"{format_time(o.ttft_s or 0)}, TPOT {tpot}, latency "
                f"{format_time(o.latency_s or 0)}, {o.requests_per_s_per_replica:.3g} req/s per "
                f"replica -> {o.replicas} replicas = {o.gpus} GPUs, {cost}"
                + ("" if o.meets_slo else " (misses the latency target)")
                + mark
            )
        lines.append(f"  targets: {describe_targets(self)}")
        lines += [f"  price {line}" for line in price_footnote(self.price_objects())]
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def price_objects(self) -> dict[str, Price | None]:
        return {g: Price(**p) if p else None for g, p in self.prices.items()}


def describe_targets(p: ServingPlan) -> str:
    """'TTFT <= 450 ms, TPOT <= 40 ms (chat: MLPerf interactive Llama-2-70B)'."""
    parts = [f"{name} <= {format_time(v)}" for name, v in
             (("TTFT", p.ttft_slo_s), ("TPOT", p.tpot_slo_s), ("latency", p.latency_slo_s))
             if v is not None]  # fmt: skip
    preset = SLO_PRESETS.get(p.slo)
    origin = {"chat": "MLPerf interactive Llama-2-70B", "server": "MLPerf Llama-2-70B server"}
    if preset and (p.ttft_slo_s, p.tpot_slo_s) == preset and p.slo in origin:
        return ", ".join(parts) + f" ({p.slo}: {origin[p.slo]} scenario)"
    return ", ".join(parts) if parts else "none"


def _batches(limit: int) -> list[int]:
    out = [b for b in (2**i for i in range(20)) if b <= limit]
    return sorted({*out, limit})


Row = tuple[float, int, float, float | None, float]  # requests/s, batch, TTFT, TPOT, latency


class _Replica:
    """One replica of ``tp`` GPUs: its rows (``Row``) at any batches, one cycle of B prefills
    and ``output`` decode steps each (the module docstring, step 3)."""

    def __init__(self, spec: ModelSpec, g: GPUSpec, tp: int, prompt: int, output: int,
                 dtype: str, runtime: Runtime, calibration: Any, host: Any) -> None:  # fmt: skip
        self.spec, self.g, self.tp, self.output, self.dtype = spec, g, tp, output, dtype
        self.runtime, self.calibration, self.host = runtime, calibration, host
        self.context = prompt + output
        self.limit = max_batch(spec, g, seq=self.context, dtype=dtype, tp=tp, phase="decode",
                               limit=4096)  # fmt: skip
        self.t_prefill = predict_inference(spec, g, "prefill", batch=1, seq=prompt, dtype=dtype,
                                           gpus=tp, tp=tp, runtime=runtime,
                                           calibration=calibration, host=host).time_s  # fmt: skip
        self.mid = prompt + output // 2

    def rows(self, batches: list[int]) -> list[Row]:
        # every batch's decode step at once (the vectorised sweep: equal to predict_inference)
        decode = sweep_inference(self.spec, self.g, phase="decode", batch=batches,
                                 context=self.mid, tp=self.tp, dtype=self.dtype,
                                 runtime=self.runtime, calibration=self.calibration,
                                 host=self.host)["time_s"].tolist()  # fmt: skip
        out = []
        for b, t_dec in zip(batches, decode):
            cycle = b * self.t_prefill + self.output * t_dec
            tpot = (cycle - self.t_prefill) / self.output if self.output else None
            out.append((b / cycle, b, self.t_prefill, tpot, cycle))
        return out

    def memory_bytes(self, batch: int) -> float:
        """The decode steady state at ``batch`` and the full context, per GPU."""
        return memory(self.spec, self.g, batch=batch, seq=self.context, dtype=self.dtype,
                      tp=self.tp, phase="decode").total_bytes  # fmt: skip

    def operating_row(self, capacity: Row, rate: float) -> Row:
        """The row of the smallest batch whose throughput covers ``rate`` (at most the
        capacity batch): what the replica runs at that load (Little's law)."""
        sizes = _batches(capacity[1])
        hi = next((r for r in self.rows(sizes) if r[0] >= rate), capacity)
        lo = max([b for b in sizes if b < hi[1]], default=0)
        if hi[1] - lo > 1:  # the exact batch between two powers of two
            hi = next((r for r in self.rows(list(range(lo + 1, hi[1] + 1))) if r[0] >= rate), hi)
        return hi


def _targets_ratio(row: Row, slo: tuple[float | None, float | None, float | None]) -> float:
    """The worst of a row's TTFT, TPOT and latency over its target (at most 1: all met)."""
    _, _, ttft, tpot, latency = row
    ratios = [t / target for t, target in zip((ttft, tpot, latency), slo)
              if target is not None and t is not None]  # fmt: skip
    return max(ratios, default=0.0)


def _capacity(replica: _Replica, slo: tuple[float | None, float | None, float | None]
              ) -> tuple[Row, bool]:  # fmt: skip
    """The capacity row (highest throughput meeting the targets, else the closest to them) and
    whether it meets them."""
    rows = replica.rows(_batches(replica.limit))
    met = [r for r in rows if _targets_ratio(r, slo) <= 1]
    if met:
        return max(met, key=lambda r: r[0]), True
    return min(rows, key=lambda r: (_targets_ratio(r, slo), -r[0])), False


def serve_on(
    spec: ModelSpec,
    g: GPUSpec,
    *,
    prompt: int,
    output: int,
    rate: float,
    dtype: str = "bf16",
    runtime: Runtime = DEFAULT_RUNTIME,
    ttft_slo_s: float | None = None,
    tpot_slo_s: float | None = None,
    latency_slo_s: float | None = None,
    price: float | Mapping[str, float] | None = None,
    calibration: Any = None,
    host: Any = None,
) -> ServingOption:
    """The serving option on one GPU type (see the module docstring)."""
    context = prompt + output  # within max_context: checked once, in plan_serving
    slo = (ttft_slo_s, tpot_slo_s, latency_slo_s)
    options: list[tuple[_Replica, Row, bool]] = []
    last_mem = None
    for t in TP_SIZES:
        try:
            tp_shape(spec, t)
            check_hf_tensor_parallel(get_runtime(runtime), spec.id, spec.kv_heads, t)
        except GpumodelError:  # a tp this model or runtime cannot run
            continue
        mem = memory(spec, g, batch=1, seq=context, dtype=dtype, tp=t, phase="decode")
        last_mem = mem
        if mem.fits:
            replica = _Replica(spec, g, t, prompt, output, dtype, runtime, calibration, host)
            options.append((replica, *_capacity(replica, slo)))
    if not options:
        reason = (infeasible_message(last_mem) + f" at tp={last_mem.tp}" if last_mem
                  else "no tensor-parallel size fits")  # fmt: skip
        return ServingOption(gpu=g.id, feasible=False, reason=reason)
    # meeting the targets first, then the fewest GPUs for the rate, then requests/s per GPU
    replica, capacity, meets = max(
        options, key=lambda o: (o[2], -math.ceil(rate / o[1][0] - 1e-9) * o[0].tp,
                                o[1][0] / o[0].tp))  # fmt: skip
    tp, limit, rps = replica.tp, replica.limit, capacity[0]
    replicas = max(1, math.ceil(rate / rps - 1e-9))
    _, b, ttft, tpot, latency = replica.operating_row(capacity, rate / replicas)
    mem_bytes = replica.memory_bytes(capacity[1])  # what a replica holds at its capacity
    n_gpus = replicas * tp
    price_info = price_for(g, price)
    usd = price_info.usd_per_gpu_hour if price_info else None
    per_hour = n_gpus * usd if usd is not None else None
    tokens_per_hour = rate * context * 3600.0
    return ServingOption(
        gpu=g.id, feasible=True, calibration=calibration_label(resolve(calibration, g)), tp=tp,
        max_batch=limit, batch=b, capacity_batch=capacity[1], ttft_s=ttft, tpot_s=tpot,
        latency_s=latency, requests_per_s_per_replica=rps,
        output_tokens_per_s_per_replica=rps * output, replicas=replicas, gpus=n_gpus,
        usd_per_gpu_hour=usd, usd_per_hour=per_hour,
        usd_per_million_tokens=per_hour / tokens_per_hour * 1e6 if per_hour is not None else None,
        usd_per_million_output_tokens=(per_hour / (rate * output * 3600.0) * 1e6
                                       if per_hour is not None and output else None),
        meets_slo=meets, memory_per_gpu_bytes=mem_bytes,
        price=price_info.to_dict() if price_info else None,
    )  # fmt: skip


def plan_serving(
    model: ModelSpec | str,
    gpus: Iterable[GPUSpec | str] | GPUSpec | str,
    *,
    prompt: int = 1024,
    output: int = 256,
    rate: float = 1.0,
    dtype: str = "bf16",
    runtime: Runtime = DEFAULT_RUNTIME,
    ttft_slo_s: float | None = None,
    tpot_slo_s: float | None = None,
    latency_slo_s: float | None = None,
    price: float | Mapping[str, float] | None = None,
    calibration: Any = None,
    calibration_from: str | None = None,
    slo: str = DEFAULT_SLO,
    host: Any = None,
) -> ServingPlan:
    """Serve ``rate`` requests/s of ``prompt`` + ``output`` tokens on each GPU type in ``gpus``.

    ``price``: $/GPU-hour for all GPUs, or a mapping GPU id -> $/GPU-hour, else each spec's.
    A GPU that cannot hold the model or lacks the dtype is listed as infeasible with the reason.
    ``calibration_from``: a GPU id or calibration file carried to every GPU (``transfer``).
    ``slo``: the latency targets used where ``ttft_slo_s`` / ``tpot_slo_s`` are not given:
    ``"chat"`` (default: TTFT <= 450 ms, TPOT <= 40 ms, MLPerf's interactive Llama-2-70B
    scenario), ``"server"`` (2 s, 200 ms, MLPerf's Llama-2-70B server scenario) or ``"none"``.
    A GPU whose best configuration misses the targets is never the best buy.
    """
    check_int(prompt, "prompt")  # required: None is an error, not 'not given'
    check_int(output, "output", ge=0)
    # at least one request in ~12 days: below it the GPU-hour price of an idle replica gave
    # $1e29 per 1M tokens (fuzz, 2026-11-30)
    rate = check_number(rate, "rate (requests/s)", ge=1e-6, le=1e12)
    check_dtype(dtype)
    check_args(ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s, latency_slo_s=latency_slo_s)
    spec = get_model(model)
    spec.check_context(prompt + output, "prompt + output")  # the model's limit, on every GPU
    if not isinstance(slo, str) or slo not in SLO_PRESETS:
        raise SpecError(f"slo must be one of {', '.join(SLO_PRESETS)}, got {slo!r}")
    ttft_slo_s = SLO_PRESETS[slo][0] if ttft_slo_s is None else ttft_slo_s
    tpot_slo_s = SLO_PRESETS[slo][1] if tpot_slo_s is None else tpot_slo_s
    for name, v in (("ttft", ttft_slo_s), ("tpot", tpot_slo_s), ("latency", latency_slo_s)):
        if v is not None and not (math.isfinite(v) and v > 0):
            raise SpecError(f"the {name} target must be positive, got {v}")
    if rate <= 0 or prompt < 1 or output < 0:
        raise SpecError(f"need rate > 0, prompt >= 1, output >= 0; got {rate}, {prompt}, {output}")
    if not isinstance(gpus, (str, GPUSpec)) and (
        isinstance(gpus, (bytes, dict)) or not hasattr(gpus, "__iter__")
    ):
        raise SpecError(f"gpus must be a GPU id, a spec or a list of them, got {_show(gpus)}")
    targets = [gpus] if isinstance(gpus, (str, GPUSpec)) else list(gpus)
    price = resolve_price_keys(price, used=targets)
    options = []
    prices: dict[str, dict[str, Any] | None] = {}
    priced_at: dict[str, Price | None] = {}
    for item in targets:
        g = get_gpu(item)
        if g.id in prices:  # an alias and its id, or a GPU named twice: one option
            continue
        info = price_for(g, price)
        priced_at[g.id] = info
        prices[g.id] = info.to_dict() if info else None
        cal = choose_calibration(g, calibration, calibration_from)
        resolve(cal, g)  # an unknown or mismatched calibration is an input error, not infeasible
        try:
            opt = serve_on(spec, g, prompt=prompt, output=output, rate=rate, dtype=dtype,
                           runtime=runtime, ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s,
                           latency_slo_s=latency_slo_s, price=price, calibration=cal,
                           host=host)  # fmt: skip
        except SpecError:
            raise
        except GpumodelError as exc:  # e.g. no bf16 on this GPU
            opt = ServingOption(gpu=g.id, feasible=False, reason=str(exc))
        options.append(opt)
    priced = [o for o in options
              if o.feasible and o.meets_slo and o.usd_per_million_tokens is not None]  # fmt: skip
    best = min(priced, key=lambda o: o.usd_per_million_tokens or 0.0).gpu if priced else None
    options = [o.model_copy(update={"best": o.gpu == best}) for o in options]
    return ServingPlan(
        model=spec.id, prompt=prompt, output=output, rate_per_s=rate, dtype=dtype,
        runtime=get_runtime(runtime).name, host=host_dict(load_host(host)),
        ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s,
        latency_slo_s=latency_slo_s, slo=slo, options=tuple(options), best=best,
        prices=prices,
        calibrations={o.gpu: o.calibration for o in options if o.feasible},
        warnings=(*mixed_calibration_warning({o.gpu: o.calibration
                                              for o in options if o.feasible}),
                  *mixed_price_warning(priced_at)),
    )  # fmt: skip
