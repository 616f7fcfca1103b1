"""Draw a DiagnoseReport: measured vs speed of light per op, and the ops on the GPU's roofline.

matplotlib is imported here only (``pip install 'gpumodel[plot]'``).
"""

from __future__ import annotations

from pathlib import Path

from gpumodel.diagnose.report import DiagnoseReport
from gpumodel.errors import GpumodelError
from gpumodel.specs import GPUSpec, get_gpu

PLOT_HINT = "plotting needs matplotlib: pip install 'gpumodel[plot]'"


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise GpumodelError(PLOT_HINT) from None
    return plt


def _label(name: str, shapes: list[list[int]], width: int = 48) -> str:
    text = name.removeprefix("aten::")
    if shapes:
        text += " " + "x".join("[" + ",".join(str(d) for d in s) + "]" for s in shapes[:2])
    return text if len(text) <= width else text[: width - 1] + "…"


def plot_report(report: DiagnoseReport, path: str | Path, top: int = 15) -> Path:
    """Write the two-panel figure to ``path`` (format from its suffix: .png, .svg, .pdf)."""
    import numpy as np

    plt = _pyplot()
    gpu: GPUSpec = get_gpu(report.gpu.id)
    ops = sorted(report.ops, key=lambda r: -r.measured_s)[:top]
    fig, (bars, roof) = plt.subplots(1, 2, figsize=(15, max(4.5, 0.32 * len(ops) + 1.5)))

    y = np.arange(len(ops))[::-1]
    measured = [r.measured_s * 1e3 for r in ops]
    sol = [(r.sol_per_call_s or 0.0) * r.count * 1e3 for r in ops]
    bars.barh(y + 0.2, measured, height=0.4, color="#b0b0b0", label="measured")
    bars.barh(y - 0.2, sol, height=0.4, color="#2a7ab9", label="speed of light (a bound)")
    for yi, r in zip(y, ops):
        if r.sol_pct is not None:
            bars.text(r.measured_s * 1e3, yi + 0.2, f" {r.sol_pct:.0f}%", va="center", fontsize=7)
        elif not r.mapped:
            bars.text(r.measured_s * 1e3, yi + 0.2, " unmapped", va="center", fontsize=7,
                      color="#a03030")  # fmt: skip
    bars.set_yticks(y)
    bars.set_yticklabels([_label(r.name, r.shapes) for r in ops], fontsize=7)
    bars.set_xlabel("time over the trace (ms)")
    bars.set_title(f"Measured vs speed of light on {gpu.name}")
    bars.legend(fontsize=7, loc="lower right")

    ai = np.logspace(-2, 4, 400)
    bw = gpu.memory_bandwidth_bytes_per_s
    roofs = []
    dtypes = {r.dtype.split(" ")[0] for r in ops if r.mapped}
    for dt, unit in (("bf16", "tensor"), ("fp16", "tensor"), ("tf32", "tensor"),
                     ("fp8", "tensor"), ("fp32", "vector")):  # fmt: skip
        peak = gpu.peak_flops(dt, unit)
        if peak and (dt in dtypes or (dt, unit) in (("bf16", "tensor"), ("fp32", "vector"))):
            roofs.append((f"{unit} {dt}", peak))
    for label, peak in roofs:
        roof.loglog(ai, np.minimum(peak, ai * bw) / 1e12, label=label, lw=1.2)
    colors = {"compute": "#d62728", "memory": "#1f77b4", "launch": "#7f7f7f", "latency": "#9467bd",
              "issue": "#ff7f0e"}  # fmt: skip
    for r in report.ops:
        if not r.mapped or not r.arithmetic_intensity or not r.achieved_flops_per_s:
            continue
        size = 15 + 300 * r.measured_s / max(report.totals.measured_s, 1e-12)
        roof.scatter([r.arithmetic_intensity], [r.achieved_flops_per_s / 1e12], s=size,
                     color=colors.get(r.bound or "", "#2ca02c"), alpha=0.7, zorder=5)  # fmt: skip
    for r in ops[:8]:
        if r.mapped and r.arithmetic_intensity and r.achieved_flops_per_s:
            roof.annotate(_label(r.name, [], 24), (r.arithmetic_intensity,
                          r.achieved_flops_per_s / 1e12), fontsize=6)  # fmt: skip
    roof.set_xlabel("arithmetic intensity (FLOP/byte)")
    roof.set_ylabel("achieved TFLOP/s (measured)")
    roof.set_title("Ops on the roofline (colour: predicted bound; size: time)")
    roof.grid(True, which="both", alpha=0.3)
    roof.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    out = Path(path)
    from gpumodel._io import save_figure

    save_figure(fig, out, dpi=120)
    plt.close(fig)
    return out


__all__ = ["PLOT_HINT", "plot_report"]
