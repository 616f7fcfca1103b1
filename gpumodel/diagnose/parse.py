"""Read a profile into plain events: a torch.profiler Chrome trace or an Nsight Systems CSV.

Two formats are understood, told apart by their content (not their file name):

* the Chrome trace JSON that ``torch.profiler.profile.export_chrome_trace`` writes (gzip
  compressed or not). What is used from it: ``deviceProperties`` (the GPU), CPU operators
  (``cat`` ``cpu_op``) with ``Input Dims`` / ``Input type`` / ``Input Strides`` /
  ``Concrete Inputs`` when recorded with ``record_shapes=True``, user annotations
  (``ProfilerStep#N``, ``enumerate(DataLoader)#...``), CUDA runtime and driver calls
  (``cuda_runtime``, ``cuda_driver``) and the GPU activities they launched (``kernel``,
  ``gpu_memcpy``, ``gpu_memset``), joined by ``args.correlation``.
* the kernel summary of Nsight Systems (``nsys stats --report cuda_gpu_kern_sum --format csv``):
  one row per kernel name with its total time and instance count; no shapes, no timeline.

A truncated Chrome trace (an export that was interrupted) is read up to the last complete
event, with a warning; anything else unreadable is a :class:`TraceFormatError` with one line
saying what was expected.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gpumodel._io import gc_paused
from gpumodel.errors import SpecError

TraceFormat = Literal["torch_chrome_trace", "nsys_kern_sum_csv"]

EXPECTED = (
    "a torch.profiler Chrome trace (export_chrome_trace: .json or .json.gz) or an Nsight Systems "
    "kernel summary CSV (nsys stats --report cuda_gpu_kern_sum --format csv)"
)

# Event categories of the Chrome trace that matter here.
CPU_CATS = frozenset({"cpu_op", "user_annotation"})
RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "runtime", "driver"})
GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
GRAPH_LAUNCH_CALLS = ("cudaGraphLaunch", "cuGraphLaunch")
# what a trace of CUDA-graph replays cannot give, and how to get it
GRAPH_REPLAY_NOTE = ("every kernel was replayed from a CUDA graph: the operators and shapes "
                     "were recorded at capture, not here, so no kernel maps to an op (trace an "
                     "eager step, or the capture, for per-op figures)")  # fmt: skip


class TraceFormatError(SpecError):
    """The profile could not be read: wrong format, truncated beyond repair, or empty."""


# An event is a measurement only within these bounds (microseconds, as the trace states them):
# a kernel or call longer than a day, or a timestamp beyond 3,000 years of the epoch, is a
# corrupt field (a fuzzed 1e300 us kernel priced 2.3e289 days a step), dropped and counted.
MAX_EVENT_US = 86_400e6
MAX_TIMESTAMP_US = 1e17

@dataclass(eq=False, slots=True)
class CpuEvent:
    """A CPU-side range: an operator (``cpu_op``) or a user annotation (``user_annotation``)."""

    name: str
    cat: str
    ts: float  # microseconds, as in the trace
    dur: float
    pid: Any
    tid: Any
    args: dict[str, Any]
    parent: CpuEvent | None = None

    @property
    def end(self) -> float:
        return self.ts + self.dur

    @property
    def external_id(self) -> Any:
        return self.args.get("External id")

    @property
    def has_shapes(self) -> bool:
        return "Input Dims" in self.args

    def ancestors(self) -> list[CpuEvent]:
        out, node = [], self.parent
        while node is not None:
            out.append(node)
            node = node.parent
        return out


@dataclass(eq=False, slots=True)
class RuntimeEvent:
    """A CUDA runtime/driver call on the host (launch, memcpy, synchronize, ...)."""

    name: str
    ts: float
    dur: float
    pid: Any
    tid: Any
    correlation: Any
    external_id: Any
    launcher: CpuEvent | None = None  # innermost CPU range enclosing the call

    @property
    def end(self) -> float:
        return self.ts + self.dur

    @property
    def graph_launch(self) -> bool:
        """A CUDA-graph replay (its kernels' operators ran at capture, not in this trace)."""
        return self.name.startswith(GRAPH_LAUNCH_CALLS)


@dataclass(eq=False, slots=True)
class GpuEvent:
    """A GPU activity: a kernel, a memcpy or a memset."""

    kind: Literal["kernel", "memcpy", "memset"]
    name: str
    ts: float
    dur: float
    device: Any
    stream: Any
    correlation: Any
    external_id: Any
    args: dict[str, Any]
    runtime: RuntimeEvent | None = None

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass(frozen=True)
class KernelSummaryRow:
    """One row of an Nsight Systems kernel summary."""

    name: str
    total_s: float
    instances: int
    avg_s: float


@dataclass(eq=False)
class Trace:
    """A parsed profile. Times of the Chrome trace stay in its microseconds."""

    format: TraceFormat
    path: str | None = None
    devices: list[dict[str, Any]] = field(default_factory=list)
    cpu: list[CpuEvent] = field(default_factory=list)
    runtime: list[RuntimeEvent] = field(default_factory=list)
    gpu: list[GpuEvent] = field(default_factory=list)
    kernel_summary: list[KernelSummaryRow] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    truncated: bool = False
    events_read: int = 0
    # the CUDA caching allocator's high-water marks, from profile_memory=True "[memory]" events
    peak_allocated_bytes: float | None = None
    peak_reserved_bytes: float | None = None

    @property
    def graph_replayed(self) -> bool:
        """Whether every kernel came from a CUDA-graph replay: its operators ran when the graph
        was captured, so the trace holds no operator or shapes for them."""
        kernels = [g for g in self.gpu if g.kind == "kernel"]
        return bool(kernels) and all(g.runtime is not None and g.runtime.graph_launch
                                     for g in kernels)  # fmt: skip

    @property
    def has_shapes(self) -> bool:
        """Whether CPU operators carry input shapes (recorded with ``record_shapes=True``)."""
        return any(e.has_shapes for e in self.cpu if e.cat == "cpu_op")

    def device_properties(self, index: Any = None) -> dict[str, Any] | None:
        """``deviceProperties`` entry of GPU ``index`` (the first one when not given)."""
        if not self.devices:
            return None
        for d in self.devices:
            if index is not None and d.get("id") == index:
                return d
        return self.devices[0]


# ---------------------------------------------------------------------------------------------
# entry point


@gc_paused()  # a trace is millions of objects: see gc_paused
def load_trace(source: str | Path | dict[str, Any] | list[Any] | Trace) -> Trace:
    """Read a profile file (or an already-loaded Chrome trace dict) into a :class:`Trace`."""
    if isinstance(source, Trace):
        return source
    if isinstance(source, (dict, list)):
        return _from_chrome(source, None, truncated=False, warnings=[])
    from gpumodel._io import InputFileError, as_path, max_input_bytes, read_bytes

    path = as_path(source, "trace")
    limit = max_input_bytes()
    try:
        raw = read_bytes(path, "trace", limit)
    except InputFileError as exc:
        raise TraceFormatError(str(exc)) from None
    warnings: list[str] = []
    data, gz_truncated = _decompress(raw, path, limit)
    if gz_truncated:
        warnings.append("the gzip stream ends early (file truncated): read what was there")
    text = _decode(data, path)
    stripped = text.lstrip()
    if not stripped:
        raise TraceFormatError(f"{path}: the file is empty; expected {EXPECTED}")
    if stripped[0] in "{[":
        return _parse_chrome_text(stripped, path, warnings, gz_truncated)
    if _looks_like_nsys_csv(stripped):
        return _parse_nsys_csv(stripped, path)
    raise TraceFormatError(f"{path}: not a recognised profile; expected {EXPECTED}")


def _decompress(raw: bytes, path: Path, limit: int) -> tuple[bytes, bool]:
    """Gunzip when the gzip magic is there, as a stream stopped at ``limit`` bytes (a gzip bomb
    is an error, not a MemoryError); a truncated stream yields what could be read."""
    if raw[:2] != b"\x1f\x8b":
        return raw, False
    from gpumodel._io import InputFileError, gunzip

    try:
        return gunzip(raw, path, "trace", limit)
    except InputFileError as exc:
        if "corrupt gzip" in str(exc):
            raise TraceFormatError(f"{path}: corrupt gzip data; expected {EXPECTED}") from None
        raise TraceFormatError(str(exc)) from None


def _decode(data: bytes, path: Path) -> str:
    if b"\x00" in data[:4096]:
        raise TraceFormatError(
            f"{path}: binary file (an .nsys-rep or .sqlite report?); expected {EXPECTED}"
        )
    try:
        return data.decode("utf-8-sig")  # (an editor's byte-order mark is not content)
    except UnicodeDecodeError:
        return data.decode("latin-1")


# ---------------------------------------------------------------------------------------------
# Chrome trace


def _parse_chrome_text(text: str, path: Path, warnings: list[str], truncated: bool) -> Trace:
    from gpumodel._io import MAX_DEPTH, has_digit_run, json_depth

    data = text.encode("utf-8", "surrogatepass")
    if json_depth(data) > MAX_DEPTH:  # (no count of brackets first: a trace has millions)
        raise TraceFormatError(f"{path}: the JSON nests deeper than {MAX_DEPTH} levels")
    parse_int = _bounded_int if has_digit_run(data, _MAX_INT_DIGITS) else None
    del data
    try:
        doc = json.loads(text, parse_int=parse_int)
    except ValueError as exc:
        if not isinstance(exc, json.JSONDecodeError):
            raise TraceFormatError(f"{path}: not a usable trace ({exc})") from None
        doc, n = _salvage(text)
        if doc is None:
            raise TraceFormatError(
                f"{path}: invalid JSON at line {exc.lineno} column {exc.colno} and no complete "
                "trace event before it (truncated export?)"
            ) from None
        truncated = True
        warnings.append(
            f"the JSON is truncated or invalid at line {exc.lineno}: read the {n} complete events "
            "before it; the report covers only that part of the trace"
        )
    return _from_chrome(doc, path, truncated=truncated, warnings=warnings)


_MAX_INT_DIGITS = 100


def _bounded_int(text: str) -> int:
    if len(text) > _MAX_INT_DIGITS:
        raise ValueError(f"a {len(text)}-digit number")
    return int(text)


def _salvage(text: str) -> tuple[dict[str, Any] | None, int]:
    """Recover the header and the complete events of a truncated Chrome trace."""
    m = re.search(r'"traceEvents"\s*:\s*\[', text)
    if m is None:
        if text.startswith("["):  # the JSON-array flavour of the format
            events = _raw_events(text, 1)
            return ({"traceEvents": events}, len(events)) if events else (None, 0)
        return None, 0
    header: dict[str, Any] = {}
    head = text[: m.start()].rstrip().rstrip(",")
    if head.startswith("{"):
        try:
            header = json.loads(head + "}") if head != "{" else {}
        except json.JSONDecodeError:
            header = {}
    events = _raw_events(text, m.end())
    if not events:
        return None, 0
    return {**header, "traceEvents": events}, len(events)


def _raw_events(text: str, pos: int) -> list[Any]:
    decoder = json.JSONDecoder()
    events: list[Any] = []
    n = len(text)
    while pos < n:
        while pos < n and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= n or text[pos] == "]":
            break
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            break
        events.append(obj)
    return events


def _from_chrome(doc: Any, path: Path | None, truncated: bool, warnings: list[str]) -> Trace:
    where = str(path) if path is not None else "trace"
    if isinstance(doc, list):
        doc = {"traceEvents": doc}
    if not isinstance(doc, dict) or "traceEvents" not in doc:
        raise TraceFormatError(f"{where}: JSON without 'traceEvents'; expected {EXPECTED}")
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        raise TraceFormatError(f"{where}: 'traceEvents' is not a list; expected {EXPECTED}")
    if not events:
        raise TraceFormatError(
            f"{where}: the trace has no events (was the profiler stopped before any step ran?)"
        )
    devices = doc.get("deviceProperties") or []
    trace = Trace(
        format="torch_chrome_trace",
        path=str(path) if path is not None else None,
        devices=[d for d in devices if isinstance(d, dict)],
        meta={k: v for k, v in doc.items() if k not in ("traceEvents", "deviceProperties")},
        warnings=warnings,
        truncated=truncated,
        events_read=len(events),
    )
    bad_times = 0
    for ev in events:
        if not isinstance(ev, dict):
            continue
        ph = ev.get("ph")
        if ph != "X":
            if ph == "i" and ev.get("name") == "[memory]" and isinstance(ev.get("args"), dict):
                _note_memory(trace, ev["args"])
            continue
        cat = ev.get("cat")
        try:
            ts = float(ev["ts"])
            dur = float(ev.get("dur", 0.0))
        except (KeyError, TypeError, ValueError, OverflowError):
            continue
        if not (abs(ts) <= MAX_TIMESTAMP_US and 0 <= dur <= MAX_EVENT_US):
            bad_times += 1  # a negative, NaN or day-long duration is no measurement: dropped
            continue
        args = ev.get("args") or {}
        if not isinstance(args, dict):  # another tool's field of the same name: no arguments
            args = {}
        name = str(ev.get("name", ""))
        if cat in CPU_CATS:
            trace.cpu.append(
                CpuEvent(name=name, cat=cat, ts=ts, dur=dur, pid=ev.get("pid"),
                         tid=ev.get("tid"), args=args)
            )  # fmt: skip
        elif cat in RUNTIME_CATS:
            trace.runtime.append(
                RuntimeEvent(name=name, ts=ts, dur=dur, pid=ev.get("pid"), tid=ev.get("tid"),
                             correlation=args.get("correlation"),
                             external_id=args.get("External id"))
            )  # fmt: skip
        elif cat in GPU_CATS:
            trace.gpu.append(
                GpuEvent(kind=GPU_CATS[cat], name=name, ts=ts, dur=dur,  # type: ignore[arg-type]
                         device=args.get("device", ev.get("pid")),
                         stream=args.get("stream", ev.get("tid")),
                         correlation=args.get("correlation"),
                         external_id=args.get("External id"), args=args)
            )  # fmt: skip
    if bad_times:
        trace.warnings.append(
            f"dropped {bad_times} event(s) with a negative, NaN, infinite or impossible time or "
            "duration (longer than a day)"
        )
    if not trace.gpu and truncated:  # Kineto writes the GPU's events after the host's
        raise TraceFormatError(f"{where}: the trace is truncated (its file ends early) before "
                               "any GPU kernel: export it again")  # fmt: skip
    if not trace.gpu:
        raise TraceFormatError(
            f"{where}: no GPU kernels or copies in the trace; record with "
            "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]"
        )
    _link_runtime(trace)
    return trace


CUDA_DEVICE_TYPE = 1  # c10::DeviceType::CUDA, the "Device Type" of a Kineto memory event


def _note_memory(trace: Trace, args: dict[str, Any]) -> None:
    """Raise the trace's allocator high-water marks to this CUDA memory event's totals."""
    if args.get("Device Type") != CUDA_DEVICE_TYPE:
        return
    for key, attr in (("Total Allocated", "peak_allocated_bytes"),
                      ("Total Reserved", "peak_reserved_bytes")):  # fmt: skip
        value = args.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value) and value >= 0:
            old = getattr(trace, attr)
            setattr(trace, attr, float(value) if old is None else max(old, float(value)))


def _link_runtime(trace: Trace) -> None:
    """Join GPU activities to the runtime calls that launched them (``correlation``)."""
    by_corr: dict[Any, RuntimeEvent] = {}
    for r in trace.runtime:
        if r.correlation is not None:
            by_corr[r.correlation] = r
    for g in trace.gpu:
        if g.correlation is not None:
            g.runtime = by_corr.get(g.correlation)


# ---------------------------------------------------------------------------------------------
# Nsight Systems kernel summary

_NSYS_TOTAL = re.compile(r"^total\s*time", re.I)


def _looks_like_nsys_csv(text: str) -> bool:
    return _nsys_header_index(text.splitlines()[:50]) is not None


def _nsys_header_index(lines: list[str]) -> int | None:
    for i, line in enumerate(lines):
        cells = [c.strip().strip('"').lower() for c in line.split(",")]
        if len(cells) < 3 or "name" not in cells:
            continue
        if any(_NSYS_TOTAL.match(c) for c in cells) and any(
            c in ("instances", "calls", "count", "num calls") for c in cells
        ):
            return i
    return None


def _time_scale(column: str) -> float:
    """Seconds per unit of a column header like 'Total Time (ns)'; ns when none is given."""
    m = re.search(r"\((ns|us|µs|ms|s|sec)\)", column)
    unit = m.group(1) if m else "ns"
    return {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0}[unit]


def _parse_nsys_csv(text: str, path: Path) -> Trace:
    lines = text.splitlines()
    start = _nsys_header_index(lines[:50])
    assert start is not None
    reader = csv.reader(io.StringIO("\n".join(lines[start:])))
    header = [h.strip() for h in next(reader)]
    low = [h.lower() for h in header]

    def col(*prefixes: str) -> int | None:
        for i, h in enumerate(low):
            if any(h.startswith(p) for p in prefixes):
                return i
        return None

    i_total, i_name = col("total time"), col("name")
    i_count = col("instances", "calls", "count", "num calls")
    i_avg = col("avg", "average")
    if i_total is None or i_name is None or i_count is None:
        raise TraceFormatError(
            f"{path}: CSV lacks Total Time / Instances / Name; expected {EXPECTED}"
        )
    scale = _time_scale(header[i_total])
    avg_scale = _time_scale(header[i_avg]) if i_avg is not None else scale
    rows: list[KernelSummaryRow] = []
    for line_no, cells in enumerate(reader, start=start + 2):
        if not cells or all(not c.strip() for c in cells):
            continue
        try:
            total = float(cells[i_total].replace(",", "")) * scale
            count = int(float(cells[i_count].replace(",", "")))
            if not (math.isfinite(total) and total >= 0 and count >= 0):
                raise ValueError("negative or non-finite time")
            avg = (
                float(cells[i_avg].replace(",", "")) * avg_scale
                if i_avg is not None
                else total / max(count, 1)
            )
            name = cells[i_name]
        except (IndexError, ValueError, OverflowError):
            raise TraceFormatError(
                f"{path}: line {line_no}: not a kernel summary row (a time must be a finite "
                "number >= 0)"
            ) from None
        rows.append(KernelSummaryRow(name=name, total_s=total, instances=count, avg_s=avg))
    if not rows:
        raise TraceFormatError(f"{path}: the Nsight kernel summary has no kernel rows")
    if not sum(r.total_s for r in rows) > 0:
        raise TraceFormatError(f"{path}: the Nsight kernel summary's kernels took no time (every "
                               "Total Time is 0): nothing to diagnose")  # fmt: skip
    return Trace(
        format="nsys_kern_sum_csv",
        path=str(path),
        kernel_summary=rows,
        events_read=len(rows),
    )


__all__ = [
    "EXPECTED",
    "CpuEvent",
    "GpuEvent",
    "KernelSummaryRow",
    "RuntimeEvent",
    "Trace",
    "TraceFormatError",
    "load_trace",
]
