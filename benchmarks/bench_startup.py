"""Start-up time of the library and the CLI (issue #20 item 6): the median of 10 fresh
processes of

    python -c "import gpumodel"
    python -m gpumodel predict gemm --m 4096 --n 4096 --k 4096 --gpu h100

against the targets (import < 0.2 s, CLI < 0.3 s on the project's 2-core machine), plus
Python's own start (``python -c pass``) for scale. Each run is a new interpreter on this
checkout (PYTHONPATH = the repository root), after one untimed warm-up run of each (file
cache, .pyc). Run from anywhere:

    python benchmarks/bench_startup.py [--runs 10] [--json out.json]

Wall time of ``subprocess.run`` around the whole process, so it includes the interpreter's
start and exit, as a user's shell sees it; the targets are on this figure. Beside it, the
process's CPU time (user + system, from ``getrusage``), which other load on a shared machine
inflates far less than the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS_S = {"import": 0.2, "cli": 0.3}
COMMANDS = {
    "python": [sys.executable, "-c", "pass"],
    "import": [sys.executable, "-c", "import gpumodel"],
    "cli": [sys.executable, "-m", "gpumodel", "predict", "gemm", "--m", "4096", "--n", "4096",
            "--k", "4096", "--gpu", "h100"],
}  # fmt: skip


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_runs(cmd: list[str], runs: int) -> tuple[list[float], list[float]]:
    """(wall seconds, CPU seconds) of ``runs`` fresh processes."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)  # warm-up
    wall, cpu = [], []
    for _ in range(runs):
        c0, t0 = _children_cpu_s(), time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)
        wall.append(time.perf_counter() - t0)
        cpu.append(_children_cpu_s() - c0)
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    results = {}
    for name, cmd in COMMANDS.items():
        times, cpu = time_runs(cmd, args.runs)
        results[name] = {
            "median_s": statistics.median(times),
            "min_s": min(times),
            "max_s": max(times),
            "cpu_median_s": statistics.median(cpu),
            "runs": args.runs,
            "target_s": TARGETS_S.get(name),
        }
    host = {"python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "load_average_1min": os.getloadavg()[0],
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}  # fmt: skip
    print(f"start-up, median of {args.runs} fresh processes ({host['cpus']} CPUs, load "
          f"{host['load_average_1min']:.1f}, Python {host['python']}, {host['date']})")  # fmt: skip
    for name, r in results.items():
        target = r["target_s"]
        verdict = "" if target is None else (
            f"  target < {target:.2f} s: {'met' if r['median_s'] < target else 'NOT met'}")  # fmt: skip
        print(f"  {name:<7} median {r['median_s']:.3f} s  (min {r['min_s']:.3f}, "
              f"max {r['max_s']:.3f}; CPU {r['cpu_median_s']:.3f} s){verdict}")  # fmt: skip
    print("  commands: " + "; ".join(" ".join(c[1:]) for c in COMMANDS.values()))
    if args.json:
        args.json.write_text(json.dumps({"host": host, "results": results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
