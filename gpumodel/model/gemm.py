"""GEMM efficiency: calibrated efficiency, wave quantization and tensor-core alignment.

factor = efficiency(dtype) x tile quantization in M and N (where the library fixes the tile)
         x (misaligned_efficiency if a dim is misaligned); wave quantization is shown, not applied

Wave quantization (NVIDIA "Matrix Multiplication Background" guide): the output is split into
tiles; tiles run in waves of ``SMs x tiles_per_SM``; a partial last wave leaves SMs idle.
Alignment (same guide): tensor cores need the fastest-varying dimensions to be multiples of
16 bytes; otherwise cuBLAS falls back to slower kernels.
"""

from __future__ import annotations

from typing import Any

from gpumodel.calibration import CalibrationParams, GemmParams
from gpumodel.ops.base import GemmShape
from gpumodel.prediction import Term
from gpumodel.specs import GPUSpec

ALIGN_ELEMENTS = {
    "fp64": 2,
    "fp32": 4,
    "tf32": 4,
    "fp16": 8,
    "bf16": 8,
    "fp8": 16,
    "int8": 16,
    "fp4": 32,
}  # fmt: skip  16 bytes / element size


def misaligned(shape: GemmShape) -> tuple[str, ...]:
    """Dimensions that are not a multiple of 16 bytes among the contiguous ones: N and K for
    row-major operands, and M where A is stored transposed (its rows are M long)."""
    if not shape.needs_alignment:
        return ()
    a = ALIGN_ELEMENTS.get(shape.dtype, 8)
    dims = (("m", shape.m),) if shape.transpose_a else ()
    return tuple(name for name, v in (*dims, ("n", shape.n), ("k", shape.k)) if v % a)


#: cuBLAS's kernels for misaligned 16-bit products (CUTLASS sm75 ``tensorop_s1688gemm ... align1``)
#: are not persistent: their tiles run in waves, each tile a whole tile's work. A product then
#: takes waves x one tile's time, which never falls as a size grows. Relative to the useful
#: FLOPs that is a busy share of tile quantization x wave quantization (NVIDIA, "Matrix
#: Multiplication Background"), M x N / (Mt x Nt x waves x SMs). The tile was fitted on an H100
#: (validation/fitset/fit_gemm_misaligned.py over validation/results/h100-sxm/
#: gemm-misaligned-2026-11-28: 40 bf16/fp16 A @ B products of 513-6143, none of the unseen
#: set's). Only plain A @ B: TF32/fp32 and transposed operands (x @ W.T, dY.T @ X) fall back to
#: other kernels, not fitted
MISALIGNED_DTYPES = ("bf16", "fp16")
MISALIGNED_TILE = (64, 128)


def misaligned_busy_share(m: Any, n: Any, k: Any, sm_count: int, batch: Any = 1) -> Any:
    """Useful share of the tiles x waves a misaligned product's fallback kernel runs: tile
    quantization x wave quantization over ``MISALIGNED_TILE`` (numpy-ready: arrays of sizes give
    an array). A product of fewer tiles than SMs splits K over the idle ones, as cuBLAS does
    (slices of at least ``MIN_K_PER_SPLIT``, at most ``MAX_SPLITS``: ``gpumodel.model.splitk``):
    without that a skinny product with a long K ran on one SM, 1,000x its aligned time
    (M = 1, N = 8, K = 2^20 + 1: 15 ms against 13 us; fuzz, 2026-11-30). The products the tile
    was fitted on (513-6143) fill the SMs or have too short a K to split: they keep their share.
    """
    import numpy as np

    from gpumodel.model.quantization import tile_efficiency_array, wave_efficiency_array
    from gpumodel.model.splitk import MAX_SPLITS, MIN_K_PER_SPLIT

    mt, nt = MISALIGNED_TILE
    m, n, k = (np.asarray(v, dtype=np.int64) for v in (m, n, k))
    tiles = np.asarray(batch, dtype=np.int64) * (-(-m // mt)) * (-(-n // nt))
    slices = np.clip(np.minimum(-(-sm_count // tiles), k // MIN_K_PER_SPLIT), 1, MAX_SPLITS)
    splits = np.where(tiles < sm_count, slices, 1)
    share = (tile_efficiency_array(m, n, MISALIGNED_TILE)
             * wave_efficiency_array(m, n, MISALIGNED_TILE, sm_count, batch=batch * splits))  # fmt: skip
    return float(share) if share.ndim == 0 else share


#: An nn.Linear-style product (x @ W.T) whose N is off 16 bytes, as a language model's head over
#: an odd vocabulary (GPT-2's 50257): cuBLAS's fallback kernels run whole tiles of
#: ``MISALIGNED_ROWS_TILE`` rows of M, so M = 129-256 takes as long as 256; below one tile, each
#: dtype has its kernel per range of M, taking a fixed share of one tile's time whatever N and
#: K are (not the time to stream W: bf16 at M = 2 runs a third of a tile, at M = 16 most of one).
#: ``MISALIGNED_ROWS_SHARE[dtype]``: (largest M, share of one tile's time) per range (M of
#: 65-128 a whole tile; M = 1 too is slower than an aligned GEMV: bf16 streams W at 0.58 of
#: the H200's HBM rate where aligned it reaches 0.9). Fitted on an H200
#: (validation/fitset/fit_gemm_lmhead.py over validation/results/h200-sxm/
#: gemm-lmhead-2026-11-28: N = 32001, 50277, K = 512-4096, M = 1-512; none of the unseen set's
#: shapes); non-decreasing in M, so time never falls as M grows.
MISALIGNED_ROWS_TILE = 128
MISALIGNED_ROWS_SHARE: dict[str, tuple[tuple[int, float], ...]] = {
    "bf16": ((1, 0.27), (2, 0.36), (4, 0.57), (8, 0.68), (16, 0.89), (32, 1.0), (64, 1.0)),
    "fp16": ((1, 0.25), (2, 0.36), (4, 0.47), (8, 0.48), (16, 0.53), (32, 0.72), (64, 0.9)),
    "tf32": ((1, 0.5), (2, 0.69), (4, 0.69), (8, 0.69), (16, 0.71), (32, 0.74), (64, 0.76)),
    "fp32": ((1, 0.2), (2, 0.23), (4, 0.3), (8, 0.34), (16, 0.4), (32, 0.46), (64, 0.61)),
}  # fmt: skip


def misaligned_rows(shape: GemmShape):
    """Whether ``shape`` runs the misaligned-N x @ W.T kernels of ``MISALIGNED_ROWS_SHARE``:
    a cuBLAS product, B stored transposed, N off 16 bytes, a dtype of the table. Their
    time is a whole tile's, loads included: the weight stream is a floor, not a second phase
    to overlap (the time model takes the larger of the two). A bool, or an array of them for a
    shape over arrays."""
    if not (shape.cublas and shape.transpose_b and not shape.transpose_a
            and shape.needs_alignment and shape.dtype in MISALIGNED_ROWS_SHARE):  # fmt: skip
        return False
    import numpy as np

    rows = np.broadcast_to(np.asarray(shape.n) % ALIGN_ELEMENTS[shape.dtype] != 0,
                           np.broadcast(shape.m, shape.n, shape.k).shape)  # fmt: skip
    return bool(rows) if rows.ndim == 0 else rows


def misaligned_rows_busy_share(m, dtype: str):
    """Useful share of the time a misaligned-N x @ W.T product of ``m`` rows runs,
    in FLOPs of whole ``MISALIGNED_ROWS_TILE``-row tiles: M / (tile x tiles x the range's
    share of one tile). numpy-ready."""
    import numpy as np

    table = MISALIGNED_ROWS_SHARE[dtype]
    m_arr = np.asarray(m, dtype=float)
    bounds = np.array([b for b, _ in table], dtype=float)
    shares = np.array([x for _, x in table] + [1.0])
    share = shares[np.searchsorted(bounds, m_arr, side="left")]
    tiles = np.ceil(m_arr / MISALIGNED_ROWS_TILE)
    busy = m_arr / (MISALIGNED_ROWS_TILE * tiles * share)
    return float(busy) if busy.ndim == 0 else busy


def pad_to(value: int, multiple: int = 64) -> int:
    return -(-value // multiple) * multiple


def tile_quantization(n: int, tile: int) -> float:
    """Useful share of the rows or columns computed when a dimension of ``n`` is cut into
    ``tile``-sized tiles (NVIDIA, "Matrix Multiplication Background User's Guide", tile
    quantization)."""
    return n / pad_to(n, tile)


def efficiency(
    shape: GemmShape, gpu: GPUSpec, params: CalibrationParams
) -> tuple[float, list[Term]]:
    """Multiplier on the peak rate for this GEMM, with the terms that make it."""
    terms: list[Term] = []
    factor = 1.0
    fitted = params.gemm.get(shape.dtype)
    if fitted is not None:
        factor *= fitted.efficiency
        terms.append(Term(name="gemm efficiency", value=fitted.efficiency, unit="x",
                          note=f"calibrated {shape.dtype} cuBLAS efficiency on large shapes"))  # fmt: skip
    if shape.batch == 1 and gpu.vendor == "nvidia":
        from gpumodel.model.quantization import tile_choice

        tc = tile_choice(shape.m, shape.n, gpu, shape.dtype)
        terms.append(Term(
            name="wave quantization (informational, not applied)", value=tc.wave_efficiency,
            unit="x",
            note=f"{tc.tiles} tiles of {tc.tile[0]}x{tc.tile[1]} = {tc.waves} wave(s) on "
                 f"{gpu.sm_count} SMs; cuBLAS on Hopper uses persistent/stream-K kernels that hide "
                 "most of it: applying it made H100 predictions worse (median 3.3% -> 5.5%)",
        ))  # fmt: skip
    for dim, size, tile in (("M", shape.m, shape.tile_m), ("N", shape.n, shape.tile_n),
                            ("K", shape.k, shape.tile_k)):
        if tile:
            tiled = tile_quantization(size, tile)
            factor *= tiled
            terms.append(Term(name=f"tile quantization ({dim})", value=tiled, unit="x",
                              note=f"{dim} = {size} in tiles of {tile}: {pad_to(size, tile)} "
                                   "computed"))  # fmt: skip
    bad = misaligned(shape)
    penalty = misaligned_factor(fitted, shape.transpose_b) if fitted is not None else 1.0
    if bad and penalty != 1.0:
        factor *= penalty
        layout = (" (B stored transposed, x @ W.T)" if shape.transpose_b
                  else " (A stored transposed, dY.T @ X)" if shape.transpose_a else "")  # fmt: skip
        terms.append(Term(name="alignment penalty", value=penalty, unit="x",
                          note=f"{', '.join(bad)} not a multiple of 16 bytes{layout}: no fast "
                               "tensor-core path"))  # fmt: skip
        fallback = fallback_kernel(shape, gpu)
        if fallback is not None:
            busy, name, note = fallback
            factor *= busy
            terms.append(Term(name=name, value=busy, unit="x", note=note))
    return factor, terms


def fallback_kernel(shape: GemmShape, gpu: GPUSpec) -> tuple[float, str, str] | None:
    """(busy share, term name, note) of the fallback kernel cuBLAS runs for a misaligned
    product (``shape`` is one): whole row tiles for x @ W.T with N off alignment, tiles in
    waves for a plain 16-bit A @ B; None where neither applies."""
    if gpu.vendor != "nvidia":
        return None
    if misaligned_rows(shape):
        busy = misaligned_rows_busy_share(shape.m, shape.dtype)
        return busy, "rows in whole tiles (misaligned x @ W.T)", (
            f"N = {shape.n} off 16 bytes: cuBLAS's kernel for M = {shape.m} runs "
            f"{busy * 100:.0f}% of the FLOPs of its {MISALIGNED_ROWS_TILE}-row tiles' time (its "
            "share of a tile is fitted per dtype and range of M)")  # fmt: skip
    if (shape.cublas and shape.dtype in MISALIGNED_DTYPES and min(shape.m, shape.n) > 1
            and not (shape.transpose_a or shape.transpose_b)):  # fmt: skip
        # (one row or column: cuBLAS's GEMV, which needs no alignment and runs no tiles)
        busy = misaligned_busy_share(shape.m, shape.n, shape.k, gpu.sm_count, shape.batch)
        if busy < 1.0:
            return busy, "tiles and waves (misaligned kernel)", (
                f"the fallback kernel runs whole {MISALIGNED_TILE[0]}x{MISALIGNED_TILE[1]} tiles "
                f"in waves of {gpu.sm_count}: time is waves x one tile's, never less as a size "
                "grows")  # fmt: skip
    return None


def stream_factor(shape: GemmShape, fitted: GemmParams | None):
    """Multiplier on a GEMM's weight-streaming bandwidth (works on numpy arrays of shapes):

    - M = 1 runs cuBLAS's GEMV kernels, at their own calibrated rate where one was measured: on
      an H100 fp32 M = 1 streamed its weights at 2.5-2.9 TB/s where M = 2-16 reached 0.8-2.3
      (validate's gemm family, 2026-11-24 run4); the 16-bit types streamed alike at both;
    - misaligned x @ W.T at M > 1: bf16/fp16 LM heads of 50257 x 1024 and 32001 x 4096 at
      M = 16-64 streamed at 0.75-1.0 TB/s where M = 1 reached 2.4 TB/s (H100, 2026-11-24);
      with N off alignment these are priced in whole tiles (``misaligned_rows``), W streaming
      at the plain rate as a floor (M = 1: the GEMV's)."""
    if fitted is None:
        return 1.0
    # never below the M > 1 rate: a GEMM with one row never takes longer than with two (the
    # 16-bit types' fits put M = 1 within noise of M > 1, on either side)
    gemv = (max(1.0, fitted.gemv_bandwidth_efficiency / fitted.small_m_bandwidth_efficiency)
            if fitted.gemv_bandwidth_efficiency is not None else 1.0)  # fmt: skip
    f = fitted.misaligned_transposed_stream
    slow = f is not None and shape.transpose_b and shape.needs_alignment
    # the products the whole-tile rule prices (misaligned_rows) stream W at the plain rate
    if all(isinstance(v, int) for v in (shape.m, shape.n, shape.k)):
        if shape.m == 1:  # misaligned or not, one row streams W at least at the GEMV rate
            return gemv
        if misaligned_rows(shape):
            return 1.0
        return f if slow and misaligned(shape) else 1.0
    import numpy as np

    m = np.asarray(shape.m)
    a = ALIGN_ELEMENTS.get(shape.dtype, 8)
    bad = (np.asarray(shape.n) % a != 0) | (np.asarray(shape.k) % a != 0)
    rows = np.asarray(misaligned_rows(shape))
    other = np.where(bad, f, 1.0) if slow else 1.0
    return np.where(m == 1, gemv, np.where(rows, 1.0, other))


def misaligned_factor(fitted: GemmParams, transpose_b: bool) -> float:
    """The calibrated multiplier of a misaligned GEMM: cuBLAS picks other kernels when B is
    stored transposed (an H100 ran 2048 x 50257 x 768 bf16 at 127 TFLOP/s as A @ B and at 97
    as x @ W.T; validation/results/unseen-h100, validate's gemm family)."""
    if transpose_b and fitted.misaligned_transposed_efficiency is not None:
        return fitted.misaligned_transposed_efficiency
    return fitted.misaligned_efficiency


def efficiency_array(
    m, n, k, dtype: str, gpu: GPUSpec, params: CalibrationParams, *,
    tile_m: int | None = None, tile_n: int | None = None, tile_k: int | None = None,
    needs_alignment: bool = True, transpose_b: bool = False, transpose_a: bool = False, batch=1,
    cublas: bool = False,
):  # fmt: skip
    """``efficiency`` over numpy arrays of shapes (same factors in the same order, no terms)."""
    import numpy as np

    fitted = params.gemm.get(dtype)
    factor = np.full(np.broadcast(m, n, k).shape, 1.0 if fitted is None else fitted.efficiency)
    for size, tile in ((m, tile_m), (n, tile_n), (k, tile_k)):
        if tile:
            factor = factor * tile_quantization(np.asarray(size), tile)
    penalty = misaligned_factor(fitted, transpose_b) if fitted is not None else 1.0
    if needs_alignment and penalty != 1.0:
        a = ALIGN_ELEMENTS.get(dtype, 8)
        bad = (np.asarray(n) % a != 0) | (np.asarray(k) % a != 0)
        if transpose_a:
            bad = bad | (np.asarray(m) % a != 0)
        rows = gpu.vendor == "nvidia" and misaligned_rows(GemmShape(
            m, n, k, batch, dtype, transpose_b=transpose_b, transpose_a=transpose_a,
            cublas=cublas))  # fmt: skip
        if np.any(rows):
            penalty = penalty * np.where(rows, misaligned_rows_busy_share(m, dtype), 1.0)
        if (gpu.vendor == "nvidia" and cublas and dtype in MISALIGNED_DTYPES
                and not (transpose_a or transpose_b)):  # fmt: skip
            gemv = np.minimum(np.asarray(m), np.asarray(n)) <= 1  # no tiles (fallback_kernel)
            busy = misaligned_busy_share(m, n, k, gpu.sm_count, batch)
            penalty = penalty * np.where(gemv, 1.0, busy)
        factor = factor * np.where(bad, penalty, 1.0)
    return factor


def advice(shape: GemmShape, gpu: GPUSpec) -> list[str]:
    out = []
    # 8-bit products: the op says what PyTorch refuses and what to pad to (Gemm.torch_refuses);
    # the model prices no misalignment penalty for them, so padding advice here would promise
    # a gain it does not predict
    for dim in misaligned(shape) if shape.dtype not in ("fp8", "int8") else ():
        value = getattr(shape, dim)
        out.append(
            f"pad {dim.upper()} to {pad_to(value)} ({dim.upper()} = {value} is not a multiple of "
            f"{ALIGN_ELEMENTS.get(shape.dtype, 8)} {shape.dtype} elements = 16 bytes)"
        )
    if shape.dtype == "fp32" and gpu.peak_flops("tf32", "tensor"):
        out.append("fp32 GEMM runs on CUDA cores: allow TF32 (or use bf16) to use tensor cores "
                   f"({gpu.peak_flops('tf32', 'tensor') / gpu.peak_flops('fp32', 'vector'):.0f}x the peak)")  # fmt: skip
    return out
