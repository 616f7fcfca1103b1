"""The plan page: GPUs compared, cost, memory fit, the chosen configuration and the runners-up.

Built from the dict ``plan serve --json`` or ``plan train --json`` prints (``plan.to_dict()``);
keys it does not know are shown as they are (lists of rows become tables), so the page keeps up
with the planners.
"""

from __future__ import annotations

from html import escape
from typing import Any

from gpumodel.report import _html as h
from gpumodel.report import _svg as svg

# unit of a --json key, by its name
_UNITS = (("_pct", "pct"), ("_s", "s"), ("_bytes", "bytes"), ("usd", "usd"), ("days", "days"),
          ("mfu", "num"), ("_per_s", "num"))  # fmt: skip


BOUND_COLORS = {"compute": svg.PALETTE[0], "memory": svg.PALETTE[2], "issue": svg.PALETTE[1],
                "launch": svg.GREY, "latency": svg.PALETTE[3], "network": svg.PALETTE[5]}  # fmt: skip


def _unit(key: str) -> str:
    for suffix, unit in _UNITS:
        if key.endswith(suffix) or key.startswith(suffix):
            return unit
    return "num"


def plan_data(plan: Any) -> dict[str, Any]:
    """The page's data: the plan's --json dict, and each compared GPU's memory capacity."""
    from gpumodel.specs import get_gpu

    data = plan.to_dict() if hasattr(plan, "to_dict") else dict(plan)
    if "options" in data and "days_target" in data:
        kind = "train_search"
    elif "options" in data:
        kind = "serve"
    else:
        kind = "train"
    # in the plan's order (a set's order changes from process to process: the same plan gave
    # two pages that differed in it)
    gpus = [o["gpu"] for o in data.get("options", []) if "gpu" in o]
    gpus += [data["gpu"]] if "gpu" in data else []
    capacity = {g: get_gpu(g).memory_bytes for g in dict.fromkeys(gpus)}
    return {"kind": "plan", "plan": kind, "data": data, "capacity_bytes": capacity}


def plan_page(page: dict[str, Any]) -> str:
    if page["plan"] == "serve":
        return _serve(page)
    if page["plan"] == "train_search":
        return _train_search(page)
    return _train(page)


RUNNERS_UP = 3


def search_roles(d: dict[str, Any]) -> list[str]:
    """Each option's role in a training search: "chosen", "runner-up" (the next RUNNERS_UP
    that meet the target, by the choice's own criterion: cost within --days, time within
    --budget alone), "frontier" or ""."""
    opts = d["options"]
    choice = d.get("choice")
    roles = ["frontier" if o.get("frontier") else "" for o in opts]
    pick = next((i for i, o in enumerate(opts) if choice and o == choice), None)
    if pick is None:
        return roles
    roles[pick] = "chosen"
    met = [i for i, o in enumerate(opts) if o.get("meets") and i != pick]
    if d.get("days_target") is not None:  # the planner's rule: fewest GPUs within 1% of cheapest
        from gpumodel.llm.planning import COST_TIE

        tie = min(_cost(opts[i]) for i in [pick, *met]) * (1 + COST_TIE)
        met.sort(key=lambda i: (0, opts[i]["gpus"]) if _cost(opts[i]) <= tie else
                 (1, _cost(opts[i])))  # fmt: skip
    else:
        met.sort(key=lambda i: (opts[i]["days"], _cost(opts[i])))
    for i in met[:RUNNERS_UP]:
        roles[i] = "runner-up"
    return roles


def _cost(o: dict[str, Any]) -> float:
    return o["cost_usd"] if o.get("cost_usd") is not None else o["gpu_hours"]


def _price_text(price: dict[str, Any] | None) -> str:
    if not price:
        return "no price: cost in GPU-hours"
    return (
        f"${price['usd_per_gpu_hour']:.2f}/GPU-hour, {price.get('provider')} "
        f"{price.get('date')}: {price.get('source')}"
    )


def _train_search(page: dict[str, Any]) -> str:
    d = page["data"]
    opts = d["options"]
    roles = search_roles(d)
    cap = page["capacity_bytes"].get(d["gpu"])
    target = " and ".join(x for x in (
        f"done within {d['days_target']:g} days" if d.get("days_target") is not None else "",
        f"within ${d['budget_usd']:,.0f}" if d.get("budget_usd") is not None else "") if x)  # fmt: skip
    summary = [("model", escape(d["model"])), ("GPU", escape(d["gpu"])),
               ("tokens", h.num(["tokens"], d["tokens"], "num", "span")
                + escape(f" ({d['seq']}-token sequences)")),
               ("target", escape(target or "none given: the frontier is the answer")),
               ("answer", f"<b>{escape(d['answer'])}</b>"),
               ("price", escape(_price_text(d.get("price")))),
               ("calibration", escape(d["calibration"]))]  # fmt: skip
    for w in d.get("warnings") or []:
        summary.append(("warning", escape(w)))
    cols = [("GPUs", "gpus", "count"), ("tp", "tp", "count"), ("pp", "pp", "count"),
            ("dp", "dp", "count"), ("step", _time_key(opts[0]) if opts else "time_s", "s"),
            ("days", "days", "days"),
            ("cost", "cost_usd", "usd"), ("GPU-hours", "gpu_hours", "num"), ("MFU", "mfu", "num"),
            ("memory per GPU", "memory_per_gpu_bytes", "bytes")]  # fmt: skip
    has_target = d.get("days_target") is not None or d.get("budget_usd") is not None

    def meets(o: dict[str, Any]) -> str:
        return ("yes" if o.get("meets") else "no") if has_target else "-"

    rows = []
    for i, o in enumerate(opts):
        cells = "".join(h.num(["options", i, key], o.get(key), unit) for _, key, unit in cols)
        rows.append(f'<tr class="{"best" if roles[i] == "chosen" else ""}">{h.cell(roles[i])}'
                    f"{cells}{h.cell(meets(o))}</tr>")  # fmt: skip
    table = h.table(["role", *[c[0] for c in cols], "meets target"], rows)
    table += ('<p class="muted small">each GPU count\'s fastest layout that fits memory; '
              "frontier: no other count is both faster and cheaper; runner-up: the next "
              f"{RUNNERS_UP} that meet the target by the choice's rule (within --days: the "
              "fewest GPUs among those within 1% of the cheapest cost, then the cheapest; "
              "within --budget alone: the fastest).</p>")  # fmt: skip
    for text in d.get("infeasible") or []:
        table += f'<p class="muted small">not possible: {escape(text)}</p>'
    days_plot = svg.loglog("days", "days to train vs GPU count", _series(opts, roles, "gpus",
                           "days"), "GPUs", "days",
                           hline=(d["days_target"], f"{d['days_target']:g} days")
                           if d.get("days_target") is not None else None)  # fmt: skip
    cost_plot = svg.loglog("cost", "cost vs days (the frontier)", _series(opts, roles, "days",
                           "cost_usd" if all(o.get("cost_usd") for o in opts) else "gpu_hours"),
                           "days", "US dollars" if all(o.get("cost_usd") for o in opts)
                           else "GPU-hours")  # fmt: skip
    bars = [svg.Bar(f"{o['gpus']} GPUs (tp {o['tp']} pp {o['pp']})",
                    o["memory_per_gpu_bytes"],
                    svg.PALETTE[0] if roles[i] == "chosen" else svg.PALETTE[2],
                    note=h.fmt(o["memory_per_gpu_bytes"], "bytes")) for i, o in enumerate(opts)]  # fmt: skip
    memory = svg.hbars("memory", "memory per GPU of each count's layout", bars, "bytes per GPU",
                       bar_h=10, label_w=170, limit=cap,
                       limit_label=f"capacity {h.fmt(cap, 'bytes')}")  # fmt: skip
    sections = [h.section("Plan", h.kv(summary), "summary"),
                h.section("GPU counts compared", f'<div class="grid">{days_plot}{cost_plot}</div>'
                          + table, "options"),
                h.section("Memory fit", memory, "memory")]  # fmt: skip
    return h.page(f"gpumodel plan train: {d['model']} on {d['gpu']}", d["answer"], sections, page)


_ROLE_STYLE = (("chosen", svg.PALETTE[5], 6.0), ("runner-up", svg.PALETTE[1], 4.5),
               ("frontier", svg.PALETTE[2], 3.5), ("", svg.GREY, 3.0))  # fmt: skip


def _series(opts: list[dict[str, Any]], roles: list[str], x: str, y: str) -> list[svg.Series]:
    """One series per role, so every option is drawn once."""
    out = []
    for role, color, radius in reversed(_ROLE_STYLE):  # the chosen one drawn last, on top
        pts = [svg.Pt(o[x], o[y], f"{o['gpus']} GPUs, tp {o['tp']} pp {o['pp']} dp {o['dp']}: "
                      f"{h.fmt(o['days'], 'days')}, {h.fmt(o.get('cost_usd'), 'usd')}")
               for o, r in zip(opts, roles) if r == role]  # fmt: skip
        if pts:
            out.append(svg.Series(role or "other", color, pts, radius=radius))
    return out


def _serve(page: dict[str, Any]) -> str:
    d = page["data"]
    opts = d["options"]
    targets = ", ".join(f"{name} {h.fmt(d.get(key), 's')}" for name, key in (
        ("TTFT", "ttft_slo_s"), ("TPOT", "tpot_slo_s"), ("latency", "latency_slo_s"))
        if d.get(key) is not None) or "none given"  # fmt: skip
    best = d.get("best")
    summary = [("model", escape(str(d.get("model")))),
               ("workload", escape(f"{d.get('prompt')} prompt + {d.get('output')} output tokens "
                                   f"per request, {d.get('rate_per_s')} requests/s, "
                                   f"{d.get('dtype')}, {d.get('runtime')}")),
               ("targets", escape(targets)),
               ("chosen", escape(str(best or "none meets the targets")))]  # fmt: skip
    for w in d.get("warnings") or []:
        summary.append(("warning", escape(w)))
    cols = [("tp", "tp", "count"), ("batch", "batch", "count"), ("TTFT", "ttft_s", "s"),
            ("TPOT", "tpot_s", "s"), ("latency", "latency_s", "s"),
            ("replicas", "replicas", "count"), ("GPUs", "gpus", "count"),
            ("$/GPU-hour", "usd_per_gpu_hour", "usd"),
            ("$ per 1M tokens (prompt + output)", "usd_per_million_prompt_and_output_tokens", "usd"),
            ("memory per GPU", "memory_per_gpu_bytes", "bytes")]  # fmt: skip
    rows: list[str] = []
    notes: list[str] = []
    prices: list[str] = []
    order = sorted(range(len(opts)), key=lambda i: _rank(opts[i]))
    for rank, i in enumerate(order):
        o = opts[i]
        cells = "".join(h.num(["options", i, key], o.get(key), unit) for _, key, unit in cols)
        meets = ("yes" if o.get("meets_slo") else "no" if o.get("feasible")
                 else escape(str(o.get("reason_short") or "does not fit")))  # fmt: skip
        role = "chosen" if o.get("best") else ("runner-up" if o.get("meets_slo") else "")
        label = str(o.get("calibration") or "-")
        short, _, where = label.partition(" (")
        cal = (f'<td title="{escape(label)}">{escape(short)}'
               + (f"<sup>[{len(notes) + 1}]</sup>" if where else "") + "</td>")  # fmt: skip
        if where:
            notes.append(f"<li>{escape(o['gpu'])}: {escape(label)}</li>")
        price = o.get("price") or {}
        price_cell = h.cell(None)
        if price:
            price_cell = (f'<td class="nowrap" title="{escape(str(price.get("source")))}">'
                          f"{escape(str(price.get('provider')))} {escape(str(price.get('date')))}"
                          f"<sup>[p{len(prices) + 1}]</sup></td>")  # fmt: skip
            prices.append(f"<li>p{len(prices) + 1}. {escape(o['gpu'])}: "
                          f"{escape(_price_text(price))}</li>")  # fmt: skip
        rows.append(f'<tr class="{"best" if o.get("best") else ""}">{h.cell(rank + 1)}'
                    f'<td class="nowrap">{escape(o["gpu"])}</td>{h.cell(role)}{cells}'
                    f"{price_cell}{h.cell(meets)}{cal}</tr>")  # fmt: skip
    table = h.table(["#", "GPU", "", *[c[0] for c in cols], "price from", "meets targets",
                     "calibration"], rows)  # fmt: skip
    if notes:
        table += (
            f'<p class="small muted">calibrations:</p><ol class="small muted">{"".join(notes)}</ol>'
        )
    if prices:
        table += f'<p class="small muted">prices:</p><ul class="small muted">{"".join(prices)}</ul>'
    priced = [(i, opts[i]) for i in order if opts[i].get("usd_per_million_prompt_and_output_tokens")]
    cost = svg.hbars("cost", "$ per 1M tokens (lower is better)", [
        svg.Bar(o["gpu"], o["usd_per_million_prompt_and_output_tokens"],
                svg.PALETTE[0] if o.get("meets_slo") else svg.GREY,
                note=h.fmt(o["usd_per_million_prompt_and_output_tokens"], "usd")
                + ("" if o.get("meets_slo") else " (misses targets)"))
        for _, o in priced], "US dollars per million tokens (prompt + output)")  # fmt: skip
    memory = _memory_fit([(opts[i]["gpu"], opts[i].get("memory_per_gpu_bytes")) for i in order],
                         page)  # fmt: skip
    sections = [h.section("Plan", h.kv(summary), "summary"),
                h.section("GPUs compared (ranked: meets targets, then cost)", table, "options"),
                h.section("Cost", cost, "cost"),
                h.section("Memory fit", memory, "memory")]  # fmt: skip
    return h.page(f"gpumodel plan serve: {d.get('model')}", f"chosen: {best or 'none'}",
                  sections, page)  # fmt: skip


def _rank(o: dict[str, Any]) -> tuple[int, float]:
    cost = o.get("usd_per_million_prompt_and_output_tokens")
    return (0 if o.get("meets_slo") else 1 if o.get("feasible") else 2,
            cost if cost is not None else float("inf"))  # fmt: skip


def _memory_fit(rows: list[tuple[str, float | None]], page: dict[str, Any]) -> str:
    bars = []
    for gpu, used in rows:
        cap = page["capacity_bytes"].get(gpu)
        if used is None or not cap:
            continue
        pct = 100 * used / cap
        bars.append(svg.Bar(gpu, pct, svg.PALETTE[2] if pct <= 100 else svg.PALETTE[5],
                            note=f"{h.fmt(used, 'bytes')} of {h.fmt(cap, 'bytes')}"))  # fmt: skip
    if not bars:
        return '<p class="muted">no memory figure in this plan</p>'
    return svg.hbars("memory", "memory per GPU, % of its capacity", bars, "% of GPU memory",
                     limit=100.0, limit_label="capacity")  # fmt: skip


def _train(page: dict[str, Any]) -> str:
    d = page["data"]
    step = d.get("step") or {}
    summary = []
    for label, key, unit in (("GPUs", "gpus", "count"), ("time", "days", "days"),
                             ("cost", "cost_usd", "usd"), ("GPU-hours", "gpu_hours", "num"),
                             ("$/GPU-hour", "usd_per_gpu_hour", "usd"), ("MFU", "mfu", "num"),
                             ("tokens", "tokens", "num")):  # fmt: skip
        if d.get(key) is not None:
            summary.append((label, h.num([key], d[key], unit, "span")))
    for label, key in (("model", "model"), ("GPU", "gpu"), ("price source", "price_source"),
                       ("calibration", "calibration")):  # fmt: skip
        value = d.get(key, step.get(key))
        if value is not None:
            summary.append((label, escape(str(value))))
    if step:
        summary.append(("parallelism", escape(
            f"tp {step.get('tp')} x pp {step.get('pp')} x dp {step.get('dp')}, ZeRO-"
            f"{step.get('zero')}, recompute {step.get('recompute')}")))  # fmt: skip
        key = _time_key(step)
        summary.append(("step", h.num(["step", key], step.get(key), "s",
                                      "span")))  # fmt: skip
        if (step.get("pp") or 1) > 1:  # the pipeline's bubble, interleaved or not
            v = step.get("virtual_stages") or 1
            how = "1F1B" if v == 1 else f"interleaved 1F1B, {v} chunks a stage"
            summary.append(("pipeline bubble", h.num(["step", "bubble_s"], step.get("bubble_s"),
                                                     "s", "span")
                            + escape(f" ({100 * step.get('bubble_fraction', 0):.1f}% of the "
                                     f"micro-batches' time, {how})")))  # fmt: skip
    sections = [h.section("Plan", h.kv(summary), "summary")]
    breakdown = step.get("breakdown") or []
    if breakdown:
        bars = [svg.Bar(b["name"], b["time_s"], BOUND_COLORS.get(b.get("bound", ""), svg.GREY),
                        note=f"{h.fmt(b['time_s'], 's')} ({b.get('bound', '')})")
                for b in breakdown]  # fmt: skip
        sections.append(h.section("Where a micro-batch's time goes", svg.hbars(
            "breakdown", "per micro-batch and stage, by op", bars, "seconds"), "breakdown"))  # fmt: skip
    mem = step.get("memory") or {}
    parts = [k for k in ("weights_bytes", "gradients_bytes", "optimizer_bytes",
                         "activations_bytes", "kv_cache_bytes", "overhead_bytes") if k in mem]  # fmt: skip
    if mem.get("transient_bytes"):  # DDP's second-step buckets
        parts.insert(-1, "transient_bytes")
    if parts:
        cap = mem.get("capacity_bytes") or page["capacity_bytes"].get(d.get("gpu"), 0.0)
        label = {"transient_bytes": "second-step buckets"}
        bars = [svg.Bar(label.get(k, k.removesuffix("_bytes").replace("_", " ")), mem[k],
                        svg.PALETTE[2], note=h.fmt(mem[k], "bytes")) for k in parts]  # fmt: skip
        bars.append(svg.Bar("total", mem.get("total_bytes", 0.0),
                            svg.PALETTE[2] if mem.get("fits", True) else svg.PALETTE[5],
                            note=h.fmt(mem.get("total_bytes"), "bytes")))  # fmt: skip
        sections.append(h.section("Memory fit", svg.hbars(
            "memory", f"memory per GPU ({'fits' if mem.get('fits') else 'does not fit'})", bars,
            "bytes per GPU", limit=cap, limit_label=f"capacity {h.fmt(cap, 'bytes')}"), "memory"))  # fmt: skip
    sections.append(
        '<p class="muted small">one GPU count: for counts compared, the frontier and '
        "runners-up, give --days or --budget, or a list (--gpus 32,64,128).</p>"
    )
    for key, value in d.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            sections.append(h.section(key.replace("_", " "), _rows_table(key, value), key))
    for n in d.get("notes") or []:
        sections.append(f'<p class="muted small">note: {escape(str(n))}</p>')
    return h.page(f"gpumodel plan train: {d.get('model')} on {d.get('gpu')}",
                  f"{d.get('gpus')} GPUs, {h.fmt(d.get('days'), 'days')}, "
                  f"{h.fmt(d.get('cost_usd'), 'usd')}", sections, page)  # fmt: skip


def _time_key(d: dict[str, Any]) -> str:
    """The step time's key: ``time_s`` where a result has it (#19 item 8), else the older
    ``step_time_s``."""
    return "time_s" if "time_s" in d else "step_time_s"


def _rows_table(key: str, rows: list[dict[str, Any]]) -> str:
    """A list of result rows (e.g. the candidates a planner compared), scalars only."""
    cols = [k for k in rows[0] if not isinstance(rows[0][k], dict | list)]
    body = []
    for i, r in enumerate(rows):
        cells = ""
        for k in cols:
            v = r.get(k)
            if isinstance(v, bool) or not isinstance(v, int | float):
                cells += h.cell(v)
            else:
                cells += h.num([key, i, k], v, _unit(k))
        body.append(
            f'<tr class="{"best" if r.get("best") or r.get("chosen") else ""}">{cells}</tr>'
        )
    return h.table(cols, body)


__all__ = ["plan_data", "plan_page"]
