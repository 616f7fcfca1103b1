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

     The capacity batch is the largest that meets the latency targets given (TTFT, TPOT,
     end-to-end), else the one closest to them (the smallest worst ratio of a time to its
     target). Every batch up to the memory limit is a candidate, not only the powers of two
     (``_Capacity``): the batch after the capacity batch misses a target or does not fit
     (Llama-3-8B on an L40S at the chat targets: batch 57 at tp 1, 9 GPUs for 50 req/s, where
     the powers of two gave 32 there and 12 GPUs at tp 2).
  4. replicas = ceil(rate / capacity throughput); each replica then serves rate / replicas, and
     the batch it runs is the smallest whose throughput covers that (Little's law: requests in
     flight = arrival rate x latency, and B / cycle(B) is B over its latency): at 0.01 req/s a
     replica runs one request at a time, not its capacity batch. TTFT, TPOT and latency are the
     ones at that batch. GPUs = replicas * tp; $/hour = GPUs * price;
     usd_per_million_prompt_and_output_tokens = $/hour / (rate * (prompt + output) * 3600)
     * 1e6 (prompt and output tokens both count); usd_per_million_output_tokens = $/hour /
     (rate * output * 3600) * 1e6 (generated tokens alone, as ``sweep-llm`` prices a decode
     step). ``usd_per_million_tokens`` is the first's old name, kept as an alias.

The best buy is the feasible GPU with the lowest $ per 1M prompt + output tokens that meets
the targets. An infeasible GPU says why (``reason``) and, in a few words, ``reason_short``:
"no fit" (no tensor-parallel size holds the model and one request), "no bf16" (the GPU has no
matrix rate for the dtype: a V100 serves in fp16), "unsupported" (another step it cannot run).

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
from gpumodel.errors import GpumodelError, SpecError, UnsupportedError
from gpumodel.hostprofile import host_dict, load_host
from gpumodel.llm.inference import Runtime, predict_inference
from gpumodel.llm.layers import tp_shape
from gpumodel.llm.memory import infeasible_message, max_batch, memory
from gpumodel.llm.models import ModelSpec, get_model
from gpumodel.llm.runtimes import DEFAULT_RUNTIME, check_hf_tensor_parallel, get_runtime
from gpumodel.llm.sweep import sweep_inference
from gpumodel.ops.base import matmul_unit
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
    # why it is infeasible in a few words (the table's label): "no fit" (memory at every tp),
    # "no bf16" (no rate for the dtype), "no bf16, no fit" (both), "unsupported" (other)
    reason_short: str = ""
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
    # $ per 1M of the tokens the requests carry, prompt and output together
    usd_per_million_prompt_and_output_tokens: float | None = None
    # $ per 1M output (generated) tokens: what sweep-llm's decode rows price
    usd_per_million_output_tokens: float | None = None
    # the old name of usd_per_million_prompt_and_output_tokens, kept as an alias (the HTML
    # report reads it); sweep-llm's usd_per_million_tokens counts a step's tokens instead
    usd_per_million_tokens: float | None = None
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
            cost = (f"${o.usd_per_hour:,.2f}/h, "
                    f"${o.usd_per_million_prompt_and_output_tokens:.3g}/1M prompt + output "
                    "tokens" if o.usd_per_hour is not None else "no price")  # fmt: skip
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


# A bracket of batches (one meets the targets, a larger one misses) narrower than this is
# priced whole in one vectorised sweep. A wider one is first priced in a window of _WINDOW
# batches around the boundary interpolated between its ends (the targets' ratios are close to
# linear in the batch between two powers of two: one sweep usually finds it), then, where the
# window missed it, narrowed by sweeps of _WHOLE_BRACKET batches spread over what is left.
_WHOLE_BRACKET = 64
_WINDOW = 16


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
        self._rows: dict[int, Row] = {}  # batch -> its row, each priced once

    def rows(self, batches: list[int]) -> list[Row]:
        new = [b for b in dict.fromkeys(batches) if b not in self._rows]
        if new:  # every new batch's decode step at once (the vectorised sweep: equal to
            # predict_inference)
            decode = sweep_inference(self.spec, self.g, phase="decode", batch=new,
                                     context=self.mid, tp=self.tp, dtype=self.dtype,
                                     runtime=self.runtime, calibration=self.calibration,
                                     host=self.host)["time_s"].tolist()  # fmt: skip
            for b, t_dec in zip(new, decode):
                cycle = b * self.t_prefill + self.output * t_dec
                tpot = (cycle - self.t_prefill) / self.output if self.output else None
                self._rows[b] = (b / cycle, b, self.t_prefill, tpot, cycle)
        return [self._rows[b] for b in batches]

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


class _Capacity:
    """A replica's capacity row: the largest batch that meets the latency targets (its
    throughput sets the replica count), else the row closest to them (the smallest worst
    ratio of a time to its target), and whether it meets them.

    The powers of two up to the memory limit are priced first (``__init__``); ``row()`` then
    prices the batches between the largest of them that meets the targets (``lo``) and the
    next (``hi``, which misses them), so the batch after the capacity batch misses a target or
    does not fit in memory. TPOT and latency grow with the batch (each request waits for the
    others' prefills and for a larger decode step), so the batches that meet them are the ones
    below the boundary, and it is found with vectorised sweeps: a window of ``_WINDOW``
    batches around the boundary interpolated between lo and hi (the targets' ratios are close
    to linear between two powers of two), then, where the window missed it, sweeps of
    ``_WHOLE_BRACKET`` batches spread over what is left, then every batch of the last
    bracket. Where a kernel switch makes a decode step slower (Llama-3-8B on an H200: batch
    199), a batch just below the largest can have ~1% more throughput; the largest is kept,
    the one the targets allow."""

    def __init__(self, replica: _Replica, slo: tuple[float | None, float | None, float | None]
                 ) -> None:  # fmt: skip
        self.replica, self.slo = replica, slo
        rows = replica.rows(_batches(replica.limit))
        met = [r for r in rows if _targets_ratio(r, slo) <= 1]
        self.meets = bool(met)
        self.closest = min(rows, key=lambda r: (_targets_ratio(r, slo), -r[0]))
        self.lo = max((r[1] for r in met), default=0)  # meets
        self.hi = min((r[1] for r in rows if r[1] > self.lo), default=None)  # misses
        self._row: Row | None = None if self.meets else self.closest

    def bound(self) -> float:
        """An upper bound on the capacity's requests/s (``row()[0]``) without pricing more
        batches: the capacity batch is below hi, B / cycle(B) grows with B at a fixed decode
        step, and no step in the bracket is faster than lo's."""
        if self._row is not None or self.hi is None or self.hi - self.lo <= 1:
            return self.row()[0]
        r = self.replica
        lo = r.rows([self.lo])[0]
        b = self.hi - 1
        return b / (b * r.t_prefill + (lo[4] - self.lo * r.t_prefill))

    def row(self) -> Row:
        if self._row is None:
            self._row = self._search()
        return self._row

    def _search(self) -> Row:
        replica, slo, lo, hi = self.replica, self.slo, self.lo, self.hi
        guess = True
        while hi is not None and hi - lo > 1:
            whole = hi - lo - 1 <= _WHOLE_BRACKET
            if whole:
                inside = list(range(lo + 1, hi))
            elif guess:  # the boundary interpolated between lo and hi, and a window around it
                r_lo, r_hi = (_targets_ratio(row, slo) for row in replica.rows([lo, hi]))
                at = lo + (1 - r_lo) / (r_hi - r_lo) * (hi - lo) if r_hi > r_lo else lo
                start = min(max(lo + 1, round(at) - _WINDOW // 2), hi - _WINDOW)
                inside = list(range(start, start + _WINDOW))
            else:
                step = (hi - lo) / _WHOLE_BRACKET
                inside = sorted({lo + round(step * i) for i in range(1, _WHOLE_BRACKET)})
            guess = False
            more = replica.rows(inside)
            lo = max([lo, *(r[1] for r in more if _targets_ratio(r, slo) <= 1)])
            hi = min([hi, *(r[1] for r in more if r[1] > lo)])
            if whole:
                break
        return replica.rows([lo])[0]


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
    try:  # a GPU without the dtype's matrix rate (bf16 on a V100 or T4) runs nothing
        matmul_unit(g, dtype)
        no_dtype = None
    except UnsupportedError as exc:
        no_dtype = str(exc)
    fitting: list[int] = []
    last_mem = None
    for t in TP_SIZES:
        try:
            tp_shape(spec, t)
            check_hf_tensor_parallel(get_runtime(runtime), spec.id, spec.kv_heads, t)
        except GpumodelError:  # a tp this model or runtime cannot run
            continue
        last_mem = memory(spec, g, batch=1, seq=context, dtype=dtype, tp=t, phase="decode")
        if last_mem.fits:
            fitting.append(t)
    no_fit = None
    if not fitting:
        no_fit = (infeasible_message(last_mem) + f" at tp={last_mem.tp}" if last_mem
                  else "no tensor-parallel size fits")  # fmt: skip
    if no_dtype is not None:  # the reason first; memory too where it does not fit either
        return ServingOption(
            gpu=g.id, feasible=False,
            reason=no_dtype + (f"; nor does it fit: {no_fit}" if no_fit else ""),
            reason_short=f"no {dtype}" + (", no fit" if no_fit else ""))  # fmt: skip
    if no_fit is not None:
        return ServingOption(gpu=g.id, feasible=False, reason=no_fit, reason_short="no fit")
    searches = [_Capacity(_Replica(spec, g, t, prompt, output, dtype, runtime, calibration,
                                   host), slo) for t in fitting]  # fmt: skip

    def rank(c: _Capacity, rps: float) -> tuple[bool, int, float]:
        """Meeting the targets first, then the fewest GPUs for the rate, then requests/s per
        GPU (higher is better)."""
        return c.meets, -math.ceil(rate / rps - 1e-9) * c.replica.tp, rps / c.replica.tp

    # each tp's exact capacity where it can still win: its bound ranks no lower than the best
    # found (a tie too: the smaller tp wins it, as it would with every tp searched)
    best: tuple[tuple[bool, int, float], int] | None = None
    for i, c in sorted(enumerate(searches), key=lambda ic: rank(ic[1], ic[1].bound()),
                       reverse=True):  # fmt: skip
        if best is not None and rank(c, c.bound()) < best[0]:
            break
        key = rank(c, c.row()[0])
        if best is None or key > best[0] or (key == best[0] and i < best[1]):
            best = (key, i)
    assert best is not None  # fitting is not empty
    search = searches[best[1]]
    replica, capacity, meets = search.replica, search.row(), search.meets
    tp, limit, rps = replica.tp, replica.limit, capacity[0]
    replicas = max(1, math.ceil(rate / rps - 1e-9))
    _, b, ttft, tpot, latency = replica.operating_row(capacity, rate / replicas)
    mem_bytes = replica.memory_bytes(capacity[1])  # what a replica holds at its capacity
    n_gpus = replicas * tp
    price_info = price_for(g, price)
    usd = price_info.usd_per_gpu_hour if price_info else None
    per_hour = n_gpus * usd if usd is not None else None
    tokens_per_hour = rate * context * 3600.0  # prompt and output tokens
    per_million = per_hour / tokens_per_hour * 1e6 if per_hour is not None else None
    return ServingOption(
        gpu=g.id, feasible=True, calibration=calibration_label(resolve(calibration, g)), tp=tp,
        max_batch=limit, batch=b, capacity_batch=capacity[1], ttft_s=ttft, tpot_s=tpot,
        latency_s=latency, requests_per_s_per_replica=rps,
        output_tokens_per_s_per_replica=rps * output, replicas=replicas, gpus=n_gpus,
        usd_per_gpu_hour=usd, usd_per_hour=per_hour,
        usd_per_million_prompt_and_output_tokens=per_million,
        usd_per_million_tokens=per_million,
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
        cal = choose_calibration(g, calibration, calibration_from, gpus=len(targets))
        resolve(cal, g)  # an unknown or mismatched calibration is an input error, not infeasible
        try:
            opt = serve_on(spec, g, prompt=prompt, output=output, rate=rate, dtype=dtype,
                           runtime=runtime, ttft_slo_s=ttft_slo_s, tpot_slo_s=tpot_slo_s,
                           latency_slo_s=latency_slo_s, price=price, calibration=cal,
                           host=host)  # fmt: skip
        except SpecError:
            raise
        except GpumodelError as exc:  # a step this GPU cannot run (serve_on names the rest)
            opt = ServingOption(gpu=g.id, feasible=False, reason=str(exc),
                                reason_short="unsupported")  # fmt: skip
        options.append(opt)
    priced = [o for o in options if o.feasible and o.meets_slo
              and o.usd_per_million_prompt_and_output_tokens is not None]  # fmt: skip
    best = (min(priced, key=lambda o: o.usd_per_million_prompt_and_output_tokens or 0.0).gpu
            if priced else None)  # fmt: skip
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
