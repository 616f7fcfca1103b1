"""The tiles-and-waves term of misaligned cuBLAS products (gemm.misaligned_busy_share):
by hand, where it applies and where not, the vectorised path, and the shipped constants
against the fit of their committed fit set."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import gpumodel as gm
from gpumodel.model import gemm as gemm_model
from gpumodel.ops import Conv2d, Gemm

ROOT = Path(__file__).resolve().parents[1]
H100 = gm.get_gpu("h100-sxm")  # 132 SMs


def _terms(op: Gemm) -> dict:
    return {t.name: t for t in gm.predict(op, "h100-sxm", condition="isolated").terms}


def test_busy_share_by_hand():
    # 1025^2 in 64x128 tiles: 17 x 9 = 153 tiles, two waves of 132: 1025^2 useful of
    # 64 x 128 x 264 computed
    assert gemm_model.misaligned_busy_share(1025, 1025, 1025, 132) == pytest.approx(
        1025**2 / (64 * 128 * 264))
    # 4097^2: 65 x 33 = 2145 tiles in 17 waves
    assert gemm_model.misaligned_busy_share(4097, 4097, 4097, 132) == pytest.approx(
        4097**2 / (64 * 128 * 17 * 132))
    # whole tiles filling whole waves: 64*12 x 128*11 = 132 tiles, one wave
    assert gemm_model.misaligned_busy_share(768, 1408, 4096, 132) == pytest.approx(1.0)


def test_a_few_tiles_split_a_long_k_over_the_idle_sms():
    """Fuzz, 2026-11-30: one 64 x 128 tile over K = 2^20 + 1 ran on one SM, 15 ms; cuBLAS
    splits such a K (at most 16 slices of at least 2048: gpumodel.model.splitk). By hand: 1 tile
    x 16 slices busy 16 of 132 SMs; 64 x 128 x 1024 as 8 tiles x 16 slices = 128 of 132."""
    assert gemm_model.misaligned_busy_share(64, 128, 2**20 + 1, 132) == pytest.approx(16 / 132)
    assert gemm_model.misaligned_busy_share(64 * 8, 128, 2**20 + 1, 132) == pytest.approx(
        128 / 132)
    # a K too short to split (< 2 x 2048) keeps the one-wave share: 1 tile of 132
    assert gemm_model.misaligned_busy_share(64, 128, 4095, 132) == pytest.approx(1 / 132)
    assert np.asarray(gemm_model.misaligned_busy_share(
        [64, 64], [128, 128], [4095, 2**20 + 1], 132)) == pytest.approx([1 / 132, 16 / 132])


def test_one_row_runs_a_gemv_whatever_the_alignment():
    """M = 1 (or N = 1): cuBLAS's GEMV, no tiles to waste: K off by one costs a GEMV's time,
    not 1,000x it (it was 15.2 ms against 12.8 us)."""
    aligned = gm.predict(Gemm(m=1, n=8, k=2**20, dtype="bf16"), "h100-sxm").time_s
    odd = gm.predict(Gemm(m=1, n=8, k=2**20 + 1, dtype="bf16"), "h100-sxm")
    assert "tiles and waves (misaligned kernel)" not in {t.name for t in odd.terms}
    assert odd.time_s == pytest.approx(aligned, rel=0.05)
    swept = gm.sweep("gemm", "h100-sxm", m=[1, 64], n=[8, 128], k=[2**20 + 1] * 2, dtype="bf16")
    one = [gm.predict(Gemm(m=m, n=n, k=2**20 + 1, dtype="bf16"), "h100-sxm").time_s
           for m, n in ((1, 8), (64, 128))]  # fmt: skip
    assert np.asarray(swept["time_s"]) == pytest.approx(one, rel=1e-9)


def test_time_is_waves_of_whole_tiles_so_it_never_falls():
    """The case a per-FLOP wave factor got wrong (tests/test_monotone.py found it): 18 products
    of 40 x n x 70, n 111 -> 420, four times the tiles in the same single wave."""
    small = gm.predict(Gemm(m=40, n=111, k=70, batch=18, dtype="bf16"), "h100-sxm")
    large = gm.predict(Gemm(m=40, n=420, k=70, batch=18, dtype="bf16"), "h100-sxm")
    assert large.time_s >= small.time_s


def test_the_term_prices_only_misaligned_16_bit_cublas_a_at_b():
    term = "tiles and waves (misaligned kernel)"
    bad = _terms(Gemm(m=1025, n=1025, k=1025, dtype="bf16"))
    assert bad[term].value == pytest.approx(1025**2 / (64 * 128 * 264))
    assert term not in _terms(Gemm(m=1024, n=1024, k=1024, dtype="bf16"))  # aligned
    assert term not in _terms(Gemm(m=1025, n=1025, k=1025, dtype="bf16", transpose_b=True))
    assert term not in _terms(Gemm(m=1025, n=1025, k=1025, dtype="tf32"))  # not fitted
    conv = gm.predict(Conv2d(batch=1, in_channels=64, out_channels=64, height=7, width=7,
                             kernel=1, dtype="bf16"), "h100-sxm", condition="isolated")  # fmt: skip
    assert term not in {t.name for t in conv.terms}


def test_the_sweep_prices_it_as_predict_does():
    sizes = [513, 1025, 2049, 3072, 4097]
    swept = gm.sweep("gemm", "h100-sxm", m=sizes, n=sizes, k=sizes, dtype="bf16",
                     condition="isolated")  # fmt: skip
    one = [gm.predict(Gemm(m=s, n=s, k=s, dtype="bf16"), "h100-sxm",
                      condition="isolated").time_s for s in sizes]  # fmt: skip
    assert np.asarray(swept["time_s"]) == pytest.approx(one, rel=1e-9)


def test_shipped_constants_are_the_fit_of_their_committed_fit_set():
    sys.path.insert(0, str(ROOT / "validation/fitset"))
    import fit_gemm_misaligned

    got = fit_gemm_misaligned.fit()
    assert tuple(got["tile"]) == gemm_model.MISALIGNED_TILE
