#!/usr/bin/env python3
"""Markdown summary of one or more unseen.json files written by kernels_unseen.py.

Standalone (imports nothing from gpumodel). Usage:
  python summarize.py validation/results/unseen-h100/unseen*.json
Prints measured rates by family/dtype/condition, the SM clock and power seen, and the
sustained-clock probe. These are measurements only: no model is involved.
"""

from __future__ import annotations

import json
import statistics
import sys


def load(paths):
    records, runs = [], []
    for p in paths:
        with open(p) as f:
            d = json.load(f)
        runs.append((p, d))
        records.extend(d["records"])
    return runs, records


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, nd=0):
    return "-" if x is None else f"{x:.{nd}f}"


def main(paths):
    runs, recs = load(paths)
    env = runs[0][1]["env"]
    nv = env.get("nvml", {})
    print(
        f"GPU: {env.get('gpu_name')}, driver {nv.get('driver_version')}, power limit "
        f"{nv.get('power_limit_w')} W, max SM clock {nv.get('max_sm_clock_mhz')} MHz; torch {env['torch']} "
        f"(CUDA {env['torch_cuda']}, cuDNN {env['cudnn']}), triton {env['triton']}; host {env['hostname']}, "
        f"CPU {env['cpu_model']}\n"
    )
    for p, d in runs:
        print(
            f"- `{p.split('/')[-1]}`: {d['env']['date_utc']}, {len(d['records'])} records, "
            f"{len(d['skipped'])} skipped, {d['total_time_s']} s, argv {d['settings'].get('argv', [])}"
        )
    print()
    print(
        "| family | dtype | condition | n | median TFLOP/s | max TFLOP/s | median SM MHz | min SM MHz "
        "| median power W |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    groups = {}
    for r in recs:
        if r.get("tflop_per_s") is None:
            continue
        groups.setdefault((r["family"], r["dtype"], r["condition"]), []).append(r)
    for (fam, dt, cond), rs in sorted(groups.items()):
        tf = [r["tflop_per_s"] for r in rs]
        sm = [r.get("sm_clock_mhz_median") for r in rs]
        pw = [r.get("power_instant_w_median", r.get("power_w_median")) for r in rs]
        print(
            f"| {fam} | {dt} | {cond} | {len(rs)} | {fmt(med(tf), 1)} | {fmt(max(tf), 1)} | {fmt(med(sm))} "
            f"| {fmt(min([x for x in sm if x is not None], default=None))} | {fmt(med(pw))} |"
        )
    print()
    # large compute-bound GEMMs: clock and power by condition
    big = [
        r for r in recs if r["family"] == "gemm" and r.get("flops", 0) >= 2 * 4096**3 and r["dtype"] == "bf16"
    ]
    if big:
        print("Large bf16 GEMMs (>= 2*4096^3 FLOPs), by condition:\n")
        print("| condition | n | median TFLOP/s | median SM MHz | median power W (instant) |")
        print("|---|---|---|---|---|")
        by = {}
        for r in big:
            by.setdefault(r["condition"], []).append(r)
        for cond, rs in sorted(by.items()):
            print(
                f"| {cond} | {len(rs)} | {fmt(med([r['tflop_per_s'] for r in rs]), 1)} "
                f"| {fmt(med([r.get('sm_clock_mhz_median') for r in rs]))} "
                f"| {fmt(med([r.get('power_instant_w_median') for r in rs]))} |"
            )
        print()
    for _p, d in runs:
        s = d.get("sustain") or {}
        if s.get("chunks"):
            ch = s["chunks"]
            first, last = s["nvml_first_200ms"], s["nvml_last_1s"]
            tail = [c["tflop_per_s"] for c in ch if c["t_s"] >= ch[-1]["t_s"] - 1.0]
            print(
                f"Sustain probe ({s['shape']['M']}^3 {s['dtype']} back to back for {s['duration_s']} s after "
                f"{s['idle_before_s']} s idle): first chunk {ch[0]['tflop_per_s']:.0f} TFLOP/s at SM "
                f"{fmt(first.get('sm_clock_mhz_median'))} MHz (first 200 ms); last 1 s median "
                f"{statistics.median(tail):.0f} TFLOP/s at SM {fmt(last.get('sm_clock_mhz_median'))} MHz "
                f"(min {fmt(last.get('sm_clock_mhz_min'))}), power {fmt(last.get('power_instant_w_median'))} W "
                f"instant / {fmt(last.get('power_w_median'))} W NVML average, reasons "
                f"{last.get('clock_event_reasons')}.\n"
            )
    # copies
    cp = [r for r in recs if r["family"] == "copy"]
    if cp:
        print("Host<->device copies, per-call median (events), GB/s:\n")
        sizes = sorted({r["shape"]["bytes"] for r in cp})
        kinds = sorted({(r["direction"], r["host_memory"]) for r in cp})
        print("| bytes | " + " | ".join(f"{a} {b}" for a, b in kinds) + " |")
        print("|---|" + "---|" * len(kinds))
        for sz in sizes:
            row = []
            for a, b in kinds:
                r = [
                    x
                    for x in cp
                    if x["shape"]["bytes"] == sz
                    and x["direction"] == a
                    and x["host_memory"] == b
                    and x["condition"] == "per-call"
                ]
                row.append(f"{r[0]['time_s_median'] * 1e6:.1f} us, {r[0]['gb_per_s']:.2f}" if r else "-")
            print(f"| {sz} | " + " | ".join(row) + " |")
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
