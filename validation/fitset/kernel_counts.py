#!/usr/bin/env python3
"""Kernels per training step in torch.profiler traces, by phase and host op kind.

For each trace (``.json.gz``): the GPU kernels of each profiled step, attributed to the operator
that launched them (the diagnose timeline: phase forward / backward / optimizer, operator name ->
host-profile kind with ``gpumodel.tracecal.host_kind``), counted per step (median over the
profiled steps). With two traces of one family and policy at different layer counts the per-layer
and outside-the-layers counts follow: per layer = (N_a - N_b) / (L_a - L_b), outside = N_a - L_a x
per layer. This is how ``HF_EAGER_TRAIN_KERNELS`` is checked against the device's traces.

    PYTHONPATH=. python validation/fitset/kernel_counts.py TRACE.json.gz [...] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpumodel.diagnose.parse import load_trace  # noqa: E402
from gpumodel.diagnose.timeline import build_timeline  # noqa: E402
from gpumodel.tracecal import host_kind  # noqa: E402


def counts(path: Path) -> dict:
    """{"forward": {kind: n}, "backward": {...}, "optimizer": {...}, "kernels": n} per step."""
    tl = build_timeline(load_trace(path))
    per_step: dict[int, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
    for inst in tl.instances:
        if inst.step is None:
            continue
        n = sum(1 for g in inst.gpu if g.kind == "kernel")
        if not n:
            continue
        phase = inst.phase or "forward"
        kind = host_kind(inst.name) if inst.kind == "op" else "unattributed"
        per_step[inst.step][phase][kind] += n
    steps = sorted(per_step)
    out: dict = {"steps": len(steps)}
    for phase in ("forward", "backward", "optimizer"):
        kinds = {k for s in steps for k in per_step[s][phase]}
        out[phase] = {k: statistics.median(per_step[s][phase][k] for s in steps)
                      for k in sorted(kinds)}  # fmt: skip
    out["kernels"] = sum(sum(out[p].values()) for p in ("forward", "backward", "optimizer"))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+", type=Path)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    res = {p.name: counts(p) for p in args.traces}
    for name, c in res.items():
        print(f"{name}: {c['kernels']:.0f} kernels per step ({c['steps']} steps)")
        for phase in ("forward", "backward", "optimizer"):
            print(f"  {phase:9s} {sum(c[phase].values()):6.0f}  {c[phase]}")
    if args.json:
        args.json.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
