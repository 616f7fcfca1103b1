"""Speed benchmarks (not tests): CLI start-up, vectorised sweep throughput, batch of 100k ops.

    python benchmarks/bench_speed.py            # prints a table; figures go in the README

Targets (issue: foundation): `gpumodel predict gemm ...` < 0.5 s wall; sweep >= 1e6
predictions/s; `gpumodel batch` with 100,000 ops in a few seconds.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout


def cli_wall_s(args: list[str], repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "gpumodel", *args], check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def sweep_rate(n: int = 1_000_000) -> float:
    import gpumodel as gm

    rng = np.random.default_rng(0)
    m, nn, k = (rng.integers(1, 16384, n) for _ in range(3))
    gm.sweep("gemm", "h100", "none", m=m[:10], n=nn[:10], k=k[:10])  # warm-up
    t0 = time.perf_counter()
    gm.sweep("gemm", "h100", "none", m=m, n=nn, k=k, dtype="bf16")
    gemm = n / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    gm.sweep("gelu", "h100", "none", n=rng.integers(1, 2**30, n))
    elem = n / (time.perf_counter() - t0)
    return min(gemm, elem)


def batch_wall_s(n: int = 100_000) -> float:
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ops.jsonl"
        with path.open("w") as fh:
            for i in range(n):
                if i % 2:
                    row = {"op": "gemm", "m": int(rng.integers(1, 8192)), "n": 4096, "k": 4096}
                else:
                    row = {"op": "silu", "n": int(rng.integers(1, 2**26))}
                fh.write(json.dumps(row) + "\n")
        t0 = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "gpumodel", "batch", str(path), "--gpu", "h100", "--json"],
            check=True, capture_output=True,
        )  # fmt: skip
        return time.perf_counter() - t0


def main() -> None:
    rows = [
        ("gpumodel predict gemm (wall, median of 5)",
         f"{cli_wall_s(['predict', 'gemm', '--m', '2048', '--n', '4096', '--k', '4096']):.3f} s", "< 0.5 s"),
        ("gpumodel specs schema (wall, 1 run)",
         f"{cli_wall_s(['specs', 'schema'], 1):.3f} s", "-"),
        ("gm.sweep GEMM/elementwise", f"{sweep_rate():,.0f} predictions/s", ">= 1,000,000/s"),
        ("gpumodel batch, 100,000 ops (wall)", f"{batch_wall_s():.2f} s", "a few seconds"),
    ]  # fmt: skip
    width = max(len(r[0]) for r in rows)
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:<32} target {target}")


if __name__ == "__main__":
    main()
