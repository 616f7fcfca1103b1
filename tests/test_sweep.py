import numpy as np
import pytest

import gpumodel as gm
from gpumodel.calibration import CalibrationParams, GemmParams
from gpumodel.predict import predict_with_params
from gpumodel.vectorised import sweep


def _cal(tmp_path):
    from datetime import datetime, timezone

    cal = gm.Calibration(
        gpu_id="h100-sxm", device_name="x", created=datetime(2026, 1, 1, tzinfo=timezone.utc),
        parameters=CalibrationParams(
            dram_efficiency=0.9, overlap_exponent=3.0, kernel_overhead_s=3e-6,
            family_overhead_s={"elementwise": 4e-6},
            gemm={"bf16": GemmParams(efficiency=0.75, misaligned_efficiency=0.4,
                                     small_m_bandwidth_efficiency=0.85, overhead_s=6e-6)}),
    )  # fmt: skip
    return cal


@pytest.mark.parametrize("calibrated", [False, True])
def test_sweep_matches_scalar_predict(tmp_path, calibrated):
    cal = _cal(tmp_path) if calibrated else "none"
    rng = np.random.default_rng(0)
    m, n, k = (rng.integers(1, 9000, 50) for _ in range(3))
    out = sweep("gemm", "h100", cal, m=m, n=n, k=k, dtype="bf16")
    for i in range(50):
        p = gm.predict(gm.ops.Gemm(m=int(m[i]), n=int(n[i]), k=int(k[i])), "h100", cal)
        assert out["time_s"][i] == pytest.approx(p.time_s, rel=1e-12)
        assert out["bound"][i] == p.bound
    sizes = rng.integers(1, 2**30, 50)
    out = sweep("gelu", "h100", cal, n=sizes, dtype="bf16")
    for i in range(50):
        p = gm.predict(gm.ops.Elementwise(op="gelu", n=int(sizes[i])), "h100", cal)
        assert out["time_s"][i] == pytest.approx(p.time_s, rel=1e-12)


def test_sweep_kernel_matches_predict():
    params = CalibrationParams()
    out = sweep(
        "kernel", "a100", "none", flops=np.array([0.0, 1e12]), bytes=np.array([8e9, 8e6]), fma=False
    )
    for i, (f, b) in enumerate(((0.0, 8e9), (1e12, 8e6))):
        p = predict_with_params(
            gm.ops.Kernel(flops=f, bytes=b, fma=False), gm.get_gpu("a100"), params
        )
        assert out["time_s"][i] == pytest.approx(p.time_s)


def test_sweep_rejects_unknown():
    with pytest.raises(gm.SpecError, match="sweep supports"):
        sweep("conv", "h100")
    with pytest.raises(gm.SpecError, match="unknown parameter"):
        sweep("gemm", "h100", "none", m=1, n=1, k=1, q=3)


def test_transposed_misaligned_gemm_sweep_matches_predict(tmp_path):
    """nn.Linear's layout (transpose_b): its own misaligned efficiency and, at M > 1, whole
    tiles of rows (N off alignment) or its own weight-streaming factor (K off alignment); sweep
    and predict agree point by point."""
    cal = _cal(tmp_path)
    g = cal.parameters.gemm["bf16"].model_copy(
        update={"misaligned_transposed_efficiency": 0.12, "misaligned_transposed_stream": 0.3}
    )
    cal = cal.model_copy(update={"parameters": cal.parameters.model_copy(
        update={"gemm": {"bf16": g}})})  # fmt: skip
    m = np.array([1, 2, 16, 64, 200, 2048, 16, 2048, 16])
    n = np.array([50257, 50257, 50257, 50257, 50257, 50257, 50304, 50304, 50304])
    k = np.array([1024, 1024, 1024, 1024, 1024, 1024, 1024, 1024, 1023])
    out = sweep("gemm", "h100", cal, m=m, n=n, k=k, dtype="bf16", transpose_b=True)
    for i in range(len(m)):
        op = gm.ops.Gemm(m=int(m[i]), n=int(n[i]), k=int(k[i]), transpose_b=True)
        assert out["time_s"][i] == pytest.approx(gm.predict(op, "h100", cal).time_s, rel=1e-12)
    with pytest.raises(gm.SpecError, match="transpose_b"):
        sweep("gemm", "h100", cal, m=1, n=1, k=1, transpose_b="yes")


def test_transposed_misaligned_gemm_terms_by_hand(tmp_path):
    """Large M: compute-bound at 0.75 x 0.12 of the 989.4 TFLOP/s bf16 peak (vs 0.75 x 0.4 as
    A @ B); N off alignment at M = 16: one whole 128-row tile's time x bf16's share for
    M = 9-16 (0.89), the weight stream only a floor at the plain rate; K off alignment at
    M = 16: the 103 MB weight streams at 3.35 TB/s x 0.85 x 0.3; M = 1 (a GEMV) and an aligned N
    keep the plain streaming rate."""
    cal = _cal(tmp_path)
    g = cal.parameters.gemm["bf16"].model_copy(
        update={"misaligned_transposed_efficiency": 0.12, "misaligned_transposed_stream": 0.3}
    )
    params = cal.parameters.model_copy(update={"gemm": {"bf16": g}})
    h100 = gm.get_gpu("h100")

    def kernel(op):
        (k,) = predict_with_params(op, h100, params, condition="isolated").kernels
        return {t.name: t.value for t in k.terms}

    big = dict(m=4096, n=50257, k=1024)
    flops = 2 * 4096 * 50257 * 1024
    t = kernel(gm.ops.Gemm(**big, transpose_b=True))["compute time (tensor bf16)"]
    assert t == pytest.approx(flops / (989.4e12 * 0.75 * 0.12), rel=0.01)
    t_ab = kernel(gm.ops.Gemm(**big))["compute time (tensor bf16)"]
    assert t_ab == pytest.approx(flops / (989.4e12 * 0.75 * 0.4), rel=0.01)
    head = kernel(gm.ops.Gemm(m=16, n=50257, k=1024, transpose_b=True))
    one_tile = 2 * 128 * 50257 * 1024 / (989.4e12 * 0.75 * 0.12)
    assert head["compute time (tensor bf16)"] == pytest.approx(0.89 * one_tile, rel=0.01)
    assert head["rows in whole tiles (misaligned x @ W.T)"] == pytest.approx(16 / (128 * 0.89))
    assert "overlap factor" not in head  # the tile's time includes its loads

    def memory(m, n, transpose_b=True, k=1024):
        return kernel(gm.ops.Gemm(m=m, n=n, k=k, transpose_b=transpose_b))["memory time"]

    weight = 2 * (16 * 1024 + 1024 * 50257) + 2 * 16 * 50257
    assert memory(16, 50257) == pytest.approx(weight / (3.35e12 * 0.85), rel=0.01)
    weight_k = 2 * (16 * 1023 + 1023 * 50304) + 2 * 16 * 50304
    assert memory(16, 50304, k=1023) == pytest.approx(weight_k / (3.35e12 * 0.85 * 0.3), rel=0.01)
    assert memory(16, 50257, transpose_b=False) == pytest.approx(
        weight / (3.35e12 * 0.85), rel=0.01
    )
    assert memory(1, 50257) == pytest.approx(
        (2 * (1024 + 1024 * 50257) + 2 * 50257) / (3.35e12 * 0.85), rel=0.01)  # fmt: skip
    assert memory(16, 50304) == pytest.approx(
        (2 * (16 * 1024 + 1024 * 50304) + 2 * 16 * 50304) / (3.35e12 * 0.85), rel=0.01)  # fmt: skip
