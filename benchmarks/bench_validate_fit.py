"""Benchmark: the calibration fit of a full `gpumodel validate` run, serial against worker
processes (issue 16: the full run stays under 5 minutes on an H100; the fit is CPU time).

Re-fits the raw measurements a full H100 run saved in its calibration (run 8: every family,
2,300+ records) once with one worker and once with N (default: this host's cores), checks that
both give the same parameters, and prints the two wall times. A timing, not a test.

    python benchmarks/bench_validate_fit.py [CALIBRATION.yaml] [--workers N] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpumodel.calibrate import calibrate  # noqa: E402
from gpumodel.calibration import read_calibration_file  # noqa: E402
from gpumodel.parallel import available_cores, workers_scope  # noqa: E402
from gpumodel.specs import get_gpu  # noqa: E402
from gpumodel.validate.host import cpu_model  # noqa: E402

RUN8 = ROOT / "validation/results/h100-sxm/validate-2026-11-27-run8/calibration.yaml"


def timed_fit(records: list[dict], gpu_id: str, workers: int) -> tuple[float, dict]:
    with workers_scope(workers):
        began = time.perf_counter()
        params, _, _ = calibrate(records, get_gpu(gpu_id))
        return time.perf_counter() - began, params.model_dump()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("calibration", nargs="?", default=str(RUN8))
    ap.add_argument("--workers", type=int, default=available_cores())
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    cal = read_calibration_file(args.calibration, measurements=True)
    records = cal.measurements or []
    serial_s, serial = timed_fit(records, cal.gpu_id, 1)
    parallel_s, parallel = timed_fit(records, cal.gpu_id, args.workers)
    same = serial == parallel
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "calibration": args.calibration, "records": len(records), "gpu": cal.gpu_id,
        "host_cpu": cpu_model(), "cores": available_cores(), "python": platform.python_version(),
        "serial_s": round(serial_s, 1), "workers": args.workers,
        "parallel_s": round(parallel_s, 1), "identical_parameters": same,
    }  # fmt: skip
    print(json.dumps(result, indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
