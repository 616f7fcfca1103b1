#!/usr/bin/env python3
"""Pool evaluate.py's scored unseen rows into the accuracy table every prediction reads.

``gpumodel.accuracy`` attaches to each prediction the error the model scores on the unseen
measurements of its class (kernel kind, dtype, condition, GPU, calibration, host profile or not).
This script computes those figures from evaluate.py's rows and writes them, with their
provenance, to ``validation/results/accuracy/accuracy.json``:

    PYTHONPATH=.:validation/unseen python validation/unseen/evaluate.py \\
        --out validation/results/unseen-errors-all.md --json-out /tmp/scored.json   # ~7 min
    PYTHONPATH=.:validation/unseen python validation/unseen/accuracy_table.py /tmp/scored.json

Like evaluate.py it only scores: nothing here feeds a fit. The figures are those of the model in
this checkout with the shipped calibrations, so the table is written again whenever the model or a
shipped calibration changes (``tests/test_accuracy.py`` recomputes one class from the raw data and
checks the table's calibrations against the shipped files).

Which rows count: the conditions ``gm.predict`` prices with a cold L2 (``do_bench``'s dirty flush
and the per-call CUDA-event copies are left out); without a host profile, eager loops whose host
set the pace (``launch_bound``) are left out of ``in-workload`` (the prediction then assumes the
GPU sets it); with one, they count. Whole steps: the metric evaluate.py names (steady state,
first round at new shapes, training peak memory), a class per runtime and phase (or training
policy) and per multi-GPU layout (tensor parallel, DDP, FSDP: ``gpumodel.accuracy.parallel_layout``;
before 2026-11-30 the multi-GPU steps were pooled with the one-GPU ones).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from evaluate import CONDITION_OF_METHOD, ROOT, git_head, kernel_op, quantile

from gpumodel import _paths
from gpumodel._io import atomic_write_text
from gpumodel.accuracy import (
    TABLE_FILE,
    TABLE_VERSION,
    kernel_classes,
    parallel_layout,
    step_class,
)
from gpumodel.calibration import load_calibration
from gpumodel.specs import get_gpu

GPUS = ("h100-sxm", "h200-sxm")
# a run whose class has fewer points than this gives no run median (the range stays honest)
RUN_MEDIAN_MIN_POINTS = 5


def describe(cls: str) -> str:
    """What a class pools, in words."""
    parts = cls.split(":")
    if parts[0] == "gemm":
        if cls == "gemm":
            return "GEMMs of every dtype (torch.matmul, torch._scaled_mm)"
        if parts[1] == "misaligned":
            return "GEMMs with N or K not a multiple of 8 (GPT-2's 50257 LM head, 1025, 4097)"
        return f"{parts[1]} GEMMs" + (" with M <= 128 (decode projections)" if len(parts) > 2
                                      else "")  # fmt: skip
    if parts[0] == "conv2d":
        return "cuDNN F.conv2d" + "".join(f" {p}" for p in parts[1:]) + " (cudnn.benchmark on)"
    if parts[0] == "attention":
        if parts[1:2] == ["decode"]:
            kernel = {"cudnn": "cuDNN", "flash": "flash", "efficient": "memory-efficient"}
            return ("F.scaled_dot_product_attention decode (one query against a KV cache), "
                    + (f"{kernel[parts[2]]} kernel" if len(parts) > 2 else "every kernel"))
        what = "backward (dQ, dK, dV)" if "backward" in parts else "forward"
        if parts[-1] == "wide":
            return f"F.scaled_dot_product_attention {what}, head dims above 128 (cuDNN, flash, memory-efficient)"
        if parts[-1] == "masked":
            return f"F.scaled_dot_product_attention {what} given a boolean mask (the default dispatch)"
        if parts[-1] not in ("attention", "backward"):
            return f"F.scaled_dot_product_attention {what}, {parts[-1]} tensors (memory-efficient kernel)"
        return f"F.scaled_dot_product_attention {what} (cuDNN, flash, memory-efficient)"
    if parts[0] == "host_transfer":
        return "host<->device copies 4 KB-1 GB" + "".join(f" {p}" for p in parts[1:])
    return cls


CONDITION_WORDS = {
    ("in-workload", False): "in-workload, the GPU setting the pace",
    ("in-workload", True): "in an eager loop, with the host profile measured beside it",
    ("isolated", False): "isolated (one cold call, CUDA events)",
    ("in-graph", False): "replayed from a CUDA graph",
}


STEP_METRIC_WORDS = {
    "time": "steady-state step time",
    "time, first round": "first step at new KV lengths (a fresh generate)",
    "peak memory": "peak memory (torch.cuda.max_memory_allocated)",
}


def calibration_kind(name: str) -> tuple[str, bool] | None:
    """evaluate.py's calibration name -> (``own`` or ``from <gpu>``, host profile used)."""
    host = name.endswith(" + host profile")
    base = name.removesuffix(" + host profile")
    if base.endswith(" own"):
        return "own", host
    if base.startswith("from "):
        return base, host
    return None  # a calibration measured beside the set ("same machine"): not shipped


def run_of(source: str) -> str:
    """The run (device call) a scored file came from: its results directory."""
    return str(Path(source).parent)


def kernel_keys(rows: list[dict]) -> dict[tuple, list[tuple[str, float]]]:
    """(kind, class, gpu, calibration, condition, host) -> [(run, error)] over kernel rows."""
    records: dict[str, list[dict]] = {}
    out: dict[tuple, list[tuple[str, float]]] = defaultdict(list)
    classes_of: dict[tuple[str, int], list[str]] = {}
    for r in rows:
        kind = calibration_kind(r["calibration"])
        method = CONDITION_OF_METHOD.get(r["condition"])
        if r.get("error") is None or kind is None or method is None or method[1] != "cold":
            continue
        cal, host = kind
        condition = method[0]
        if condition == "in-workload" and not host and r.get("launch_bound"):
            continue
        if (r["source"], r["index"]) not in classes_of:
            if r["source"] not in records:
                records[r["source"]] = json.loads((ROOT / r["source"]).read_text())["records"]
            rec = records[r["source"]][r["index"]]
            try:
                # the op as the GPU runs it (SDPA's default dispatch names its kernel), as
                # gm.predict classes it
                op = kernel_op(rec).on(get_gpu(r["gpu"]))
                classes_of[(r["source"], r["index"])] = kernel_classes(op)
            except (ValueError, KeyError):
                classes_of[(r["source"], r["index"])] = []
        for cls in classes_of[(r["source"], r["index"])]:
            out[("kernel", cls, r["gpu"], cal, condition, host)].append((run_of(r["source"]),
                                                                          r["error"]))  # fmt: skip
    return out


def step_keys(rows: list[dict]) -> dict[tuple, list[tuple[str, float]]]:
    """The same over whole-step rows (``metric`` as evaluate.py names it; a step over several GPUs
    in its layout's class, ``parallel_layout``)."""
    out: dict[tuple, list[tuple[str, float]]] = defaultdict(list)
    for r in rows:
        kind = calibration_kind(r["calibration"])
        if r.get("error") is None or kind is None or r.get("status") != "ok":
            continue
        cal, host = kind
        layout = parallel_layout(tp=r.get("tp", 1), dp=r.get("dp", 1), zero=r.get("zero", 0))
        if layout is None:
            continue
        cls = step_class(r["runtime"], r["phase"], r.get("policy"), layout)
        out[(f"step {r['metric']}", cls, r["gpu"], cal, "in-workload", host)].append(
            (run_of(r["source"]), r["error"]))  # fmt: skip
    return out


def entry(key: tuple, scored: list[tuple[str, float]]) -> dict[str, Any]:
    kind, cls, gpu, cal, condition, host = key
    errors = [e for _, e in scored]
    absolute = [abs(e) for e in errors]
    by_run: dict[str, list[float]] = defaultdict(list)
    for run, e in scored:
        by_run[run].append(abs(e))
    medians = [statistics.median(v) for v in by_run.values() if len(v) >= RUN_MEDIAN_MIN_POINTS]
    if kind == "kernel":
        what = f"{describe(cls)}, {CONDITION_WORDS.get((condition, host), condition)}"
    else:
        metric = STEP_METRIC_WORDS[kind.removeprefix("step ")]
        what = f"{cls}, {metric}" + (", with the host profile of the same call" if host else "")
    return {
        "kind": kind, "class": cls, "gpu": gpu, "calibration": cal, "condition": condition,
        "host": host, "what": what, "n": len(errors), "runs": len(by_run),
        "median_abs_pct": round(100 * statistics.median(absolute), 2),
        "p90_abs_pct": round(100 * quantile(absolute, 0.9), 2),
        "bias_pct": round(100 * statistics.median(errors), 2),
        "run_median_range_pct": ([round(100 * min(medians), 2), round(100 * max(medians), 2)]
                                 if medians else None),
    }  # fmt: skip


def build(scored: dict[str, Any]) -> dict[str, Any]:
    keys = {**kernel_keys(scored.get("kernels", [])), **step_keys(scored.get("steps", []))}
    calibrations = {}
    for gpu in GPUS:
        cal = load_calibration(str(_paths.results_dir() / gpu / "calibration.yaml"))
        calibrations[gpu] = {"created": cal.created.isoformat(),
                             "file": f"validation/results/{gpu}/calibration.yaml"}  # fmt: skip
    sources = sorted({r["source"] for r in (*scored.get("kernels", []), *scored.get("steps", []))})
    return {
        "accuracy_table": TABLE_VERSION,
        "generated": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "generator": "validation/unseen/accuracy_table.py (from evaluate.py's scored rows)",
        "model": git_head(),
        "statistic": "|predicted / measured - 1| in percent: median and p90 over the class's "
                     "points; bias: median signed (> 0: predicted too slow); run medians: the "
                     f"lowest and highest of runs with >= {RUN_MEDIAN_MIN_POINTS} points",
        "calibrations": calibrations,
        "sources": len(sources),
        "entries": [entry(k, v) for k, v in sorted(keys.items(), key=lambda kv: str(kv[0]))],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scored", type=Path, help="evaluate.py --json-out file")
    ap.add_argument("--out", type=Path, default=ROOT / "validation" / "results" / TABLE_FILE)
    args = ap.parse_args(argv)
    try:
        scored = json.loads(args.scored.read_text())
    except (OSError, ValueError) as exc:
        print(f"error: cannot read {args.scored}: {exc}", file=sys.stderr)
        return 2
    table = build(scored)
    atomic_write_text(args.out, json.dumps(table, indent=1) + "\n", mkdir=True)
    print(f"{len(table['entries'])} classes from {table['sources']} files -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
