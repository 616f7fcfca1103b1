"""Speed benchmark (not a test): `gpumodel batch` on 100,000 ops as a table, as CSV and as
JSON (issue #19 item 6: 100k rows as a table in under 5 s).

    python benchmarks/bench_batch_output.py     # figures go in docs/planning.md

Wall time of the whole command (interpreter start, reading the JSONL, the vectorised
predictions, the output written to a file), median of 3 runs.
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(n: int = 100_000) -> None:
    random.seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ops.jsonl"
        with path.open("w", encoding="utf-8") as f:
            for i in range(n):
                row = ({"op": "gemm", "m": random.randint(1, 8192), "n": 4096, "k": 4096}
                       if i % 2 else {"op": "relu", "n": random.randint(1, 10**8)})  # fmt: skip
                f.write(json.dumps(row) + "\n")
        for mode in ([], ["--csv"], ["--json"]):
            times = []
            for _ in range(3):
                out = Path(tmp) / "out.txt"
                t0 = time.perf_counter()
                with out.open("w", encoding="utf-8") as fh:
                    subprocess.run([sys.executable, "-m", "gpumodel", "batch", str(path),
                                    "--gpu", "h100", *mode], check=True, stdout=fh, cwd=ROOT)  # fmt: skip
                times.append(time.perf_counter() - t0)
            lines = sum(1 for _ in out.open(encoding="utf-8"))
            print(
                f"batch {n:,} ops {' '.join(mode) or '(table)':<8} {statistics.median(times):6.2f} s"
                f"  ({lines:,} lines)"
            )


if __name__ == "__main__":
    main()
