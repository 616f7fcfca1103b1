"""Planning output for the CLI: lists and ranges of counts, the tables of ``plan train``,
``plan serve`` and ``sweep-llm`` (100 columns, calibration files and price sources as
footnotes, ``--csv`` and ``--json`` of the same rows).

Lists and ranges (``--gpus``, ``--batch``, ``--context``, ``--tp``, ...):

    64,256          these values
    8-512           8, 16, 32, ..., 512 (doubling)
    8:512           the same
    8:512:x4        8, 32, 128, 512 (times 4)
    8:64:+8         8, 16, 24, ..., 64 (plus 8)
    1,8:64:x2,100   lists and ranges mix
"""

from __future__ import annotations

import re
from typing import Any

from gpumodel.cli._app import fail
from gpumodel.cli.tables import Table, dollars
from gpumodel.units import format_count, format_quantity, format_time

MAX_VALUES = 100_000
MAX_VALUE = 2**53

COUNTS_HELP = "a number, a list '64,256' or a range '8-512' / '8:512:x2' / '8:64:+8'"


def _int(text: str, option: str) -> int:
    if not re.fullmatch(r"[0-9]+", text):
        fail(f"{option}: {text!r} is not a whole number (lists: '64,256', ranges: '8-512', "
             "'8:512:x2', '8:64:+8')")  # fmt: skip
    if len(text) > 16:  # 2^53 has 16 digits; longer cannot be meant (and int() refuses 4300+)
        fail(f"{option}: a {len(text)}-digit number is out of range (1 to 2^53)")
    value = int(text)
    if not 1 <= value <= MAX_VALUE:
        fail(f"{option}: {value} is out of range (1 to 2^53)")
    return value


def parse_counts(text: str, option: str) -> list[int]:
    """'64,256' / '8-512' / '8:512:x2' / '8:64:+8' (see the module docstring) -> sorted values."""
    out: set[int] = set()
    parts = [p.strip() for p in str(text).split(",")]
    if not any(parts):
        fail(f"{option}: no values")
    for part in parts:
        if not part:
            continue
        m = re.fullmatch(r"([0-9]+)\s*(?:-|:)\s*([0-9]+)(?:\s*:\s*([x+*]?)([0-9]+))?", part)
        if m is None:
            out.add(_int(part, option))
            continue
        lo, hi = _int(m.group(1), option), _int(m.group(2), option)
        if hi < lo:
            fail(f"{option}: range {part!r} runs backwards")
        kind, step = m.group(3) or "x", int(m.group(4) or 2)
        if kind in ("x", "*"):
            if step < 2:
                fail(f"{option}: a multiplying range needs a factor >= 2, got {part!r}")
            v = lo
            while v <= hi:
                out.add(v)
                v *= step
        else:
            if step < 1:
                fail(f"{option}: a range step must be >= 1, got {part!r}")
            if (hi - lo) // step + 1 > MAX_VALUES:
                fail(f"{option}: {part!r} has more than {MAX_VALUES:,} values")
            out.update(range(lo, hi + 1, step))
        if len(out) > MAX_VALUES:
            fail(f"{option}: more than {MAX_VALUES:,} values")
    return sorted(out)


def calibration_notes(labels: dict[str, str]) -> list[str]:
    """Footnotes naming each GPU's calibration in full (paths stay out of the cells)."""
    return [f"calibration {gpu}: {label}" for gpu, label in labels.items()]


def price_notes(prices: dict[str, Any]) -> list[str]:
    out = []
    for gpu, p in prices.items():
        if p is None:
            out.append(f"price {gpu}: none (the spec has none; pass --price {gpu}=USD)")
        elif p["provider"] == "given":
            out.append(f"price {gpu}: ${p['usd_per_gpu_hour']:.4g}/GPU-hour, given (--price)")
        else:
            out.append(f"price {gpu}: ${p['usd_per_gpu_hour']:.4g}/GPU-hour, {p['provider']} "
                       f"{p['date']}: {p['source']}")  # fmt: skip
    return out


def training_search_table(s: Any) -> Table:
    """One row per GPU count: the fastest layout that fits, its global batch, time, cost, MFU;
    '*' marks the frontier, '>' the choice, '^' a global batch rounded up to a multiple of
    dp x micro-batch."""
    from gpumodel.calibration import calibration_short
    from gpumodel.units import format_duration

    t = Table(
        title=f"train {s.model} on {format_count(s.tokens)} tokens ({s.seq}-token sequences) on {s.gpu}: "
        f"{s.answer}",
        columns=["", "GPUs", "tp", "pp", "dp", "batch", "time", "cost", "MFU", "mem/GPU",
                 "calibration"],
        right={"GPUs", "tp", "pp", "dp", "batch", "time", "cost", "MFU", "mem/GPU"},
    )  # fmt: skip
    fields = ["gpus", "tp", "pp", "dp", "global_batch", "global_batch_asked", "dp_limit",
              "step_time_s", "days", "gpu_hours", "cost_usd", "mfu", "memory_per_gpu_bytes",
              "frontier", "meets"]  # fmt: skip
    t.csv_header = [*fields, "chosen", "calibration"]
    t.csv_rows = []
    chosen = s.choice.gpus if s.choice else None
    short = calibration_short(s.calibration)
    for o in s.options:
        mark = (">" if o.gpus == chosen else " ") + ("*" if o.frontier else " ")
        rounded = "^" if o.global_batch != o.global_batch_asked else ""
        t.add(mark, o.gpus, o.tp, o.pp, o.dp, f"{o.global_batch:,}{rounded}",
              format_duration(o.days), dollars(o.cost_usd), f"{100 * o.mfu:.0f}%",
              format_quantity(o.memory_per_gpu_bytes, "B"), short)  # fmt: skip
        t.csv_rows.append([getattr(o, f) for f in fields] + [o.gpus == chosen, short])
    t.notes = ["* time/cost frontier (no other count is both faster and >1% cheaper); > the choice; "
               "each count's fastest layout that fits memory"]  # fmt: skip
    if s.options:
        o = s.options[0]
        t.notes.append(f"batch: sequences per optimizer step, {o.global_batch_asked:,} asked ("
                       "--global-batch, else ~4M tokens)"
                       + ("; ^ rounded up to a multiple of dp x micro-batch"
                          if any(x.global_batch != x.global_batch_asked for x in s.options)
                          else ""))  # fmt: skip
        limited = [x for x in s.options if x.dp_limit]
        if limited:
            where = (", ".join(f"{x.gpus:,}" for x in limited) + " GPUs" if len(limited) <= 4
                     else f"the {len(limited)} counts from {limited[0].gpus:,} GPUs on")  # fmt: skip
            t.notes.append(
                f"at most {limited[0].dp_limit:,} data-parallel ranks at {where}: each takes "
                "at least one micro-batch of the global batch "
                f"({limited[0].global_batch_asked:,} sequences), so tensor/pipeline parallelism "
                "runs the rest; a larger --global-batch allows more"
            )  # fmt: skip
    t.notes += [f"not possible: {x}" for x in s.infeasible]
    t.notes += calibration_notes({s.gpu: s.calibration})
    t.notes += price_notes({s.gpu: s.price})
    t.notes += [f"warning: {w}" for w in s.warnings]
    return t


def serving_table(p: Any) -> Table:
    """One row per GPU type: layout, batch, latency, fleet and cost; footnotes for the targets,
    calibrations and prices."""
    from gpumodel.calibration import calibration_short
    from gpumodel.llm.serving import describe_targets

    t = Table(
        title=f"serve {p.model}: {p.rate_per_s:g} req/s, {p.prompt} prompt + {p.output} output "
        f"tokens ({p.runtime}, {p.dtype})",
        columns=["GPU", "tp", "batch", "TTFT", "TPOT", "GPUs", "$/hour", "$/1M p+o",
                 "targets", "calibration"],
        right={"tp", "batch", "TTFT", "TPOT", "GPUs", "$/hour", "$/1M p+o"},
    )  # fmt: skip
    fields = ["gpu", "feasible", "reason_short", "tp", "batch", "capacity_batch", "max_batch",
              "ttft_s", "tpot_s", "latency_s",
              "requests_per_s_per_replica", "replicas", "gpus", "usd_per_gpu_hour",
              "usd_per_hour", "usd_per_million_prompt_and_output_tokens",
              "usd_per_million_output_tokens", "usd_per_million_tokens",
              "memory_per_gpu_bytes", "meets_slo", "best", "calibration"]  # fmt: skip
    t.csv_header = fields
    t.csv_rows = []
    for o in p.options:
        t.csv_rows.append([getattr(o, f) for f in fields])
        if not o.feasible:  # why, in a few words: no fit, no bf16, ... (the notes say more)
            t.add(f"{o.gpu} ({o.reason_short or 'infeasible'})", "-", "-", "-", "-", "-", "-",
                  "-", "-", "-")  # fmt: skip
            continue
        t.add(o.gpu + (" (best)" if o.best else ""), o.tp,
              f"{o.batch}/{o.capacity_batch}/{o.max_batch}", format_time(o.ttft_s or 0),
              format_time(o.tpot_s) if o.tpot_s is not None else "-", o.gpus,
              dollars(o.usd_per_hour), dollars(o.usd_per_million_prompt_and_output_tokens),
              "met" if o.meets_slo else "MISSED",
              calibration_short(o.calibration, dated=False))  # fmt: skip
    t.notes = [f"targets: {describe_targets(p)}; a GPU that misses them is never the best buy",
               "batch: requests in flight per replica at this rate (Little's law) / the "
               "replica's capacity batch, which sets the replica count / the most that fit in "
               "memory; TTFT and TPOT are priced at the first of the three (requests in "
               "flight)",
               "$/1M p+o (usd_per_million_prompt_and_output_tokens): per million tokens the "
               "requests carry, prompt and output; usd_per_million_output_tokens: output "
               "alone, as sweep-llm prices a decode step (usd_per_million_tokens: the old name "
               "of the first); mem/GPU (memory_per_gpu_bytes): a replica at its capacity "
               "batch"]  # fmt: skip
    if p.best:
        t.notes.append(f"best buy: {p.best} (lowest $ per 1M tokens, prompt + output, that "
                       "meets the targets)")  # fmt: skip
    else:
        t.notes.append("no best buy: no priced GPU meets the targets (relax --ttft/--tpot or "
                       "--slo server)")  # fmt: skip
    t.notes += [f"{o.gpu}: {o.reason}" for o in p.options if not o.feasible]
    t.notes += calibration_notes(p.calibrations)
    t.notes += price_notes(p.prices)
    if p.host:
        how = ("every eager kernel at its op kind's cost" if p.runtime == "hf-eager"
               else "prefill eager, decode one compiled call" if p.runtime == "hf-static-compiled"
               else "one graph launch per step")  # fmt: skip
        t.notes.append(f"host: {p.host['name']} ({p.host['cpu_model']}); {p.runtime}: {how}")
    t.notes += [f"warning: {w}" for w in p.warnings]
    return t


SWEEP_COLUMNS = {
    "inference": [("gpu", "GPU"), ("batch", "batch"), ("seq", "seq"), ("context", "context"),
                  ("tp", "tp"), ("dp", "dp"), ("time_s", "step"), ("tokens_per_s", "tokens/s"),
                  ("memory_bytes", "mem/GPU"), ("fits", "fits"),
                  ("usd_per_million_tokens", "$/1M tok"), ("calibration", "calibration")],
    "training": [("gpu", "GPU"), ("micro_batch", "mb"), ("seq", "seq"), ("tp", "tp"),
                 ("pp", "pp"), ("virtual_stages", "v"), ("dp", "dp"), ("time_s", "step"),
                 ("mfu", "MFU"),
                 ("memory_bytes", "mem/GPU"), ("fits", "fits"), ("usd_per_hour", "$/hour"),
                 ("calibration", "calibration")],
}  # fmt: skip


# An inference sweep's usd_per_million_tokens counts the tokens its step processes (those of
# tokens_per_s): sweep-llm writes it under the name that says which as well, the name plan
# serve gives the same quantity (a decode step's tokens are output tokens).
COST_NAMES = {"decode": ("usd_per_million_output_tokens", "$/1M out"),
              "prefill": ("usd_per_million_prompt_tokens", "$/1M prompt")}  # fmt: skip


def named_costs(r: Any) -> Any:
    """An inference sweep with its cost column also under the name of the tokens it counts
    (``COST_NAMES``), next to ``usd_per_million_tokens``; a training sweep as it is."""
    import dataclasses

    import numpy as np

    named = COST_NAMES.get(r.settings.get("phase")) if r.kind == "inference" else None
    if named is None or "usd_per_million_tokens" not in r.columns or named[0] in r.columns:
        return r
    names = list(r.columns)
    at = names.index("usd_per_million_tokens") + 1
    dtype = [(n, r.table.dtype[n]) for n in names]
    dtype.insert(at, (named[0], r.table.dtype["usd_per_million_tokens"]))
    table = np.empty(len(r.table), dtype=dtype)
    for n in names:
        table[n] = r.table[n]
    table[named[0]] = r.table["usd_per_million_tokens"]
    return dataclasses.replace(r, table=table)


def _fmt(key: str, v: Any) -> str:
    if key == "time_s":
        return format_time(v)
    if key == "memory_bytes":
        return format_quantity(v, "B")
    if key == "mfu":
        return f"{100 * v:.0f}%"
    if key == "fits":
        return "yes" if v else "NO"
    if key == "tokens_per_s":
        return f"{v:,.0f}"
    if key.startswith("usd") or key == "cost_usd":
        return dollars(v)
    if key == "days":
        return f"{v:.3g}"
    return str(v)


def sweep_table(r: Any, limit: int | None = None) -> Table:
    """A sweep's points (the most useful columns; a column with one value throughout goes to
    the title; ``--csv`` / ``--json`` have every column)."""
    cols = list(SWEEP_COLUMNS[r.kind])
    named = COST_NAMES.get(r.settings.get("phase")) if r.kind == "inference" else None
    if named is not None and named[0] in r.columns:  # the cost named by the tokens it counts
        cols = [named if k == "usd_per_million_tokens" else (k, c) for k, c in cols]
    else:
        named = None
    if "days" in r.columns:  # a training sweep with tokens: time and cost to train
        cols[-2:-1] = [("days", "days"), ("cost_usd", "cost")]
    records = r.records()
    constant = ("seq", "context", "tp", "pp", "virtual_stages", "dp", "micro_batch", "batch",
                "gpu", "calibration")  # fmt: skip
    fixed = {k: records[0][k] for k, _ in cols
             if records and k in constant and all(x[k] == records[0][k] for x in records)}  # fmt: skip
    cols = [(k, c) for k, c in cols if k not in fixed]
    if fixed.get("virtual_stages") == 1:  # plain 1F1B throughout: the default, not a setting
        del fixed["virtual_stages"]
    settings = [f"{k} {_setting(v)}" for k, v in r.settings.items() if v is not None]
    t = Table(
        title=f"{r.kind} sweep of {r.model}: {len(r):,} points ("
        + ", ".join([f"{k} {v}" for k, v in fixed.items()] + settings) + ")",
        columns=[c for _, c in cols],
        right={c for k, c in cols if k not in ("gpu", "calibration", "fits")},
    )  # fmt: skip
    t.csv_header = list(r.columns)
    t.csv_rows = r.table.tolist()
    shown = records if limit is None or len(r) <= limit else records[:limit]
    for row in shown:
        t.add(*[_fmt(k, row[k]) for k, _ in cols])
    if limit is not None and len(r) > limit:
        t.notes.append(f"... {len(r) - limit:,} more rows: --csv or --json for all, --rows N")
    if named is not None:
        which = {"usd_per_million_output_tokens": "generated tokens, the output (a decode "
                 "step's, each of its query tokens kept), as plan serve's "
                 "usd_per_million_output_tokens",
                 "usd_per_million_prompt_tokens": "prompt tokens (a prefill step's)"}[named[0]]
        t.notes.append(f"{named[1]} ({named[0]}): $ per million {which}; "
                       "usd_per_million_tokens: the same, its old name")  # fmt: skip
    t.notes += calibration_notes(r.calibrations)
    t.notes += price_notes({g: p.to_dict() if p else None for g, p in r.prices.items()})
    t.notes += [f"warning: {w}" for w in r.warnings]
    return t


# ---------------------------------------------------------------------------------------------
# sweep-llm

import typer  # noqa: E402

from gpumodel.cli._app import app, print_json  # noqa: E402


@app.command("sweep-llm")
def sweep_llm(
    ctx: typer.Context,
    model: str = typer.Option(..., help="model preset id/alias or a model YAML file"),
    gpu: str = typer.Option("h100", help="GPU ids, comma-separated"),
    mode: str = typer.Option("inference", help="inference or training"),
    phase: str = typer.Option("decode", help="inference: prefill or decode"),
    batch: str = typer.Option(
        "1", help=f"sequences per step (training: micro-batch); {COUNTS_HELP}"
    ),
    seq: str = typer.Option(None, help="new tokens per sequence (training: sequence length)"),
    context: str = typer.Option(None, help="inference: tokens attended to (KV-cache length)"),
    tp: str = typer.Option("1", help="tensor-parallel sizes"),
    pp: str = typer.Option("1", help="pipeline-parallel sizes (training)"),
    dp: str = typer.Option("1", help="data-parallel sizes (inference: replicas)"),
    runtime: str = typer.Option(
        None,
        help="inference: hf-eager, hf-static-compiled or fused-graph (default "
        "fused-graph, as infer)",
    ),
    host: str = typer.Option(
        None,
        help="host profile: a name or a YAML file (default: the "
        "measured one of this machine, else typical)",
    ),
    new_shapes: bool = typer.Option(
        False, "--new-shapes", help="inference: price steps at attention shapes new to the "
        "process (as infer --new-shapes)"),
    policy: str = typer.Option(None, help="training precision policy: amp, bf16, mixed or "
                               "fp32 (an fp32 model, no autocast; --dtype fp32 or tf32)"),
    fusion: str = typer.Option(None, help="training: fused (default) or unfused (eager HF)"),
    dtype: str = typer.Option("bf16"),
    zero: int = typer.Option(1, help="training: ZeRO stage"),
    recompute: str = typer.Option("selective", help="training: none, selective or full"),
    virtual_stages: int = typer.Option(
        1, help="training: model chunks per pipeline stage (interleaved 1F1B) where a layout "
        "takes them"),
    tokens: str = typer.Option(None, help="training: tokens to train on (adds days and cost)"),
    price: str = typer.Option(None, help="$ per GPU-hour: '2.49' or 'h100=2.49,h200=3.10'"),
    calibration: str = typer.Option(None, help="'none', a calibration file, or a GPU id"),
    calibration_from: str = typer.Option(None, help="carry this GPU's calibration to every GPU"),
    fits_only: bool = typer.Option(False, "--fits-only", help="only points that fit in memory"),
    sort: str = typer.Option(None, help="sort by a column, e.g. time_s or "
                             "usd_per_million_output_tokens"),
    rows: int = typer.Option(50, help="rows shown in the table (--csv / --json: all)"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable output"),
    as_csv: bool = typer.Option(False, "--csv", help="every point and column as CSV"),
) -> None:
    """Vectorised grid of LLM steps: every combination of the values given (lists and ranges,
    e.g. --batch 1:256 --context 1024,4096 --tp 1,2,4) on every GPU, with time, memory, fit
    and cost per point. Same model as `infer` and `plan train` (equal to 1e-9)."""
    import numpy as np

    import gpumodel as gm
    from gpumodel.cli.tables import show
    from gpumodel.units import parse_count

    if mode not in ("inference", "training"):
        fail(f"--mode: '{mode}' is not one of inference, training")
    from gpumodel._validators import check_args

    # the declared values, checked in both modes (an option one mode does not use is still
    # never silently accepted with a value that cannot be meant)
    check_args(fusion=fusion, recompute=recompute, policy=policy, dtype=dtype)
    if rows < 0:
        fail(f"--rows must be >= 0, got {rows}")
    # an option of the other mode is an error, not silently nothing
    other = (("policy", "fusion", "zero", "recompute", "tokens", "virtual_stages")
             if mode == "inference"
             else ("phase", "runtime", "context", "new_shapes"))  # fmt: skip
    given = [o for o in other if getattr(ctx.get_parameter_source(o), "name", "") != "DEFAULT"]
    if given:
        flags = ", ".join("--" + o.replace("_", "-") for o in given)
        kind = "training" if mode == "inference" else "inference"
        fail(f"{flags} {'is a' if len(given) == 1 else 'are'} {kind} option"
             f"{'' if len(given) == 1 else 's'}; this sweep is --mode {mode}")
    gpus = [g.strip() for g in gpu.split(",") if g.strip()]
    if not gpus:
        fail("--gpu needs at least one GPU id")
    prices = gm.parse_prices(price) if price is not None else None
    counts = {k: parse_counts(v, f"--{k}") for k, v in
              (("batch", batch), ("tp", tp), ("pp", pp), ("dp", dp)) if v is not None}  # fmt: skip
    seqs = parse_counts(seq, "--seq") if seq is not None else None
    common: dict[str, Any] = dict(dtype=dtype, calibration=calibration,
                                  calibration_from=calibration_from, price=prices)  # fmt: skip
    if mode == "inference":
        if phase not in ("prefill", "decode"):
            fail(f"--phase: '{phase}' is not one of prefill, decode")
        names = ("hf-eager", "hf-static-compiled", "fused-graph", "eager", "graph")
        if runtime is not None and runtime not in names:
            fail(f"--runtime: '{runtime}' is not one of {', '.join(names[:3])}")
        ctx = parse_counts(context, "--context") if context is not None else None
        r = gm.sweep_inference(model, gpus, phase=phase, batch=counts["batch"], seq=seqs,  # type: ignore[arg-type]
                               context=ctx, tp=counts["tp"], pp=counts["pp"], dp=counts["dp"],
                               runtime=runtime, host=host, new_shapes=new_shapes, **common)  # type: ignore[arg-type]  # fmt: skip
    else:
        if recompute not in ("none", "selective", "full"):
            fail(f"--recompute: '{recompute}' is not one of none, selective, full")
        from gpumodel.llm.memory import POLICY_STATE_BYTES

        if policy is not None and policy not in POLICY_STATE_BYTES:
            fail(f"--policy: '{policy}' is not one of {', '.join(POLICY_STATE_BYTES)}")
        if fusion is not None and fusion not in ("fused", "unfused"):
            fail(f"--fusion: '{fusion}' is not one of fused, unfused")
        r = gm.sweep_training(model, gpus, micro_batch=counts["batch"], seq=seqs,
                              tp=counts["tp"], pp=counts["pp"], dp=counts["dp"], zero=zero,
                              recompute=recompute, policy=policy, host=host,  # type: ignore[arg-type]
                              fusion=fusion or "fused",  # type: ignore[arg-type]
                              virtual_stages=virtual_stages,
                              tokens=parse_count(tokens) if tokens else None, **common)  # fmt: skip
    r = named_costs(r)  # usd_per_million_output_tokens (decode) / _prompt_tokens (prefill)
    table = r.table
    if fits_only:
        table = table[table["fits"]]
    if sort is not None:
        if sort not in r.columns:
            fail(f"--sort: no column '{sort}'; columns: {', '.join(r.columns)}")
        table = table[np.argsort(table[sort], kind="stable")]
    import dataclasses

    r = dataclasses.replace(r, table=table)
    if as_json:
        print_json(r.to_dict())
        return
    show(sweep_table(r, limit=rows), as_csv)


def _setting(value: object) -> str:
    """A sweep setting as a title shows it: a host by its name, a GPU -> value mapping as
    ``gpu value`` pairs, a float in short form."""
    if isinstance(value, dict):
        if "name" in value:  # a host profile
            return str(value["name"])
        return ", ".join(f"{k} {v}" for k, v in value.items())
    return f"{value:g}" if isinstance(value, float) else str(value)
