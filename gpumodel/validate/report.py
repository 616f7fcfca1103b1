"""Validation reports: markdown, rich table and a plot of measured points over predictions."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpumodel.calibrate import groups, points_from_records, predict_points, split
from gpumodel.calibration import Calibration, CalibrationParams
from gpumodel.specs import get_gpu
from gpumodel.validate.families import registry


def _pct(v: float | None) -> str:
    return "-" if v is None or v != v else f"{v:.1f}%"


def error_rows(cal: Calibration) -> list[list[str]]:
    rows = []
    table = groups()
    for name, e in cal.errors.items():
        tol = table.get(name, (None, None, None))
        status = "-"
        if tol[1] is not None:
            ok = e.median_abs_pct <= tol[1] and (tol[2] is None or e.p90_abs_pct <= tol[2])
            status = "pass" if ok else "FAIL"
        target = (
            "-" if tol[1] is None else f"{tol[1]:g}%" + (f" / p90 {tol[2]:g}%" if tol[2] else "")
        )
        rows.append([name, str(e.n), _pct(e.datasheet_median_abs_pct), _pct(e.median_abs_pct),
                     _pct(e.p90_abs_pct), f"{e.bias_pct:+.1f}%", target, status])  # fmt: skip
    return rows


HEADER = ["family", "n (held out)", "datasheet median", "calibrated median", "calibrated p90",
          "bias", "target (median)", "status"]  # fmt: skip


def markdown_report(cal: Calibration, skipped: list[str], fails: list[str]) -> str:
    p = cal.parameters
    lines = [
        f"# gpumodel validation: {cal.device_name} ({cal.gpu_id})",
        "",
        f"- date: {cal.created.isoformat()}",
        f"- backend: {cal.backend}",
        *[f"- {k}: {v}" for k, v in sorted(cal.environment.items())],
        f"- measurements: {len(cal.measurements)}",
        "",
        "Errors are |predicted - measured| / measured on the held-out half of each family "
        "(the other half was used to fit). 'datasheet' is the same model with no calibration.",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "---|" * len(HEADER),
    ]
    lines += ["| " + " | ".join(r) + " |" for r in error_rows(cal)]
    lines += ["", "## Result", ""]
    lines += [f"- FAIL {f}" for f in fails] or ["- every family with a target is within it"]
    for family in registry():  # each family's own lines (the bandwidth harness check, ...)
        if family.report is not None:
            lines += family.report(cal)
    lines += ["", "## Fitted parameters", "", "```yaml"]
    import yaml

    lines.append(
        yaml.safe_dump(p.model_dump(mode="json", exclude_defaults=True), sort_keys=False).rstrip()
    )
    lines += ["```", ""]
    if cal.unavailable:
        lines += ["## Not measured", ""]
        lines += [
            f"- {u.get('family')}: {u.get('what')}: {u.get('reason')}" for u in cal.unavailable
        ]
        lines.append("")
    if skipped:
        lines += ["## Recorded but not used for fitting", ""]
        lines += [f"- {s}" for s in sorted(set(skipped))]
        lines.append("")
    return "\n".join(lines)


def plot_validation(cal: Calibration, path: Path) -> Path:
    """Measured vs predicted (datasheet and calibrated) for every held-out point, by family."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from gpumodel.errors import GpumodelError

        raise GpumodelError("plotting needs matplotlib: pip install 'gpumodel[plot]'") from None
    gpu = get_gpu(cal.gpu_id)
    points, _ = points_from_records(cal.measurements)
    _, held = split(points)
    meas = np.array([q.measured_s for q in held])
    pred_cal = predict_points(held, gpu, cal.parameters)
    pred_ds = predict_points(held, gpu, CalibrationParams())
    families = sorted({q.family for q in held})
    fig, axes = plt.subplots(1, 2, figsize=(13, 6), sharex=True, sharey=True)
    for ax, pred, title in (
        (axes[0], pred_ds, "datasheet roofline"),
        (axes[1], pred_cal, "calibrated"),
    ):
        for fam in families:
            idx = [i for i, q in enumerate(held) if q.family == fam]
            ax.scatter(meas[idx], pred[idx], s=10, label=fam, alpha=0.7)
        lo, hi = meas.min() / 2, meas.max() * 2
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], color="k", alpha=0.08)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("measured time (s)")
        ax.set_title(f"{cal.gpu_id}: {title} (held-out points; band = ±10%)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("predicted time (s)")
    axes[1].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    from gpumodel._io import save_figure

    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path


def transfer_markdown(cal: Calibration, info: dict, errors: dict, fails: list[str]) -> str:
    """Report of a transferred calibration scored on another GPU's measurements."""
    lines = [
        f"# gpumodel transfer check: {cal.transferred_from} calibration -> {cal.gpu_id}",
        "",
        f"- calibration: {cal.label}",
        f"- measured device: {info.get('device_name')} (driver {info.get('driver_version_string', '?')}, "
        f"CUDA runtime {info.get('cuda_runtime_version', '?')}, CuPy {info.get('cupy_version', '?')}, "
        f"torch {info.get('torch_version', '?')})",
        "",
        "No measurement of this GPU was used to fit anything: efficiencies, latencies and issue "
        "rates in cycles and alignment effects come from the source GPU's calibration, rates "
        "(bandwidths, SMs x clock) from this GPU's spec. "
        "Errors are over every measured point.",
        "",
        "| family | n | datasheet median | transferred median | transferred p90 | bias | target |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, e in errors.items():
        target = "-" if e.tolerance_pct is None else f"{e.tolerance_pct:g}%"
        lines.append(f"| {name} | {e.n} | {_pct(e.datasheet_median_abs_pct)} | {_pct(e.median_abs_pct)} | "
                     f"{_pct(e.p90_abs_pct)} | {e.bias_pct:+.1f}% | {target} |")  # fmt: skip
    lines += ["", "## Result", ""]
    lines += [f"- FAIL {f}" for f in fails] or ["- every family with a target is within it"]
    return "\n".join(lines) + "\n"
