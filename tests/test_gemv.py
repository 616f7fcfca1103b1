"""M = 1 runs cuBLAS's GEMV kernels, which stream weights at a rate of their own (issue #16)."""

import numpy as np
import pytest

import gpumodel as gm
from gpumodel.calibration import GemmParams
from gpumodel.model.gemm import stream_factor
from gpumodel.ops.base import GemmShape


def _params(gemv: float | None) -> GemmParams:
    return GemmParams(efficiency=0.8, small_m_bandwidth_efficiency=0.7,
                      gemv_bandwidth_efficiency=gemv)  # fmt: skip


def test_stream_factor_by_hand():
    one, two = GemmShape(1, 4096, 4096, 1, "fp32"), GemmShape(2, 4096, 4096, 1, "fp32")
    assert stream_factor(one, _params(1.0)) == pytest.approx(1.0 / 0.7)
    assert stream_factor(two, _params(1.0)) == 1.0
    assert stream_factor(one, _params(None)) == 1.0
    # never below the M > 1 rate: one row never takes longer than two
    assert stream_factor(one, _params(0.5)) == 1.0
    arr = GemmShape(np.array([1, 2, 64]), 4096, 4096, 1, "fp32")
    np.testing.assert_allclose(stream_factor(arr, _params(1.0)), [1.0 / 0.7, 1.0, 1.0])


def test_fp32_gemv_streams_faster_than_small_m_on_the_h100():
    """validate run4 (H100): fp32 M = 1 streamed its weights at 2.5-2.9 TB/s, M = 2-16 at
    0.8-2.3 TB/s; the fitted GEMV rate is above the M > 1 one, and the 16-bit types, which
    streamed alike at both, get no more than their M > 1 rate."""
    gemm = gm.load_calibration("h100-sxm").parameters.gemm
    fp32 = gemm["fp32"]
    assert fp32.gemv_bandwidth_efficiency > 1.3 * fp32.small_m_bandwidth_efficiency
    # never fitted: the unseen run3 timed nn.Linear's fp32 x @ W.T at M = 1, N = 14336,
    # K = 4096 at 84.4 us in-workload (validation/results/unseen-h100-run3); 110 us before
    op = gm.ops.Gemm(m=1, n=14336, k=4096, dtype="fp32", transpose_b=True)
    assert gm.predict(op, "h100").time_s == pytest.approx(84.4e-6, rel=0.1)
    for dtype in ("bf16", "fp16"):
        g = gemm[dtype]
        assert g.gemv_bandwidth_efficiency == pytest.approx(g.small_m_bandwidth_efficiency,
                                                            rel=0.05)  # fmt: skip


def test_sweep_and_predict_agree_at_m_1():
    m = np.array([1, 2, 8, 128])
    swept = gm.sweep("gemm", "h100", m=m, n=14336, k=4096, dtype="fp32")["time_s"]
    for mi, t in zip(m.tolist(), swept, strict=True):
        one = gm.predict(gm.ops.Gemm(m=mi, n=14336, k=4096, dtype="fp32"), "h100").time_s
        assert t == pytest.approx(one, rel=1e-9)
    assert swept[0] < swept[1]  # the GEMV is faster than the two-row product
