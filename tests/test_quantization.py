"""GEMM tile and wave quantization, tile choice and tensor-core alignment."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpumodel.errors import SpecError
from gpumodel.model.quantization import (
    CUBLAS_TILES,
    alignment_elements,
    alignment_penalty_reason,
    misaligned_array,
    misaligned_dims,
    misalignments,
    tile_choice,
    tile_choice_array,
    tile_count,
    tile_efficiency,
    tile_efficiency_array,
    tile_reuse,
    wave_efficiency,
    wave_efficiency_array,
)

A100_SMS = 108
H100_SMS = 132


def test_tile_efficiency_by_hand():
    # M=N=1000, 256x128: ceil(1000/256)=4, ceil(1000/128)=8 -> 32 tiles of 32768 = 1,048,576
    assert tile_count(1000, 1000, (256, 128)) == 32
    assert tile_efficiency(1000, 1000, (256, 128)) == pytest.approx(1e6 / 1_048_576)
    # exact multiples waste nothing
    assert tile_efficiency(4096, 4096, (128, 128)) == 1.0
    # one element past a tile boundary: M=257 pads to 512 rows
    assert tile_efficiency(257, 128, (256, 128)) == pytest.approx(257 / 512)


def test_wave_efficiency_a100_example():
    # A100, 108 SMs, one 256x128 tile per SM (formulas.md §2, from NVIDIA's guide):
    # M=2304, N=6144 -> 9 x 48 = 432 tiles = exactly 4 waves
    assert tile_count(2304, 6144, (256, 128)) == 432
    assert wave_efficiency(2304, 6144, (256, 128), A100_SMS) == 1.0
    # N=6272 -> 9 x 49 = 441 tiles -> 5 waves, the last with 9 tiles: 441 / 540
    assert wave_efficiency(2304, 6272, (256, 128), A100_SMS) == pytest.approx(441 / 540)
    # two tiles per SM: 216 slots a wave -> 441 tiles need 3 waves of 216: 441 / 648
    assert wave_efficiency(2304, 6272, (256, 128), A100_SMS, 2) == pytest.approx(441 / 648)
    # batch multiplies tiles: 2 x 432 = 864 = 8 waves
    assert wave_efficiency(2304, 6144, (256, 128), A100_SMS, batch=2) == 1.0


def test_tile_reuse_follows_the_guides_order():
    # 256x128 = 128x256 > 128x128 > 256x64 > 128x64 > 64x64
    values = [tile_reuse(t) for t in [(256, 128), (128, 128), (256, 64), (128, 64), (64, 64)]]
    assert values == pytest.approx([1.0, 0.75, 0.6, 0.5, 0.375])
    assert tile_reuse((128, 256)) == tile_reuse((256, 128))


def test_tile_choice_large_gemm_uses_the_big_tile():
    c = tile_choice(8192, 8192, H100_SMS, "bf16")
    assert c.tile == (256, 128)
    # 32 x 64 = 2048 tiles, ceil(2048 / 132) = 16 waves
    assert (c.tiles, c.waves) == (2048, 16)
    assert c.tile_efficiency == 1.0
    assert c.wave_efficiency == pytest.approx(2048 / (16 * 132))
    assert c.efficiency == pytest.approx(c.tile_efficiency * c.wave_efficiency)
    assert len(c.candidates) == len(CUBLAS_TILES)


def test_tile_choice_small_gemm_uses_smaller_tiles():
    # 1024 x 1024: 256x128 gives 32 tiles, a quarter of the 132 SMs; 128x64 gives 128 tiles in
    # one wave: cost 1 x 8192 / 0.5 = 16384 < 256x128's 1 x 32768 / 1.0
    c = tile_choice(1024, 1024, H100_SMS)
    assert c.tile == (128, 64)
    assert c.waves == 1
    # M much larger than N prefers the tall tile of an equal pair (first in preference)
    assert tile_choice(65536, 128, H100_SMS).tile in ((256, 128), (128, 128), (256, 64))


def test_tile_choice_array_agrees_with_scalar():
    rng = np.random.default_rng(0)
    m = rng.integers(1, 20000, 300)
    n = rng.integers(1, 20000, 300)
    index, mt, nt = tile_choice_array(m, n, H100_SMS)
    for i in range(len(m)):
        c = tile_choice(int(m[i]), int(n[i]), H100_SMS)
        assert (int(mt[i]), int(nt[i])) == c.tile
        assert CUBLAS_TILES[int(index[i])] == c.tile


def test_arrays_agree_with_scalars():
    rng = np.random.default_rng(1)
    m = rng.integers(1, 50000, 500)
    n = rng.integers(1, 50000, 500)
    for tile in [(256, 128), (128, 64), (64, 64)]:
        te = tile_efficiency_array(m, n, tile)
        we = wave_efficiency_array(m, n, tile, A100_SMS)
        for i in range(0, 500, 25):
            assert te[i] == pytest.approx(tile_efficiency(int(m[i]), int(n[i]), tile))
            assert we[i] == pytest.approx(wave_efficiency(int(m[i]), int(n[i]), tile, A100_SMS))


def test_vectorised_speed():
    # a million shapes in well under a second (sweeps of 1e6 shapes/s)
    import time

    rng = np.random.default_rng(2)
    m = rng.integers(1, 1 << 16, 1_000_000)
    n = rng.integers(1, 1 << 16, 1_000_000)
    start = time.perf_counter()
    wave_efficiency_array(m, n, (256, 128), H100_SMS)
    tile_efficiency_array(m, n, (256, 128))
    elapsed = time.perf_counter() - start
    assert elapsed < 1.0


@settings(max_examples=300, deadline=None)
@given(
    m=st.integers(1, 100_000),
    n=st.integers(1, 100_000),
    tile=st.sampled_from(CUBLAS_TILES),
    sms=st.integers(1, 200),
)
def test_efficiencies_are_fractions(m, n, tile, sms):
    te = tile_efficiency(m, n, tile)
    we = wave_efficiency(m, n, tile, sms)
    assert 0 < te <= 1 and 0 < we <= 1
    # padding to the tile multiple makes it exact
    mt, nt = tile
    assert tile_efficiency(math.ceil(m / mt) * mt, math.ceil(n / nt) * nt, tile) == 1.0


# ---------------------------------------------------------------------------------------------
# alignment


def test_gpt2_vocabulary():
    # 2048 tokens x 768 hidden -> 50257 logits (GPT-2): N is not a multiple of 8 bf16 elements
    assert misaligned_dims(2048, 50257, 768, "bf16") == ("n",)
    (x,) = misalignments(2048, 50257, 768, "bf16")
    assert (x.dim, x.size, x.multiple) == ("n", 50257, 8)
    assert x.padded_aligned == 50264  # next multiple of 8
    assert x.padded_64 == 50304  # next multiple of 64: the classic fix
    reason = alignment_penalty_reason(2048, 50257, 768, "bf16")
    assert "pad n to 50304 (a multiple of 64" in reason
    assert "50264" in reason
    assert alignment_penalty_reason(2048, 50304, 768, "bf16") is None


def test_alignment_by_dtype():
    # 16 bytes: fp16/bf16 8 elements, tf32/fp32 4, fp8/int8 16
    assert [alignment_elements(d) for d in ("fp16", "bf16", "tf32", "fp32", "fp8", "int8")] == [
        8, 8, 4, 4, 16, 16,
    ]  # fmt: skip
    assert misaligned_dims(4096, 4096, 4100, "fp32") == ()
    assert misaligned_dims(4096, 4096, 4100, "bf16") == ("k",)
    assert misaligned_dims(4104, 4096, 4104, "fp8") == ("m", "k")
    assert misaligned_array(np.array([8, 12, 16, 50257]), "bf16").tolist() == [
        False, True, False, True,
    ]  # fmt: skip


def test_bad_inputs():
    with pytest.raises(SpecError, match="unknown dtype 'fp12'"):
        misaligned_dims(1, 1, 1, "fp12")
    with pytest.raises(SpecError, match="m must be >= 1"):
        tile_efficiency(0, 10, (128, 128))
    with pytest.raises(SpecError, match="a tile is two positive integers"):
        tile_efficiency(10, 10, (0, 128))
    with pytest.raises(SpecError, match="unknown dtype"):
        tile_choice(10, 10, H100_SMS, "fp12")
