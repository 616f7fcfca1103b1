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
