"""Measurements taken through CuPy: custom CUDA kernels, cuBLAS GEMMs, copies, launches, latency.

``run(families, quick, progress)`` returns ``(records, unavailable)``. A record is a plain dict::

    {"family": str, "op": dict | None, "time_s": float, "repeats": int, "spread": float,
     "meta": dict}

``op`` is the op in gpumodel's batch-row format, built by the small pure ``*_op`` functions
below (so tests can pin their keys and FLOP/byte counts without a GPU). ``time_s`` is the median
of the repeats, ``spread`` = (p90 - p10) / median (see timing.py for how a repeat is timed).
``unavailable`` lists what could not be measured: {"family", "what", "reason"}.

Every measured point is checked first: its output is poisoned (NaN) before a run and compared
with a float64 reference (on the host, or through CuPy in float64) afterwards; a point that
fails its check is reported unavailable, never recorded. Inputs are fresh random numbers, never
zeros. CuPy (and PyTorch, for the GEMM dtypes CuPy cannot run) are imported inside functions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpumodel.errors import SpecError
from gpumodel.validate.tasks import Progress, Task, run_tasks
from gpumodel.validate.timing import log_ints, log_sizes

FAMILIES = (
    "poly",
    "poly_fma",
    "bandwidth",
    "copy",
    "gemm",
    "launch",
    "host_transfer",
    "latency",
)

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
BW_PATTERNS = ("read", "write", "copy", "triad")
BW_ARRAYS = {"read": 1, "write": 1, "copy": 2, "triad": 3}  # fp32 arrays each pattern touches
GEMM_DTYPES = ("fp32", "tf32", "fp16", "bf16", "fp8")
# Norm-wise relative error allowed against the float64 reference, per GEMM dtype. fp32 is kept
# under TF32's typical ~3e-4 on purpose: a pass proves TF32 was really off.
GEMM_TOLERANCE = {"fp32": 5e-5, "tf32": 5e-3, "fp16": 5e-3, "bf16": 2e-2, "fp8": 3e-2}
LATENCY_STRIDE_BYTES = 256  # > the 128-byte cache line: no two chase nodes share a line
LLM_PROJECTIONS = ((4096, 4096), (11008, 4096), (4096, 11008), (12288, 4096), (14336, 4096))


# --------------------------------------------------------------------------- op builders


def make_record(
    family: str,
    op: dict[str, Any] | None,
    time_s: float,
    repeats: int,
    spread: float,
    meta: dict[str, Any],
) -> dict[str, Any]:
    return {
        "family": family,
        "op": op,
        "time_s": float(time_s),
        "repeats": int(repeats),
        "spread": float(spread),
        "meta": meta,
    }


def poly_op(k: int, n: int, *, fma: bool) -> dict[str, Any]:
    """Seed polynomial kernel over n elements, degree k: 2k FLOPs and 8 bytes per element."""
    return {
        "op": "kernel",
        "flops": 2 * k * n,
        "bytes": 8 * n,
        "bytes_written": 4 * n,
        "dtype": "fp32",
        "fma": bool(fma),
        "threads": n,
        "threads_per_block": BLOCK,
    }


def bandwidth_counts(pattern: str, n: int) -> tuple[int, int]:
    """(FLOPs, bytes moved) of a streaming pattern over fp32 arrays of n elements each."""
    if pattern == "read":
        return n, 4 * n  # one add per element
    if pattern == "write":
        return 0, 4 * n
    if pattern == "copy":
        return 0, 8 * n
    if pattern == "triad":
        return 2 * n, 12 * n  # a = b + s*c: read b and c, write a
    raise SpecError(f"unknown bandwidth pattern {pattern!r}")


def bandwidth_written(pattern: str, n: int) -> int:
    """Bytes written by a streaming pattern over fp32 arrays of n elements (read writes none)."""
    return 0 if pattern == "read" else 4 * n


def bandwidth_op(pattern: str, n: int, threads: int) -> dict[str, Any]:
    flops, nbytes = bandwidth_counts(pattern, n)
    return {
        "op": "kernel",
        "flops": flops,
        "bytes": nbytes,
        "bytes_written": bandwidth_written(pattern, n),
        "dtype": "fp32",
        "fma": True,
        "threads": int(threads),
        "threads_per_block": BLOCK,
    }


def copy_op(nbytes: int) -> dict[str, Any]:
    """Device-to-device copy of one buffer of ``nbytes`` (2 x nbytes move through memory)."""
    return {"op": "copy", "bytes": int(nbytes)}


def gemm_op(m: int, n: int, k: int, dtype: str) -> dict[str, Any]:
    return {"op": "gemm", "m": int(m), "n": int(n), "k": int(k), "dtype": dtype}


def launch_op() -> dict[str, Any]:
    return {"op": "kernel", "flops": 0, "bytes": 0, "threads": 1, "threads_per_block": 32}


def host_transfer_op(nbytes: int, direction: str, pinned: bool) -> dict[str, Any]:
    if direction not in ("h2d", "d2h"):
        raise SpecError(f"direction must be h2d or d2h, not {direction!r}")
    return {
        "op": "host_transfer",
        "bytes": int(nbytes),
        "direction": direction,
        "pinned": bool(pinned),
    }


def bandwidth_grid(n: int, sm_count: int, pattern: str = "copy") -> int:
    """Blocks for the grid-stride float4 kernels. Write, copy and triad get one thread per float4
    (the block scheduler then walks memory in order, as CuPy's elementwise kernels do): on an H100
    that copy ran at 1.00x cudaMemcpy d2d vs 0.94x for a grid of 8 blocks per SM
    (validation/results/h100-sxm/copy-kernel-variants.txt). Read keeps 8 x 256 threads per SM,
    the bound of its per-block partial sums."""
    vec = max(1, n // 4)
    blocks = math.ceil(vec / BLOCK)
    return max(1, min(blocks, sm_count * 8) if pattern == "read" else blocks)


# --------------------------------------------------------------------------- point plans


def poly_points(quick: bool) -> list[tuple[int, int]]:
    """(k, n) points of the polynomial sweep."""
    if quick:
        return [(k, 1 << 24) for k in (1, 4, 16, 64, 256, 1000)]
    ks = log_ints(1, 1000, 28)  # 25 distinct k after rounding
    return [(k, n) for n in (1 << 20, 1 << 24, 1 << 26) for k in ks]


def bandwidth_points(quick: bool) -> list[tuple[str, int]]:
    """(pattern, n elements per array) points: total bytes moved from 4 KB to 4 GB (1 GB quick),
    three points per octave (one every two octaves quick)."""
    totals = log_sizes(4096, 1 << 30, 1)[::2] if quick else log_sizes(4096, 4 << 30, 3)
    out = []
    for pattern in BW_PATTERNS:
        per = 4 * BW_ARRAYS[pattern]
        seen = set()
        for total in totals:
            n = max(4, round(total / per / 4) * 4)  # float4 granularity
            if n not in seen:
                seen.add(n)
                out.append((pattern, n))
    return out


def copy_sizes(quick: bool) -> list[int]:
    """Bytes per buffer of the cupy device-to-device copies (2 KB .. 2 GB)."""
    return log_sizes(4096, 1 << 30, 1)[::2] if quick else log_sizes(2048, 2 << 30, 2, multiple=16)


def gemm_shapes(quick: bool) -> list[tuple[int, int, int, str]]:
    """(M, N, K, tag) GEMM shapes; C[M,N] = A[M,K] @ B[K,N], all row-major."""
    if quick:
        squares = (1024, 4096, 8192)
        ms: tuple[int, ...] = (1, 16, 128, 1024, 4096)
        projections: tuple[tuple[int, int], ...] = ((4096, 4096), (14336, 4096))
        misaligned = [(2048, 50257, 768), (2048, 50304, 768), (4096, 4095, 4096)]
    else:
        squares = (256, 512, 1024, 2048, 3000, 4096, 6144, 8192, 16384)
        ms = tuple(1 << i for i in range(14))  # 1 .. 8192
        projections = LLM_PROJECTIONS
        misaligned = [
            (4096, 4095, 4096),
            (4096, 4097, 4096),
            (2048, 50257, 768),
            (2048, 50304, 768),
            (4096, 4096, 4095),
            (4096, 4096, 4097),
        ]
    out = [(s, s, s, "square") for s in squares]
    out += [(m, n, k, "llm") for (n, k) in projections for m in ms]
    out += [(m, n, k, "misaligned") for (m, n, k) in misaligned]
    return out


def host_transfer_sizes(quick: bool) -> list[int]:
    if quick:
        return [4096, 1 << 16, 1 << 20, 16 << 20, 256 << 20]
    return log_sizes(4096, 1 << 30, 1, multiple=16)


def latency_sizes(quick: bool) -> list[int]:
    if quick:
        return [16 << 10, 256 << 10, 4 << 20, 32 << 20, 256 << 20, 1 << 30]
    extra = [24 << 20, 40 << 20, 48 << 20, 80 << 20, 96 << 20]
    return sorted(set(log_sizes(16 << 10, 1 << 30, 1)) | set(extra))


# --------------------------------------------------------------------------- context


@dataclass
class _Context:
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


class _Dev:
    """Inputs and checks through check.cu, so no check needs a CuPy JIT-compiled kernel (each
    of those costs a compile of a second or more on a machine's first run)."""

    def __init__(self, ctx: _Context):
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


def _rel_err(out: Any, ref: Any) -> float:
    import numpy as np

    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if not np.all(np.isfinite(out)):
        return float("inf")
    denom = float(np.linalg.norm(ref))
    return float(np.linalg.norm(out - ref)) / (denom if denom > 0 else 1.0)


class CheckError(RuntimeError):
    """A measured point computed the wrong result; it is reported, never recorded."""


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise CheckError(f"wrong result: {what}")


# --------------------------------------------------------------------------- poly


def _poly_tasks(ctx: _Context, fma: bool) -> list[Task]:
    family = "poly_fma" if fma else "poly"
    tasks = []
    for k, n in poly_points(ctx.quick):
        tasks.append(
            Task(family, f"{family} k={k} n={n}", lambda k=k, n=n: _poly_point(ctx, k, n, fma))
        )
    return tasks


def _poly_point(ctx: _Context, k: int, n: int, fma: bool) -> list[dict[str, Any]]:
    import numpy as np

    cp = ctx.cupy

    dev = _Dev(ctx)

    def make() -> tuple[Any, Any]:
        a = cp.empty(n, dtype=cp.float32)
        dev.fill_uniform(a, 0.05, 0.9)  # 0 < x < 1: powers stay finite, sums non-zero
        return a, cp.empty(n, dtype=cp.float32)

    a, b = ctx.slot("poly", n, make)
    name = "compute_k_terms_fma" if fma else "compute_k_terms"
    kern = ctx.kernel("poly.cu", name)
    grid = ((n + BLOCK - 1) // BLOCK,)
    args = (a, b, np.int32(n), np.int32(k))

    def fn() -> None:
        kern(grid, (BLOCK,), args)

    dev.poison(b)
    fn()
    ctx.sync()
    _check(dev.count_nonfinite(b) == 0, "unwritten outputs")
    idx = np.random.default_rng().integers(0, n, 2048)
    x = dev.gather(a, idx)
    got = dev.gather(b, idx)
    ref = np.zeros_like(x)
    p = x.copy()
    for _ in range(k):
        ref += p
        p *= x
    err = float(np.max(np.abs(got - ref) / np.abs(ref)))
    _check(err <= 1e-5 + 2e-7 * k, f"max rel err {err:.2e}")

    from gpumodel.validate.timing import time_cuda

    t, spread, reps = time_cuda(fn, flush=ctx.cold(8 * n), **ctx.reps)
    family = "poly_fma" if fma else "poly"
    meta = {"k": k, "n": n, "cache": "cold", "max_rel_err": err}
    return [make_record(family, poly_op(k, n, fma=fma), t, reps, spread, meta)]


# --------------------------------------------------------------------------- bandwidth


def _bandwidth_tasks(ctx: _Context) -> list[Task]:
    points = bandwidth_points(ctx.quick)
    max_n: dict[str, int] = {}
    for pattern, n in points:
        max_n[pattern] = max(max_n.get(pattern, 0), n)
    return [
        Task(
            "bandwidth",
            f"bandwidth {pattern} {BW_ARRAYS[pattern] * 4 * n} B",
            lambda p=pattern, n=n: _bandwidth_point(ctx, p, n, max_n[p]),
        )
        for pattern, n in points
    ]


def _bandwidth_point(ctx: _Context, pattern: str, n: int, n_max: int) -> list[dict[str, Any]]:
    import numpy as np

    cp = ctx.cupy
    dev = _Dev(ctx)

    def make() -> dict[str, Any]:
        arrays = [cp.empty(n_max, dtype=cp.float32) for _ in range(BW_ARRAYS[pattern])]
        for x in arrays:
            dev.fill_uniform(x, 0.0, 1.0)
        bufs = {
            "arrays": arrays,
            "partials": cp.zeros(ctx.sm_count * 8, dtype=cp.float32),
            "counter": cp.zeros(1, dtype=cp.uint32),
            "result": cp.zeros(1, dtype=cp.float32),
        }
        return bufs

    bufs = ctx.slot("bandwidth", pattern, make)
    arrs = [x[:n] for x in bufs["arrays"]]
    grid = (bandwidth_grid(n, ctx.sm_count, pattern),)
    n4 = np.int64(n // 4)
    kern = ctx.kernel("bandwidth.cu", f"bw_{pattern}")
    rng = np.random.default_rng()
    value = np.float32(rng.uniform(0.5, 2.0))
    if pattern == "read":
        args: tuple[Any, ...] = (arrs[0], n4, bufs["partials"], bufs["counter"], bufs["result"])
    elif pattern == "write":
        args = (arrs[0], n4, value)
    elif pattern == "copy":
        args = (arrs[0], arrs[1], n4)
    else:
        args = (arrs[0], arrs[1], arrs[2], value, n4)

    def fn() -> None:
        kern(grid, (BLOCK,), args)

    # poison the output, run once, check every element
    if pattern == "read":
        dev.poison(bufs["result"])
    elif pattern == "copy":
        dev.poison(arrs[1])
    else:
        dev.poison(arrs[0])
    fn()
    ctx.sync()
    if pattern == "read":
        ref = dev.sum64(arrs[0])
        got = float(cp.asnumpy(bufs["result"])[0])
        _check(abs(got - ref) <= 1e-4 * abs(ref), f"sum {got} vs {ref}")
    elif pattern == "write":
        _check(dev.count_ne_value(arrs[0], float(value)) == 0, "fill value not everywhere")
    elif pattern == "copy":
        _check(dev.count_ne(arrs[1], arrs[0]) == 0, "copy differs from source")
    else:
        err = dev.triad_err(arrs[0], arrs[1], arrs[2], float(value))
        _check(err <= 1e-6, f"triad max rel err {err:.2e}")

    from gpumodel.validate.timing import time_cuda

    _, nbytes = bandwidth_counts(pattern, n)
    op = bandwidth_op(pattern, n, grid[0] * BLOCK)
    out = []
    for cache, flush in (("cold", ctx.flush()), ("hot", None)):
        t, spread, reps = time_cuda(fn, flush=flush, **ctx.reps)
        meta = {
            "pattern": pattern,
            "working_set_bytes": nbytes,
            "cache": cache,
            "blocks": grid[0],
        }
        out.append(make_record("bandwidth", op, t, reps, spread, meta))
    return out


def _copy_tasks(ctx: _Context) -> list[Task]:
    sizes = copy_sizes(ctx.quick)
    top = max(sizes)
    return [Task("copy", f"copy {s} B", lambda s=s: _copy_point(ctx, s, top)) for s in sizes]


def _copy_point(ctx: _Context, size: int, top: int) -> list[dict[str, Any]]:
    cp = ctx.cupy
    rt = cp.cuda.runtime

    dev = _Dev(ctx)

    def make() -> tuple[Any, Any]:
        src = cp.empty(top // 4, dtype=cp.float32)
        dev.fill_uniform(src, 0.0, 1.0)
        return src, cp.empty(top // 4, dtype=cp.float32)

    src, dst = ctx.slot("copy", top, make)
    n = size // 4

    def fn() -> None:
        rt.memcpyAsync(
            dst.data.ptr,
            src.data.ptr,
            size,
            rt.memcpyDeviceToDevice,
            cp.cuda.get_current_stream().ptr,
        )

    dev.poison(dst[:n])
    fn()
    ctx.sync()
    _check(dev.count_ne(dst[:n], src[:n]) == 0, "copy differs from source")

    from gpumodel.validate.timing import time_cuda

    out = []
    for cache, flush in (("cold", ctx.flush()), ("hot", None)):
        t, spread, reps = time_cuda(fn, flush=flush, **ctx.reps)
        meta = {"moved_bytes": 2 * size, "cache": cache, "api": "cudaMemcpyAsync"}
        out.append(make_record("copy", copy_op(size), t, reps, spread, meta))
    return out


# --------------------------------------------------------------------------- gemm


def _torch_importable() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def _gemm_tasks(ctx: _Context, unavailable: list[dict[str, Any]]) -> list[Task]:
    has_torch = _torch_importable()
    tasks = []
    for dtype in GEMM_DTYPES:
        if dtype == "fp8" and not has_torch:
            unavailable.append(
                {
                    "family": "gemm",
                    "what": "fp8",
                    "reason": "fp8 GEMMs run through torch._scaled_mm; PyTorch not importable",
                }
            )
            continue
        for m, n, k, tag in gemm_shapes(ctx.quick):
            tasks.append(
                Task(
                    "gemm",
                    f"gemm {dtype} {m}x{n}x{k}",
                    lambda m=m, n=n, k=k, d=dtype, t=tag: _gemm_point(ctx, m, n, k, d, t),
                )
            )
    return tasks


def _cupy_compute_type(ctx: _Context, tf32: bool | None) -> None:
    """fp32 GEMM compute type in CuPy: TF32 tensor cores, plain FP32, or back to the default
    (None: CuPy then reads CUPY_TF32 again)."""
    import numpy as np
    from cupy._core import _routines_linalg as rl

    if tf32 is None:
        rl.set_compute_type(np.float32, rl.COMPUTE_TYPE_TBD)
    else:
        rl.set_compute_type(np.float32, rl.COMPUTE_TYPE_TF32 if tf32 else rl.COMPUTE_TYPE_DEFAULT)


def _cupy_bf16(ctx: _Context) -> Any:
    """CuPy's bfloat16 dtype (through ml_dtypes) if CuPy can multiply it on this GPU, else None."""
    if ctx._cupy_bf16 is None:
        ctx._cupy_bf16 = False
        try:
            import ml_dtypes
            import numpy as np

            cp = ctx.cupy
            dev = _Dev(ctx)
            a = cp.empty((64, 64), dtype=ml_dtypes.bfloat16)
            dev.fill_uniform(a, -1.0, 1.0)
            c = cp.matmul(a, a)
            ah = bits_to_float64(cp.asnumpy(a).view(np.uint16), "bfloat16")
            ch = bits_to_float64(cp.asnumpy(c).view(np.uint16), "bfloat16")
            if _rel_err(ch, ah @ ah) < GEMM_TOLERANCE["bf16"]:
                ctx._cupy_bf16 = ml_dtypes.bfloat16
        except Exception:
            ctx._cupy_bf16 = False
    return ctx._cupy_bf16 or None


def _gemm_sample(m: int, n: int, count: int = 32) -> tuple[Any, Any]:
    import numpy as np

    rng = np.random.default_rng()
    return rng.integers(0, m, count), rng.integers(0, n, count)


def _gemm_point(ctx: _Context, m: int, n: int, k: int, dtype: str, tag: str) -> list[dict]:
    if dtype in ("fp32", "tf32", "fp16"):
        return _gemm_cupy(ctx, m, n, k, dtype, tag, None)
    if dtype == "bf16":
        bf16 = _cupy_bf16(ctx)
        if bf16 is not None:
            return _gemm_cupy(ctx, m, n, k, dtype, tag, bf16)
        if not _torch_importable():
            raise RuntimeError("CuPy cannot run bfloat16 GEMMs and PyTorch is not importable")
    return _gemm_torch(ctx, m, n, k, dtype, tag)


def _gemm_cupy(
    ctx: _Context, m: int, n: int, k: int, dtype: str, tag: str, bf16: Any
) -> list[dict[str, Any]]:
    import numpy as np

    cp = ctx.cupy
    np_dtype = {"fp32": np.float32, "tf32": np.float32, "fp16": np.float16}.get(dtype, bf16)
    itemsize = np.dtype(np_dtype).itemsize
    if dtype in ("fp32", "tf32"):
        _cupy_compute_type(ctx, tf32=(dtype == "tf32"))

    dev = _Dev(ctx)
    a = cp.empty((m, k), dtype=np_dtype)
    b = cp.empty((k, n), dtype=np_dtype)
    c = cp.empty((m, n), dtype=np_dtype)
    dev.fill_uniform(a, -1.0, 1.0)
    dev.fill_uniform(b, -1.0, 1.0)
    dev.poison(c)

    def fn() -> None:
        cp.matmul(a, b, out=c)

    fn()
    ctx.sync()
    _check(dev.count_nonfinite(c) == 0, "unwritten outputs")
    ii, jj = _gemm_sample(m, n)
    kk = np.arange(k, dtype=np.int64)
    rows = dev.gather(a, ii[:, None] * k + kk[None, :]).reshape(len(ii), k)
    cols = dev.gather(b, kk[None, :] * n + jj[:, None]).reshape(len(jj), k)
    got = dev.gather(c, ii * n + jj)
    ref = np.einsum("ik,ik->i", rows, cols)
    err = _rel_err(got, ref)
    _check(err <= GEMM_TOLERANCE[dtype], f"{dtype} rel err {err:.2e}")

    from gpumodel.validate.timing import time_cuda

    footprint = (m * k + k * n + m * n) * itemsize
    flush = ctx.cold(footprint)
    t, spread, reps = time_cuda(fn, flush=flush, **ctx.reps)
    meta = {
        "engine": "cupy",
        "shape_set": tag,
        "cache": "cold",
        "flushed": flush is not None,
        "rel_err": err,
    }
    return [make_record("gemm", gemm_op(m, n, k, dtype), t, reps, spread, meta)]


def _gemm_torch(
    ctx: _Context, m: int, n: int, k: int, dtype: str, tag: str
) -> list[dict[str, Any]]:
    import torch

    dev = "cuda"

    def rand(rows: int, cols: int) -> Any:
        return torch.rand(rows, cols, device=dev, dtype=torch.float32) * 2 - 1

    if dtype == "bf16":
        a = rand(m, k).to(torch.bfloat16)
        b = rand(k, n).to(torch.bfloat16)
        c = torch.full((m, n), float("nan"), device=dev, dtype=torch.bfloat16)

        def fn() -> Any:
            return torch.mm(a, b, out=c)

        itemsize, out_size = 2, 2
        a_ref, b_ref = a, b
        extra: dict[str, Any] = {}
    elif dtype == "fp8":
        f8 = torch.float8_e4m3fn
        a = rand(m, k).to(f8)
        b = rand(n, k).to(f8).t()  # column-major B, as cuBLASLt's fp8 kernels want
        one = torch.ones((), device=dev, dtype=torch.float32)
        c = None

        def fn() -> Any:
            return torch._scaled_mm(
                a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True
            )

        itemsize, out_size = 1, 2
        a_ref, b_ref = a, b
        extra = {"fp8_format": "e4m3", "out_dtype": "bf16", "use_fast_accum": True}
    else:
        raise SpecError(dtype)

    res = fn()
    torch.cuda.synchronize()
    _check(bool(torch.isfinite(res.float()).all()), "non-finite or unwritten outputs")
    ii, jj = _gemm_sample(m, n)
    ii_t = torch.as_tensor(ii, device=dev)
    jj_t = torch.as_tensor(jj, device=dev)
    rows = a_ref.float()[ii_t].double()
    cols = b_ref.float()[:, jj_t].double()
    ref = (rows * cols.t()).sum(dim=1).cpu().numpy()
    got = res.float()[ii_t, jj_t].double().cpu().numpy()
    err = _rel_err(got, ref)
    _check(err <= GEMM_TOLERANCE[dtype], f"{dtype} rel err {err:.2e}")
    del res

    from gpumodel.validate.timing import time_torch

    footprint = (m * k + k * n) * itemsize + m * n * out_size
    flush = ctx.torch_flush() if footprint < 4 * ctx.l2_bytes else None
    t, spread, reps = time_torch(fn, flush=flush, **ctx.reps)
    meta = {
        "engine": "torch",
        "torch_version": str(torch.__version__),
        "shape_set": tag,
        "cache": "cold",
        "flushed": flush is not None,
        "rel_err": err,
        **extra,
    }
    return [make_record("gemm", gemm_op(m, n, k, dtype), t, reps, spread, meta)]


# --------------------------------------------------------------------------- launch


def _launch_tasks(ctx: _Context) -> list[Task]:
    return [Task("launch", "launch overhead", lambda: _launch_point(ctx))]


def _launch_point(ctx: _Context) -> list[dict[str, Any]]:
    from gpumodel.validate.timing import time_cuda, time_host

    cp = ctx.cupy
    kern = ctx.kernel("timing.cu", "empty_kernel")
    stream = cp.cuda.get_current_stream()
    per_trial = 500 if ctx.quick else 2000

    def launch() -> None:
        kern((1,), (1,), ())

    def back_to_back() -> None:
        for _ in range(per_trial):
            launch()
        stream.synchronize()

    def sync_each() -> None:
        launch()
        stream.synchronize()

    op = launch_op()
    out = []
    t, spread, reps = time_host(back_to_back, repeats=7 if not ctx.quick else 5, warmup=1)
    meta = {"mode": "back_to_back", "launches_per_trial": per_trial, "api": "cupy.RawKernel"}
    out.append(make_record("launch", op, t / per_trial, reps, spread, meta))
    t, spread, reps = time_host(sync_each, repeats=100 if ctx.quick else 400, warmup=20)
    meta = {"mode": "sync_each", "timer": "host", "api": "cupy.RawKernel"}
    out.append(make_record("launch", op, t, reps, spread, meta))
    t, spread, reps = time_cuda(launch, min_repeats=20, max_repeats=200, target_s=0.002)
    meta = {"mode": "event", "timer": "cuda_event", "api": "cupy.RawKernel"}
    out.append(make_record("launch", op, t, reps, spread, meta))
    return out


# --------------------------------------------------------------------------- host transfer


def _host_transfer_tasks(ctx: _Context) -> list[Task]:
    sizes = host_transfer_sizes(ctx.quick)
    top = max(sizes)
    tasks = []
    for pinned in (True, False):
        for direction in ("h2d", "d2h"):
            for s in sizes:
                kind = "pinned" if pinned else "pageable"
                tasks.append(
                    Task(
                        "host_transfer",
                        f"{direction} {kind} {s} B",
                        lambda s=s, d=direction, p=pinned: _host_point(ctx, s, d, p, top),
                    )
                )
    return tasks


def _host_point(
    ctx: _Context, size: int, direction: str, pinned: bool, top: int
) -> list[dict[str, Any]]:
    import numpy as np

    cp = ctx.cupy
    rt = cp.cuda.runtime

    util = _Dev(ctx)

    def make() -> tuple[Any, Any, Any]:
        dev = cp.empty(top // 4, dtype=cp.float32)
        util.fill_uniform(dev, 0.0, 1.0)
        if pinned:
            mem = cp.cuda.alloc_pinned_memory(top)
            host = np.frombuffer(mem, dtype=np.float32, count=top // 4)
        else:
            mem = None
            host = np.empty(top // 4, dtype=np.float32)
        dev.get(out=host)  # touches every page; random, non-zero contents
        return dev, host, mem

    dev, host, _mem = ctx.slot("host", (top, pinned), make)
    stream = cp.cuda.get_current_stream()
    n = size // 4
    if direction == "h2d":
        dst, src, kind = dev.data.ptr, host.ctypes.data, rt.memcpyHostToDevice
        util.poison(dev[:n])  # host[:n] holds random data since make()
    else:
        dst, src, kind = host.ctypes.data, dev.data.ptr, rt.memcpyDeviceToHost
        util.fill_uniform(dev[:n], 0.0, 1.0)
        host[:n] = np.nan
    ctx.sync()

    def fn() -> None:
        rt.memcpyAsync(dst, src, size, kind, stream.ptr)

    fn()
    ctx.sync()
    rng = np.random.default_rng()
    idx = rng.integers(0, n, 1024)
    dev_vals = util.gather(dev, idx)
    _check(bool(np.array_equal(dev_vals, host[idx].astype(np.float64))), f"{direction} differs")
    if direction == "d2h":
        _check(not bool(np.isnan(host[:n]).any()), "unwritten host bytes")
    else:
        _check(util.count_nonfinite(dev[:n]) == 0, "unwritten device bytes")

    from gpumodel.validate.timing import time_cuda

    reps = dict(ctx.reps)
    if size >= 256 << 20:
        reps["min_repeats"] = 3
    # Pageable copies block the host (staged through a driver buffer): no spin kernel ahead.
    t, spread, n_rep = time_cuda(fn, use_spin=pinned, **reps)
    meta = {"timer": "cuda_event", "api": "cudaMemcpyAsync"}
    return [
        make_record(
            "host_transfer", host_transfer_op(size, direction, pinned), t, n_rep, spread, meta
        )
    ]


# --------------------------------------------------------------------------- latency


def _latency_tasks(ctx: _Context) -> list[Task]:
    sizes = latency_sizes(ctx.quick)
    top = max(sizes)
    return [
        Task("latency", f"latency {s} B", lambda s=s: _latency_point(ctx, s, top)) for s in sizes
    ]


def _latency_point(ctx: _Context, ws: int, top: int) -> list[dict[str, Any]]:
    import numpy as np

    cp = ctx.cupy
    buf = ctx.slot("latency", top, lambda: cp.zeros(top // 8, dtype=cp.uint64))
    words = LATENCY_STRIDE_BYTES // 8
    nodes = ws // LATENCY_STRIDE_BYTES
    # one cycle through every node in random order: node order[i] points to order[i + 1]
    order = np.random.default_rng().permutation(nodes).astype(np.int64)
    order_d = cp.asarray(order)
    ctx.kernel("check.cu", "build_chain")(
        _Dev(ctx)._grid(nodes), (BLOCK,), (buf, order_d, np.int64(nodes), np.int64(words))
    )
    del order_d
    steps = 20_000 if ctx.quick else 100_000
    out = cp.zeros(3, dtype=cp.int64)
    kern = ctx.kernel("latency.cu", "pointer_chase")
    cycles, nss = [], []
    fits = ws <= 2 * ctx.l2_bytes
    at = 0  # position along the cycle; each run carries on where the last one stopped, so a
    # working set larger than L2 keeps meeting nodes the earlier runs did not leave in cache
    for i in range(4):
        # The first run also compiles and, for working sets near L2 size or below, walks every
        # node once so the timed steps find them in cache; later runs re-load L1 (per SM, not
        # kept across launches) with a short walk.
        if i == 0:
            warm = nodes if fits else min(nodes, 20_000)
        else:
            warm = min(nodes, 2048) if fits else 0
        start = np.uint64(order[at] * words)
        kern((1,), (1,), (buf, np.int64(warm), np.int64(steps), start, out))
        res = cp.asnumpy(out)
        at = (at + warm + steps) % nodes
        _check(int(res[2]) == int(order[at] * words), "pointer chase ended on the wrong node")
        if i:
            cycles.append(res[0] / steps)
            nss.append(res[1] / steps)
    from gpumodel.validate.timing import summarize

    ns, spread = summarize(nss)
    cyc = float(np.median(cycles))
    meta = {
        "working_set_bytes": ws,
        "ns_per_load": ns,
        "cycles_per_load": cyc,
        "cycles_per_load_from_clock_rate": (
            ns * ctx.sm_clock_khz * 1e-6 if ctx.sm_clock_khz else None
        ),
        "stride_bytes": LATENCY_STRIDE_BYTES,
        "steps": steps,
        "cycle_source": "clock64",
    }
    return [make_record("latency", None, ns * 1e-9, len(nss), spread, meta)]


# --------------------------------------------------------------------------- run


def run(
    families: set[str] | None = None,
    quick: bool = False,
    progress: Progress | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Measure the selected families (all of FAMILIES when None; names of other runners are
    ignored). Returns (records, unavailable). Raises DeviceError without CuPy or a GPU."""
    selected = [f for f in FAMILIES if families is None or f in families]
    if not selected:
        return [], []
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
    ctx = _Context(
        cupy=cp,
        quick=quick,
        sm_count=int(props["multiProcessorCount"]),
        l2_bytes=int(props["l2CacheSize"]),
        sm_clock_khz=clock,
    )
    unavailable: list[dict[str, Any]] = []
    builders: dict[str, Callable[[], list[Task]]] = {
        "poly": lambda: _poly_tasks(ctx, False),
        "poly_fma": lambda: _poly_tasks(ctx, True),
        "bandwidth": lambda: _bandwidth_tasks(ctx),
        "copy": lambda: _copy_tasks(ctx),
        "gemm": lambda: _gemm_tasks(ctx, unavailable),
        "launch": lambda: _launch_tasks(ctx),
        "host_transfer": lambda: _host_transfer_tasks(ctx),
        "latency": lambda: _latency_tasks(ctx),
    }
    tasks: list[Task] = []
    for fam in selected:
        tasks += builders[fam]()

    def new_family(previous: str | None) -> None:
        ctx.release()
        if previous == "gemm":
            _cupy_compute_type(ctx, None)

    try:
        records = run_tasks(tasks, unavailable, progress, new_family, ctx.sync)
    finally:
        try:
            _cupy_compute_type(ctx, None)  # CuPy's default fp32 GEMM mode again
        except Exception:
            pass
        ctx.release()
        ctx._flush = None
        ctx._torch_flush = None
        cp.get_default_memory_pool().free_all_blocks()
    return records, unavailable
