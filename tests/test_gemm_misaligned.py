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
    assert gemm_model.misaligned_busy_share(1025, 1025, 132) == pytest.approx(
        1025**2 / (64 * 128 * 264))
    # 4097^2: 65 x 33 = 2145 tiles in 17 waves
    assert gemm_model.misaligned_busy_share(4097, 4097, 132) == pytest.approx(
        4097**2 / (64 * 128 * 17 * 132))
    # whole tiles filling whole waves: 64*12 x 128*11 = 132 tiles, one wave
    assert gemm_model.misaligned_busy_share(768, 1408, 132) == pytest.approx(1.0)


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
