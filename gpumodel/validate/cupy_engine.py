"""The CuPy engine: the context CuPy families measure on (device properties, compiled kernels,
buffers kept between points, the L2 flush), the device-side checks (check.cu) and the engine's
setup and teardown around a run (gpumodel.validate.runner).

Every measured point is checked first: its output is poisoned (NaN) before a run and compared
with a float64 reference (on the host, or through CuPy in float64) afterwards; a point that
fails its check is reported unavailable, never recorded. Inputs are fresh random numbers, never
zeros. CuPy is imported inside functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpumodel.errors import SpecError

# Kernel file -> the extern "C" symbols this runner (and timing.py) looks up in it.
KERNEL_SYMBOLS: dict[str, tuple[str, ...]] = {
    "poly.cu": ("compute_k_terms", "compute_k_terms_fma"),
    "bandwidth.cu": ("bw_read", "bw_write", "bw_copy", "bw_triad"),
    "latency.cu": ("pointer_chase",),
    "timing.cu": ("spin_ns", "l2_flush_read", "empty_kernel"),
    "check.cu": (
        "fill_uniform_f32",
        "fill_uniform_f16",
        "fill_uniform_bf16",
        "gather_u32",
        "gather_u16",
        "count_nan_f32",
        "count_nonfinite_u16",
        "count_ne_f32",
        "count_ne_u32",
        "sum_f64",
        "triad_max_err",
        "build_chain",
    ),
}

BLOCK = 256  # threads per block of every custom kernel here


# --------------------------------------------------------------------------- context


@dataclass
class Context:
    cupy: Any
    quick: bool
    sm_count: int
    l2_bytes: int
    sm_clock_khz: int | None
    modules: dict[str, Any] = field(default_factory=dict)
    slots: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    _flush: Any = None
    _torch_flush: Any = None
    _cupy_bf16: Any = None

    @property
    def reps(self) -> dict[str, Any]:
        if self.quick:
            return {"min_repeats": 5, "max_repeats": 30, "target_s": 0.01}
        return {"min_repeats": 5, "max_repeats": 50, "target_s": 0.02}

    def kernel(self, filename: str, name: str) -> Any:
        if filename not in self.modules:
            from gpumodel._paths import kernels_dir

            src = (kernels_dir() / filename).read_text()
            self.modules[filename] = self.cupy.RawModule(code=src, options=("-std=c++17",))
        return self.modules[filename].get_function(name)

    def slot(self, name: str, key: Any, factory: Callable[[], Any]) -> Any:
        """Buffers kept while consecutive points share ``key``; replaced when it changes."""
        held = self.slots.get(name)
        if held is not None and held[0] == key:
            return held[1]
        self.slots.pop(name, None)
        self.cupy.get_default_memory_pool().free_all_blocks()
        value = factory()
        self.slots[name] = (key, value)
        return value

    def release(self) -> None:
        import sys

        self.slots.clear()
        self.cupy.get_default_memory_pool().free_all_blocks()
        self.cupy.get_default_pinned_memory_pool().free_all_blocks()
        if "torch" in sys.modules:
            sys.modules["torch"].cuda.empty_cache()

    def flush(self) -> Callable[[], None]:
        if self._flush is None:
            from gpumodel.validate.timing import l2_flusher

            self._flush = l2_flusher(self.l2_bytes, sm_count=self.sm_count)
        return self._flush

    def torch_flush(self) -> Callable[[], None]:
        if self._torch_flush is None:
            from gpumodel.validate.timing import torch_l2_flusher

            self._torch_flush = torch_l2_flusher(self.l2_bytes)
        return self._torch_flush

    def cold(self, footprint_bytes: int) -> Callable[[], None] | None:
        """The L2 flush when a working set could stay in L2 between repeats, else None (a
        working set of 4x L2 or more evicts itself)."""
        return self.flush() if footprint_bytes < 4 * self.l2_bytes else None

    def sync(self) -> None:
        self.cupy.cuda.get_current_stream().synchronize()


class Dev:
    """Inputs and checks through check.cu, so no check needs a CuPy JIT-compiled kernel (each
    of those costs a compile of a second or more on a machine's first run)."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.cp = ctx.cupy

    def _grid(self, n: int) -> tuple[int]:
        return (max(1, min((int(n) + BLOCK - 1) // BLOCK, self.ctx.sm_count * 8)),)

    def _k(self, name: str) -> Any:
        return self.ctx.kernel("check.cu", name)

    @staticmethod
    def _kind(arr: Any) -> str:
        name = arr.dtype.name
        if name in ("float32", "float16", "bfloat16"):
            return name
        raise TypeError(f"unsupported dtype {name}")

    def fill_uniform(self, arr: Any, lo: float, hi: float) -> None:
        """Fresh uniform random numbers in [lo, hi) (a new seed every call)."""
        import numpy as np

        kind = self._kind(arr)
        name = {"float32": "fill_uniform_f32", "float16": "fill_uniform_f16"}.get(
            kind, "fill_uniform_bf16"
        )
        seed = np.uint64(np.random.default_rng().integers(1, 2**63))
        n = np.int64(arr.size)
        self._k(name)(
            self._grid(arr.size), (BLOCK,), (arr, n, seed, np.float32(lo), np.float32(hi))
        )

    def poison(self, arr: Any) -> None:
        """All bytes 0xFF: NaN in fp32, fp16 and bf16 alike."""
        cp = self.cp
        cp.cuda.runtime.memsetAsync(
            arr.data.ptr, 0xFF, arr.nbytes, cp.cuda.get_current_stream().ptr
        )

    def _counter(self, name: str, args: tuple[Any, ...], n: int) -> int:
        cp = self.cp
        count = cp.zeros(1, dtype=cp.uint64)
        self._k(name)(self._grid(n), (BLOCK,), (*args, count))
        return int(cp.asnumpy(count)[0])

    def count_nonfinite(self, arr: Any) -> int:
        import numpy as np

        kind = self._kind(arr)
        n = np.int64(arr.size)
        if kind == "float32":
            return self._counter("count_nan_f32", (arr, n), arr.size)
        mask = np.uint32(0x7C00 if kind == "float16" else 0x7F80)
        return self._counter("count_nonfinite_u16", (arr, n, mask), arr.size)

    def count_ne_value(self, arr: Any, value: float) -> int:
        import numpy as np

        return self._counter("count_ne_f32", (arr, np.int64(arr.size), np.float32(value)), arr.size)

    def count_ne(self, a: Any, b: Any) -> int:
        import numpy as np

        return self._counter("count_ne_u32", (a, b, np.int64(a.size)), a.size)

    def sum64(self, arr: Any) -> float:
        import numpy as np

        cp = self.cp
        out = cp.zeros(1, dtype=cp.float64)
        self._k("sum_f64")(self._grid(arr.size), (BLOCK,), (arr, np.int64(arr.size), out))
        return float(cp.asnumpy(out)[0])

    def triad_err(self, a: Any, b: Any, c: Any, s: float) -> float:
        import numpy as np

        cp = self.cp
        out = cp.zeros(1, dtype=cp.uint32)
        self._k("triad_max_err")(
            self._grid(a.size), (BLOCK,), (a, b, c, np.float32(s), np.int64(a.size), out)
        )
        return float(cp.asnumpy(out).view(np.float32)[0])

    def gather(self, arr: Any, flat_idx: Any) -> Any:
        """arr.ravel()[flat_idx] on the host as float64 (arr C-contiguous)."""
        import numpy as np

        cp = self.cp
        kind = self._kind(arr)
        idx = cp.asarray(np.ascontiguousarray(flat_idx, dtype=np.int64))
        count = np.int64(idx.size)
        if kind == "float32":
            out = cp.empty(idx.size, dtype=cp.uint32)
            self._k("gather_u32")(self._grid(idx.size), (BLOCK,), (arr, idx, out, count))
            return cp.asnumpy(out).view(np.float32).astype(np.float64)
        out = cp.empty(idx.size, dtype=cp.uint16)
        self._k("gather_u16")(self._grid(idx.size), (BLOCK,), (arr, idx, out, count))
        bits = cp.asnumpy(out)
        return bits_to_float64(bits, kind)


def bits_to_float64(bits: Any, kind: str) -> Any:
    """uint16 bit patterns of fp16 or bf16 numbers -> float64 values (numpy, no ml_dtypes)."""
    import numpy as np

    bits = np.asarray(bits, dtype=np.uint16)
    if kind == "float16":
        return bits.view(np.float16).astype(np.float64)
    if kind == "bfloat16":
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    raise SpecError(kind)


def rel_err(out: Any, ref: Any) -> float:
    import numpy as np

    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if not np.all(np.isfinite(out)):
        return float("inf")
    denom = float(np.linalg.norm(ref))
    return float(np.linalg.norm(out - ref)) / (denom if denom > 0 else 1.0)


class CheckError(RuntimeError):
    """A measured point computed the wrong result; it is reported, never recorded."""


def check(ok: bool, what: str) -> None:
    if not ok:
        raise CheckError(f"wrong result: {what}")


def compute_type(ctx: Context, tf32: bool | None) -> None:
    """fp32 GEMM compute type in CuPy: TF32 tensor cores, plain FP32, or back to the default
    (None: CuPy then reads CUPY_TF32 again)."""
    import numpy as np
    from cupy._core import _routines_linalg as rl

    if tf32 is None:
        rl.set_compute_type(np.float32, rl.COMPUTE_TYPE_TBD)
    else:
        rl.set_compute_type(np.float32, rl.COMPUTE_TYPE_TF32 if tf32 else rl.COMPUTE_TYPE_DEFAULT)


# --------------------------------------------------------------------------- engine


def start(quick: bool) -> Context:
    """The context of a CuPy run on device 0. Raises DeviceError without CuPy or a GPU."""
    from gpumodel.validate.device_info import _require_cupy

    cp = _require_cupy()
    dev = cp.cuda.Device(0)
    dev.use()
    rt = cp.cuda.runtime
    props = rt.getDeviceProperties(0)
    try:
        clock = int(props["clockRate"]) if "clockRate" in props else None
    except Exception:
        clock = None
    if clock is None:
        try:
            clock = int(rt.deviceGetAttribute(rt.cudaDevAttrClockRate, 0))
        except Exception:
            clock = None
    return Context(
        cupy=cp,
        quick=quick,
        sm_count=int(props["multiProcessorCount"]),
        l2_bytes=int(props["l2CacheSize"]),
        sm_clock_khz=clock,
    )


def release(ctx: Context) -> None:
    """Between families: free the last family's buffers."""
    ctx.release()


def sync(ctx: Context) -> None:
    ctx.sync()


def close(ctx: Context) -> None:
    """After the run: CuPy's default fp32 GEMM mode again, every buffer freed."""
    cp = ctx.cupy
    try:
        compute_type(ctx, None)  # CuPy's default fp32 GEMM mode again
    except Exception:
        pass
    ctx.release()
    ctx._flush = None
    ctx._torch_flush = None
    cp.get_default_memory_pool().free_all_blocks()
