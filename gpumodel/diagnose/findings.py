"""Step-level findings: what holds the step back, how much each fix would return, and the fix.

Every finding is quantified as time per step. Two kinds of evidence:

* idle time (timeline gaps, see :mod:`gpumodel.diagnose.timeline`): data loading, host syncs,
  launch overhead, other host work. Gaps are disjoint, so these add up.
* kernel time that a known fix would cut: fp32 matrix products (TF32/bf16), misaligned matrix
  dimensions (padding), pageable host copies (pinned memory), elementwise chains (fusion).
  Each claims part of specific kernel calls' time; where two claim the same call, the union
  counts the larger claim once.

The fixes are the ones the seed documents give (002 "Problem: ..." sections, 004 symptom table).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpumodel.diagnose.comms import FAMILY as COMM_FAMILY
from gpumodel.diagnose.mapping import ChainCost, Mapped
from gpumodel.diagnose.timeline import (
    GRAPH_GAP_US,
    LONG_GAP_US,
    SHORT_KERNEL_US,
    Instance,
    Timeline,
    exposed_comm_us,
)
from gpumodel.model.gemm import pad_to
from gpumodel.ops import Conv2d, Gemm, HostTransfer, Op
from gpumodel.specs import GPUSpec
from gpumodel.units import format_quantity

PAD_MULTIPLE = 64  # pad to a multiple of 64 elements: aligned for every dtype and tile (nanoGPT)

FIXES = {
    "data_loading": (
        "Prepare batches ahead of the GPU: DataLoader(num_workers=8, pin_memory=True, "
        "prefetch_factor=4, persistent_workers=True); move CPU preprocessing off the hot path "
        "(or onto the GPU)."
    ),
    "host_sync": (
        "Remove host syncs from the loop: keep metrics on the GPU and read them every N steps "
        "(accumulate the loss in a GPU tensor), avoid .item()/.cpu()/.tolist()/print of GPU "
        "values and Python `if` on GPU tensors; copy with non_blocking=True."
    ),
    "launch_bound": (
        "Cut the number of launches: torch.compile(model) fuses kernels (mode='reduce-overhead' "
        "also replays them as CUDA graphs), or capture the step with torch.cuda.graph; larger "
        "batches give each kernel more work."
    ),
    "host_other": (
        "Move the host work in these gaps off the critical path: overlap it with GPU work, run "
        "it every N steps or in a background thread/process."
    ),
    "pageable_copy": (
        "Pin the host buffers (DataLoader(pin_memory=True) or tensor.pin_memory()) and copy with "
        ".to('cuda', non_blocking=True); keep reused data on the GPU."
    ),
    "fp32_matmul": (
        "Use the tensor cores: torch.backends.cuda.matmul.allow_tf32 = True (or "
        "torch.set_float32_matmul_precision('high')), or run in bf16 with "
        "torch.autocast('cuda', dtype=torch.bfloat16)."
    ),
    "misaligned_matmul": (
        "Pad the dimension to a multiple of 64 (e.g. vocabulary 50257 -> 50304): tensor cores "
        "need every leading dimension to be a multiple of 16 bytes (8 bf16/fp16 elements)."
    ),
    "comm_exposed": (
        "Hide the communication behind compute: DDP overlaps each gradient bucket's all-reduce "
        "with the rest of the backward (keep find_unused_parameters=False, tune bucket_cap_mb, "
        "skip the sync of gradient-accumulation micro-steps with no_sync()); FSDP prefetches "
        "the next all-gather (backward_prefetch=BACKWARD_PRE, forward_prefetch=True); fewer, "
        "larger messages pay NCCL's latency less often; more work per GPU (a larger batch) "
        "leaves more compute to hide it behind."
    ),
    "fusion": (
        "Fuse the chain into one kernel: torch.compile fuses pointwise chains; or call a fused "
        "op (F.gelu(x, approximate='tanh') for a hand-written tanh GELU, fused norms, "
        "AdamW(fused=True))."
    ),
}


@dataclass
class Draft:
    """A finding before it is turned into the report's model."""

    kind: str
    title: str
    per_step_us: float | None
    evidence: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    claims: dict[int, float] = field(default_factory=dict)  # id(instance) -> us over the trace
    idle: bool = False  # a timeline (idle) finding rather than a kernel-time one
    fix_note: str = ""  # what this trace adds to the standard fix
    fix_text: str | None = None  # replaces the standard fix where this trace says it is another

    @property
    def fix(self) -> str:
        if self.fix_text is not None:
            return self.fix_text
        return f"{FIXES[self.kind]} {self.fix_note}".strip()


@dataclass
class GroupView:
    """What findings need from a per-op group (built in report.py)."""

    name: str
    phase: str
    mapped: Mapped
    instances: list[Instance]
    predict: Callable[[Op], float]  # seconds per call on this GPU, calibration applied
    pred_per_call_s: float | None
    sol_per_call_s: float | None = None  # speed of light (a bound), per call

    @property
    def measured_s(self) -> float:
        return sum(i.measured_us for i in self.instances) * 1e-6

    @property
    def count(self) -> int:
        return len(self.instances)


def idle_findings(tl: Timeline) -> list[Draft]:
    periods = tl.periods or 1
    by_cause: dict[str, list] = defaultdict(list)
    for g in tl.gaps:
        by_cause[g.cause].append(g)
    out: list[Draft] = []
    if by_cause["data_loading"]:
        gs = by_cause["data_loading"]
        total = sum(g.dur for g in gs)
        out.append(Draft(
            kind="data_loading", idle=True,
            title="GPU idle while the DataLoader fetches the next batch (input pipeline starved)",
            per_step_us=total / periods,
            evidence=[f"{len(gs)} gaps, {total / 1000:.2f} ms in {periods} step period(s); "
                      f"the longest {max(g.dur for g in gs) / 1000:.2f} ms"],
            details={"gaps": len(gs), "idle_s": total * 1e-6},
        ))  # fmt: skip
    if by_cause["host_sync"]:
        gs = by_cause["host_sync"]
        total = sum(g.dur for g in gs)
        first = [g for g in gs if not g.refill]
        refill = [g for g in gs if g.refill]
        calls: dict[str, int] = defaultdict(int)
        for g in first:
            calls[g.evidence.removeprefix("after ")] += 1
        what = ", ".join(f"{n} x{c}" for n, c in sorted(calls.items(), key=lambda kv: -kv[1])[:3])
        ev = [f"{len(first)} gaps right after a synchronising call ({what}), "
              f"{sum(g.dur for g in first) / 1000:.2f} ms in {periods} step period(s)"]  # fmt: skip
        if refill:
            ev.append(f"then {len(refill)} launch gaps while the drained queue refilled, "
                      f"{sum(g.dur for g in refill) / 1000:.2f} ms (at most the time the host "
                      "was blocked in the sync)")  # fmt: skip
        pageable = [c for c in calls if "pageable" in c.lower()]
        if pageable:
            ev.append("a copy from pageable memory blocks the host even with non_blocking=True")
        pin = ("Copies from pageable memory synchronise: pin the host buffer (DataLoader("
               "pin_memory=True) or tensor.pin_memory()) so that .to('cuda', non_blocking=True) "
               "overlaps the copy with GPU work.")  # fmt: skip
        out.append(Draft(
            kind="host_sync", idle=True,
            title="GPU idle after host syncs (.item(), .cpu(), synchronize, pageable copies): "
                  "the host waited, then the GPU waited for the host",
            per_step_us=total / periods, evidence=ev,
            details={"gaps": len(first), "refill_gaps": len(refill), "idle_s": total * 1e-6,
                     "calls": dict(calls)},
            fix_note=pin if pageable else "",
            fix_text=pin if pageable and len(pageable) == len(calls) else None,
        ))  # fmt: skip
    launch = by_cause["launch"]
    if launch:
        total = sum(max(g.dur - GRAPH_GAP_US, 0.0) for g in launch)
        ks = tl.kernels_in_window
        short = sum(1 for k in ks if k.kind == "kernel" and k.dur < SHORT_KERNEL_US)
        n_k = sum(1 for k in ks if k.kind == "kernel")
        med = statistics.median(g.dur for g in launch)
        out.append(Draft(
            kind="launch_bound", idle=True,
            title="Many short kernels back to back: the GPU waits for the host to launch the next",
            per_step_us=total / periods,
            evidence=[f"{n_k / periods:.0f} kernels per step, {short / max(n_k, 1):.0%} shorter "
                      f"than {SHORT_KERNEL_US:.0f} us; {len(launch) / periods:.0f} launch gaps per "
                      f"step, median {med:.1f} us (CUDA graphs leave ~{GRAPH_GAP_US:.0f} us)"],
            details={"kernels_per_step": n_k / periods, "short_kernel_fraction": short / max(n_k, 1),
                     "gaps_per_step": len(launch) / periods, "median_gap_s": med * 1e-6},
        ))  # fmt: skip
    if by_cause["host_other"]:
        gs = by_cause["host_other"]
        total = sum(g.dur for g in gs)
        ev = [
            f"{len(gs)} gaps over {LONG_GAP_US / 1000:g} ms, {total / 1000:.2f} ms in {periods} step "
            "period(s)"
        ]
        ev += [f"during the longest: {g.evidence}" for g in sorted(gs, key=lambda g: -g.dur)[:1]
               if g.evidence]  # fmt: skip
        out.append(Draft(
            kind="host_other", idle=True,
            title="GPU idle during other host work (no DataLoader or sync in the gap)",
            per_step_us=total / periods, evidence=ev,
            details={"gaps": len(gs), "idle_s": total * 1e-6},
        ))  # fmt: skip
    return out


# Idle findings whose gaps are the host issuing work, which the profiler slows (its cost per
# recorded event): the profiler's host cost comes out of these first, then out of the other idle
# findings (a sync's refill, a loader's own operators) if the unprofiled step says there was more
HOST_PACED = ("launch_bound", "host_other")


def without_profiler(drafts: list[Draft], cut_us: float, how: str) -> list[Draft]:
    """``drafts`` with ``cut_us`` per step (the profiler's own host cost that the step loses
    without the profiler) taken out of their idle time: from the host-paced findings, in
    proportion to their size, then from the other idle findings; never below zero."""
    out = list(drafts)
    for kinds in (HOST_PACED, None):
        picked = [i for i, d in enumerate(out) if d.idle and d.per_step_us
                  and (kinds is None or d.kind in kinds)]  # fmt: skip
        total = sum(out[i].per_step_us or 0.0 for i in picked)
        take = min(cut_us, total)
        if take <= 0:
            continue
        for i in picked:
            d = out[i]
            share = take * (d.per_step_us or 0.0) / total
            out[i] = dataclasses.replace(
                d, per_step_us=(d.per_step_us or 0.0) - share,
                evidence=[*d.evidence, f"{share / 1000:.2f} ms of it per step was the profiler's "
                          f"own host cost ({how}), taken out"],
            )  # fmt: skip
        cut_us -= take
    return out


def kernel_findings(groups: list[GroupView], gpu: GPUSpec, tl: Timeline | None) -> list[Draft]:
    n_steps = tl.steps_with_work if tl is not None else 1
    out = [
        _pageable(groups, n_steps),
        _fp32(groups, gpu, n_steps),
        _misaligned(groups, n_steps),
        _fusion(groups, tl, n_steps) if tl is not None else None,
        _comm(groups, tl, n_steps) if tl is not None else None,
    ]
    return [d for d in out if d is not None]


def _comm(groups: list[GroupView], tl: Timeline, n_steps: int) -> Draft | None:
    """NCCL time with nothing else on the GPU beside it (``timeline.exposed_comm_us``)."""
    views = [v for v in groups if v.mapped.family == COMM_FAMILY]
    if not views:
        return None
    exposed = exposed_comm_us([g for v in views for i in v.instances for g in i.gpu],
                              tl.activities)  # fmt: skip
    d = Draft(kind="comm_exposed", per_step_us=0.0,
              title="Communication the compute does not hide: the GPU runs only NCCL kernels")  # fmt: skip
    for v in views:
        for inst in v.instances:
            d.per_step_us += _claim(d, inst, sum(exposed[id(g)] for g in inst.gpu)) / n_steps  # type: ignore[operator]
    measured = sum(v.measured_s for v in views) * 1e3 / n_steps
    calls = sum(v.count for v in views) / n_steps
    d.evidence.append(f"{calls:.3g} NCCL kernels per step, {measured:.3g} ms; "
                      f"{(d.per_step_us or 0) * 1e-3:.3g} ms of it with no other kernel or copy "
                      "on the GPU")  # fmt: skip
    priced = [v for v in views if v.pred_per_call_s is not None]
    for v in sorted(priced, key=lambda v: -v.measured_s)[:3]:
        op = v.mapped.op
        assert op is not None and v.pred_per_call_s is not None
        d.evidence.append(
            f"{v.name} of {format_quantity(op.bytes, 'B')} over {op.gpus} ranks, "  # type: ignore[attr-defined]
            f"{v.count / n_steps:.3g} per step: {v.measured_s / v.count * 1e3:.3g} ms each, "
            f"model {v.pred_per_call_s * 1e3:.3g} ms"
        )
    model_ms = sum(v.pred_per_call_s * v.count for v in priced) * 1e3 / n_steps  # type: ignore[operator]
    measured_priced = sum(v.measured_s for v in priced) * 1e3 / n_steps
    if priced and model_ms > 0 and measured_priced > 2 * model_ms:
        d.evidence.append(
            f"the priced NCCL kernels ran {measured_priced / model_ms:.3g}x the model's "
            f"{model_ms:.3g} ms: a traced NCCL kernel also waits for the slowest rank to reach "
            "the collective (uneven work, a straggler) or for a slower link than the GPU spec's"
        )
    if any("SendRecv" in g.name for v in views for i in v.instances for g in i.gpu):
        d.fix_note = ("Pipeline stages' send/recv (SendRecv kernels here) hide behind more "
                      "micro-batches per step or an interleaved schedule.")  # fmt: skip
    d.details = {"nccl_ms_per_step": measured, "exposed_ms_per_step": (d.per_step_us or 0) * 1e-3,
                 "model_ms_per_step": model_ms if priced else None}  # fmt: skip
    return d


def _claim(d: Draft, inst: Instance, us: float) -> float:
    us = min(max(us, 0.0), inst.measured_us)
    if us > 0:
        d.claims[id(inst)] = d.claims.get(id(inst), 0.0) + us
    return us


def _pageable(groups: list[GroupView], n_steps: int) -> Draft | None:
    d = Draft(kind="pageable_copy", title="", per_step_us=0.0)
    total = 0.0
    nbytes = 0.0
    rows = []
    for g in groups:
        op = g.mapped.op
        if not isinstance(op, HostTransfer) or op.pinned:
            continue
        pinned = g.predict(op.model_copy(update={"pinned": True}))
        got = sum(_claim(d, i, i.measured_us - pinned * 1e6) for i in g.instances)
        total += got
        nbytes += op.bytes * g.count
        rows.append((got, g))
    if not rows:
        return None
    rows.sort(key=lambda r: -r[0])
    d.title = (f"Host<->device copies from pageable memory on the critical path "
               f"({nbytes / n_steps / 1e6:.1f} MB per step)")  # fmt: skip
    d.per_step_us = total / n_steps
    d.evidence = [f"{g.name}: {g.count} copies {_in_steps(n_steps)}, {g.measured_s * 1e3:.2f} ms "
                  f"measured, {got / 1000:.2f} ms over pinned speed" for got, g in rows[:3]]  # fmt: skip
    d.details = {"bytes_per_step": nbytes / n_steps}
    return d


def _fp32(groups: list[GroupView], gpu: GPUSpec, n_steps: int) -> Draft | None:
    target = "tf32" if gpu.peak_flops("tf32", "tensor") else None
    if target is None:
        return None
    d = Draft(kind="fp32_matmul", title="", per_step_us=0.0)
    total, alt_bf16 = 0.0, 0.0
    rows = []
    for g in groups:
        op = g.mapped.op
        if not isinstance(op, (Gemm, Conv2d)) or op.dtype != "fp32" or g.mapped.tf32:
            continue
        t_tf32 = g.predict(op.model_copy(update={"dtype": target})) * g.mapped.scale
        got = sum(_claim(d, i, i.measured_us - t_tf32 * 1e6) for i in g.instances)
        if gpu.peak_flops("bf16", "tensor"):
            t_bf16 = g.predict(op.model_copy(update={"dtype": "bf16"})) * g.mapped.scale
            alt_bf16 += sum(max(i.measured_us - t_bf16 * 1e6, 0.0) for i in g.instances)
        total += got
        rows.append((got, g))
    if not rows or total <= 0:
        return None
    rows.sort(key=lambda r: -r[0])
    unknown = any(g.mapped.tf32 is None for _, g in rows)
    d.title = ("fp32 matrix products on CUDA cores" + (" (TF32 looks off)" if unknown else
               " (TF32 off)") + ": tensor cores unused")  # fmt: skip
    d.per_step_us = total / n_steps
    d.evidence = [f"{g.name} {_shape_text(g.mapped)}: {g.count} calls {_in_steps(n_steps)}, "
                  f"{g.measured_s * 1e3:.2f} ms; at TF32 speed of light {got / 1000:.2f} ms less"
                  for got, g in rows[:3]]  # fmt: skip
    if unknown:
        d.evidence.append("the trace cannot say whether TF32 was allowed; kernel names and the "
                          "measured speed suggest it was not")  # fmt: skip
    d.details = {
        "target_dtype": target,
        "recoverable_with_bf16_s_per_step": alt_bf16 / n_steps * 1e-6,
    }
    return d


def _in_steps(n: int) -> str:
    """Kernel evidence is summed over the trace: say over how many steps."""
    return f"in {n} step" + ("s" if n != 1 else "")


def _shape_text(m: Mapped) -> str:
    return " x ".join("[" + ", ".join(str(x) for x in s) + "]" for s in m.shapes)


def _misaligned(groups: list[GroupView], n_steps: int) -> Draft | None:
    # The trace's own aligned products say how close to the speed of light the library gets:
    # a padded product runs at the best efficiency an aligned product of its dtype reached
    # (the large ones, which a padded big matrix is like), among those that carry >= 2% of
    # the aligned products' time (so a tiny, noisy one cannot set it).
    eff: dict[str, float] = {}
    aligned: dict[str, list[GroupView]] = defaultdict(list)
    for g in groups:
        op = g.mapped.op
        if isinstance(op, Gemm) and not g.mapped.misaligned() and g.pred_per_call_s:
            aligned[op.dtype].append(g)
    for dt, gs in aligned.items():
        total = sum(g.measured_s for g in gs)
        ratios = [g.pred_per_call_s * g.count / g.measured_s for g in gs
                  if g.measured_s > 0 and g.measured_s >= 0.02 * total and g.pred_per_call_s]  # fmt: skip
        if ratios:
            eff[dt] = min(max(max(ratios), 0.05), 1.0)
    d = Draft(kind="misaligned_matmul", title="", per_step_us=0.0)
    pads: dict[int, dict[str, Any]] = {}
    total = 0.0
    rows = []
    for g in groups:
        op = g.mapped.op
        bad = g.mapped.misaligned()
        if not isinstance(op, Gemm) or not bad:
            continue
        padded = {dim: pad_to(v, PAD_MULTIPLE) for dim, v in bad.items()}
        new = op.model_copy(update=padded)
        e = eff.get(op.dtype, 1.0)
        t_pad = g.predict(new) / e
        got = sum(_claim(d, i, i.measured_us - t_pad * 1e6) for i in g.instances)
        total += got
        rows.append((got, g))
        for dim, v in bad.items():
            p = pads.setdefault(v, {"size": v, "padded": padded[dim], "dims": set(), "ops": 0,
                                    "recoverable_us": 0.0})  # fmt: skip
            p["dims"].add(dim.upper())
            p["ops"] += 1
            p["recoverable_us"] += got / len(bad)
    if not rows or total <= 0:
        return None
    rows.sort(key=lambda r: -r[0])
    ordered = sorted(pads.values(), key=lambda p: -p["recoverable_us"])
    what = "; ".join(f"pad {p['size']} -> {p['padded']} ({'/'.join(sorted(p['dims']))} of "
                     f"{p['ops']} product{'s' if p['ops'] > 1 else ''})"
                     for p in ordered[:3])  # fmt: skip
    d.title = f"Matrix products off the tensor-core alignment: {what}"
    d.per_step_us = total / n_steps
    d.evidence = [f"{g.name} {_shape_text(g.mapped)} {g.mapped.dtype}: {g.count} calls "
                  f"{_in_steps(n_steps)}, {g.measured_s * 1e3:.2f} ms; padded {got / 1000:.2f} ms "
                  "less"
                  for got, g in rows[:4]]  # fmt: skip
    dts = sorted({g.mapped.op.dtype for _, g in rows if g.mapped.op is not None})
    if any(dt in eff for dt in dts):
        d.evidence.append("padded time = the model's time for the padded shape (calibration "
                          "applied) / the best ratio of model to measured time this trace's "
                          "aligned " + ", ".join(f"{dt} products reach ({eff[dt]:.0%}; at most "
                                                 "100%)" for dt in dts if dt in eff))  # fmt: skip
    else:
        d.evidence.append("no aligned product of that dtype in the trace: the padded time is the "
                          "model's for the padded shape, so this is an upper bound")  # fmt: skip
    d.details = {
        "pads": [{"size": p["size"], "padded": p["padded"], "dims": sorted(p["dims"]),
                  "ops": p["ops"]} for p in ordered],
        "aligned_efficiency": eff,
    }  # fmt: skip
    return d


def _fusion(groups: list[GroupView], tl: Timeline, n_steps: int) -> Draft | None:
    group_of: dict[int, GroupView] = {id(i): g for g in groups for i in g.instances}
    by_stream: dict[Any, list[Instance]] = defaultdict(list)
    for inst in tl.instances:
        if inst.kind in ("op", "kernel"):
            by_stream[inst.stream].append(inst)
    chains: list[list[Instance]] = []
    for insts in by_stream.values():
        insts.sort(key=lambda i: i.start)
        run: list[Instance] = []
        for inst in insts:
            m = inst.mapped
            ok = (m is not None and m.family == "elementwise" and m.op is not None
                  and m.out_numel is not None)  # fmt: skip
            if ok and run and _continues(run[-1], inst):
                run.append(inst)
                continue
            if len(run) >= 2:
                chains.append(run)
            run = [inst] if ok else []
        if len(run) >= 2:
            chains.append(run)
    if not chains:
        return None
    d = Draft(kind="fusion", title="", per_step_us=0.0)
    total = 0.0
    patterns: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    cache: dict[Any, float] = {}
    for chain in chains:
        cost = ChainCost()
        preds = 0.0
        for inst in chain:
            assert inst.mapped is not None
            cost.add(inst.mapped)
            g = group_of.get(id(inst))
            preds += (g.pred_per_call_s or 0.0) if g else 0.0
        if preds <= 0:
            continue
        fused = cost.fused_op()
        if fused not in cache:
            cache[fused] = chain_group(chain, group_of).predict(fused)
        ratio = min(cache[fused] / preds, 1.0)
        got = sum(_claim(d, i, i.measured_us * (1.0 - ratio)) for i in chain)
        total += got
        key = " -> ".join(i.name.removeprefix("aten::") for i in chain)
        patterns[key][0] += 1
        patterns[key][1] += sum(i.measured_us for i in chain)
        patterns[key][2] += got
    if total <= 0:
        return None
    top = sorted(patterns.items(), key=lambda kv: -kv[1][2])
    d.title = (f"Chains of elementwise kernels that one fused kernel would do in a single pass "
               f"({sum(int(v[0]) for v in patterns.values()) / n_steps:.0f} chains per step)")  # fmt: skip
    d.per_step_us = total / n_steps
    d.evidence = [f"{k} (x{int(v[0])} {_in_steps(n_steps)}): {v[1] / 1000:.2f} ms measured, "
                  f"{v[2] / 1000:.2f} ms recoverable" for k, v in top[:3]]  # fmt: skip
    d.details = {"chains": len(chains), "patterns": [
        {"ops": k.split(" -> "), "count": int(v[0]), "measured_s": v[1] * 1e-6,
         "recoverable_s": v[2] * 1e-6} for k, v in top[:10]]}  # fmt: skip
    return d


def chain_group(chain: list[Instance], group_of: dict[int, GroupView]) -> GroupView:
    for inst in chain:
        if id(inst) in group_of:
            return group_of[id(inst)]
    raise LookupError("chain without a group")


FUSION_MIN_ELEMENTS = 1 << 16  # chains of smaller tensors return next to nothing


def _continues(prev: Instance, cur: Instance) -> bool:
    """Does ``cur`` plausibly read what ``prev`` wrote: same phase, an input of the shape
    ``prev`` wrote, and big enough for the round trip to DRAM to matter."""
    a, b = prev.mapped, cur.mapped
    assert a is not None and b is not None
    return (prev.phase == cur.phase and a.out_dims is not None
            and (a.out_numel or 0) >= FUSION_MIN_ELEMENTS and a.out_dims in b.shapes)  # fmt: skip


__all__ = ["FIXES", "HOST_PACED", "Draft", "GroupView", "idle_findings", "kernel_findings",
           "without_profiler"]
