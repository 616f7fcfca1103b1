"""GEMM realism: tile quantization, wave quantization and tensor-core alignment.

Source: NVIDIA Deep Learning Performance guide, "Matrix Multiplication Background"
(formulas.md §2). A GEMM's ``M x N`` output is cut into ``Mt x Nt`` tiles, one thread block each;
partial tiles do the work of whole ones (tile quantization) and the tiles run in waves of
``SMs x tiles_per_SM`` (wave quantization). Tensor cores want the dimensions to be multiples of
16 bytes.

Pure functions; the ``*_array`` forms take numpy arrays of shapes (a million shapes in well
under a second). Not modelled: split-K and stream-K kernels, which cuBLAS uses on some shapes
to remove the wave tail; the measured penalty for misalignment is fitted by calibration.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpumodel.errors import SpecError

if TYPE_CHECKING:
    import numpy as np

    from gpumodel.specs import GPUSpec

__all__ = [
    "ALIGNMENT_BYTES",
    "CUBLAS_TILES",
    "PAD_MULTIPLE",
    "Misalignment",
    "TileChoice",
    "alignment_elements",
    "alignment_penalty_reason",
    "misaligned_array",
    "misaligned_dims",
    "misalignments",
    "tile_choice",
    "tile_choice_array",
    "tile_count",
    "tile_efficiency",
    "tile_efficiency_array",
    "tile_reuse",
    "wave_efficiency",
    "wave_efficiency_array",
]

Tile = tuple[int, int]

#: cuBLAS tile sizes in order of preference (NVIDIA "Matrix Multiplication Background"):
#: 256x128 = 128x256 > 128x128 > 256x64 > 128x64 > 64x64; transposed shapes rank with their pair.
CUBLAS_TILES: tuple[Tile, ...] = (
    (256, 128), (128, 256), (128, 128), (256, 64), (64, 256), (128, 64), (64, 128), (64, 64),
)  # fmt: skip

#: Tensor cores are fastest when dimensions are multiples of 16 bytes (formulas.md §2).
ALIGNMENT_BYTES = 16
#: The padding usually advised: a multiple of 64 elements (GPT-2's 50257 -> 50304).
PAD_MULTIPLE = 64

_BYTES_PER_ELEMENT: dict[str, float] = {
    "fp64": 8, "fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1, "fp4": 0.5,
}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# tiles


def _check_tile(tile: Tile) -> tuple[int, int]:
    mt, nt = tile
    if int(mt) != mt or int(nt) != nt or mt < 1 or nt < 1:
        raise SpecError(f"a tile is two positive integers (Mt, Nt), got {tile!r}")
    return int(mt), int(nt)


def _check_dims(**dims: Any) -> None:
    for name, value in dims.items():
        if isinstance(value, int) and not isinstance(value, bool):  # scalar: no numpy
            if value < 1:
                raise SpecError(f"{name} must be >= 1, got {value!r}")
            continue
        import numpy as np

        arr = np.asarray(value)
        if arr.dtype.kind not in "iu" and not (
            arr.dtype.kind == "f" and np.all(arr == np.floor(arr))
        ):
            raise SpecError(f"{name} must be whole numbers, got {value!r}")
        if np.any(arr < 1):
            raise SpecError(f"{name} must be >= 1, got {value!r}")


def tile_count(m: int, n: int, tile: Tile, batch: int = 1) -> int:
    """Output tiles ``batch x ceil(M/Mt) x ceil(N/Nt)`` (NVIDIA, "Matrix Multiplication
    Background")."""
    mt, nt = _check_tile(tile)
    _check_dims(m=m, n=n, batch=batch)
    # tiles = ceil(M / Mt) * ceil(N / Nt)
    return int(batch) * math.ceil(m / mt) * math.ceil(n / nt)


def tile_efficiency(m: int, n: int, tile: Tile) -> float:
    """Useful share of the tiles' work: ``M*N / (tiles * Mt * Nt)`` (tile quantization)."""
    mt, nt = _check_tile(tile)
    # efficiency = M*N / (ceil(M/Mt)*Mt * ceil(N/Nt)*Nt)   (formulas.md §2)
    return (m * n) / (tile_count(m, n, tile) * mt * nt)


def wave_efficiency(
    m: int, n: int, tile: Tile, sm_count: int, tiles_per_sm: int = 1, batch: int = 1
) -> float:
    """Busy share of the launched waves: ``tiles / (ceil(tiles / (SMs x t)) x SMs x t)``.

    *Derived* from the guide's A100 example (108 SMs, one 256x128 tile per SM), formulas.md §2.
    """
    _check_dims(sm_count=sm_count, tiles_per_sm=tiles_per_sm)
    tiles = tile_count(m, n, tile, batch)
    per_wave = sm_count * tiles_per_sm
    # waves = ceil(tiles / (SMs * tiles_per_SM)); utilisation = tiles / (waves * SMs * tiles_per_SM)
    return tiles / (math.ceil(tiles / per_wave) * per_wave)


def tile_reuse(tile: Tile) -> float:
    """Operand reuse of a tile relative to 256x128: ``(Mt*Nt/(Mt+Nt)) / (256*128/384)``.

    A tile does ``2*Mt*Nt*K`` FLOPs on ``(Mt+Nt)*K`` operand elements, so its on-chip
    arithmetic intensity scales with ``Mt*Nt/(Mt+Nt)`` (*derived*). The ratio reproduces the
    guide's preference order (1.0, 0.75, 0.6, 0.5, 0.375 for 256x128, 128x128, 256x64, 128x64,
    64x64) and stands in for per-tile speed until calibration measures it.
    """
    mt, nt = _check_tile(tile)
    return (mt * nt / (mt + nt)) / (256 * 128 / (256 + 128))


@dataclass(frozen=True)
class TileChoice:
    """The tile a cuBLAS-like heuristic would pick, and its quantization terms."""

    tile: Tile
    tiles: int
    waves: int
    tile_efficiency: float
    wave_efficiency: float
    relative_cost: float  # waves x Mt x Nt / tile_reuse, in 256x128-tile units; lower is faster
    candidates: tuple[tuple[Tile, float], ...]  # (tile, relative_cost) for every tile tried

    @property
    def efficiency(self) -> float:
        """Tile x wave efficiency: the share of the launched tile slots doing useful work."""
        return self.tile_efficiency * self.wave_efficiency


def _scalar_costs(
    m: int, n: int, sm_count: int, tiles_per_sm: int, batch: int, tiles: tuple[Tile, ...]
) -> list[float]:
    """``_costs`` for one shape in Python integers (what ``predict`` needs, without numpy)."""
    per_wave = sm_count * tiles_per_sm
    out = []
    for tile in tiles:
        mt, nt = _check_tile(tile)
        count = batch * (-(-m // mt)) * (-(-n // nt))
        launched = -(-count // per_wave)
        out.append(launched * (mt * nt) / (256 * 128) / tile_reuse(tile))
    return out


def _costs(m, n, sm_count: int, tiles_per_sm: int, batch, tiles: tuple[Tile, ...]) -> np.ndarray:
    """Relative time of each tile (rows) for each shape (columns)."""
    import numpy as np

    m = np.asarray(m, dtype=np.int64)
    n = np.asarray(n, dtype=np.int64)
    batch = np.asarray(batch, dtype=np.int64)
    per_wave = sm_count * tiles_per_sm
    rows = []
    for tile in tiles:
        mt, nt = _check_tile(tile)
        count = batch * (-(-m // mt)) * (-(-n // nt))
        launched = -(-count // per_wave)
        # time ~ waves x work per tile / tile speed, tile speed ~ operand reuse (tile_reuse)
        rows.append(launched * (mt * nt) / (256 * 128) / tile_reuse(tile))
    return np.stack(np.broadcast_arrays(*rows))


def tile_choice(
    m: int,
    n: int,
    gpu: GPUSpec | int,
    dtype: str = "bf16",
    *,
    batch: int = 1,
    tiles: tuple[Tile, ...] = CUBLAS_TILES,
    tiles_per_sm: int = 1,
) -> TileChoice:
    """Pick the tile with the least estimated time, as a tile heuristic would.

    Estimated time of a tile ~ ``ceil(tiles / (SMs x tiles_per_SM)) x Mt x Nt / tile_reuse``:
    padded work spread over whole waves, slower for small tiles that reuse operands less. Ties go
    to the earlier tile in ``tiles`` (the guide's preference order). ``dtype`` is checked but
    does not change the tile set here. ``gpu`` may be a spec or an SM count.
    """
    if dtype not in _BYTES_PER_ELEMENT:
        raise SpecError(f"unknown dtype '{dtype}'; known: {', '.join(_BYTES_PER_ELEMENT)}")
    if not tiles:
        raise SpecError("tile_choice needs at least one tile")
    sms = gpu if isinstance(gpu, int) else gpu.sm_count
    _check_dims(m=m, n=n, batch=batch, sm_count=sms, tiles_per_sm=tiles_per_sm)
    if all(isinstance(v, int) for v in (m, n, batch, sms, tiles_per_sm)):
        costs: Any = _scalar_costs(m, n, sms, tiles_per_sm, batch, tiles)
    else:
        costs = [float(c) for c in _costs(m, n, sms, tiles_per_sm, batch, tiles).reshape(-1)]
    best = costs.index(min(costs))  # the first of equal costs, as argmin
    tile = tiles[best]
    count = tile_count(m, n, tile, batch)
    per_wave = sms * tiles_per_sm
    return TileChoice(
        tile=tile,
        tiles=count,
        waves=math.ceil(count / per_wave),
        tile_efficiency=tile_efficiency(m, n, tile),
        wave_efficiency=wave_efficiency(m, n, tile, sms, tiles_per_sm, batch),
        relative_cost=float(costs[best]),
        candidates=tuple((t, float(c)) for t, c in zip(tiles, costs, strict=True)),
    )


# ---------------------------------------------------------------------------------------------
# vectorised forms


def tile_efficiency_array(m: Any, n: Any, tile: Tile) -> np.ndarray:
    """``tile_efficiency`` over numpy arrays of M and N (broadcast), tile fixed."""
    import numpy as np

    mt, nt = _check_tile(tile)
    m = np.asarray(m, dtype=np.int64)
    n = np.asarray(n, dtype=np.int64)
    # M*N / (ceil(M/Mt)*Mt * ceil(N/Nt)*Nt)
    return (m * n) / ((-(-m // mt) * mt) * (-(-n // nt) * nt))


def wave_efficiency_array(
    m: Any, n: Any, tile: Tile, sm_count: int, tiles_per_sm: int = 1, batch: Any = 1
) -> np.ndarray:
    """``wave_efficiency`` over numpy arrays of M, N (and batch), tile fixed."""
    import numpy as np

    mt, nt = _check_tile(tile)
    m = np.asarray(m, dtype=np.int64)
    n = np.asarray(n, dtype=np.int64)
    count = np.asarray(batch, dtype=np.int64) * (-(-m // mt)) * (-(-n // nt))
    per_wave = sm_count * tiles_per_sm
    return count / (-(-count // per_wave) * per_wave)


def tile_choice_array(
    m: Any,
    n: Any,
    sm_count: int,
    *,
    batch: Any = 1,
    tiles: tuple[Tile, ...] = CUBLAS_TILES,
    tiles_per_sm: int = 1,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``tile_choice`` over arrays: (index into ``tiles``, Mt, Nt) for each shape."""
    import numpy as np

    costs = _costs(m, n, sm_count, tiles_per_sm, batch, tiles)
    index = np.argmin(costs, axis=0)
    table = np.asarray(tiles, dtype=np.int64)
    return index, table[index, 0], table[index, 1]


# ---------------------------------------------------------------------------------------------
# alignment


def alignment_elements(dtype: str) -> int:
    """Elements per 16 bytes: fp16/bf16 8, tf32/fp32 4, fp8/int8 16, fp64 2, fp4 32."""
    if dtype not in _BYTES_PER_ELEMENT:
        raise SpecError(f"unknown dtype '{dtype}'; known: {', '.join(_BYTES_PER_ELEMENT)}")
    return int(ALIGNMENT_BYTES / _BYTES_PER_ELEMENT[dtype])


@dataclass(frozen=True)
class Misalignment:
    """One GEMM dimension that is not a multiple of 16 bytes, and how to pad it."""

    dim: str  # "m", "n" or "k"
    size: int
    multiple: int  # elements per 16 bytes for the dtype
    padded_aligned: int  # next multiple of ``multiple``
    padded_64: int  # next multiple of 64 (the usual advice)

    def advice(self, dtype: str) -> str:
        return (
            f"{self.dim}={self.size} is not a multiple of {self.multiple} {dtype} elements "
            f"({ALIGNMENT_BYTES} bytes): pad {self.dim} to {self.padded_64} (a multiple of "
            f"{PAD_MULTIPLE}; {self.padded_aligned} is the next multiple of {self.multiple})"
        )


def misaligned_array(size: Any, dtype: str) -> np.ndarray:
    """True where a dimension is not a multiple of 16 bytes of ``dtype`` (numpy arrays)."""
    import numpy as np

    return np.asarray(size, dtype=np.int64) % alignment_elements(dtype) != 0


def misalignments(m: int, n: int, k: int, dtype: str) -> tuple[Misalignment, ...]:
    """The dimensions of an ``M x N x K`` GEMM that are not multiples of 16 bytes."""
    multiple = alignment_elements(dtype)
    _check_dims(m=m, n=n, k=k)
    out = []
    for dim, size in (("m", m), ("n", n), ("k", k)):
        size = int(size)
        if size % multiple:
            out.append(
                Misalignment(
                    dim=dim,
                    size=size,
                    multiple=multiple,
                    padded_aligned=-(-size // multiple) * multiple,
                    padded_64=-(-size // PAD_MULTIPLE) * PAD_MULTIPLE,
                )
            )
    return tuple(out)


def misaligned_dims(m: int, n: int, k: int, dtype: str) -> tuple[str, ...]:
    """Names of the misaligned dimensions; ``misaligned_dims(2048, 50257, 768, "bf16")`` is
    ``("n",)``."""
    return tuple(x.dim for x in misalignments(m, n, k, dtype))


def alignment_penalty_reason(m: int, n: int, k: int, dtype: str) -> str | None:
    """Why tensor cores may lose their fast path on this GEMM, with the padding to fix it; None
    when every dimension is aligned."""
    found = misalignments(m, n, k, dtype)
    return "; ".join(x.advice(dtype) for x in found) or None
