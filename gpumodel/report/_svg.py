"""Inline SVG plots for the HTML reports: no JavaScript, no external file, no plotting library.

Every plot is ``<svg class="plot" data-plot="ID" data-points="N">`` and every point it draws
carries ``data-point="ID"`` (a circle or a bar), so a test can count what a plot shows and
compare it with the data embedded in the page. Hovering a point shows its ``<title>``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

# colour-blind safe palette (Okabe & Ito, "Color Universal Design", 2008)
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
GREY = "#9a9a9a"
FONT = 'font-family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif"'


@dataclass(frozen=True)
class Pt:
    x: float
    y: float
    title: str = ""


@dataclass(frozen=True)
class Series:
    name: str
    color: str
    points: Sequence[Pt]
    radius: float = 3.0
    hollow: bool = False


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    color: str = PALETTE[0]
    title: str = ""
    note: str = ""


def _num(v: float) -> str:
    return f"{v:.1f}"


def _open(plot_id: str, width: float, height: float, n: int, label: str) -> str:
    return (
        f'<svg class="plot" data-plot="{escape(plot_id)}" data-points="{n}" role="img" '
        f'aria-label="{escape(label)}" viewBox="0 0 {_num(width)} {_num(height)}" '
        f'width="{_num(width)}" height="{_num(height)}" xmlns="http://www.w3.org/2000/svg" {FONT}>'
    )


def _text(x: float, y: float, s: str, size: int = 11, anchor: str = "start", **extra: str) -> str:
    attrs = "".join(f' {k.replace("_", "-")}="{escape(v)}"' for k, v in extra.items())
    return (
        f'<text x="{_num(x)}" y="{_num(y)}" font-size="{size}" text-anchor="{anchor}"{attrs}>'
        f"{escape(s)}</text>"
    )


def _log_ticks(lo: float, hi: float) -> list[float]:
    return [10.0**e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]


def _tick_label(v: float, unit: str) -> str:
    if unit == "s":
        for scale, name in ((1, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
            if v >= scale:
                return f"{v / scale:.3g} {name}"
        return f"{v:.3g} s"
    for scale, name in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if v >= scale:
            return f"{v / scale:g}{name}{unit}"
    return f"{v:g}{unit}"


class _LogAxes:
    """Map data to pixels on log-log axes with a frame, ticks and labels."""

    def __init__(self, xs: Sequence[float], ys: Sequence[float], width: float, height: float,
                 left: float = 56, bottom: float = 36, top: float = 24, right: float = 12,
                 xlim: tuple[float, float] | None = None,
                 ylim: tuple[float, float] | None = None):  # fmt: skip
        pos_x = [v for v in xs if v > 0 and math.isfinite(v)] or [1.0]
        pos_y = [v for v in ys if v > 0 and math.isfinite(v)] or [1.0]
        self.x0, self.x1 = xlim or (min(pos_x) / 1.5, max(pos_x) * 1.5)
        self.y0, self.y1 = ylim or (min(pos_y) / 1.5, max(pos_y) * 1.5)
        self.left, self.top = left, top
        self.w, self.h = width - left - right, height - top - bottom

    def px(self, x: float) -> float:
        x = min(max(x, self.x0), self.x1)
        return self.left + self.w * math.log(x / self.x0) / math.log(self.x1 / self.x0)

    def py(self, y: float) -> float:
        y = min(max(y, self.y0), self.y1)
        return self.top + self.h * (1 - math.log(y / self.y0) / math.log(self.y1 / self.y0))

    def frame(self, xlabel: str, ylabel: str, xunit: str, yunit: str) -> list[str]:
        out = [f'<rect x="{_num(self.left)}" y="{_num(self.top)}" width="{_num(self.w)}" '
               f'height="{_num(self.h)}" fill="#fff" stroke="#bbb"/>']  # fmt: skip
        for t in _log_ticks(self.x0, self.x1):
            if self.x0 <= t <= self.x1:
                x = self.px(t)
                out.append(f'<line x1="{_num(x)}" y1="{_num(self.top)}" x2="{_num(x)}" '
                           f'y2="{_num(self.top + self.h)}" stroke="#eee"/>')  # fmt: skip
                out.append(_text(x, self.top + self.h + 13, _tick_label(t, xunit), 9, "middle"))
        for t in _log_ticks(self.y0, self.y1):
            if self.y0 <= t <= self.y1:
                y = self.py(t)
                out.append(f'<line x1="{_num(self.left)}" y1="{_num(y)}" '
                           f'x2="{_num(self.left + self.w)}" y2="{_num(y)}" stroke="#eee"/>')  # fmt: skip
                out.append(_text(self.left - 4, y + 3, _tick_label(t, yunit), 9, "end"))
        out.append(_text(self.left + self.w / 2, self.top + self.h + 28, xlabel, 10, "middle"))
        cy = self.top + self.h / 2
        out.append(_text(12, cy, ylabel, 10, "middle", transform=f"rotate(-90 12 {_num(cy)})"))
        return out


def _circle(plot_id: str, x: float, y: float, s: Series, title: str, kind: str) -> str:
    fill = "none" if s.hollow else s.color
    return (
        f'<circle data-point="{escape(plot_id)}" data-series="{escape(kind)}" cx="{_num(x)}" '
        f'cy="{_num(y)}" r="{s.radius}" fill="{fill}" fill-opacity="0.75" stroke="{s.color}">'
        f"<title>{escape(title)}</title></circle>"
    )


def _legend(series: Sequence[Series], x: float, y: float, step: float = 110) -> list[str]:
    out = []
    for i, s in enumerate(series):
        cx = x + i * step
        fill = "none" if s.hollow else s.color
        out.append(f'<circle cx="{_num(cx)}" cy="{_num(y - 3)}" r="4" fill="{fill}" '
                   f'stroke="{s.color}"/>')  # fmt: skip
        out.append(_text(cx + 7, y, s.name, 10))
    return out


def scatter_vs_diagonal(plot_id: str, title: str, series: Sequence[Series], width: float = 300,
                        height: float = 250, band: float = 0.10, unit: str = "s",
                        xlabel: str = "measured", ylabel: str = "predicted") -> str:  # fmt: skip
    """Predicted against measured on log-log axes, with y = x and a +-``band`` region."""
    xs = [p.x for s in series for p in s.points]
    ys = [p.y for s in series for p in s.points]
    lo = min([v for v in xs + ys if v > 0] or [1e-6]) / 1.5
    hi = max([v for v in xs + ys if v > 0] or [1.0]) * 1.5
    ax = _LogAxes(xs, ys, width, height, xlim=(lo, hi), ylim=(lo, hi))
    n = sum(len(s.points) for s in series)
    out = [
        _open(plot_id, width, height, n, title),
        _text(ax.left, 14, title, 11, font_weight="600"),
    ]
    out += ax.frame(xlabel, ylabel, unit, unit)
    lo_b = [(ax.px(lo), ax.py(lo * (1 - band))), (ax.px(hi), ax.py(hi * (1 - band)))]
    hi_b = [(ax.px(hi), ax.py(hi * (1 + band))), (ax.px(lo), ax.py(lo * (1 + band)))]
    poly = " ".join(f"{_num(a)},{_num(b)}" for a, b in lo_b + hi_b)
    out.append(f'<polygon points="{poly}" fill="#000" fill-opacity="0.06"/>')
    out.append(f'<line x1="{_num(ax.px(lo))}" y1="{_num(ax.py(lo))}" x2="{_num(ax.px(hi))}" '
               f'y2="{_num(ax.py(hi))}" stroke="#444" stroke-width="0.8"/>')  # fmt: skip
    for s in series:
        out += [_circle(plot_id, ax.px(p.x), ax.py(p.y), s, p.title, s.name) for p in s.points]
    out.append("</svg>")
    return "".join(out)


def strip(plot_id: str, title: str, rows: Sequence[tuple[str, Sequence[Pt]]], clip: float = 50.0,
          width: float = 760, row_h: float = 18, label_w: float = 250) -> str:  # fmt: skip
    """One row of dots per group: signed error in percent (x of each Pt), clipped at +-clip."""
    height = 40 + row_h * len(rows) + 30
    n = sum(len(pts) for _, pts in rows)
    plot_w = width - label_w - 20
    x_of = lambda v: label_w + plot_w * (min(max(v, -clip), clip) + clip) / (2 * clip)  # noqa: E731
    out = [_open(plot_id, width, height, n, title), _text(10, 16, title, 11, font_weight="600")]
    top = 30
    for t in (-clip, -clip / 2, -10, 0, 10, clip / 2, clip):
        x = x_of(t)
        out.append(f'<line x1="{_num(x)}" y1="{top}" x2="{_num(x)}" '
                   f'y2="{_num(top + row_h * len(rows))}" stroke="{"#888" if t == 0 else "#e4e4e4"}"/>')  # fmt: skip
        out.append(_text(x, top + row_h * len(rows) + 13, f"{t:+g}%", 9, "middle"))
    out.append(f'<rect x="{_num(x_of(-10))}" y="{top}" width="{_num(x_of(10) - x_of(-10))}" '
               f'height="{_num(row_h * len(rows))}" fill="#000" fill-opacity="0.05"/>')  # fmt: skip
    for i, (label, pts) in enumerate(rows):
        y = top + row_h * i + row_h / 2
        out.append(_text(label_w - 8, y + 4, label, 10, "end"))
        color = PALETTE[i % len(PALETTE)]
        for p in pts:
            edge = abs(p.x) > clip
            out.append(
                f'<circle data-point="{escape(plot_id)}" cx="{_num(x_of(p.x))}" cy="{_num(y)}" '
                f'r="{3.2 if edge else 2.6}" fill="{"#fff" if edge else color}" '
                f'fill-opacity="0.6" stroke="{color}"><title>{escape(p.title)}</title></circle>'
            )
    out.append(_text(label_w + plot_w / 2, height - 4,
                     f"(predicted - measured) / measured; hollow: beyond ±{clip:g}%", 10, "middle"))  # fmt: skip
    out.append("</svg>")
    return "".join(out)


def hbars(plot_id: str, title: str, bars: Sequence[Bar], unit_label: str, width: float = 760,
          bar_h: float = 16, label_w: float = 260, limit: float | None = None,
          limit_label: str = "") -> str:  # fmt: skip
    """Horizontal bars from zero (linear scale), one data point each; ``limit`` draws a line."""
    height = 34 + (bar_h + 6) * len(bars) + 26
    vmax = max([b.value for b in bars] + [limit or 0.0] + [1e-30]) * 1.08
    plot_w = width - label_w - 150
    out = [_open(plot_id, width, height, len(bars), title), _text(10, 16, title, 11,
                                                                  font_weight="600")]  # fmt: skip
    for i, b in enumerate(bars):
        y = 28 + i * (bar_h + 6)
        w = plot_w * max(b.value, 0.0) / vmax
        out.append(_text(label_w - 8, y + bar_h - 4, b.label, 10, "end"))
        out.append(f'<rect data-point="{escape(plot_id)}" x="{label_w}" y="{_num(y)}" '
                   f'width="{_num(max(w, 0.5))}" height="{bar_h}" fill="{b.color}">'
                   f"<title>{escape(b.title or b.label)}</title></rect>")  # fmt: skip
        if b.note:
            out.append(_text(label_w + w + 4, y + bar_h - 4, b.note, 10))
    base = 28 + len(bars) * (bar_h + 6)
    if limit is not None:
        x = label_w + plot_w * limit / vmax
        out.append(f'<line x1="{_num(x)}" y1="24" x2="{_num(x)}" y2="{_num(base)}" '
                   f'stroke="#D55E00" stroke-dasharray="4 3"/>')  # fmt: skip
        out.append(_text(x, base + 12, limit_label, 10, "middle", fill="#D55E00"))
    out.append(_text(label_w, height - 6, unit_label, 10))
    out.append("</svg>")
    return "".join(out)


ACTIVITY_COLORS = {"kernel": PALETTE[0], "memcpy": PALETTE[2], "memset": PALETTE[4]}


def timeline(plot_id: str, title: str, spans: Sequence[tuple[float, float, str, str]],
             gaps: Sequence[tuple[float, float, str]], length_s: float, periods: int,
             gap_colors: dict[str, str], width: float = 980) -> str:  # fmt: skip
    """GPU activities (start, end, name, kind in seconds from the window's start) on the GPU
    lane, idle gaps by cause on the lane below, step boundaries as ticks. Activities are the
    data points (``data-kind`` kernel, memcpy or memset)."""
    height = 122
    left, plot_w = 70, width - 90
    x_of = lambda t: left + plot_w * min(max(t / length_s, 0.0), 1.0)  # noqa: E731
    out = [_open(plot_id, width, height, len(spans), title), _text(10, 16, title, 11,
                                                                   font_weight="600")]  # fmt: skip
    out.append(_text(left - 6, 42, "GPU", 10, "end"))
    out.append(_text(left - 6, 72, "idle", 10, "end"))
    out.append(f'<rect x="{left}" y="28" width="{plot_w}" height="22" fill="#f4f4f4"/>')
    for s, e, name, kind in spans:
        x = x_of(s)
        out.append(f'<rect data-point="{escape(plot_id)}" data-kind="{escape(kind)}" '
                   f'x="{_num(x)}" y="28" width="{max(x_of(e) - x, 0.6):.2f}" height="22" '
                   f'fill="{ACTIVITY_COLORS.get(kind, GREY)}" fill-opacity="0.85"><title>'
                   f"{escape(name)} {(e - s) * 1e6:.1f} µs</title></rect>")  # fmt: skip
    for s, e, cause in gaps:
        x = x_of(s)
        out.append(f'<rect data-gap="{escape(cause)}" x="{_num(x)}" y="60" '
                   f'width="{max(x_of(e) - x, 0.6):.2f}" height="18" '
                   f'fill="{gap_colors.get(cause, GREY)}"><title>{escape(cause)} '
                   f"{(e - s) * 1e6:.1f} µs</title></rect>")  # fmt: skip
    for k in range(periods + 1):  # step boundaries
        x = x_of(length_s * k / max(periods, 1))
        out.append(f'<line x1="{_num(x)}" y1="24" x2="{_num(x)}" y2="82" stroke="#444" '
                   f'stroke-width="0.8"/>')  # fmt: skip
        t = length_s * k / max(periods, 1)
        out.append(_text(x, 94, _tick_label(t, "s") if t > 0 else "0", 9, "middle"))
    legend = [(kind, c) for kind, c in ACTIVITY_COLORS.items()] + list(gap_colors.items())
    for i, (name, color) in enumerate(legend):
        out.append(f'<rect x="{left + i * 105}" y="104" width="10" height="10" fill="{color}"/>')
        out.append(_text(left + i * 105 + 14, 113, name.replace("_", " "), 10))
    out.append("</svg>")
    return "".join(out)


def loglog(plot_id: str, title: str, series: Sequence[Series], xlabel: str, ylabel: str,
           xunit: str = "", yunit: str = "", hline: tuple[float, str] | None = None,
           width: float = 470, height: float = 300) -> str:  # fmt: skip
    """Points of each series on log-log axes (a series with ``hollow`` draws its points as rings
    over the others: e.g. the chosen option); ``hline`` = (y, label) draws a target line."""
    xs = [p.x for s in series for p in s.points]
    ys = [p.y for s in series for p in s.points] + ([hline[0]] if hline else [])
    ax = _LogAxes(xs, ys, width, height, top=40)
    n = sum(len(s.points) for s in series)
    out = [
        _open(plot_id, width, height, n, title),
        _text(ax.left, 14, title, 11, font_weight="600"),
    ]
    out += ax.frame(xlabel, ylabel, xunit, yunit)
    if hline is not None:
        y = ax.py(hline[0])
        out.append(f'<line x1="{_num(ax.left)}" y1="{_num(y)}" x2="{_num(ax.left + ax.w)}" '
                   f'y2="{_num(y)}" stroke="#D55E00" stroke-dasharray="4 3"/>')  # fmt: skip
        out.append(_text(ax.left + ax.w - 4, y - 4, hline[1], 10, "end", fill="#D55E00"))
    for s in series:
        out += [_circle(plot_id, ax.px(p.x), ax.py(p.y), s, p.title, s.name) for p in s.points]
    out += _legend(series, ax.left + 6, 32, step=80)
    out.append("</svg>")
    return "".join(out)


def roofline(plot_id: str, title: str, peak_flops: float, bandwidth: float,
             points: Sequence[Pt], width: float = 480, height: float = 320) -> str:  # fmt: skip
    """Achieved FLOP/s against arithmetic intensity, under the GPU's roof min(P, I x B)."""
    xs = [p.x for p in points] + [peak_flops / bandwidth]
    ax = _LogAxes(xs, [p.y for p in points] + [peak_flops], width, height,
                  ylim=None)  # fmt: skip
    ax.y1 = max(ax.y1, peak_flops * 2)
    out = [_open(plot_id, width, height, len(points), title),
           _text(ax.left, 14, title, 11, font_weight="600")]  # fmt: skip
    out += ax.frame("arithmetic intensity (FLOP/B)", "achieved FLOP/s", "", "")
    ridge = peak_flops / bandwidth
    xa = max(ax.x0, ax.y0 / bandwidth)
    pts = [(xa, xa * bandwidth), (ridge, peak_flops), (ax.x1, peak_flops)]
    poly = " ".join(f"{_num(ax.px(x))},{_num(ax.py(y))}" for x, y in pts)
    out.append(f'<polyline points="{poly}" fill="none" stroke="#444" stroke-width="1.4"/>')
    s = Series("op", PALETTE[0], points, radius=4)
    out += [_circle(plot_id, ax.px(p.x), ax.py(p.y), s, p.title, "op") for p in points]
    out.append("</svg>")
    return "".join(out)


__all__ = ["ACTIVITY_COLORS", "GREY", "PALETTE", "Bar", "Pt", "Series", "hbars", "loglog", "roofline", "scatter_vs_diagonal",
           "strip", "timeline"]  # fmt: skip
