"""Which GEMMs cuBLAS splits along K, and what that costs the host of an eager call.

A product with few output tiles leaves most SMs idle in its only wave. cuBLAS(Lt) then splits K
into ``s`` slices, runs ``tiles x s`` blocks, and adds the partial sums in a second kernel
(``cublasLt::splitKreduce_kernel``). On the GPU that costs little (the calibration's small-M
GEMM overhead already holds it); on the host it is a second launch through cuBLASLt, so an
eager ``torch.matmul`` that splits costs more host time than one that does not (the eager
decode of Llama-3-8B launches one reduction after each of its q, k, v, o and down projections:
``validation/results/steps-h100-run20/trace-llama3-8b-decode-eager.json.gz``).

The rule, wave quantization (NVIDIA, "Matrix Multiplication Background" user guide) with the
library's choice fitted to what it did:

    tiles    = ceil(M / TILE_M) x ceil(N / TILE_N)
    wave(t)  = t / (ceil(t / SMs) x SMs)      the busy share of the waves (quantization.py)
    split    iff some s >= 2 with K / s >= MIN_K_PER_SPLIT has
                 wave(tiles x s) > SPLIT_GAIN[dtype] x wave(tiles)

Fitted on an H100 (cuBLAS of CUDA 13.0, torch 2.11) over 332 shapes chosen apart from the
unseen set (``validation/fitset/gemm_launches_device.py``, data in ``validation/results/
h100-sxm/gemm-launches-2026-11-28``; the fit: ``validation/fitset/fit_gemm_launches.py``): the
rule agrees with the profiler's kernel list on 281 of 292 bf16/fp16 shapes and 40 of 40 fp8
ones. A split call's host time is ``SPLIT_HOST_FACTOR`` x an unsplit one's (median over the
split shapes, each against the 64x64 probe timed just before it). fp32 and TF32 run other
kernels (CUDA-core GEMV/SGEMM, sm80/sm90 xmma) whose launch pattern this does not model.
"""

from __future__ import annotations

from gpumodel.model.quantization import wave_efficiency

#: cuBLAS's output tile (rows of A, columns of B) for the products it splits
TILE_M = 32
TILE_N = 64
#: each of the s slices keeps at least this much of K
MIN_K_PER_SPLIT = 2048
#: the last wave's occupancy must grow by this factor for cuBLAS to split (fitted per dtype)
SPLIT_GAIN: dict[str, float] = {"bf16": 1.3, "fp16": 1.3, "fp8": 2.0}
#: host time of an eager call that splits / one that does not (the reduction's launch)
SPLIT_HOST_FACTOR = 1.29
#: the largest split tried
MAX_SPLITS = 16


def split_k(
    m: int,
    n: int,
    k: int,
    dtype: str,
    sm_count: int,
    *,
    tile: tuple[int, int] = (TILE_M, TILE_N),
    min_k: int = MIN_K_PER_SPLIT,
    gain: float | None = None,
) -> bool:
    """Whether cuBLAS splits the (m x k) @ (k x n) product along K (see the module rule);
    False for dtypes it does not model (fp32, TF32, int8, ...). ``tile``, ``min_k``, ``gain``:
    the shipped rule unless given (the fit passes its candidates)."""
    need = SPLIT_GAIN.get(dtype) if gain is None else gain
    if need is None:
        return False
    base = wave_efficiency(m, n, tile, sm_count)
    s = 2
    while s <= MAX_SPLITS and k / s >= min_k:  # s slices: as many tiles as a batch of s
        if wave_efficiency(m, n, tile, sm_count, batch=s) > need * base:
            return True
        s += 1
    return False


__all__ = [
    "MAX_SPLITS",
    "MIN_K_PER_SPLIT",
    "SPLIT_GAIN",
    "SPLIT_HOST_FACTOR",
    "TILE_M",
    "TILE_N",
    "split_k",
]
