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
    kind = "serve" if "options" in data else "train"
    gpus = {o["gpu"] for o in data.get("options", [])} | ({data["gpu"]} if "gpu" in data else set())
    capacity = {g: get_gpu(g).memory_bytes for g in gpus}
    return {"kind": "plan", "plan": kind, "data": data, "capacity_bytes": capacity}


def plan_page(page: dict[str, Any]) -> str:
    if page["plan"] == "serve":
        return _serve(page)
    return _train(page)


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
            ("$ per 1M tokens", "usd_per_million_tokens", "usd"),
            ("memory per GPU", "memory_per_gpu_bytes", "bytes")]  # fmt: skip
    rows: list[str] = []
    notes: list[str] = []
    order = sorted(range(len(opts)), key=lambda i: _rank(opts[i]))
    for rank, i in enumerate(order):
        o = opts[i]
        cells = "".join(h.num(["options", i, key], o.get(key), unit) for _, key, unit in cols)
        meets = "yes" if o.get("meets_slo") else ("no" if o.get("feasible") else "does not fit")
        role = "chosen" if o.get("best") else ("runner-up" if o.get("meets_slo") else "")
        label = str(o.get("calibration") or "-")
        short, _, where = label.partition(" (")
        cal = (f'<td title="{escape(label)}">{escape(short)}'
               + (f"<sup>[{len(notes) + 1}]</sup>" if where else "") + "</td>")  # fmt: skip
        if where:
            notes.append(f"<li>{escape(o['gpu'])}: {escape(label)}</li>")
        rows.append(f'<tr class="{"best" if o.get("best") else ""}">{h.cell(rank + 1)}'
                    f'<td class="nowrap">{escape(o["gpu"])}</td>{h.cell(role)}{cells}'
                    f"{h.cell(meets)}{cal}</tr>")  # fmt: skip
    table = h.table(["#", "GPU", "", *[c[0] for c in cols], "meets targets", "calibration"], rows)
    if notes:
        table += f'<ol class="small muted">{"".join(notes)}</ol>'
    priced = [(i, opts[i]) for i in order if opts[i].get("usd_per_million_tokens")]
    cost = svg.hbars("cost", "$ per 1M tokens (lower is better)", [
        svg.Bar(o["gpu"], o["usd_per_million_tokens"],
                svg.PALETTE[0] if o.get("meets_slo") else svg.GREY,
                note=h.fmt(o["usd_per_million_tokens"], "usd")
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
    cost = o.get("usd_per_million_tokens")
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
        summary.append(("step", h.num(["step", "step_time_s"], step.get("step_time_s"), "s",
                                      "span")))  # fmt: skip
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
    if parts:
        cap = mem.get("capacity_bytes") or page["capacity_bytes"].get(d.get("gpu"), 0.0)
        bars = [svg.Bar(k.removesuffix("_bytes").replace("_", " "), mem[k], svg.PALETTE[2],
                        note=h.fmt(mem[k], "bytes")) for k in parts]  # fmt: skip
        bars.append(svg.Bar("total", mem.get("total_bytes", 0.0),
                            svg.PALETTE[2] if mem.get("fits", True) else svg.PALETTE[5],
                            note=h.fmt(mem.get("total_bytes"), "bytes")))  # fmt: skip
        sections.append(h.section("Memory fit", svg.hbars(
            "memory", f"memory per GPU ({'fits' if mem.get('fits') else 'does not fit'})", bars,
            "bytes per GPU", limit=cap, limit_label=f"capacity {h.fmt(cap, 'bytes')}"), "memory"))  # fmt: skip
    for key, value in d.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            sections.append(h.section(key.replace("_", " "), _rows_table(key, value), key))
    for n in d.get("notes") or []:
        sections.append(f'<p class="muted small">note: {escape(str(n))}</p>')
    return h.page(f"gpumodel plan train: {d.get('model')} on {d.get('gpu')}",
                  f"{d.get('gpus')} GPUs, {h.fmt(d.get('days'), 'days')}, "
                  f"{h.fmt(d.get('cost_usd'), 'usd')}", sections, page)  # fmt: skip


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
        body.append(f'<tr class="{"best" if r.get("best") or r.get("chosen") else ""}">{cells}</tr>')
    return h.table(cols, body)


__all__ = ["plan_data", "plan_page"]
