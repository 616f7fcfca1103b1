"""Speed benchmark (not a test): LLM-level predictions per second of the vectorised sweeps, the
scalar functions for comparison, and the planners built on them.

    python benchmarks/bench_llm_sweep.py        # figures go in docs/planning.md

Target (issue #20 item 7): >= 1e4 LLM predictions/s on one core. "Points" are rows of the
grid (every combination of GPU, tp, dp, batch, context / layout); "distinct steps" are the
points that need their own op-model evaluation (dp replicas of one step share it). Medians of
3 runs after a warm-up (specs, calibrations and numpy loaded).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

import gpumodel as gm


def timed(fn, repeats: int = 3) -> tuple[float, object]:
    out, times = None, []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main() -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core
    gm.sweep_inference("llama-3-8b", "h100", batch=[1, 2])  # warm-up: specs, calibrations
    rows = []
    gpus = ["h100", "h200", "a100"]
    batch, context = 2 ** np.arange(12), np.arange(256, 4097, 256)
    tp, dp = [1, 2, 4, 8], [1, 2, 3, 4, 6, 8, 12, 16]
    for runtime in ("graph", "eager"):
        t, r = timed(
            lambda rt=runtime: gm.sweep_inference(
                "llama-3-8b", gpus, batch=batch, context=context, tp=tp, dp=dp, runtime=rt
            )
        )
        distinct = len(r) // len(dp)
        rows.append(
            (
                f"sweep_inference llama-3-8b decode {runtime}: 3 GPUs x tp 4 x dp 8 x "
                "batch 12 x context 16",
                len(r),
                t,
                distinct,
            )
        )
        t1, r1 = timed(
            lambda rt=runtime: gm.sweep_inference(
                "llama-3-8b", gpus, batch=batch, context=context, tp=tp, runtime=rt
            )
        )
        rows.append(
            (
                f"  same grid without dp (every point a distinct step), {runtime}",
                len(r1),
                t1,
                len(r1),
            )
        )
    t, r = timed(
        lambda: gm.sweep_training(
            "llama-2-70b",
            ["h100", "h200"],
            tp=[1, 2, 4, 8],
            pp=[1, 2, 4, 5, 8, 10],
            dp=[1, 2, 4, 8, 16, 32, 64, 128, 256, 512],
            micro_batch=[1, 2, 4, 8],
            tokens=2e12,
        )
    )
    rows.append(
        (
            "sweep_training llama-2-70b: 2 GPUs x tp 4 x pp 6 x dp 10 x micro-batch 4",
            len(r),
            t,
            len(r),
        )
    )
    t, r = timed(
        lambda: gm.sweep_training(
            "llama-2-7b",
            "h100",
            tp=[1, 2, 4, 8],
            pp=[1, 2, 4, 8],
            dp=2 ** np.arange(11),
            micro_batch=[1, 2, 4],
            seq=[1024, 2048, 4096],
            tokens=1e12,
        )
    )
    rows.append(
        (
            "sweep_training llama-2-7b: tp 4 x pp 4 x dp 11 x micro-batch 3 x seq 3",
            len(r),
            t,
            len(r),
        )
    )
    # the scalar functions, for comparison
    n = 20
    t0 = time.perf_counter()
    for b in range(1, n + 1):
        gm.predict_inference("llama-3-8b", "h100", batch=b, context=2048 + b, runtime="graph")
    scalar_inf = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    for mb in range(1, 6):
        gm.predict_training_step("llama-2-7b", "h100", 64, tp=2, micro_batch=mb)
    scalar_train = (time.perf_counter() - t0) / 5
    t_search, _ = timed(
        lambda: gm.llm.planning.search_training("llama-2-7b", "h100", 1e12, days=30)
    )
    t_serve, _ = timed(
        lambda: gm.plan_serving("llama-3-8b", ["l4", "a100", "h100", "h200"], rate=50)
    )
    print(f"{'grid':<86} {'points':>7} {'time':>7} {'points/s':>9} {'steps/s':>8}")
    for name, pts, t, distinct in rows:
        print(f"{name:<86} {pts:>7,} {t:>6.2f}s {pts / t:>9,.0f} {distinct / t:>8,.0f}")
    print(
        f"scalar predict_inference (graph, decode): {1e3 * scalar_inf:.2f} ms each "
        f"= {1 / scalar_inf:,.0f}/s"
    )
    print(
        f"scalar predict_training_step: {1e3 * scalar_train:.2f} ms each "
        f"= {1 / scalar_train:,.0f}/s"
    )
    print(f"search_training llama-2-7b 1T tokens --days 30 (33 GPU counts): {t_search:.2f} s")
    print(f"plan_serving llama-3-8b on 4 GPUs at 50 req/s: {t_serve:.2f} s")


if __name__ == "__main__":
    main()
