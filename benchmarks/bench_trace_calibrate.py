"""Benchmark: `calibrate_from_trace` on a ~50 MB torch.profiler trace (target: < 5 s on a
2-core CPU, issue 18).

The trace is the real eager-transformer fixture (tests/fixtures/traces, 5.8 MB, recorded on an
H100) repeated end to end until it passes 50 MB: each copy's timestamps are shifted past the
previous copy and its correlation / external ids offset, so the result is one long profile
with ~45 ProfilerStep ranges. Prints the size, the wall time (median of 3) in this process
and of the CLI in a fresh one (imports included: what a user waits for), and the steps found;
then `diagnose` on the same trace, and the share of it spent taking the profiler's own host
cost out (`gpumodel.tracecal.profiler_cost`, added 2026-12-01).

    python benchmarks/bench_trace_calibrate.py
"""

from __future__ import annotations

import gzip
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpumodel.tracecal import calibrate_from_trace  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "traces" / "transformer_eager.json.gz"
TARGET_BYTES = 50e6


def build(out: Path) -> int:
    doc = json.loads(gzip.decompress(FIXTURE.read_bytes()))
    events = doc["traceEvents"]
    span = max(e.get("ts", 0) + e.get("dur", 0) for e in events if "ts" in e) - min(
        e["ts"] for e in events if "ts" in e
    )
    one = len(json.dumps(events))
    copies = int(TARGET_BYTES // one) + 1
    merged = []
    for c in range(copies):
        for e in events:
            e2 = dict(e)
            if "ts" in e2:
                e2["ts"] = e2["ts"] + c * (span + 1000)
            args = e2.get("args")
            if isinstance(args, dict) and c:
                args = dict(args)
                for key in ("correlation", "External id"):
                    if isinstance(args.get(key), int):
                        args[key] += c * 10_000_000
                e2["args"] = args
            if c and str(e2.get("name", "")).startswith("ProfilerStep#"):
                e2["name"] = f"ProfilerStep#{c * 100 + int(e2['name'].split('#')[1])}"
            merged.append(e2)
    doc["traceEvents"] = merged
    text = json.dumps(doc)
    out.write_text(text)
    return len(text)


def cli_seconds(path: Path, out: Path) -> float:
    """Wall time of ``gpumodel calibrate --trace`` in a fresh interpreter, as a user runs it
    (its imports included)."""
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "gpumodel", "calibrate", "--trace", str(path), "--out", str(out)],
        check=True, stdout=subprocess.DEVNULL, cwd=ROOT,
    )  # fmt: skip
    return time.perf_counter() - t0


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "big.json"
        size = build(path)
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            cal = calibrate_from_trace(path)
            times.append(time.perf_counter() - t0)
        cli = [cli_seconds(path, Path(tmp) / "cal.yaml") for _ in range(3)]
        fit = cal.trace
        print(f"trace {size / 1e6:.1f} MB, {fit.steps} steps: calibrate_from_trace median "
              f"{statistics.median(times):.2f} s (runs: {', '.join(f'{t:.2f}' for t in times)}); "
              f"`gpumodel calibrate --trace` in a fresh process median "
              f"{statistics.median(cli):.2f} s (runs: {', '.join(f'{t:.2f}' for t in cli)}); "
              "target < 5 s")  # fmt: skip
        from gpumodel.diagnose import diagnose
        from gpumodel.diagnose.parse import load_trace
        from gpumodel.diagnose.timeline import build_timeline
        from gpumodel.tracecal import profiler_cost

        whole, part = [], []
        for _ in range(3):
            t0 = time.perf_counter()
            rep = diagnose(path)
            whole.append(time.perf_counter() - t0)
            tr = load_trace(path)
            tl = build_timeline(tr)
            t0 = time.perf_counter()
            profiler_cost(tr, tl, path)
            part.append(time.perf_counter() - t0)
        print(f"diagnose: median {statistics.median(whole):.2f} s, of which the profiler's cost "
              f"{statistics.median(part):.2f} s; step {rep.steps.step_time_s * 1e3:.2f} ms "
              f"traced, {rep.steps.unprofiled_step_time_s * 1e3:.2f} ms without the profiler")  # fmt: skip


if __name__ == "__main__":
    main()
