"""Speed benchmark (not a test): LLM-level predictions per second of the vectorised sweeps, the
scalar functions for comparison, and the planners built on them.

    python benchmarks/bench_llm_sweep.py [--json out.json]   # figures: docs/performance-planning.md

Target (issue #20 item 7): >= 1e4 LLM predictions/s on one core. "Points" are rows of the
grid (every combination of GPU, tp, dp, batch, context / layout), each one LLM-level
prediction; "steps/s" counts only the points that need their own op-model evaluation (dp
replicas of one inference step share it). Medians of 3 runs after a warm-up (specs,
calibrations and numpy loaded), pinned to one core, timed in CPU seconds of the process.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one core: set before numpy loads its BLAS

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

import gpumodel as gm  # noqa: E402

TARGET_PER_S = 1e4


def timed(fn, repeats: int = 3) -> tuple[float, float, object]:
    """(median CPU seconds of this process, median wall seconds, the result). CPU time is
    the figure: on a shared machine the wall clock also counts other processes' turns."""
    from gpumodel.model import scheduling

    memo = getattr(scheduling, "_tile_efficiency", None)  # absent before 2026-11-24
    out, cpu, wall = None, [], []
    for _ in range(repeats):
        if memo is not None:
            memo.cache_clear()  # every run pays its block schedules (no earlier run's)
        c0, w0 = time.process_time(), time.perf_counter()
        out = fn()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    return statistics.median(cpu), statistics.median(wall), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # pinned to one core
    gm.sweep_inference("llama-3-8b", "h100", batch=[1, 2])  # warm-up: specs, calibrations
    gpus = ["h100", "h200", "a100"]
    batch, context = 2 ** np.arange(12), np.arange(256, 4097, 256)
    tp, dp = [1, 2, 4, 8], [1, 2, 3, 4, 6, 8, 12, 16]
    grids = []  # (name, fn, distinct steps per point)
    for rt in ("graph", "eager"):
        grids.append((
            f"sweep_inference llama-3-8b decode {rt}: 3 GPUs x tp 4 x dp 8 x batch 12 x context 16",
            lambda rt=rt: gm.sweep_inference("llama-3-8b", gpus, batch=batch, context=context,
                                             tp=tp, dp=dp, runtime=rt), 1 / len(dp)))  # fmt: skip
        grids.append((
            f"  same grid without dp (every point a distinct step), {rt}",
            lambda rt=rt: gm.sweep_inference("llama-3-8b", gpus, batch=batch, context=context,
                                             tp=tp, runtime=rt), 1.0))  # fmt: skip
    grids.append((
        "sweep_inference llama-3-8b decode graph: 3 GPUs x tp 4 x batch 1-512 (every one)",
        lambda: gm.sweep_inference("llama-3-8b", gpus, batch=np.arange(1, 513), tp=tp,
                                   runtime="graph"), 1.0))  # fmt: skip
    grids.append((
        "sweep_inference llama-3-8b prefill graph: 3 GPUs x tp 4 x batch 8 x prompt 8 (128-4096)",
        lambda: gm.sweep_inference("llama-3-8b", gpus, phase="prefill", batch=[1, 2, 3, 4, 6, 8,
                                   12, 16], seq=[128, 256, 512, 1024, 1536, 2048, 3072, 4096],
                                   tp=tp, runtime="graph"), 1.0))  # fmt: skip
    grids.append((
        "sweep_training llama-2-70b: 2 GPUs x tp 4 x pp 6 x dp 10 x micro-batch 4",
        lambda: gm.sweep_training("llama-2-70b", ["h100", "h200"], tp=[1, 2, 4, 8],
                                  pp=[1, 2, 4, 5, 8, 10],
                                  dp=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
                                  micro_batch=[1, 2, 4, 8], tokens=2e12), 1.0))  # fmt: skip
    grids.append((
        "sweep_training llama-2-7b: tp 4 x pp 4 x dp 11 x micro-batch 3 x seq 3",
        lambda: gm.sweep_training("llama-2-7b", "h100", tp=[1, 2, 4, 8], pp=[1, 2, 4, 8],
                                  dp=2 ** np.arange(11), micro_batch=[1, 2, 4],
                                  seq=[1024, 2048, 4096], tokens=1e12), 1.0))  # fmt: skip
    print(f"target: >= {TARGET_PER_S:,.0f} LLM predictions/s on one core (CPU time; wall in "
          "brackets)")  # fmt: skip
    print(f"{'grid':<84} {'points':>7} {'CPU s':>6} {'points/s':>9} {'steps/s':>8}")
    rows = []
    for name, fn, share in grids:
        cpu, wall, r = timed(fn)
        pts = len(r)
        steps = pts * share
        ok = "ok" if pts / cpu >= TARGET_PER_S else "MISSED"
        rows.append({"grid": name.strip(), "points": pts, "cpu_s": cpu, "wall_s": wall,
                     "points_per_s": pts / cpu, "distinct_steps_per_s": steps / cpu})  # fmt: skip
        print(f"{name:<84} {pts:>7,} {cpu:>6.2f} {pts / cpu:>9,.0f} {steps / cpu:>8,.0f} {ok} "
              f"[{wall:.2f} s wall]")  # fmt: skip
    # the scalar functions, for comparison
    c0 = time.process_time()
    for b in range(1, 21):
        gm.predict_inference("llama-3-8b", "h100", batch=b, context=2048 + b, runtime="graph")
    scalar_inf = (time.process_time() - c0) / 20
    c0 = time.process_time()
    for mb in range(1, 6):
        gm.predict_training_step("llama-2-7b", "h100", 64, tp=2, micro_batch=mb)
    scalar_train = (time.process_time() - c0) / 5
    print(f"scalar predict_inference (graph, decode): {1e3 * scalar_inf:.2f} ms each "
          f"= {1 / scalar_inf:,.0f}/s")  # fmt: skip
    print(f"scalar predict_training_step: {1e3 * scalar_train:.2f} ms each "
          f"= {1 / scalar_train:,.0f}/s")  # fmt: skip
    cpu, wall, _ = timed(lambda: gm.search_training("llama-2-7b", "h100", 1e12, days=30))
    print(f"search_training llama-2-7b 1T tokens --days 30 (33 GPU counts): {cpu:.2f} s CPU")
    cpu, wall, _ = timed(
        lambda: gm.plan_serving("llama-3-8b", ["l4", "a100", "h100", "h200"], rate=50)
    )
    print(f"plan_serving llama-3-8b on 4 GPUs at 50 req/s: {cpu:.2f} s CPU")
    if args.json:
        root = Path(__file__).resolve().parent.parent
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()  # fmt: skip
        host = {"python": platform.python_version(), "numpy": np.__version__,
                "cpus": os.cpu_count(), "load_average_1min": os.getloadavg()[0],
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                "commit": commit or None}  # fmt: skip
        out = {"host": host, "target_per_s": TARGET_PER_S, "grids": rows,
               "scalar_predict_inference_s": scalar_inf,
               "scalar_predict_training_step_s": scalar_train}  # fmt: skip
        tmp = args.json.with_name(args.json.name + ".tmp")
        tmp.write_text(json.dumps(out, indent=2) + "\n")
        tmp.replace(args.json)  # atomic: a reader sees the old file or the new one


if __name__ == "__main__":
    main()
