"""The validate page: measured vs predicted per family, error distributions, the conditions and
timing methods of the measurements, and the calibration's provenance.

Built from a Calibration that carries its measurements (what `gpumodel validate` writes): the
held-out half of each family (gpumodel.calibrate.split) is predicted again with the fitted
parameters and with the datasheet alone, so the plots show the points behind the error table.
"""

from __future__ import annotations

from html import escape
from typing import Any

from gpumodel.calibration import Calibration
from gpumodel.report import _html as h
from gpumodel.report import _svg as svg

# measurement metadata that says how or under which conditions a point was timed
CONDITION_KEYS = ("cache", "timer", "mode", "api", "engine", "backend", "flushed", "layout",
                  "cudnn_benchmark", "pattern", "phase", "cycle_source", "fp8_format",
                  "use_fast_accum", "clock", "conditions")  # fmt: skip

# how a GPU point is timed (gpumodel/validate/timing.py); the numpy backend times on the host
TIMING = {
    "gpu": "each point is the median of CUDA-event intervals taken back to back behind a "
    "busy-wait kernel (so launch and Python overhead stay out), after untimed warm-up calls; "
    "a batch whose (p90 - p10) / median spread is high is retaken and the steadiest kept "
    "(gpumodel/validate/timing.py)",
    "numpy": "each point is the median of host wall-clock timings (time.perf_counter) of the "
    "NumPy kernel on the CPU (the CI backend)",
}


def validate_data(cal: Calibration) -> dict[str, Any]:
    """What the page shows: ``validate --json``'s ``errors`` and ``failures`` and the points
    behind them (held out, predicted with the calibration and with the datasheet)."""
    from gpumodel.calibrate import failures, groups, points_from_records, predict_points, split
    from gpumodel.calibration import CalibrationParams
    from gpumodel.specs import get_gpu

    if not cal.measurements and cal.origin:  # loaded without them: read them from its file
        from gpumodel.calibration import read_calibration_file

        cal = read_calibration_file(cal.origin, measurements=True)
    if not cal.measurements:
        from gpumodel.errors import CalibrationError

        raise CalibrationError(f"{cal.label} carries no measurements to plot; use the file "
                               "`gpumodel validate` wrote")  # fmt: skip
    gpu = get_gpu(cal.gpu_id)
    table = groups()
    points, skipped = points_from_records(cal.measurements)
    _, held = split(points)
    calibrated = predict_points(held, gpu, cal.parameters) if held else []
    datasheet = predict_points(held, gpu, CalibrationParams()) if held else []
    families = []
    for name in cal.errors:
        if name not in table:
            continue  # e.g. collective:* (fitted by `validate --collectives`, no points here)
        select = table[name][0]
        idx = [i for i, p in enumerate(held) if select(p)]
        families.append({
            "name": name,
            "points": [{"what": held[i].op.label(), "measured_s": held[i].measured_s,
                        "predicted_s": float(calibrated[i]), "datasheet_s": float(datasheet[i])}
                       for i in idx],
        })  # fmt: skip
    env = cal.environment
    return {
        "kind": "validate",
        "calibration": cal.label,
        "gpu": cal.gpu_id,
        "device": cal.device_name,
        "created": cal.created.isoformat(),
        "backend": cal.backend,
        "transferred_from": cal.transferred_from,
        "system": cal.system.model_dump(mode="json") if cal.system else None,
        "environment": dict(env),
        "measurements": len(cal.measurements),
        "errors": {k: v.model_dump() for k, v in cal.errors.items()},
        "failures": failures({k: v for k, v in cal.errors.items() if k in table}),
        "families": families,
        "conditions": _conditions(cal.measurements),
        "timing": _timing(cal.measurements),
        "timing_method": TIMING["numpy" if cal.backend == "numpy" else "gpu"],
        "unavailable": list(cal.unavailable),
        "not_used": sorted(set(skipped)),
        "parameters": cal.parameters.model_dump(mode="json", exclude_defaults=True),
    }


def _conditions(records: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, int]]]:
    """family -> condition key -> value -> count, over every measurement."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for r in records:
        meta = r.get("meta") or {}
        fam = out.setdefault(str(r.get("family")), {})
        for key in CONDITION_KEYS:
            if key in meta:
                value = meta[key]
                text = value if isinstance(value, str) else repr(value)
                counts = fam.setdefault(key, {})
                counts[text] = counts.get(text, 0) + 1
    return {k: v for k, v in out.items() if v}


def _timing(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """family -> measurements, median repeats per point, median and largest spread (%)."""
    import numpy as np

    by: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by.setdefault(str(r.get("family")), []).append(r)
    out = {}
    for fam, rs in sorted(by.items()):
        reps = [float(r["repeats"]) for r in rs if isinstance(r.get("repeats"), int | float)]
        spread = [float(r["spread"]) for r in rs if isinstance(r.get("spread"), int | float)]
        out[fam] = {"measurements": len(rs),
                    "repeats_median": float(np.median(reps)) if reps else None,
                    "spread_median_pct": 100 * float(np.median(spread)) if spread else None,
                    "spread_max_pct": 100 * max(spread) if spread else None}  # fmt: skip
    return out


def validate_page(data: dict[str, Any]) -> str:
    env = data["environment"]
    versions = ", ".join(f"{name} {env[k]}" for k, name in (
        ("driver_version_string", "driver"), ("cuda_runtime_version", "CUDA runtime"),
        ("cupy_version", "CuPy"), ("torch_version", "torch"), ("numpy_version", "numpy"),
    ) if env.get(k))  # fmt: skip
    prov = [("calibration", escape(data["calibration"])),
            ("device", escape(f"{data['device']} ({data['gpu']})")),
            ("measured", escape(data["created"])), ("backend", escape(data["backend"])),
            ("versions", escape(versions or "-")),
            ("measurements", escape(str(data["measurements"])))]  # fmt: skip
    if data.get("system"):
        system = data["system"]
        prov.append(("system", escape(f"{system['gpus']} x {system['interconnect']}")))
    if env.get("fitted_from_measurements"):
        prov.append(
            ("fitted from", escape(f"saved measurements {env['fitted_from_measurements']}"))
        )
    if data.get("transferred_from"):
        prov.append(("transferred from", escape(data["transferred_from"])))
    if env.get("sm_clock_max_mhz"):
        prov.append(("clocks", escape(f"SM max {env['sm_clock_max_mhz']} MHz, memory max "
                                      f"{env.get('memory_clock_max_mhz', '?')} MHz; power limit "
                                      f"{env.get('power_limit_w', '?')} W")))  # fmt: skip
    sections = [h.section("Provenance", h.kv(prov), "provenance"),
                h.section("Held-out error per family", _error_table(data), "errors"),
                h.section("Measured vs predicted (held-out points)", _scatters(data), "scatter"),
                h.section("Error distribution", _strip(data), "distribution"),
                h.section("Conditions and timing methods", _conditions_table(data), "conditions")]  # fmt: skip
    import yaml

    params = yaml.safe_dump(data["parameters"], sort_keys=False, width=100)
    sections.append(h.section("Fitted parameters", f"<pre>{escape(params)}</pre>", "parameters"))
    failed = len(data["failures"])
    verdict = "every family with a target is within it" if not failed else f"{failed} FAIL"
    return h.page(f"gpumodel validation: {data['device']} ({data['gpu']})",
                  f"measured {data['created'][:10]}; {verdict}", sections, data)  # fmt: skip


def _error_table(data: dict[str, Any]) -> str:
    from gpumodel.calibrate import groups

    table = groups()

    rows = []
    for name, e in data["errors"].items():
        p = ["errors", name]
        tol = table.get(name, (None, e.get("tolerance_pct"), None))
        target = (
            "-" if tol[1] is None else f"{tol[1]:g}%" + (f" / p90 {tol[2]:g}%" if tol[2] else "")
        )
        status = "-"
        if tol[1] is not None:
            ok = e["median_abs_pct"] <= tol[1] and (tol[2] is None or e["p90_abs_pct"] <= tol[2])
            status = '<span class="pass">pass</span>' if ok else '<span class="fail">FAIL</span>'
        rows.append(
            f"<tr>{h.cell(name)}{h.num([*p, 'n'], e['n'], 'count')}"
            f"{h.num([*p, 'datasheet_median_abs_pct'], e.get('datasheet_median_abs_pct'), 'pct')}"
            f"{h.num([*p, 'median_abs_pct'], e['median_abs_pct'], 'pct')}"
            f"{h.num([*p, 'p90_abs_pct'], e['p90_abs_pct'], 'pct')}"
            f"{h.num([*p, 'bias_pct'], e['bias_pct'], 'pct')}"
            f"<td>{escape(target)}</td><td>{status}</td></tr>"
        )
    note = ('<p class="muted small">|predicted - measured| / measured on the held-out half of '
            "each family (the other half was fitted); datasheet = the same model with no "
            "calibration.</p>")  # fmt: skip
    head = ["family", "n", "datasheet median", "calibrated median", "calibrated p90", "bias",
            "target", "status"]  # fmt: skip
    return note + h.table(head, rows)


def _scatters(data: dict[str, Any]) -> str:
    plots = []
    for i, fam in enumerate(data["families"]):
        pts = fam["points"]
        cal = svg.Series("calibrated", svg.PALETTE[0], [
            svg.Pt(p["measured_s"], p["predicted_s"], f"{p['what']}: measured "
                   f"{h.fmt(p['measured_s'], 's')}, predicted {h.fmt(p['predicted_s'], 's')}")
            for p in pts])  # fmt: skip
        ds = svg.Series("datasheet", svg.GREY, [
            svg.Pt(p["measured_s"], p["datasheet_s"], f"{p['what']}: measured "
                   f"{h.fmt(p['measured_s'], 's')}, datasheet {h.fmt(p['datasheet_s'], 's')}")
            for p in pts], radius=2.6, hollow=True)  # fmt: skip
        plots.append(svg.scatter_vs_diagonal(f"family-{i}", fam["name"], [ds, cal]))
    legend = ('<p class="muted small">filled: calibrated; hollow grey: datasheet only; '
              "line: predicted = measured; band: ±10%.</p>")  # fmt: skip
    return legend + '<div class="grid">' + "".join(plots) + "</div>"


def _strip(data: dict[str, Any]) -> str:
    rows = []
    for fam in data["families"]:
        pts = [svg.Pt(100 * (p["predicted_s"] - p["measured_s"]) / p["measured_s"], 0.0,
                      f"{p['what']}: {100 * (p['predicted_s'] / p['measured_s'] - 1):+.1f}%")
               for p in fam["points"]]  # fmt: skip
        rows.append((fam["name"], pts))
    return svg.strip("errors", "calibrated error of every held-out point", rows)


def _conditions_table(data: dict[str, Any]) -> str:
    body = f'<p class="small">Timing: {escape(data["timing_method"])}.</p>'
    rows = []
    for family, t in data["timing"].items():
        keys = data["conditions"].get(family, {})
        text = "; ".join(f"{k}: " + ", ".join(f"{v} ×{n}" for v, n in sorted(vals.items()))
                         for k, vals in keys.items())  # fmt: skip
        p = ["timing", family]
        rows.append(f"<tr>{h.cell(family)}{h.num([*p, 'measurements'], t['measurements'], 'count')}"
                    f"{h.num([*p, 'repeats_median'], t['repeats_median'], 'count')}"
                    f"{h.num([*p, 'spread_median_pct'], t['spread_median_pct'], 'pct')}"
                    f"{h.num([*p, 'spread_max_pct'], t['spread_max_pct'], 'pct')}"
                    f"{h.cell(text or '-')}</tr>")  # fmt: skip
    head = ["family", "measurements", "repeats per point (median)", "spread (median)",
            "spread (largest)", "conditions and timing (count of measurements)"]  # fmt: skip
    body += h.table(head, rows)
    body += ('<p class="muted small">spread = (p90 - p10) / median of one point\'s repeats; '
             "all measurements, fitted and held out.</p>")  # fmt: skip
    if data["unavailable"]:
        items = "".join(f"<li>{escape(str(u.get('family')))}: {escape(str(u.get('what')))}: "
                        f"{escape(str(u.get('reason')))}</li>" for u in data["unavailable"])  # fmt: skip
        body += f'<h3>Not measured</h3><ul class="small">{items}</ul>'
    return body


__all__ = ["validate_data", "validate_page"]
