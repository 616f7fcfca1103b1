"""Misaligned-N x @ W.T products in whole row tiles (gemm.misaligned_rows_busy_share): by hand,
where the rule applies and where not, time never falling with M, the vectorised path, and the
shipped table against the fit of its committed fit set."""

from __future__ import annotations

import sys
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

import gpumodel as gm
from gpumodel.model import gemm as gemm_model
from gpumodel.ops import Gemm
from gpumodel.vectorised import sweep

ROOT = Path(__file__).resolve().parents[1]
TERM = "rows in whole tiles (misaligned x @ W.T)"


def _terms(op: Gemm) -> dict:
    return {t.name: t.value for t in gm.predict(op, "h100-sxm", condition="isolated").terms}


def test_busy_share_by_hand():
    # bf16, M = 16: the range (8, 16] runs 0.89 of one 128-row tile's time; M = 1 0.27
    assert gemm_model.misaligned_rows_busy_share(1, "bf16") == pytest.approx(1 / (128 * 0.27))
    assert gemm_model.misaligned_rows_busy_share(16, "bf16") == pytest.approx(16 / (128 * 0.89))
    # M = 2 in fp32: 0.23 of a tile
    assert gemm_model.misaligned_rows_busy_share(2, "fp32") == pytest.approx(2 / (128 * 0.23))
    # M = 100 fills most of one tile; M = 192 pays for two (256 rows), M = 512 for four
    assert gemm_model.misaligned_rows_busy_share(100, "tf32") == pytest.approx(100 / 128)
    assert gemm_model.misaligned_rows_busy_share(192, "bf16") == pytest.approx(0.75)
    assert gemm_model.misaligned_rows_busy_share(512, "fp16") == pytest.approx(1.0)
    shares = gemm_model.misaligned_rows_busy_share(np.array([16, 192]), "bf16")
    np.testing.assert_allclose(shares, [16 / (128 * 0.89), 0.75])


def test_the_rule_prices_only_misaligned_n_cublas_linear_products():
    assert TERM in _terms(Gemm(m=16, n=50257, k=768, transpose_b=True))
    assert TERM in _terms(Gemm(m=1, n=50257, k=768, transpose_b=True))  # not the aligned GEMV
    assert TERM not in _terms(Gemm(m=1, n=50304, k=768, transpose_b=True))
    assert TERM not in _terms(Gemm(m=16, n=50304, k=768, transpose_b=True))  # aligned N
    assert TERM not in _terms(Gemm(m=16, n=50304, k=767, transpose_b=True))  # only K off
    assert TERM not in _terms(Gemm(m=16, n=50257, k=768))  # A @ B: the waves term instead
    assert TERM not in _terms(Gemm(m=16, n=50257, k=768, transpose_b=True, dtype="fp8"))


def test_time_never_falls_as_m_grows():
    for dtype in gemm_model.MISALIGNED_ROWS_SHARE:
        times = [gm.predict(Gemm(m=m, n=32001, k=2048, dtype=dtype, transpose_b=True),
                            "h100-sxm").time_s for m in range(1, 300)]  # fmt: skip
        assert all(b >= a * (1 - 1e-9) for a, b in pairwise(times)), dtype


def test_a_head_at_m_2_to_128_costs_a_share_of_one_tile_not_the_weight_stream():
    """The fit set's shape (H200, bf16 32001 x 4096): M = 1 ran 93 us, M = 2 135 us, M = 16
    271 us and M = 128 332 us; a stream-bound model has them all near the weight's 55 us at
    the HBM rate."""
    t = {m: gm.predict(Gemm(m=m, n=32001, k=4096, transpose_b=True), "h200-sxm",
                       condition="in-graph").time_s for m in (1, 2, 16, 128, 256)}  # fmt: skip
    assert t[1] / t[128] == pytest.approx(0.27, rel=0.05)
    assert t[2] / t[128] == pytest.approx(0.36, rel=0.05)
    assert t[16] / t[128] == pytest.approx(0.89, rel=0.05)
    assert t[256] / t[128] == pytest.approx(2.0, rel=0.05)


def test_the_sweep_prices_it_as_predict_does():
    m = np.array([1, 2, 3, 8, 16, 64, 100, 128, 129, 200, 1024])
    for dtype in ("bf16", "fp16", "tf32", "fp32"):
        out = sweep("gemm", "h100-sxm", m=m, n=50257, k=1024, dtype=dtype, transpose_b=True)
        for i, mi in enumerate(m):
            op = Gemm(m=int(mi), n=50257, k=1024, dtype=dtype, transpose_b=True)
            assert out["time_s"][i] == pytest.approx(gm.predict(op, "h100-sxm").time_s,
                                                     rel=1e-9), (dtype, mi)  # fmt: skip


def test_shipped_table_is_the_fit_of_its_committed_fit_set():
    sys.path.insert(0, str(ROOT / "validation/fitset"))
    import fit_gemm_lmhead

    table = fit_gemm_lmhead.fit()
    assert table == gemm_model.MISALIGNED_ROWS_SHARE
    # the fit set's shapes follow the table: level-free median 5.3%, p90 15.3%
    errs = sorted(fit_gemm_lmhead.level_free_errors(fit_gemm_lmhead.table_predict(table)))
    assert np.median(errs) == pytest.approx(0.053, abs=0.001)
