"""From a parsed Chrome trace to op instances, steps and the GPU's idle gaps.

* Each GPU activity is joined to the runtime call that launched it (``correlation``) and that
  call to the innermost CPU range around it on its thread (the *launcher*). The kernels of one
  operator call form an *instance*; its measured time is the sum of its kernels' durations.
* Which operator a kernel is charged to: the innermost operator in the launcher's ancestry that
  a mapping rule knows (``aten::mm`` under ``aten::linear``), climbing to the outermost of an
  attention or convolution family (``aten::scaled_dot_product_attention`` rather than the
  ``_flash_attention_forward`` it calls, whose layout differs).
* Steps: ``ProfilerStep#N`` ranges (``prof.step()``). A GPU activity belongs to the step whose
  range contains its *launch*, never its GPU time: when the host runs ahead, step N's kernels
  run long after ``ProfilerStep#N`` ended (into the ranges of later steps); when the host is
  slow they run long before the next range starts. Activities whose launch is not in the trace
  (work queued before profiling began, e.g. the tail of the schedule's warm-up step, whose CPU
  events the profiler drops) belong to no step and are left out, with a note. The analysed
  window runs from the first GPU activity of the first step to the first GPU activity of the
  last step: whole step periods of the GPU, which is what CUDA events recorded at each step's
  start measure, whether the host or the GPU sets the pace. Without step markers (or without
  launches in the trace) the window is the whole GPU timeline, counted as one step.
* Gaps: the window minus the union of GPU activity on the device. A gap is charged to data
  loading when a DataLoader ``__next__`` range covers most of it, to a host sync when a
  synchronising call (``.item()``, ``cudaStreamSynchronize``, a D2H or pageable copy) returned
  at its start, else to launch overhead (short gaps) or other host work (long ones). A sync
  also drains the GPU's queue: the launch gaps after it are the sync's too, up to the time the
  host was blocked in it (see :func:`_refill`).
"""

from __future__ import annotations

import bisect
import functools
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from gpumodel._io import gc_paused
from gpumodel.diagnose.comms import is_nccl, map_collective
from gpumodel.diagnose.mapping import Mapped, family_of, map_memory, map_op_cached
from gpumodel.diagnose.parse import CpuEvent, GpuEvent, Trace

SHORT_KERNEL_US = 10.0  # "many short kernels": shorter than a launch costs (seeds 002, 004)
LONG_GAP_US = 1000.0  # idle longer than this is host work, not per-launch overhead
MIN_ATTRIBUTED_GAP_US = 20.0  # smaller gaps are launch spacing whatever the CPU did
GRAPH_GAP_US = 1.0  # kernel-to-kernel spacing left under CUDA-graph replay

_STEP = re.compile(r"^ProfilerStep#\d+$")
_BACKWARD = re.compile(r"Backward\d*\b|evaluate_function|autograd::engine|CompiledFunctionBackward")
SYNC_RUNTIME = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
    "cudaMemcpy2D", "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize",
    "cuMemcpyDtoH", "cuMemcpyDtoH_v2",
})  # fmt: skip
SYNC_OPS = frozenset({
    "aten::item", "aten::_local_scalar_dense", "aten::nonzero", "aten::is_nonzero",
    "aten::equal", "aten::allclose", "aten::tolist", "aten::masked_select", "aten::unique",
    "aten::_unique2",
})  # fmt: skip
# operators that own kernels but no rule: climb past them only into these families
_WRAPPED_FAMILIES = ("attention", "conv", "norm", "softmax")


@dataclass(eq=False)
class Instance:
    """One operator call (or one unattributed kernel / one copy) with its GPU activities."""

    kind: str  # "op", "kernel", "memcpy", "memset"
    node: CpuEvent | None
    gpu: list[GpuEvent] = field(default_factory=list)
    phase: str = ""
    step: int | None = None
    mapped: Mapped | None = None
    name: str = ""

    @property
    def measured_us(self) -> float:
        return sum(g.dur for g in self.gpu)

    @property
    def start(self) -> float:
        return min(g.ts for g in self.gpu)

    @property
    def end(self) -> float:
        return max(g.end for g in self.gpu)

    @property
    def stream(self) -> Any:
        return self.gpu[0].stream

    @property
    def kernel_names(self) -> list[str]:
        return [g.name for g in self.gpu]


@dataclass
class Gap:
    start: float
    end: float
    cause: str  # "data_loading", "host_sync", "launch", "host_other"
    evidence: str = ""
    wait: float = 0.0  # host_sync: how long the synchronising call blocked the host (us)
    refill: bool = False  # host_sync: a launch gap while the queue refilled after the sync

    @property
    def dur(self) -> float:
        return self.end - self.start


@dataclass
class Timeline:
    instances: list[Instance]
    device: Any
    step_names: list[str]
    steps_with_work: int  # divisor for per-step totals of op instances
    window: tuple[float, float]
    periods: int  # whole step periods inside the window
    step_source: str
    busy_us: float  # GPU busy inside the window
    gaps: list[Gap]
    kernels_in_window: list[GpuEvent]
    notes: list[str] = field(default_factory=list)
    activities: list[GpuEvent] = field(default_factory=list)  # the device's, by start time

    @property
    def window_us(self) -> float:
        return self.window[1] - self.window[0]

    @property
    def step_us(self) -> float:
        return self.window_us / self.periods if self.periods else self.window_us


@functools.lru_cache(maxsize=1 << 14)  # a trace repeats a few hundred names thousands of times
def short_name(kernel: str) -> str:
    """``void at::native::foo<float, 4>(...)`` -> ``at::native::foo``."""
    s = kernel.strip().replace("(anonymous namespace)", "\0")
    s = re.sub(r"^void\s+", "", s)
    depth, out = 0, []
    for ch in s:
        if ch in "<(":
            if depth == 0 and ch == "(":
                break
            depth += 1
            continue
        if ch in ">)":
            depth = max(depth - 1, 0)
            continue
        if depth == 0:
            out.append(ch)
    name = "".join(out).strip() or s[:80]
    return name.replace("\0", "(anonymous namespace)")


def _phase(node: CpuEvent | None) -> str:
    if node is None:
        return ""
    for n in [node, *node.ancestors()]:
        if _BACKWARD.search(n.name):
            return "backward"
        if n.name.startswith("Optimizer.") or n.name.startswith("aten::_fused_adam"):
            return "optimizer"
    return "forward"


def _link_launchers(trace: Trace) -> None:
    """Parent pointers of CPU ranges and the innermost range around each runtime call."""
    threads: dict[tuple[Any, Any], list[tuple[float, int, float, Any]]] = defaultdict(list)
    for i, e in enumerate(trace.cpu):
        threads[(e.pid, e.tid)].append((e.ts, 0, -e.dur, i))
    for j, r in enumerate(trace.runtime):
        threads[(r.pid, r.tid)].append((r.ts, 1, 0.0, j))
    for items in threads.values():
        items.sort()  # by time, ranges before the calls they hold, longer ranges first
        stack: list[CpuEvent] = []
        for ts, kind, _, idx in items:
            while stack and stack[-1].end <= ts:
                stack.pop()
            if kind == 0:
                ev = trace.cpu[idx]
                ev.parent = stack[-1] if stack else None
                stack.append(ev)
            else:
                trace.runtime[idx].launcher = stack[-1] if stack else None
    orphans = [r for r in trace.runtime if r.launcher is None and r.external_id is not None]
    if not orphans:  # the usual trace: every call lies inside a range of its own thread
        return
    by_ext: dict[Any, CpuEvent] = {}
    for e in trace.cpu:
        if e.cat == "cpu_op" and e.external_id is not None:
            by_ext.setdefault(e.external_id, e)
    for r in orphans:
        r.launcher = by_ext.get(r.external_id)


def _select(launcher: CpuEvent | None) -> CpuEvent | None:
    """The operator a kernel launched under ``launcher`` is charged to (see module doc)."""
    if launcher is None:
        return None
    chain = [launcher, *launcher.ancestors()]
    for i, node in enumerate(chain):
        fam = family_of(node.name)
        if fam is None:
            continue
        if i > 0 and chain[0].name.startswith("aten::") and fam not in _WRAPPED_FAMILIES:
            break
        if fam in ("attention", "conv"):
            while i + 1 < len(chain) and family_of(chain[i + 1].name) == fam:
                i += 1
        return chain[i]
    return None


def _charge_node(launcher: CpuEvent | None) -> CpuEvent | None:
    """Mapped operator if any; else the innermost ATen operator (listed unmapped); else None
    (kernels of compiled regions and custom ops are then listed one by one, by kernel name)."""
    chosen = _select(launcher)
    if chosen is not None:
        return chosen
    if launcher is None:
        return None
    for node in [launcher, *launcher.ancestors()]:
        if node.cat == "cpu_op" and node.name.startswith("aten::"):
            return node
    return None


@gc_paused()  # a trace is millions of objects: see gc_paused
def build_timeline(trace: Trace) -> Timeline:
    _link_launchers(trace)
    notes: list[str] = []
    busy_by_device: dict[Any, float] = defaultdict(float)
    for g in trace.gpu:
        busy_by_device[g.device] += g.dur
    device = max(busy_by_device, key=busy_by_device.__getitem__)
    if len(busy_by_device) > 1:
        notes.append(f"the trace has {len(busy_by_device)} GPUs; device {device} (the busiest) "
                     "is analysed")  # fmt: skip
    gpu = sorted((g for g in trace.gpu if g.device == device), key=lambda g: g.ts)

    steps = sorted((e for e in trace.cpu if _STEP.match(e.name)), key=lambda e: e.ts)
    starts = [s.ts for s in steps]
    linked = sum(1 for g in gpu if g.runtime is not None)
    use_launch = linked >= 0.5 * len(gpu)
    if gpu and not use_launch:
        notes.append("most GPU activities have no launching runtime call in the trace: they are "
                     "charged to no operator, and to steps by their GPU time")  # fmt: skip

    def step_of(g: GpuEvent) -> int | None:
        if not steps:
            return None
        if use_launch:
            # By launch only: the GPU may run a step's work long after its CPU range ended
            # (the host runs ahead) or, when the host is slow, long before the next range
            # starts, so GPU timestamps say nothing about which step an activity belongs to.
            if g.runtime is None:
                return None
            t = g.runtime.ts
        else:
            t = g.ts
        i = bisect.bisect_right(starts, t) - 1
        if i >= 0 and t <= steps[i].end:
            return i
        if not use_launch and i >= 0:
            return i
        return None

    step_index = {id(g): step_of(g) for g in gpu}
    if steps and all(v is None for v in step_index.values()):
        notes.append(f"no GPU activity was launched inside the {len(steps)} ProfilerStep "
                     "range(s): the whole GPU timeline is analysed as one step")  # fmt: skip
        steps, starts = [], []
        step_index = {}

    instances: list[Instance] = []
    by_node: dict[int, Instance] = {}
    excluded = unlaunched = 0
    for g in gpu:
        st = step_index.get(id(g))
        if steps and st is None:
            if use_launch and g.runtime is None:
                unlaunched += 1
            else:
                excluded += 1
            continue
        launcher = g.runtime.launcher if g.runtime is not None else None
        if g.kind != "kernel":
            node = launcher
            inst = Instance(kind=g.kind, node=node, gpu=[g], phase=_phase(node), step=st)
            instances.append(inst)
            continue
        # an NCCL kernel is its collective, whatever operator (a backward hook's) launched it
        node = None if is_nccl(g.name) else _charge_node(launcher)
        if node is None:
            instances.append(Instance(kind="kernel", node=launcher, gpu=[g], phase=_phase(launcher),
                                      step=st))  # fmt: skip
            continue
        inst = by_node.get(id(node))
        if inst is None:
            inst = Instance(kind="op", node=node, phase=_phase(node), step=st)
            by_node[id(node)] = inst
            instances.append(inst)
        inst.gpu.append(g)
    if excluded:
        notes.append(f"{excluded} GPU activities launched outside the ProfilerStep ranges were "
                     "left out")  # fmt: skip
    if unlaunched:
        notes.append(f"{unlaunched} GPU activities whose launch is not in the trace (work queued "
                     "before the profiled steps, still running when they began) were left out")  # fmt: skip

    shapes = trace.has_shapes
    world = (trace.meta.get("distributedInfo") or {}).get("world_size")
    mapped: dict[str, Mapped] = {}
    for inst in instances:
        if inst.kind == "op":
            assert inst.node is not None
            inst.name = inst.node.name
            inst.mapped = map_op_cached(mapped, inst.node.name, inst.node.args, inst.kernel_names)
        elif inst.kind == "kernel" and is_nccl(inst.gpu[0].name):
            inst.mapped = map_collective(inst.gpu[0], inst.node, world)
            inst.name = inst.mapped.label or "nccl"
        elif inst.kind == "kernel":
            g = inst.gpu[0]
            inst.name = short_name(g.name)
            if not trace.cpu:
                why = "no CPU operators in the trace: record with activities=[CPU, CUDA]"
            elif g.runtime is not None and g.runtime.graph_launch:
                why = "replayed from a CUDA graph: its operator ran at capture, not in the trace"
            elif not shapes:
                why = "no shapes recorded: record with record_shapes=True"
            elif inst.name.startswith("triton_") or (inst.node and "Compiled" in inst.node.name):
                why = "compiler-generated kernel: no operator shapes recorded"
            elif inst.node is not None:
                why = f"launched under '{inst.node.name}', which has no shapes"
            else:
                why = "no launching operator found"
            inst.mapped = Mapped(op=None, family="other", reason=why)
        else:
            g = inst.gpu[0]
            inst.name = g.name
            inst.mapped = map_memory(g.name, g.kind, g.args)

    # steps and the analysed window
    step_first: dict[int, float] = {}
    for inst in instances:
        if inst.step is not None:
            s = inst.start
            step_first[inst.step] = min(step_first.get(inst.step, s), s)
    with_work = sorted(step_first)
    # whole step periods: from the first GPU activity of the first step with GPU work to that
    # of the last one (steps in between without GPU work still count as periods)
    spanned = with_work[-1] - with_work[0] + 1 if with_work else 0
    if len(with_work) >= 2 and step_first[with_work[-1]] > step_first[with_work[0]]:
        window = (step_first[with_work[0]], step_first[with_work[-1]])
        periods = with_work[-1] - with_work[0]
        source = "ProfilerStep"
    else:
        included = [g for inst in instances for g in inst.gpu]
        window = (min(g.ts for g in included), max(g.end for g in included))
        periods = 1
        source = "ProfilerStep (one step)" if with_work else "whole trace"
        if len(with_work) >= 2:
            notes.append("the steps' GPU work does not start in step order: the whole GPU "
                         "timeline of the profiled steps is counted as one step")  # fmt: skip
            source, spanned = "whole trace", 1
        elif with_work:
            notes.append("only one profiled step: idle time between steps is not visible; "
                         "profile at least 3 steps")  # fmt: skip
    busy, gaps = _gaps(trace, gpu, window)
    in_window = [g for g in gpu if window[0] <= g.ts < window[1]]
    return Timeline(
        instances=instances, device=device, step_names=[s.name for s in steps],
        steps_with_work=max(spanned, 1), window=window, periods=periods,
        step_source=source, busy_us=busy, gaps=gaps, kernels_in_window=in_window, notes=notes,
        activities=gpu,
    )  # fmt: skip


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def loader_spans(trace: Trace) -> list[tuple[float, float]]:
    """Where the host was inside a DataLoader (its ``__next__`` and what it called), merged."""
    return _merge([(e.ts, e.end) for e in trace.cpu if "dataloader" in e.name.lower()])


def span_overlap(spans: list[tuple[float, float]], s: float, e: float) -> float:
    return sum(max(0.0, min(e, b) - max(s, a)) for a, b in spans if a < e and b > s)


def exposed_comm_us(comm: list[GpuEvent], others: list[GpuEvent]) -> dict[int, float]:
    """Per NCCL activity of ``comm`` (by ``id``): the microseconds of it that no activity of
    ``others`` (the device's other kernels and copies) overlaps: the time the GPU did nothing
    but communicate, which the step pays in full. Where NCCL kernels overlap each other, the
    shared time is counted once, on the first."""
    if not comm:  # most traces: no NCCL, nothing to merge the device's activities for
        return {}
    other = _merge([(g.ts, g.end) for g in others if not (g.kind == "kernel" and is_nccl(g.name))])
    ends = [b for _, b in other]
    out: dict[int, float] = {}
    covered = float("-inf")  # NCCL time already counted, up to here
    for g in sorted(comm, key=lambda g: g.ts):
        s, e = max(g.ts, covered), g.end
        covered = max(covered, e)
        hidden, i = 0.0, bisect.bisect_right(ends, s)
        while i < len(other) and other[i][0] < e:
            hidden += min(e, other[i][1]) - max(s, other[i][0])
            i += 1
        out[id(g)] = max(0.0, e - s - hidden)
    return out


def _gaps(
    trace: Trace, gpu: list[GpuEvent], window: tuple[float, float]
) -> tuple[float, list[Gap]]:
    w0, w1 = window
    merged = _merge([(g.ts, g.end) for g in gpu])
    busy = sum(max(0.0, min(e, w1) - max(s, w0)) for s, e in merged)
    loader = loader_spans(trace)
    syncs = sorted(_syncs(trace), key=lambda x: x.end)
    top = [e for e in trace.cpu if e.parent is None or _STEP.match(e.parent.name or "")]
    top = [e for e in top if not _STEP.match(e.name)]
    gaps: list[Gap] = []
    cursor = w0
    for s, e in [*merged, (w1, w1)]:
        if e <= w0:
            continue
        s = max(s, w0)
        if s > cursor and cursor < w1:
            after = gaps[-1].end if gaps else float("-inf")
            gaps.append(_classify(cursor, min(s, w1), loader, syncs, top, after))
        cursor = max(cursor, e)
        if cursor >= w1:
            break
    return busy, _refill(gaps)


@dataclass(frozen=True)
class _Sync:
    """A host call that blocked until the GPU caught up: when it returned, how long it waited."""

    end: float
    wait: float
    label: str
    rank: int  # which label to show when several returned together: 0 operator, 1 runtime, 2 copy


def _syncs(trace: Trace) -> list[_Sync]:
    out = [_Sync(r.end, r.dur, r.name, 1) for r in trace.runtime if r.name in SYNC_RUNTIME]
    out += [_Sync(e.end, e.dur, e.name, 0) for e in trace.cpu if e.name in SYNC_OPS]
    for g in trace.gpu:  # a D2H copy, or any copy from pageable memory, blocks the host
        if g.kind == "memcpy" and g.runtime is not None:
            n = g.name.lower()
            if "dtoh" in n or "pageable" in n:
                end = max(g.runtime.end, g.end)
                out.append(_Sync(end, end - g.runtime.ts, g.name, 2))
    return out


def _refill(gaps: list[Gap]) -> list[Gap]:
    """A sync drains the GPU's queue: after it returns, the GPU waits on each launch (until the
    host is far enough ahead again). Without the wait the host would have reached every later
    launch up to ``wait`` earlier, so the launch gaps after a sync, until the next sync or other
    host work, are the sync's as well, up to the time the host spent blocked in it; a gap only
    partly covered is split. (The gap right after the sync is the sync's whole.)"""
    out: list[Gap] = []
    budget, sync = 0.0, None
    for g in gaps:
        if g.cause == "host_sync" or (g.cause == "launch" and g.wait > 0.0):
            g.cause = "host_sync"
            budget, sync = g.wait, g
            out.append(g)
            continue
        if g.cause != "launch":
            budget = 0.0
        if g.cause != "launch" or budget <= 0.0 or sync is None:
            out.append(g)
            continue
        take = min(g.dur, budget)
        budget -= take
        out.append(Gap(g.start, g.start + take, "host_sync", sync.evidence, refill=True))
        if take < g.dur:
            out.append(Gap(g.start + take, g.end, "launch"))
    return out


def _classify(
    s: float,
    e: float,
    loader: list[tuple[float, float]],
    syncs: list[_Sync],
    top: list[CpuEvent],
    after: float = float("-inf"),
) -> Gap:
    dur = e - s
    if dur >= MIN_ATTRIBUTED_GAP_US:
        in_loader = span_overlap(loader, s, e)
        if in_loader >= 0.5 * dur:
            return Gap(s, e, "data_loading", f"DataLoader busy for {in_loader / dur:.0%} of it")
    # a synchronising call that returned as the GPU went idle (before it resumed), and not
    # before the previous gap ended (``after``): that one was the previous gap's
    lo = bisect.bisect_right(syncs, max(s - MIN_ATTRIBUTED_GAP_US, after), key=lambda x: x.end)
    hi = bisect.bisect_right(syncs, min(e, s + max(200.0, 0.25 * dur)), key=lambda x: x.end)
    if hi > lo:
        near = syncs[lo:hi]
        x = min(near, key=lambda x: (x.rank, -x.wait))  # the outermost user-level call
        wait = max(y.wait for y in near)
        # a short one is launch spacing on its own, but the sync behind it still drained the
        # queue: ``_refill`` charges it and the launch gaps after it to the sync
        cause = "host_sync" if dur >= MIN_ATTRIBUTED_GAP_US else "launch"
        return Gap(s, e, cause, f"after {x.label}", wait=wait)
    if dur < LONG_GAP_US:
        return Gap(s, e, "launch")
    by_name: dict[str, float] = defaultdict(float)
    for ev in top:
        if ev.ts < e and ev.end > s:
            by_name[ev.name] += min(e, ev.end) - max(s, ev.ts)
    names = [n for n in sorted(by_name, key=by_name.__getitem__, reverse=True)[:3]
             if by_name[n] >= 0.05 * dur]  # fmt: skip
    ev_txt = ", ".join(f"{n} ({by_name[n] / 1000:.2f} ms)" for n in names) if names else ""
    return Gap(s, e, "host_other", ev_txt)


__all__ = [
    "GRAPH_GAP_US",
    "LONG_GAP_US",
    "SHORT_KERNEL_US",
    "Gap",
    "Instance",
    "Timeline",
    "build_timeline",
    "short_name",
]
