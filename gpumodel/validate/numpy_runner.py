"""CPU backend: the same measure -> fit -> report pipeline with numpy kernels, so CI exercises it
end to end without a GPU. It calibrates the ``cpu-numpy`` spec."""

from __future__ import annotations

import platform
import time
from collections.abc import Callable

import numpy as np

FAMILIES = ("numpy_stream", "numpy_gemm")


def device_info() -> dict[str, str]:
    return {
        "device_name": f"CPU ({platform.machine()}, numpy {np.__version__})",
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def _time(
    fn: Callable[[], object], target_s: float = 0.02, max_repeats: int = 25
) -> tuple[float, int]:
    fn()  # warm-up
    times = []
    start = time.perf_counter()
    while len(times) < 3 or (time.perf_counter() - start < target_s and len(times) < max_repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), len(times)


def run(
    families: set[str] | None = None,
    quick: bool = True,
    progress: Callable[[str, int, int], None] | None = None,
) -> tuple[list[dict], list[dict]]:
    rng = np.random.default_rng(0)
    records: list[dict] = []
    stream_sizes = [2**p for p in range(20, 26 if quick else 28)]  # 1 MiB .. 32/128 MiB
    gemm_sizes = [32, 64, 128, 192, 256, 384, 512] + ([] if quick else [768, 1024])
    total = len(stream_sizes) + len(gemm_sizes)
    done = 0
    if families is None or "numpy_stream" in families:
        for nbytes in stream_sizes:
            a = rng.random(nbytes // 4, dtype=np.float32)
            b = np.empty_like(a)
            t, n = _time(lambda a=a, b=b: np.copyto(b, a))
            if not np.array_equal(a, b):
                raise RuntimeError("numpy copy produced wrong data")
            records.append({
                "family": "numpy_stream", "time_s": t, "repeats": n, "spread": 0.0,
                "op": {"op": "kernel", "flops": 0, "bytes": 2 * nbytes, "dtype": "fp32"},
                "meta": {"pattern": "copy", "working_set_bytes": 2 * nbytes},
            })  # fmt: skip
            done += 1
            if progress:
                progress("numpy stream copy", done, total)
    if families is None or "numpy_gemm" in families:
        for size in gemm_sizes:
            a = rng.random((size, size), dtype=np.float32)
            b = rng.random((size, size), dtype=np.float32)
            t, n = _time(lambda a=a, b=b: a @ b)
            ref = a[:4].astype(np.float64) @ b.astype(np.float64)
            if not np.allclose((a @ b)[:4], ref, rtol=1e-3):
                raise RuntimeError("numpy matmul produced wrong data")
            records.append({
                "family": "numpy_gemm", "time_s": t, "repeats": n, "spread": 0.0,
                "op": {"op": "gemm", "m": size, "n": size, "k": size, "dtype": "fp32"}, "meta": {},
            })  # fmt: skip
            done += 1
            if progress:
                progress("numpy matmul", done, total)
    return records, []
