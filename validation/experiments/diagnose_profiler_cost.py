#!/usr/bin/env python3
"""How far `gpumodel diagnose`'s step without the profiler is from the step timed without it.

Scores, never fits. For every torch.profiler trace that `validation/unseen/steps_unseen.py`
recorded beside CUDA-event times of the same point in the same process (the traced point's
median over its rounds, `evaluate.steady_s`), diagnose the trace and compare with that time:

- the profiled step (what diagnose reported before it took the profiler's cost out);
- the step without the profiler, estimated from the recorded events at the default cost per
  event (no host profile, no --step-ms: what a user gets from the trace alone);
- the same with the host profile measured in that device call (its ``profiler_event_s``).

Errors are (step - measured) / measured, |error| median and p90 by runtime and phase.

The spread of the cost per event. From the H100 runs' host-bound eager decode traces alone, the
cost per event solved exactly from each traced point's unprofiled time (``--step-ms``): its p10
and p90 are ``gpumodel.tracecal.PROFILER_EVENT_SPREAD_S``, the range diagnose gives its estimate
(``steps.unprofiled_step_range_s``). How often the H200 runs' measured steps fall inside that
range is then scored on data the spread did not see.

usage: PYTHONPATH=.:validation/unseen python validation/experiments/diagnose_profiler_cost.py \
           validation/results/steps-h*-run* --out validation/results/diagnose-profiler-cost.md
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from pathlib import Path

from evaluate import quantile, steady_s
from evaluate_traces import _same_point, load_machine

import gpumodel as gm

VARIANTS = ("profiled step", "without the profiler (default cost)",
            "without the profiler (host profile)")  # fmt: skip


def solved_per_event_us(roots: list[Path], gpu: str) -> list[float]:
    """The profiler's cost per event, solved from each host-bound eager decode trace of ``gpu``
    with its traced point's unprofiled step time."""
    from gpumodel.diagnose.parse import load_trace
    from gpumodel.diagnose.timeline import build_timeline
    from gpumodel.tracecal import profiler_cost

    out = []
    for root in roots:
        try:
            m = load_machine(root)
        except SystemExit:
            continue
        if m.gpu != gpu:
            continue
        for t in m.traces:
            path = Path(t["dir"]) / t["file"]
            traced = next((r for r in m.records if _same_point(r, t["point"])), None)
            if "decode-eager" not in t["file"] or traced is None or not path.is_file():
                continue
            tr = load_trace(path)
            prof, _ = profiler_cost(tr, build_timeline(tr), path, steady_s(traced) * 1e3)
            if prof.method.startswith("step-ms"):  # host-bound: solved
                out.append(prof.per_event_s * 1e6)
    return sorted(out)


def score(roots: list[Path]) -> tuple[dict[tuple, dict[str, list[float]]], list[str]]:
    errs: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    rows = []
    for root in roots:
        try:
            m = load_machine(root)
        except SystemExit:
            continue
        for t in m.traces:
            path = Path(t["dir"]) / t["file"]
            traced = next((r for r in m.records if _same_point(r, t["point"])), None)
            if traced is None or not path.is_file():
                continue
            measured = steady_s(traced)
            key = (m.gpu, traced["runtime"], traced["phase"])
            plain = gm.diagnose(path, gpu=m.gpu).steps
            got = [plain.step_time_s, plain.unprofiled_step_time_s]
            lo, hi = plain.unprofiled_step_range_s or (None, None)
            if lo is not None:
                errs[key]["inside the range"].append(float(lo <= measured <= hi))
            got.append(gm.diagnose(path, gpu=m.gpu, host=m.host).steps.unprofiled_step_time_s
                       if m.host else None)  # fmt: skip
            cells = []
            for name, v in zip(VARIANTS, got):
                if v is None:
                    cells.append("-")
                    continue
                e = v / measured - 1
                errs[key][name].append(e)
                cells.append(f"{v * 1e3:.2f} ({100 * e:+.0f}%)")
            rows.append(f"| {root.name}/{t['file']} | {traced['batch']} x {traced['seq']} | "
                        f"{measured * 1e3:.2f} | " + " | ".join(cells) + " |")  # fmt: skip
    return errs, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("roots", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    spread = {gpu: solved_per_event_us(args.roots, gpu) for gpu in ("h100-sxm", "h200-sxm")}
    errs, rows = score(args.roots)
    lines = ["# diagnose: the step without the profiler against the step timed without it", "",
             "Generated by `validation/experiments/diagnose_profiler_cost.py` (scores only). "
             "|error| median, p90 and n against the traced point's unprofiled CUDA-event median.",
             "", "| GPU | runtime | phase | " + " | ".join(VARIANTS)
             + " | measured inside diagnose's range |",
             "|---|---|---|" + "---:|" * (len(VARIANTS) + 1)]  # fmt: skip
    for key in sorted(errs):
        cells = []
        for name in VARIANTS:
            a = [abs(e) for e in errs[key][name]]
            cells.append(f"{100 * statistics.median(a):.1f}% / {100 * quantile(a, 0.9):.1f}% "
                         f"(n={len(a)})" if a else "-")  # fmt: skip
        inside = errs[key]["inside the range"]
        lines.append(f"| {' | '.join(key)} | " + " | ".join(cells)
                     + (f" | {100 * sum(inside) / len(inside):.0f}% |" if inside else " | - |"))  # fmt: skip
    lines += ["", "## The profiler's cost per event, solved from host-bound decode traces", "",
              "| GPU | n | p10 | median | p90 | us an event |", "|---|---:|---:|---:|---:|---|"]
    for gpu, v in spread.items():
        if v:
            lines.append(f"| {gpu} | {len(v)} | {quantile(v, 0.1):.2f} | "
                         f"{statistics.median(v):.2f} | {quantile(v, 0.9):.2f} | "
                         + ", ".join(f"{x:.2f}" for x in v) + " |")  # fmt: skip
    lines += ["", "## Every trace", "", "| trace | point | measured ms | "
              + " | ".join(VARIANTS) + " |", "|---|---|---:|" + "---:|" * len(VARIANTS), *rows]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:6 + len(errs)]))


if __name__ == "__main__":
    main()
