"""Speed benchmark (not a test): `gpumodel batch` on 100,000 ops as a table, as CSV and as
JSON, and its peak memory as the file grows (issue #19 item 6: 100k rows as a table in under
5 s; #20 item 2: a 200 MB JSONL in constant memory).

    python benchmarks/bench_batch_output.py              # figures go in docs/planning.md
    python benchmarks/bench_batch_output.py --mb 200     # the memory check on a 200 MB file

Wall time of the whole command (interpreter start, reading the JSONL, the vectorised
predictions, the output written to a file), median of 3 runs; peak resident memory (max RSS)
of the command, one run per file size.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGET_TABLE_S = 5.0


def write_ops(path: Path, n: int) -> None:
    """``n`` rows, half GEMMs of random M, half ReLUs of random size (seeded)."""
    rnd = random.Random(0)
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            row = ({"op": "gemm", "m": rnd.randint(1, 8192), "n": 4096, "k": 4096}
                   if i % 2 else {"op": "relu", "n": rnd.randint(1, 10**8)})  # fmt: skip
            f.write(json.dumps(row) + "\n")


def run(path: Path, mode: list[str], out: Path) -> tuple[float, float]:
    """(wall seconds, peak RSS in MB) of one `gpumodel batch` run, stdout to ``out``."""
    with out.open("w", encoding="utf-8") as fh:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "gpumodel", "batch", str(path),
                                 "--gpu", "h100", *mode], stdout=fh, stderr=subprocess.DEVNULL,
                                cwd=ROOT)  # fmt: skip
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"gpumodel batch {' '.join(mode)} exited {proc.returncode}")
    return wall, usage.ru_maxrss / 1024  # Linux: ru_maxrss in KiB


def main(n: int = 100_000, big_mb: float = 50) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ops.jsonl"
        out = Path(tmp) / "out.txt"
        write_ops(path, n)
        print(f"batch of {n:,} ops ({path.stat().st_size / 1e6:.1f} MB JSONL), "
              f"median of 3 runs (target: table < {TARGET_TABLE_S:g} s)")  # fmt: skip
        rss_small = {}
        for mode in ([], ["--csv"], ["--json"]):
            runs = [run(path, mode, out) for _ in range(3)]
            wall = statistics.median(t for t, _ in runs)
            rss_small[" ".join(mode)] = max(m for _, m in runs)
            lines = sum(1 for _ in out.open(encoding="utf-8"))
            ok = "" if mode else (" ok" if wall < TARGET_TABLE_S else " MISSED")
            print(f"  {' '.join(mode) or 'table':<7} {wall:6.2f} s  {lines:>9,} lines  "
                  f"peak {rss_small[' '.join(mode)]:5.0f} MB{ok}")  # fmt: skip
        # constant memory: the same commands on a file ``big_mb`` MB large
        row_bytes = path.stat().st_size / n
        big_n = int(big_mb * 1e6 / row_bytes)
        write_ops(path, big_n)
        print(f"constant memory: {big_n:,} ops ({path.stat().st_size / 1e6:.0f} MB JSONL), one run")
        for mode in ([], ["--csv"], ["--json"]):
            wall, rss = run(path, mode, out)
            grew = rss / rss_small[" ".join(mode)]
            print(f"  {' '.join(mode) or 'table':<7} {wall:6.1f} s  peak {rss:5.0f} MB "
                  f"({grew:.2f}x the {n:,}-row peak)")  # fmt: skip


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--mb", type=float, default=50, help="size of the constant-memory file")
    a = ap.parse_args()
    main(a.rows, a.mb)
