"""The diagnose page: one step's timeline, each op against its speed of light and on the GPU's
roofline, the findings with what fixing each would save."""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from gpumodel.report import _html as h
from gpumodel.report import _svg as svg

GAP_COLORS = {"data_loading": "#D55E00", "host_sync": "#CC79A7", "launch": "#E69F00",
              "host_other": "#9a9a9a"}  # fmt: skip


def diagnose_data(report: Any, trace: str | Path | None = None) -> dict[str, Any]:
    """``diagnose --json`` (``report.to_dict()``) plus the first step's timeline from the trace
    (Chrome traces only) and the roof the ops are drawn under."""
    from gpumodel.specs import get_gpu

    data: dict[str, Any] = {"kind": "diagnose", **report.to_dict()}
    data["timeline"] = _timeline(trace) if trace is not None else None
    gpu = get_gpu(report.gpu.id)
    dtypes = {r.dtype.split(" ")[0] for r in report.ops if r.mapped}
    dtype = next((d for d in ("bf16", "fp16", "tf32", "fp8") if d in dtypes), "bf16")
    peak = gpu.peak_flops(dtype, "tensor") or gpu.peak_flops("fp32", "vector") or 0.0
    data["roof"] = {"peak_flops": peak, "unit": f"tensor {dtype}",
                    "bandwidth_bytes_per_s": gpu.memory_bandwidth_bytes_per_s}  # fmt: skip
    return data


def _timeline(trace: str | Path) -> dict[str, Any] | None:
    """Every GPU activity (kernel, memcpy, memset) of the analysed window (whole step periods,
    as diagnose counts them) and the idle gaps by cause, in seconds from the window's start."""
    from gpumodel.diagnose.parse import load_trace
    from gpumodel.diagnose.timeline import build_timeline

    tr = load_trace(trace)
    if tr.format == "nsys_kern_sum_csv":
        return None  # a kernel summary has no timestamps
    tl = build_timeline(tr)
    w0, w1 = tl.window
    spans = [[(g.ts - w0) * 1e-6, (min(g.end, w1) - w0) * 1e-6, g.name, g.kind]
             for g in sorted(tl.kernels_in_window, key=lambda g: g.ts)]  # fmt: skip
    gaps = [[(max(g.start, w0) - w0) * 1e-6, (min(g.end, w1) - w0) * 1e-6, g.cause]
            for g in tl.gaps if g.start < w1 and g.end > w0]  # fmt: skip
    return {"window_s": (w1 - w0) * 1e-6, "periods": tl.periods, "spans": spans, "gaps": gaps}


def diagnose_page(data: dict[str, Any]) -> str:
    st = data["steps"]
    gpu = data["gpu"]
    head = [("trace", escape(str(data["source"].get("path") or "-"))),
            ("GPU", escape(f"{gpu['name']} ({gpu['id']})")),
            ("calibration", escape(data["calibration"])),
            ("step", h.num(["steps", "step_time_s"], st["step_time_s"], "s", "span")
             + escape(f" ({st['source']}, {st['count']} step(s))"))]  # fmt: skip
    prof = data.get("profiler")
    if prof and st.get("unprofiled_step_time_s") is not None:
        head.append(("step without the profiler",
                     h.num(["steps", "unprofiled_step_time_s"], st["unprofiled_step_time_s"], "s",
                           "span")
                     + escape((f" (range {h.fmt(st['unprofiled_step_range_s'][0], 's')} - "
                               f"{h.fmt(st['unprofiled_step_range_s'][1], 's')})"
                               if st.get("unprofiled_step_range_s") else "")
                              + f" (its host cost: {prof['method']}; {prof['events_per_step']:.0f} "
                              "recorded events a step); findings and Amdahl are for this step")))  # fmt: skip
    if st.get("gpu_utilization_pct") is not None:
        head.append(("GPU busy / idle per step",
                     h.num(["steps", "gpu_busy_s"], st["gpu_busy_s"], "s", "span") + " / "
                     + h.num(["steps", "gpu_idle_s"], st["gpu_idle_s"], "s", "span") + " ("
                     + h.num(["steps", "gpu_utilization_pct"], st["gpu_utilization_pct"], "pct",
                             "span") + " busy)"))  # fmt: skip
        head.append(
            (
                "kernels per step",
                h.num(["steps", "kernels_per_step"], st["kernels_per_step"], "count", "span"),
            )
        )
    sections = [h.section("Step", h.kv(head), "step")]
    tl = data.get("timeline")
    if tl:
        title = (f"GPU activity over the analysed window: {tl['periods']} step(s), "
                 f"{len(tl['spans'])} kernels and copies")  # fmt: skip
        plot = svg.timeline("timeline", title, [tuple(s) for s in tl["spans"]],
                            [tuple(g) for g in tl["gaps"]], tl["window_s"], tl["periods"],
                            GAP_COLORS)  # fmt: skip
        sections.append(h.section("Step timeline", plot, "timeline"))
    per = "per step" if str(data["steps"]["source"]).startswith("ProfilerStep") else "whole trace"
    sections.append(h.section(f"Findings ({per})", _findings(data), "findings"))
    sections.append(h.section("Ops against their speed of light", _ops(data), "ops"))
    for n in data.get("notes") or []:
        sections.append(f'<p class="muted small">note: {escape(n)}</p>')
    return h.page(f"gpumodel diagnose: {Path(str(data['source'].get('path') or 'trace')).name}",
                  f"{gpu['name']}; step {h.fmt(st['step_time_s'], 's')}", sections, data)  # fmt: skip


def _findings(data: dict[str, Any]) -> str:
    items = []
    for i, f in enumerate(data["findings"]):
        p = ["findings", i]
        saving = ("not quantified" if f["recoverable_s"] is None else
                  h.num([*p, "recoverable_s"], f["recoverable_s"], "s", "span") + " ("
                  + h.num([*p, "pct_of_step"], f["pct_of_step"], "pct", "span")
                  + " of the step); step if fixed "
                  + h.num([*p, "step_time_if_fixed_s"], f["step_time_if_fixed_s"], "s", "span"))  # fmt: skip
        evidence = "".join(f"<li>{escape(e)}</li>" for e in f["evidence"])
        items.append(f"<li><b>{escape(f['title'])}</b> <span class=\"muted\">[{escape(f['kind'])}]"
                     f"</span><br>predicted saving: {saving}<ul class=\"small\">{evidence}</ul>"
                     f"fix: {escape(f['fix'])}</li>")  # fmt: skip
    body = (f'<ol class="findings">{"".join(items)}</ol>' if items
            else '<p class="muted">no step-level finding above 1% of the step</p>')  # fmt: skip
    a = data["amdahl"]
    if a.get("per_finding"):
        bars = [svg.Bar(e["kind"].replace("_", " "), e["step_time_s"], svg.PALETTE[2],
                        note=h.fmt(e["step_time_s"], "s")) for e in a["per_finding"]]  # fmt: skip
        bars.insert(0, svg.Bar("step", a["step_time_s"], svg.GREY,
                               note=h.fmt(a["step_time_s"], "s")))  # fmt: skip
        if a.get("all_fixed_step_time_s") is not None:
            bars.append(svg.Bar("all of them", a["all_fixed_step_time_s"], svg.PALETTE[0],
                                note=h.fmt(a["all_fixed_step_time_s"], "s")))  # fmt: skip
        body += svg.hbars("amdahl", "step time if each finding is fixed (Amdahl)", bars,
                          "seconds per step", label_w=180)  # fmt: skip
    return body


def _ops(data: dict[str, Any]) -> str:
    rows = []
    for i, r in enumerate(data["ops"]):
        p = ["ops", i]
        bound = r["bound"] or f"unmapped: {r['reason']}"
        rows.append(
            f"<tr>{h.cell(r['name'])}{h.cell(r['phase'])}{h.cell(r['dtype'])}"
            f"{h.num([*p, 'count'], r['count'], 'count')}"
            f"{h.num([*p, 'measured_s'], r['measured_s'], 's')}"
            f"{h.num([*p, 'predicted_s'], r['predicted_s'], 's')}"
            f"{h.num([*p, 'sol_pct'], r['sol_pct'], 'pct')}{h.cell(bound)}"
            f"{h.num([*p, 'recoverable_s'], r['recoverable_s'] if r['mapped'] else None, 's')}</tr>"
        )
    table = h.table(["op", "phase", "dtype", "calls", "measured", "speed of light", "SoL %",
                     "bound", "recoverable"], rows)  # fmt: skip
    om = data["ops_omitted"]
    if om["count"]:
        table += (
            f'<p class="muted small">{om["count"]} more ops, {h.fmt(om["measured_s"], "s")}</p>'
        )
    bars = []
    for r in data["ops"]:
        label = r["name"].removeprefix("aten::")[:38]
        bars.append(svg.Bar(label, r["measured_s"], svg.GREY, note=h.fmt(r["measured_s"], "s"),
                            title=f"{r['name']}: measured {h.fmt(r['measured_s'], 's')}"))  # fmt: skip
        bars.append(svg.Bar("", r["predicted_s"] or 0.0, svg.PALETTE[0],
                            note=f"SoL {h.fmt(r['sol_pct'], 'pct')}" if r["mapped"] else "unmapped",
                            title=f"{r['name']}: speed of light {h.fmt(r['predicted_s'], 's')}"))  # fmt: skip
    chart = svg.hbars("sol", "measured (grey) and speed of light (blue) over the trace", bars,
                      "seconds over the whole trace", bar_h=9)  # fmt: skip
    roof = data["roof"]
    pts = [svg.Pt(r["arithmetic_intensity"], r["achieved_flops_per_s"],
                  f"{r['name']}: {r['arithmetic_intensity']:.3g} FLOP/B, "
                  f"{r['achieved_flops_per_s'] / 1e12:.3g} TFLOP/s ({r['bound']})")
           for r in data["ops"] if r["mapped"] and r["arithmetic_intensity"]
           and r["achieved_flops_per_s"]]  # fmt: skip
    roofline = ""
    if pts and roof["peak_flops"]:
        roofline = svg.roofline("roofline", f"ops on the roofline ({roof['unit']} peak, HBM)",
                                roof["peak_flops"], roof["bandwidth_bytes_per_s"], pts)  # fmt: skip
    return table + f'<div class="grid">{chart}{roofline}</div>'


__all__ = ["diagnose_data", "diagnose_page"]
