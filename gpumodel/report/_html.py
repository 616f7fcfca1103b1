"""The page around the plots: one self-contained HTML file (inline CSS, inline SVG, the data as
a JSON script tag; no script, font or style sheet loaded from anywhere).

Numbers taken from the command's ``--json`` output are written as
``<td data-path='["errors", "gemm", "median_abs_pct"]' data-value="2.368" data-unit="pct">``:
the path into that output, the exact value and its unit, so a test can check that what the page
shows is what ``--json`` says.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

CSS = """
:root { --fg:#1d1d1f; --muted:#666; --line:#e3e3e3; --accent:#0072B2; --bad:#b3261e; --ok:#1e7b34; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
       margin: 0; background: #fafafa; }
header { background: #fff; border-bottom: 1px solid var(--line); padding: 18px 28px 12px; }
header h1 { font-size: 20px; margin: 0 0 4px; }
header .sub { color: var(--muted); }
main { padding: 8px 28px 40px; max-width: 1280px; }
section { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 14px 18px; overflow-x: auto;
          margin: 16px 0; }
h2 { font-size: 16px; margin: 0 0 10px; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 7px; border-bottom: 1px solid var(--line); text-align: left;
         vertical-align: top; }
th { font-weight: 600; background: #f6f6f6; }
td.num { text-align: right; white-space: nowrap; }
td.nowrap { white-space: nowrap; }
tr.best td { background: #eef6fc; font-weight: 600; }
.pass { color: var(--ok); font-weight: 600; } .fail { color: var(--bad); font-weight: 600; }
.grid { display: flex; flex-wrap: wrap; gap: 10px; }
.kv { display: grid; grid-template-columns: max-content auto; gap: 2px 16px; }
.kv div:nth-child(odd) { color: var(--muted); }
.muted { color: var(--muted); } .small { font-size: 12px; }
pre { background: #f6f6f6; padding: 10px; overflow-x: auto; font-size: 12px; }
ol.findings li { margin-bottom: 10px; }
footer { color: var(--muted); font-size: 12px; padding: 0 28px 24px; }
"""


def fmt(value: Any, unit: str) -> str:
    """How the page shows one number (the test reads it back with the same units)."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    v = float(value)
    if unit == "pct":
        return f"{v:.1f}%".replace("-0.0%", "0.0%")  # a bias that rounds to zero has no sign
    if unit == "s":
        v = float(f"{v:.3g}")  # the unit its shown digits need: 999.96 us is "1 ms"
        for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
            if abs(v) >= scale or name == "ns":
                return f"{v / scale:.3g} {name}"
    if unit == "bytes":
        return f"{v / 1e9:.3g} GB"
    if unit == "usd":
        return f"${v:,.0f}" if abs(v) >= 1000 else f"${v:.3g}"
    if unit == "x":
        return f"{v:.3g}x"
    if unit == "count":
        return f"{round(v)}"
    if unit == "days":
        return f"{v:.3g} days"
    if 1e4 <= abs(v) < 1e9:
        return f"{v:,.0f}"
    return f"{v:.3g}"


def num(data_path: Sequence[Any] | None, value: Any, unit: str, tag: str = "td") -> str:
    """A number cell; with ``data_path`` it names where ``value`` sits in the --json output."""
    attrs = f' class="num" data-unit="{unit}"'
    if data_path is not None and value is not None:
        attrs += f" data-path='{escape(json.dumps(list(data_path)), quote=True)}'"
        attrs += f' data-value="{escape(repr(value))}"'
    return f"<{tag}{attrs}>{escape(fmt(value, unit))}</{tag}>"


def cell(text: Any) -> str:
    return f"<td>{escape('-' if text is None else str(text))}</td>"


def table(head: Sequence[str], rows: Sequence[str], cls: str = "") -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    return (
        f'<table class="{cls}"><thead><tr>{th}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


def kv(pairs: Sequence[tuple[str, str]]) -> str:
    """Label/value pairs; values are HTML already (escape text before passing it)."""
    return '<div class="kv">' + "".join(f"<div>{escape(k)}</div><div>{v}</div>"
                                        for k, v in pairs) + "</div>"  # fmt: skip


def _json_script(data: Any) -> str:
    text = json.dumps(data, default=_default, allow_nan=False)
    # inside <script>, "</" would end the element: JSON allows "\/" for "/"
    return text.replace("</", "<\\/")


def _default(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="json")
    if hasattr(obj, "isoformat"):
        return obj.isoformat()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    raise TypeError(f"cannot serialise {type(obj).__name__}")


def clean(value: Any) -> Any:
    """JSON-safe copy: non-finite floats become None (JSON has no NaN or Infinity)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value]
    return value


def page(title: str, subtitle: str, sections: Sequence[str], data: dict[str, Any]) -> str:
    from gpumodel import __version__

    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
        f'<header><h1>{escape(title)}</h1><div class="sub">{escape(subtitle)}</div></header>'
        f"<main>{''.join(sections)}</main>"
        f"<footer>gpumodel {escape(__version__)}: a self-contained page (no network); the data "
        "behind it is in the script tag <code>#gpumodel-data</code>.</footer>"
        f'<script type="application/json" id="gpumodel-data">{_json_script(clean(data))}</script>'
        "</body></html>\n"
    )


def section(title: str, body: str, id_: str = "") -> str:
    ident = f' id="{escape(id_)}"' if id_ else ""
    return f"<section{ident}><h2>{escape(title)}</h2>{body}</section>"


def write(path: str | Path, html: str) -> Path:
    """Write atomically (temp file in the same folder, then rename); a path that cannot be
    written is a GpumodelError naming it."""
    from gpumodel._io import as_path
    from gpumodel.calibration import atomic_write_text
    from gpumodel.errors import GpumodelError

    path = as_path(path, "HTML report")
    if path.is_dir():
        raise GpumodelError(f"{path} is a folder: give the HTML file to write, e.g. report.html")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, html)  # mode from the umask, like any file the user writes
    except OSError as exc:
        raise GpumodelError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path
