"""validate --from-measurements CAL.yaml re-fits what the file's measurements hold and keeps,
named, what they do not (the sections merged into a shipped calibration after its run)."""

from __future__ import annotations

from pathlib import Path

import gpumodel as gm
from gpumodel.calibration import CalibrationParams, read_calibration_file
from gpumodel.validate.pipeline import CARRIED_KEY, _keep_unfitted, carry_unset

SHIPPED = Path(__file__).resolve().parents[1] / "validation/results/h100-sxm/calibration.yaml"


def test_carry_unset_takes_only_what_the_fit_left_unset():
    fitted = {"a": 1.0, "b": None, "fam": {"x": 2.0}, "power": None}
    source = {"a": 9.0, "b": 3.0, "fam": {"x": 8.0, "y": 4.0}, "power": {"w": 5.0}, "c": None}
    merged, kept = carry_unset(fitted, source)
    assert merged == {"a": 1.0, "b": 3.0, "fam": {"x": 2.0, "y": 4.0}, "power": {"w": 5.0}}
    assert kept == ["b", "fam.y", "power"]


def test_a_refit_that_fits_nothing_keeps_the_whole_file():
    """The extreme case: a fit that set nothing returns the shipped parameters, so the
    shipped H100 prediction of a 4096^3 bf16 GEMM (its sustained clock included) is unchanged
    (213 us before the fix became 181 us: the power section was dropped)."""
    cal = read_calibration_file(SHIPPED)
    empty = cal.model_copy(update={"parameters": CalibrationParams()})
    kept = _keep_unfitted(empty, str(SHIPPED))
    assert kept.parameters == cal.parameters
    assert "power" in kept.environment[CARRIED_KEY]
    assert kept.environment[CARRIED_KEY].startswith("calibration.yaml: ")
    op = gm.ops.Gemm(m=4096, n=4096, k=4096, dtype="bf16")
    assert gm.predict(op, "h100", kept).time_s == gm.predict(op, "h100", cal).time_s
    assert any(t.name == "sustained clock" for t in gm.predict(op, "h100", kept).terms)
    # a fit that sets everything keeps nothing from the file
    assert _keep_unfitted(cal, str(SHIPPED)).environment == cal.environment
