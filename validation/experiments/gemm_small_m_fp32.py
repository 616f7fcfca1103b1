"""Every fp32 GEMM with M <= 128 of a validate run: measured, the run's own prediction, its error,
the bandwidth it reached and whether the point was fitted or held out.

What it shows (docs/validation.md, runs of 2026-11-28, later): cuBLAS's fp32 kernel choice at
2 <= M <= 64 is erratic in M and the same on the H100 and the H200.

usage: python validation/experiments/gemm_small_m_fp32.py RUN/calibration.yaml [...]
"""

from __future__ import annotations

import sys

import gpumodel as gm
import gpumodel.calibrate as C
from gpumodel.calibration import read_calibration_file


def rows(path: str) -> list[str]:
    cal = read_calibration_file(path, measurements=True)
    gpu = gm.get_gpu(cal.gpu_id)
    points, _ = C.points_from_records(cal.measurements)
    _, held = C.split(points)
    held_ids = {id(p) for p in held}
    small = [p for p in points if type(p.op).__name__ == "Gemm" and p.op.dtype == "fp32"
             and p.op.m <= 128]  # fmt: skip
    small.sort(key=lambda p: (p.op.n, p.op.k, p.op.m))
    measured = C.measured_times(small)
    predicted = C.predict_points(small, gpu, cal.parameters)
    out = [f"{path} ({gpu.id})"]
    for p, t, pr in zip(small, measured, predicted):
        op = p.op
        moved = 4 * (op.m * op.k + op.k * op.n + op.m * op.n)  # fp32 bytes, each operand once
        out.append(f"  N={op.n:6d} K={op.k:6d} M={op.m:4d} measured {t * 1e6:7.1f} us "
                   f"predicted {pr * 1e6:7.1f} us ({(pr / t - 1) * 100:+6.1f}%) "
                   f"{moved / t / 1e12:.2f} TB/s {'held out' if id(p) in held_ids else 'fit'}")  # fmt: skip
    return out


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print("\n".join(rows(arg)))
