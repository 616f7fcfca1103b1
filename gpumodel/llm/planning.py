"""How many GPUs? Training plans searched over GPU counts and layouts (tp x pp x dp) with the
vectorised training sweep, against a deadline or a budget, with the time/cost frontier.

    s = gm.search_training("llama-2-7b", "h100", tokens=1e12, days=30)
    s.choice.gpus, s.choice.days, s.choice.cost_usd      # the cheapest plan done in 30 days
    [(o.gpus, o.days, o.cost_usd) for o in s.options if o.frontier]

For each GPU count the fastest layout whose memory fits is kept (tp in 1, 2, 4, 8 dividing the
heads, pp dividing the layers, dp the rest; ``gpumodel.llm.sweep.sweep_training``). The
frontier is the set of counts no other count beats on both time and cost (by more than 1%
on cost). The choice:

    days only          the cheapest option done within ``days`` (costs within 1% tie: the
                       fewest GPUs win)
    budget only        the fastest option within ``budget`` dollars
    days and budget    the cheapest option within both
    neither            none: the frontier is the answer

The global batch stays what it would be for one GPU (``global_batch`` sequences, default ~4M
tokens as Llama 2: 1,024 sequences of 4,096 tokens; a default that dp x micro-batch does not
divide is rounded up to a multiple of it, and the option says so in ``notes``): layouts with
more data-parallel ranks than sequences per step are left out, so large counts need tensor and
pipeline parallelism, as they do in practice, and an option whose count the batch held to
fewer data-parallel ranks says that too (``dp_limit``). One code path decides a count's layout
for ``search_training`` and for ``plan_training`` (``fastest_layout``): the same count gets the
same layout, batch and time whether it is asked alone or in a list. A count no layout can use
within the batch (a million GPUs for 1,024 sequences) is an error or an ``infeasible`` line, never
a plan with a silently larger batch.

Durations are written in days from one day on, in hours or minutes below it
(``format_duration``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from gpumodel.calibration import calibration_short, choose_calibration
from gpumodel.errors import InfeasibleError, SpecError
from gpumodel.llm.layers import AttentionImpl, Fusion
from gpumodel.llm.memory import Policy, Recompute
from gpumodel.llm.models import ModelSpec, get_model
from gpumodel.llm.sweep import SweepResult, sweep_training
from gpumodel.llm.training import default_global_batch, step_exceeds_run
from gpumodel.prices import PriceArg, price_for, resolve_price_keys
from gpumodel.specs import GPUSpec, get_gpu
from gpumodel.units import format_count, format_duration, format_gb, format_quantity

TP_SIZES = (1, 2, 4, 8)
# costs within 1% are a tie, which the fewer GPUs win (a plan's cost is not known to 1%)
COST_TIE = 0.01
# 1, 2, 3, 4, 6, 8, 12, ... 49152, 65536: powers of two and 1.5 x powers of two
DEFAULT_GPU_COUNTS = tuple(sorted({2**k for k in range(17)} | {3 * 2**k for k in range(15)}))


def layouts(
    spec: ModelSpec, counts: Iterable[int], tp: int | None = None, pp: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (tp, pp, dp) with tp x pp x dp in ``counts``: tp in 1-8 dividing the heads (or
    ``tp``), pp dividing the layers or one of the GPU counts' sizes (2^k, 3 x 2^k) up to the
    layers, whose stages are then uneven (``layers.stage_layers``), or ``pp``."""
    tps = [tp] if tp else [t for t in TP_SIZES if spec.heads % t == 0]
    pps = [pp] if pp else sorted({p for p in range(1, spec.layers + 1) if spec.layers % p == 0}
                                 | {p for p in DEFAULT_GPU_COUNTS if p <= spec.layers})  # fmt: skip
    rows = [(t, p, n // (t * p)) for n in counts for t in tps for p in pps
            if n % (t * p) == 0]  # fmt: skip
    if not rows:
        raise SpecError(f"no tp x pp layout of {spec.id} divides the GPU counts given")
    arr = np.array(rows, dtype=np.int64)
    return arr[:, 0], arr[:, 1], arr[:, 2]


class TrainingOption(BaseModel):
    """The fastest layout that fits for one GPU count."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    gpus: int
    tp: int
    pp: int
    dp: int
    global_batch: int  # sequences per optimizer step, as run
    # the global batch asked (--global-batch, else ~4M tokens): global_batch rounds it up to a
    # multiple of dp x micro-batch where that does not divide it
    global_batch_asked: int = 0
    # the most data-parallel ranks the global batch holds (one micro-batch each), where it left
    # out layouts of this count with more; None where it did not
    dp_limit: int | None = None
    notes: tuple[str, ...] = ()
    step_time_s: float
    virtual_stages: int = 1
    days: float
    gpu_hours: float
    cost_usd: float | None
    mfu: float
    memory_per_gpu_bytes: float
    frontier: bool = False
    meets: bool = False


class TrainingSearch(BaseModel):
    """Options per GPU count, the frontier, and the one that answers the question asked."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    model: str
    gpu: str
    tokens: float
    seq: int
    days_target: float | None
    budget_usd: float | None
    calibration: str
    price: dict[str, Any] | None
    options: tuple[TrainingOption, ...]
    choice: TrainingOption | None
    answer: str
    infeasible: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def frontier(self) -> list[TrainingOption]:
        return [o for o in self.options if o.frontier]


def _frontier(days: np.ndarray, cost: np.ndarray, tie: float = COST_TIE) -> np.ndarray:
    """Options no other option beats on both time and cost: an option is off the frontier when
    another is faster and cheaper by more than ``tie`` (costs within 1% are the same cost, as
    in the choice; equal-cost counts that differ only in speed all stay on it)."""
    order = np.argsort(days, kind="stable")
    keep = np.ones(len(days), dtype=bool)
    best = math.inf  # the least cost among options as fast or faster
    i = 0
    while i < len(order):
        j = i
        while j < len(order) and days[order[j]] == days[order[i]]:
            j += 1
        group = order[i:j]
        best = min(best, float(cost[group].min()))  # as fast and cheaper also beats
        keep[group] = ~(best * (1 + tie) < cost[group])
        i = j
    return keep


def search_training(
    model: ModelSpec | str,
    gpu: GPUSpec | str,
    tokens: float,
    *,
    days: float | None = None,
    budget: float | None = None,
    gpus: Iterable[int] | None = None,
    tp: int | None = None,
    pp: int | None = None,
    zero: int = 1,
    micro_batch: int = 1,
    global_batch: int | None = None,
    seq: int | None = None,
    dtype: str = "bf16",
    recompute: Recompute = "selective",
    price: PriceArg = None,
    calibration: Any = None,
    calibration_from: str | None = None,
    fusion: Fusion = "fused",
    attention: AttentionImpl | None = None,
    policy: Policy | None = None,
    host: Any = None,
    fragmentation: float | None = None,
    virtual_stages: int = 1,
) -> TrainingSearch:
    """Train ``model`` on ``tokens`` tokens on ``gpu``: the fastest fitting layout for every
    GPU count in ``gpus`` (default ``DEFAULT_GPU_COUNTS``), the time/cost frontier, and the
    option that meets ``days`` and/or ``budget`` (see the module docstring)."""
    from gpumodel._validators import _show, check_args, check_int, check_number

    check_int(micro_batch, "micro_batch")
    if host is not None:
        from gpumodel.hostprofile import load_host

        load_host(host)  # checked even where the plan does not use it
    check_number(tokens, "tokens", gt=0)  # required: None is an error, not 'not given'
    check_args(tokens=tokens, days=days, budget=budget, tp=tp, pp=pp, zero=zero,
               micro_batch=micro_batch, global_batch=global_batch, seq=seq, dtype=dtype,
               recompute=recompute, fusion=fusion, policy=policy, fragmentation=fragmentation,
               attention="flash" if attention is None else attention)  # fmt: skip
    if gpus is not None:
        if isinstance(gpus, (str, bytes, dict)) or not hasattr(gpus, "__iter__"):
            raise SpecError(f"gpus must be a list of GPU counts, got {_show(gpus)}")
        gpus = list(gpus)
        check_args(**{f"gpus[{i}]": n for i, n in enumerate(gpus)})
    spec = get_model(model)
    g = get_gpu(gpu)
    if not (math.isfinite(tokens) and tokens > 0):
        raise SpecError(f"tokens must be positive, got {tokens}")
    for name, value in (("days", days), ("budget", budget)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise SpecError(f"{name} must be positive, got {value}")
    counts = sorted(set(DEFAULT_GPU_COUNTS if gpus is None else gpus))
    if not counts or counts[0] < 1:
        raise SpecError("GPU counts must be >= 1")
    cal = choose_calibration(g, calibration, calibration_from)
    price_info = price_for(g, resolve_price_keys(price, used=[g]))
    if budget is not None and price_info is None:
        raise SpecError(f"--budget needs a price: {g.id}'s spec has none; pass --price")
    seq = spec.check_context(seq or min(spec.max_context, 8192), "seq")
    found = _fastest_per_count(
        spec, g, counts, tokens, tp=tp, pp=pp, micro_batch=micro_batch, seq=seq, zero=zero,
        global_batch=global_batch, dtype=dtype, recompute=recompute, fusion=fusion,
        attention=attention, calibration=cal, price=price, policy=policy, host=host,
        fragmentation=fragmentation, virtual_stages=virtual_stages,
    )  # fmt: skip
    r = found.sweep
    rows = r.table
    options: list[TrainingOption] = []
    infeasible = [found.failed[n] for n in counts if n in found.failed]
    for n in counts:
        if n not in found.best:
            continue
        best = found.best[n]
        cost = float(best["cost_usd"]) if price_info else None
        limited = n in found.limited
        options.append(TrainingOption(
            gpus=n, tp=int(best["tp"]), pp=int(best["pp"]), dp=int(best["dp"]),
            global_batch=int(best["global_batch"]), global_batch_asked=found.asked,
            dp_limit=found.asked // micro_batch if limited else None,
            notes=tuple(batch_notes(n, int(best["tp"]), int(best["pp"]), int(best["dp"]),
                                    micro_batch, seq, int(best["global_batch"]), found.asked,
                                    global_batch is not None, limited)),
            step_time_s=float(best["time_s"]),
            virtual_stages=int(best["virtual_stages"]),
            days=float(best["days"]), gpu_hours=n * float(best["train_time_s"]) / 3600.0,
            cost_usd=cost, mfu=float(best["mfu"]),
            memory_per_gpu_bytes=float(best["memory_bytes"]),
        ))  # fmt: skip
    if not options:
        hint = "; try --zero 3 or --recompute full" if "fits memory" in infeasible[-1] else ""
        raise InfeasibleError(f"{spec.id} on {g.id}: {infeasible[-1]}{hint}")
    d_arr = np.array([o.days for o in options])
    c_arr = np.array([o.cost_usd if o.cost_usd is not None else o.gpu_hours for o in options])
    front = _frontier(d_arr, c_arr)
    meets = np.ones(len(options), dtype=bool)
    if days is not None:
        meets &= d_arr <= days
    if budget is not None:
        meets &= c_arr <= budget
    options = [o.model_copy(update={"frontier": bool(f), "meets": bool(m) and bool(
        days or budget)}) for o, f, m in zip(options, front, meets)]  # fmt: skip
    choice: TrainingOption | None = None
    if days is None and budget is None:
        answer = ("no deadline or budget given: the frontier is the answer (--days or "
                  "--budget picks one)")  # fmt: skip
    elif not meets.any():
        fastest = min(options, key=lambda o: o.days)
        cheapest = min(options, key=lambda o: c_arr[options.index(o)])
        answer = (f"no GPU count meets the target: fastest {fastest.gpus} GPUs in "
                  f"{format_duration(fastest.days)}, cheapest {cheapest.gpus} GPUs "
                  + (f"${cheapest.cost_usd:,.0f}" if cheapest.cost_usd is not None else "")
                  + "; none is recommended")  # fmt: skip
    else:
        idx = [i for i in range(len(options)) if meets[i]]
        if days is not None:  # the fewest GPUs within 1% of the cheapest that meets
            cheapest = min(c_arr[i] for i in idx)
            pick = min((i for i in idx if c_arr[i] <= cheapest * (1 + COST_TIE)),
                       key=lambda i: options[i].gpus)  # fmt: skip
        else:
            pick = min(idx, key=lambda i: (d_arr[i], c_arr[i]))
        choice = options[pick]
        cost = f", ${choice.cost_usd:,.0f}" if choice.cost_usd is not None else ""
        want = " and ".join(
            x for x in (f"{days:g} days" if days else "", f"${budget:,.0f}" if budget else "") if x
        )
        answer = (f"{choice.gpus} x {g.id} (tp={choice.tp} pp={choice.pp} dp={choice.dp}): "
                  f"{format_duration(choice.days)}{cost}, MFU {100 * choice.mfu:.0f}% "
                  f"({'cheapest' if days is not None else 'fastest'} within {want})")  # fmt: skip
    warnings = []
    if r.calibrations[g.id].startswith("none"):
        warnings.append("datasheet roofline only (no calibration for this GPU): times are "
                        "lower bounds, MFU an upper bound")  # fmt: skip
    return TrainingSearch(
        model=spec.id, gpu=g.id, tokens=tokens, seq=int(rows["seq"][0]), days_target=days,
        budget_usd=budget, calibration=r.calibrations[g.id],
        price=price_info.to_dict() if price_info else None, options=tuple(options),
        choice=choice, answer=answer, infeasible=tuple(infeasible), warnings=tuple(warnings),
    )  # fmt: skip


def _max_layout(spec: ModelSpec, tp: int | None, pp: int | None) -> tuple[int, int]:
    """The largest tp and pp a layout of ``spec`` takes (``layouts``' choices)."""
    return (tp or max(t for t in TP_SIZES if spec.heads % t == 0)), (pp or spec.layers)


def within_batch(
    spec: ModelSpec, t: np.ndarray, p: np.ndarray, d: np.ndarray, micro_batch: int,
    global_batch: int | None, batch_cap: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The layouts whose data parallelism the global batch holds: dp x micro-batch at most
    ``batch_cap`` sequences (no more ranks than sequences per step), dividing ``global_batch``
    where one is given; SpecError when none does, naming the most GPUs the batch takes."""
    keep = d * micro_batch <= batch_cap
    if global_batch is not None:
        keep &= global_batch % (d * micro_batch) == 0
    if not keep.any():
        counts = sorted(set((t * p * d).tolist()))
        what = f"{counts[0]:,} GPUs" if len(counts) == 1 else "these GPU counts"
        tmax, pmax = _max_layout(spec, int(t.max()) if len(set(t.tolist())) == 1 else None,
                                 int(p.max()) if len(set(p.tolist())) == 1 else None)  # fmt: skip
        asked = ("given" if global_batch is not None
                 else "the default, ~4M tokens")  # fmt: skip
        raise SpecError(
            f"{spec.id} on {what}: no tp x pp x dp layout keeps dp x micro-batch within "
            + ("and dividing " if global_batch is not None else "")
            + f"the global batch of {batch_cap:,} sequences ({asked}): a data-parallel rank "
            f"takes at least one micro-batch of {micro_batch}, so at most tp {tmax} x pp "
            f"{pmax} x dp {batch_cap // micro_batch:,} = "
            f"{tmax * pmax * (batch_cap // micro_batch):,} GPUs; use fewer GPUs or a larger "
            "--global-batch"
        )  # fmt: skip
    return t[keep], p[keep], d[keep]


@dataclass(frozen=True)
class _PerCount:
    """Each GPU count's fastest layout that fits (``best``: its sweep row), or why it has none
    (``failed``: one line; ``least``: the smallest layout's row where memory stopped it)."""

    sweep: SweepResult
    asked: int  # the global batch asked, in sequences
    best: dict[int, Any]
    failed: dict[int, str]
    least: dict[int, Any]
    limited: set[int]  # counts whose layouts with more data-parallel ranks the batch left out


def _fastest_per_count(
    spec: ModelSpec, g: GPUSpec, counts: list[int], tokens: float, *, tp: int | None,
    pp: int | None, micro_batch: int, seq: int, global_batch: int | None, **kwargs: Any,
) -> _PerCount:
    """The one code path ``search_training`` and ``fastest_layout`` (``plan_training``) share:
    every layout of every count (``layouts``) the global batch holds (``within_batch``: asked,
    or ~4M tokens), priced by one training sweep; per count the fastest that fits memory and
    whose step is no more than the run."""
    asked = global_batch or int(default_global_batch(seq, 1))
    t, p, d = layouts(spec, counts, tp, pp)
    limited = set((t * p * d)[d * micro_batch > asked].tolist())
    t, p, d = within_batch(spec, t, p, d, micro_batch, global_batch, asked)
    r: SweepResult = sweep_training(spec, g, tp=t, pp=p, dp=d, micro_batch=micro_batch,
                                    seq=seq, tokens=tokens, global_batch=global_batch,
                                    grid=False, **kwargs)  # fmt: skip
    rows = r.table
    best: dict[int, Any] = {}
    failed: dict[int, str] = {}
    least: dict[int, Any] = {}
    for n in counts:
        mine = rows[rows["gpus"] == n]
        if not len(mine):
            failed[n] = (f"{n} GPUs: no tp x pp layout divides {n} with dp x micro-batch "
                         f"<= the global batch ({asked} sequences)")  # fmt: skip
            continue
        ok = mine[mine["fits"]]
        if not len(ok):
            least[n] = mine[np.argmin(mine["memory_bytes"])]
            failed[n] = (
                f"{n} GPUs: no layout fits memory (least: tp={least[n]['tp']} "
                f"pp={least[n]['pp']} needs {format_gb(least[n]['memory_bytes'])}, has "
                f"{format_gb(least[n]['capacity_bytes'])})"
            )
            continue
        # a run shorter than one step is no plan (plan_training's check, per count)
        whole = ok[ok["global_batch"] * seq <= tokens]
        if not len(whole):
            failed[n] = f"{n} GPUs: {step_exceeds_run(int(np.min(ok['global_batch'])), seq, tokens)}"
            continue
        best[n] = whole[np.argmin(whole["train_time_s"])]
    return _PerCount(r, asked, best, failed, least, limited & set(best))


def batch_notes(gpus: int, tp: int, pp: int, dp: int, micro_batch: int, seq: int, used: int,
                asked: int, given: bool, limited: bool) -> list[str]:  # fmt: skip
    """What a layout did to the global batch, in words: rounded it up to a multiple of dp x
    micro-batch (``used`` > ``asked``), or held the count to fewer data-parallel ranks than a
    layout of it could have (``limited``)."""
    notes = []
    if used != asked:
        notes.append(
            f"global batch {used:,} sequences x {seq} tokens = {used * seq:,} tokens: the "
            + ("given" if given else "default (~4M tokens)")
            + f" {asked:,} rounded up to a multiple of dp x micro-batch = {dp * micro_batch:,}"
        )  # fmt: skip
    if limited:
        notes.append(
            f"{gpus:,} GPUs, at most {asked // micro_batch:,} data-parallel ranks: each takes at "
            f"least one micro-batch of {micro_batch} of the global batch of {asked:,} "
            f"sequences, so tp x pp = {tp * pp} (tp={tp} pp={pp} dp={dp}); a larger "
            "--global-batch allows more"
        )  # fmt: skip
    return notes


def plan_notes(model: ModelSpec | str, step: Any, *, tp: int | None = None,
               pp: int | None = None, global_batch: int | None = None) -> list[str]:  # fmt: skip
    """``batch_notes`` of a ``plan_training`` step (``TrainingPlan.step``): its global batch
    against the one asked, and whether the batch held its count's data parallelism
    (``tp``/``pp`` as given to the plan)."""
    spec = get_model(model)
    asked = global_batch or int(default_global_batch(step.seq, 1))
    _, _, d = layouts(spec, [step.gpus], tp, pp)
    limited = bool(np.any(d * step.micro_batch > asked))
    return batch_notes(step.gpus, step.tp, step.pp, step.dp, step.micro_batch, step.seq,
                       step.global_batch, asked, global_batch is not None, limited)  # fmt: skip


def fastest_layout(
    spec: ModelSpec, g: GPUSpec, gpus: int, tokens: float, **kwargs: Any
) -> tuple[int, int, int]:
    """(tp, pp, virtual stages) of the fastest layout of ``gpus`` GPUs that fits memory (the
    interleaving asked for where that layout takes it, ``sweep_training``), chosen as
    ``search_training`` chooses it for that count (``_fastest_per_count``: dp x micro-batch
    within the global batch asked or the ~4M-token default); InfeasibleError with the smallest
    layout's shortfall when none fits, SpecError when the batch holds no layout or one step is
    more than the run (``plan_training``'s search)."""
    seq = kwargs.pop("seq", None) or min(spec.max_context, 8192)
    found = _fastest_per_count(spec, g, [gpus], tokens, tp=kwargs.pop("tp", None),
                               pp=kwargs.pop("pp", None),
                               micro_batch=kwargs.pop("micro_batch", 1), seq=seq,
                               global_batch=kwargs.pop("global_batch", None), **kwargs)  # fmt: skip
    if gpus in found.least:
        from gpumodel.llm.memory import infeasible_message
        from gpumodel.llm.training import training_memory

        least = found.least[gpus]
        mem = training_memory(
            spec, g, micro_batch=int(least["micro_batch"]), seq=int(least["seq"]),
            dtype=kwargs.get("dtype", "bf16"), tp=int(least["tp"]), pp=int(least["pp"]),
            dp=int(least["dp"]), zero=kwargs.get("zero", 1),
            recompute=kwargs.get("recompute", "selective"),
            microbatches=int(least["microbatches"]), fusion=kwargs.get("fusion", "fused"),
            policy=kwargs.get("policy"), fragmentation=kwargs.get("fragmentation"),
            accumulation=int(least["microbatches"]),
            virtual_stages=int(least["virtual_stages"]),
        )  # fmt: skip
        raise InfeasibleError(
            infeasible_message(mem) + "; try more GPUs, --zero 3, --recompute full",
            needed=mem.total_bytes, available=mem.capacity_bytes,
        )  # fmt: skip
    if gpus not in found.best:
        raise SpecError(found.failed[gpus].split(": ", 1)[1])
    best = found.best[gpus]
    return int(best["tp"]), int(best["pp"]), int(best["virtual_stages"])


def explain_search(s: TrainingSearch) -> str:
    """Plain-text summary (the CLI renders the table itself)."""
    lines = [f"train {s.model} on {format_count(s.tokens)} tokens on {s.gpu}: {s.answer}"]
    for o in s.options:
        mark = " *" if o.frontier else ""
        cost = f"${o.cost_usd:,.0f}" if o.cost_usd is not None else "-"
        lines.append(f"  {o.gpus:>6} GPUs tp={o.tp} pp={o.pp} dp={o.dp}: "
                     f"{format_duration(o.days)}, "
                     f"{cost}, MFU {100 * o.mfu:.0f}%, "
                     f"{format_quantity(o.memory_per_gpu_bytes, 'B')}/GPU{mark}")  # fmt: skip
    lines += [f"  calibration: {calibration_short(s.calibration)}"]
    lines += [f"  warning: {w}" for w in s.warnings]
    return "\n".join(lines)


__all__ = [
    "DEFAULT_GPU_COUNTS",
    "TrainingOption",
    "TrainingSearch",
    "batch_notes",
    "explain_search",
    "fastest_layout",
    "layouts",
    "plan_notes",
    "search_training",
]
